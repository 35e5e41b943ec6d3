"""Every hint the frontend can give, found in its source with ``ast``.

A hint site is a ``FrontendError`` (or subclass) built with ``hint=``, or a
converter's ``self.error(node, message, hint)``. Its key is the file and the
hint's text, with each f-string placeholder written ``{}``. A hint read from a
name is followed to the name's assignments in the same function; a hint read
from a table (``refused[1]``, ``hints[fn]``, ``ATTRIBUTES.get(...)``) is keyed
by that expression in angle brackets, and the tests of the table check each of
its entries. A hint forwarded from a caught error (``err.hint``) is not a site:
its origin is one. Two sites of one file with the same hint text share a key
only if their messages are the same too; otherwise the message is added."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("effir/frontend", "effir/train", "effir/optim", "effir/__init__.py")
BASE = "FrontendError"


@dataclass(frozen=True)
class HintSite:
    """One place that gives a hint, and where it is."""

    file: str
    line: int
    message: str
    hint: str

    @property
    def key(self) -> str:
        return f"{self.file}: {self.hint}"


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return [p for p in found if p.exists()]


def _error_classes(trees: list[ast.Module]) -> set[str]:
    """``FrontendError`` and the classes that derive from it, by name."""
    names = {BASE}
    bases = {
        node.name: {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    grew = True
    while grew:
        new = {n for n, parents in bases.items() if parents & names} - names
        names |= new
        grew = bool(new)
    return names


def _template(node: ast.expr) -> str | None:
    """The text of a string expression, ``{}`` for each placeholder; None
    when ``node`` is not built of string literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _assignments(scope: ast.AST, name: str) -> list[ast.expr]:
    return [
        node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]


@dataclass(frozen=True)
class _Where:
    """Where a name is looked up: its function (or the module), then the module."""

    scope: ast.AST
    module: ast.Module

    def values(self, name: str) -> list[ast.expr]:
        found = _assignments(self.scope, name)
        return found or [
            v
            for stmt in self.module.body
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            if isinstance(t, ast.Name) and t.id == name
            for v in [stmt.value]
        ]

    def returns(self, name: str) -> list[ast.expr]:
        return [
            r.value
            for fn in self.module.body
            if isinstance(fn, ast.FunctionDef) and fn.name == name
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and r.value is not None
        ]


def _resolved(node: ast.expr, where: _Where) -> Iterator[ast.expr]:
    """The expressions ``node`` may stand for: a name's assigned values, a
    table's entries (``TABLE[k]``, ``TABLE.get(k, default)``, ``entry[1]``),
    a module function's returned values; else ``node`` itself."""
    if isinstance(node, ast.Name):
        found = where.values(node.id)
        for value in found:
            yield from _resolved(value, where)
        if not found:
            yield node
    elif isinstance(node, ast.IfExp):
        yield from _resolved(node.body, where)
        yield from _resolved(node.orelse, where)
    elif isinstance(node, ast.Subscript):
        position = node.slice.value if isinstance(node.slice, ast.Constant) else None
        for table in _resolved(node.value, where):
            if isinstance(table, ast.Tuple) and isinstance(position, int):
                yield from _resolved(table.elts[position], where)
            elif isinstance(table, ast.Dict):
                for value in table.values:
                    yield from _resolved(value, where)
            else:
                yield node
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        tables = list(_resolved(node.func.value, where))
        if node.func.attr == "get" and tables and all(isinstance(t, ast.Dict) for t in tables):
            for table in tables:
                for value in table.values:  # type: ignore[union-attr]
                    yield from _resolved(value, where)
            for default in node.args[1:]:
                yield from _resolved(default, where)
        else:
            yield node
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        found = where.returns(node.func.id)
        for value in found:
            yield from _resolved(value, where)
        if not found:
            yield node
    else:
        yield node


def _hints(node: ast.expr, where: _Where) -> Iterator[str]:
    """The hint texts (or unresolved expressions) ``node`` may hold."""
    if isinstance(node, ast.Attribute) and node.attr == "hint":
        return  # forwarded from a caught error: its origin is the site
    scope = where.scope
    params = {a.arg for a in scope.args.args} if isinstance(scope, ast.FunctionDef) else set()
    for value in _resolved(node, where):
        if isinstance(value, ast.Constant) and value.value is None:
            continue
        if isinstance(value, ast.Name) and value.id in params:
            continue  # a helper that passes its caller's hint on: the caller is the site
        text = _template(value)
        yield text if text is not None else f"<{ast.unparse(value)}>"


def _hint_and_message(call: ast.Call, classes: set[str]) -> tuple[ast.expr, ast.expr] | None:
    func = call.func
    callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    keyword = next((k.value for k in call.keywords if k.arg == "hint"), None)
    if callee in classes:
        hint = keyword or (call.args[3] if len(call.args) > 3 else None)
        message = call.args[0] if call.args else None
    elif (
        callee == "error" and isinstance(func, ast.Attribute) and ast.unparse(func) == "self.error"
    ):
        hint = keyword or (call.args[2] if len(call.args) > 2 else None)
        message = call.args[1] if len(call.args) > 1 else None
    else:
        return None
    if hint is None or message is None:
        return None
    return hint, message


def _scopes(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.Call]]:
    """Each call with its innermost enclosing function (or the module)."""
    stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
    while stack:
        node, scope = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.Lambda) else scope
            if isinstance(child, ast.Call):
                yield inner, child
            stack.append((child, inner))


def sources() -> dict[str, str]:
    """The scanned files' texts by path (relative to the repository)."""
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in _files()}


def hint_sites(texts: dict[str, str]) -> list[HintSite]:
    """Every hint site of ``texts`` (path -> source), in file and line order."""
    parsed = {file: ast.parse(text, file) for file, text in texts.items()}
    classes = _error_classes(list(parsed.values()))
    sites: list[HintSite] = []
    for file, tree in parsed.items():
        for scope, call in _scopes(tree):
            found = _hint_and_message(call, classes)
            if found is None:
                continue
            hint, message = found
            shown = _template(message) or f"<{ast.unparse(message)}>"
            sites.extend(
                HintSite(file, call.lineno, shown, text)
                for text in _hints(hint, _Where(scope, tree))
            )
    return sorted(sites, key=lambda s: (s.file, s.line))


def site_keys(texts: dict[str, str]) -> dict[str, list[HintSite]]:
    """The sites of ``texts`` by key; a hint text that one file gives for different
    messages gets the message in its key, so each is applied on its own."""
    by_text: dict[str, list[HintSite]] = {}
    for site in hint_sites(texts):
        by_text.setdefault(site.key, []).append(site)
    keys: dict[str, list[HintSite]] = {}
    for key, sites in by_text.items():
        if len({s.message for s in sites}) == 1:
            keys[key] = sites
        else:
            for s in sites:
                keys.setdefault(f"{key} [{s.message}]", []).append(s)
    return keys
