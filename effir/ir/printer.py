"""The canonical printer of effir's text format (docs/text-format.md).

Canonical means: the same module always prints the same text, and that text
parses back to a structurally equal module that prints identically.

1. Names. Each definition gets its own namespace. A variable prints as its
   name hint (made a valid identifier) when that name is free in the
   definition, otherwise as ``hint_1``, ``hint_2``... in print order. The
   printed names are all distinct, so a reparsed program prints the same.
   Type variables are named the same way, avoiding the names the parser
   would read as something else (keywords, ``Key``, dtypes, ADT names).
2. Let form by default. A let chain prints as ``let %x = ...;`` lines; a
   ``let`` bound to ``_`` whose variable is unused prints as ``value;``.
3. Graph form for sharing. A non-atomic expression reachable along several
   edges (a DAG) prints once as ``%N = ...;`` in the innermost block that
   encloses all its uses, just before the first line that uses it; parsing
   ``%N`` gives back the one shared object.
4. Literals print inline when their text reads back bit for bit; tensors and
   other scalars go to the ``#[metadata]`` section, numbered in print order.
5. Operator attributes print in schema order and only when they differ from
   the default; function attributes print sorted by name.
6. Indentation is two spaces a block, capped at MAX_INDENT levels so that
   10,000 nested blocks print in linear space. A function whose parameters
   and return type exceed WRAP_SIGNATURE_AT characters prints one parameter
   a line. The rule depends only on the function, never on the column where
   it starts, so it is canonical.

``Printer`` is an ``ExprFunctor`` (effir.ir.expr_functor): one ``@on``
hook per expression class returns its text, an atom's at once, a
compound's as a generator that yields its children's texts, driven by
``trampoline.run`` as are the walks over types and patterns: no recursion.
"""

from __future__ import annotations

import re
from typing import Any

from . import metadata
from .collector import collector_paced
from .display import register_renderer
from .expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalCell,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
)
from .expr_functor import ExprFunctor
from .functor import on
from .literals import format_scalar
from .module import IRModule
from .node import Attrs, Node
from .op import lookup_op
from .parser import VERSION
from .trampoline import Computation, run
from .types import (
    RESERVED_TYPE_NAMES,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    KeyType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)

MAX_INDENT = 32
WRAP_SIGNATURE_AT = 90  # characters of parameters and return type
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")
_BARE_INT = re.compile(r"-?[0-9]+\Z")  # an int32 literal, which has no suffix
_ATOMS = (Var, GlobalVar, Constant, Op, Constructor)
# A type variable never prints as a name the parser reads as something else:
# a keyword, `Key`, a dtype (a scalar type) or, in a module, an ADT's name.
_RESERVED_TYPE_NAMES = RESERVED_TYPE_NAMES
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def _indent(level: int) -> str:
    return "  " * min(level, MAX_INDENT)


class _Text:
    """Printed text as a tree of pieces, written out once at the end.

    Each construct's text holds its parts' texts: joined as strings, every
    level of nesting would copy all the text below it again (quadratic in
    the depth); a piece costs the same at any depth. ``length`` and
    ``multiline`` are what the layout rules ask of a text."""

    __slots__ = ("pieces", "length", "multiline")
    pieces: list[Text]
    length: int
    multiline: bool

    def __init__(self, pieces: list[Text]) -> None:
        self.pieces = pieces
        length, multiline = 0, False
        for piece in pieces:
            if isinstance(piece, str):
                length += len(piece)
                multiline = multiline or "\n" in piece
            else:
                length += piece.length
                multiline = multiline or piece.multiline
        self.length, self.multiline = length, multiline

    def __str__(self) -> str:
        out: list[str] = []
        stack: list[Text] = [self]
        while stack:
            piece = stack.pop()
            if isinstance(piece, str):
                out.append(piece)
            else:
                stack.extend(reversed(piece.pieces))
        return "".join(out)


Text = str | _Text


def _cat(*pieces: Text) -> _Text:
    return _Text(list(pieces))


def _join(separator: str, items: list[Text]) -> Text:
    if len(items) == 1:
        return items[0]
    if all(isinstance(item, str) for item in items):
        return separator.join(items)  # type: ignore[arg-type]
    pieces: list[Text] = []
    for i, item in enumerate(items):
        if i:
            pieces.append(separator)
        pieces.append(item)
    return _Text(pieces)


def _length(text: Text) -> int:
    return len(text) if isinstance(text, str) else text.length


def _multiline(text: Text) -> bool:
    return "\n" in text if isinstance(text, str) else text.multiline


def quote(text: str) -> str:
    """A string literal the lexer reads back as ``text``."""
    out = []
    for ch in text:
        if ch in _STRING_ESCAPES:
            out.append(_STRING_ESCAPES[ch])
        elif not ch.isprintable() and ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def attr_text(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(attr_text(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def _is_nullary_value(expr: Expr) -> bool:
    """``Nil()``, which prints as Relay's bare ``Nil``."""
    return (
        isinstance(expr, Call)
        and isinstance(expr.callee, Constructor)
        and not expr.callee.inputs
        and not expr.args
    )


def _sanitize(hint: str, fallback: str) -> str:
    if _IDENT.match(hint):
        return hint
    cleaned = _NOT_IDENT_CHAR.sub("_", hint)
    if not cleaned or cleaned[0].isdigit():
        cleaned = fallback + cleaned
    return cleaned


class _Block:
    """A printed block: its indentation and the graph bindings waiting to be
    written before its current line."""

    __slots__ = ("parent", "level", "depth", "pending")
    parent: _Block | None
    level: int
    depth: int
    pending: list[Text]

    def __init__(self, parent: _Block | None, level: int) -> None:
        self.parent = parent
        self.level = level
        self.depth = 0 if parent is None else parent.depth + 1
        self.pending = []

    def up(self) -> _Block:
        """The enclosing block (this one is not a root: its depth is above 0)."""
        assert self.parent is not None, "a root block has no enclosing block"
        return self.parent


def _lca(a: _Block, b: _Block) -> _Block:
    """The innermost block enclosing both (they are in one tree)."""
    while a.depth > b.depth:
        a = a.up()
    while b.depth > a.depth:
        b = b.up()
    while a is not b:
        a, b = a.up(), b.up()
    return a


def _expr_edges(node: Expr):
    """(slot, child, opens_block, level_offset) for each child expression."""
    if isinstance(node, Call):
        yield "callee", node.callee, isinstance(node.callee, Let), 1
        for i, arg in enumerate(node.args):
            yield i, arg, isinstance(arg, Let), 1
    elif isinstance(node, Let):
        yield "value", node.value, isinstance(node.value, Let), 1
        yield "body", node.body, False, 0
    elif isinstance(node, Function):
        yield "body", node.body, True, 1
    elif isinstance(node, If):
        yield "cond", node.cond, isinstance(node.cond, Let), 1
        yield "then", node.then_branch, True, 1
        yield "else", node.else_branch, True, 1
    elif isinstance(node, Match):
        yield "data", node.data, isinstance(node.data, Let), 1
        for i, clause in enumerate(node.clauses):
            yield i, clause.body, True, 2
    elif isinstance(node, Tuple):
        for i, field in enumerate(node.fields):
            yield i, field, isinstance(field, Let), 1
    elif isinstance(node, TupleGetItem):
        yield "tuple", node.tuple_value, isinstance(node.tuple_value, Let), 1
    elif isinstance(node, RefCreate):
        yield "value", node.value, isinstance(node.value, Let), 1
    elif isinstance(node, RefRead):
        yield "ref", node.ref, isinstance(node.ref, Let), 1
    elif isinstance(node, RefWrite):
        yield "ref", node.ref, isinstance(node.ref, Let), 1
        yield "value", node.value, isinstance(node.value, Let), 1


class _Layout:
    """Where each expression of one definition prints (step 3 of the essay)."""

    def __init__(self, root: Expr, level: int) -> None:
        self.used_vars: set[Var] = set()
        self.shared: set[int] = set()
        self.placement: dict[int, _Block] = {}
        self.edge_blocks: dict[tuple[int, Any], _Block] = {}
        self.content_blocks: dict[int, _Block] = {}  # shared lets print inside { }
        self.root_block = _Block(None, level)
        if isinstance(root, _ATOMS):
            if isinstance(root, Var):
                self.used_vars.add(root)
            return
        # Pass 1: count incoming edges of every non-atomic expression.
        indegree: dict[int, int] = {id(root): 0}
        order: list[Expr] = [root]
        stack = [root]
        while stack:
            node = stack.pop()
            for _, child, _, _ in _expr_edges(node):
                if isinstance(child, _ATOMS):
                    if isinstance(child, Var):
                        self.used_vars.add(child)
                    continue
                key = id(child)
                if key in indegree:
                    indegree[key] += 1
                else:
                    indegree[key] = 1
                    order.append(child)
                    stack.append(child)
        self.shared = {key for key, count in indegree.items() if count > 1}
        # Pass 2: place nodes in topological order (all parents first).
        remaining = dict(indegree)
        candidates: dict[int, _Block] = {}
        self.placement[id(root)] = self.root_block
        ready = [root]
        while ready:
            node = ready.pop()
            block = self.placement[id(node)]
            if isinstance(node, Let) and id(node) in self.shared:
                block = _Block(block, block.level + 1)
                self.content_blocks[id(node)] = block
            for slot, child, opens, offset in _expr_edges(node):
                if isinstance(child, _ATOMS):
                    continue
                edge_block = block
                if opens:
                    edge_block = _Block(block, block.level + offset)
                    self.edge_blocks[(id(node), slot)] = edge_block
                key = id(child)
                previous = candidates.get(key)
                candidates[key] = edge_block if previous is None else _lca(previous, edge_block)
                remaining[key] -= 1
                if remaining[key] == 0:
                    self.placement[key] = candidates.pop(key)
                    ready.append(child)

    def block_for(self, parent: Expr | None, slot: Any, level: int) -> _Block:
        block = self.edge_blocks.get((id(parent), slot))
        return block if block is not None else _Block(None, level)


class Printer(ExprFunctor):
    """Prints modules, expressions and types; one instance per top-level call.
    An ``ExprFunctor`` over expressions: ``eval(expr, layout, level)``."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata: list[Constant] = []
        self.metadata_index: dict[int, int] = {}
        self.reserved_type_names: frozenset[str] = _RESERVED_TYPE_NAMES
        self.reset_names()

    def reset_names(self) -> None:
        self.var_names: dict[Var, str] = {}
        self.used_names: set[str] = set()
        self.suffixes: dict[str, int] = {}
        self.type_var_names: dict[TypeVar, str] = {}
        self.used_type_names: set[str] = set(self.reserved_type_names)
        self.type_suffixes: dict[str, int] = {}
        self.graph_names: dict[int, str] = {}
        self.graph_counter = 0

    # ----------------------------------------------------------------- names
    def var_name(self, var: Var) -> str:
        name = self.var_names.get(var)
        if name is None:
            base = _sanitize(var.name_hint, "v")
            if base == "_" and var.name_hint != "_":
                base = "v_"  # `%_` reads back as a `_` binding, which may print as `value;`
            name = self._fresh(base, self.used_names, self.suffixes)
            self.var_names[var] = name
        return "%" + name

    def type_var_name(self, tv: TypeVar) -> str:
        name = self.type_var_names.get(tv)
        if name is None:
            name = self._fresh(_sanitize(tv.name, "T"), self.used_type_names, self.type_suffixes)
            self.type_var_names[tv] = name
        return name

    @staticmethod
    def _fresh(base: str, used: set[str], suffixes: dict[str, int]) -> str:
        """``base``, or ``base_k`` with the least k free. Names are never
        freed, so the search goes on from where the last one for ``base``
        stopped (from 0 at each use, 10,000 variables named ``%v`` would
        cost 50 million tries)."""
        k = suffixes.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        suffixes[base] = k
        return name

    # --------------------------------------------------------------- modules
    def module(self, mod: IRModule) -> str:
        parts: list[Text] = [f'#[version = "{VERSION}"]']
        self.reserved_type_names = _RESERVED_TYPE_NAMES | frozenset(mod.type_defs)
        for data in mod.type_defs.values():
            self.reset_names()
            parts.append(run(self.type_def(data)))
        for cell in mod.cells.values():
            self.reset_names()
            parts.append(run(self.cell(cell)))
        for name, fn in mod.functions.items():
            self.reset_names()
            layout = _Layout(fn, 0)
            parts.append(_cat("def @", name, run(self.function_rest(fn, layout, 0))))
        text = str(_join("\n\n", parts)) + "\n"
        return text + self.metadata_section()

    def metadata_section(self) -> str:
        return metadata.encode(self.metadata)

    def type_def(self, data: TypeData):
        head = "type " + data.name + self.type_params(data.type_params)
        if not data.constructors:  # an opaque type, as Relay's `extern type`
            return "extern " + head
            yield  # a generator, as every printing step
        lines: list[Text] = [head + " {"]
        for ctor in data.constructors:
            if ctor.inputs:
                inputs = []
                for t in ctor.inputs:
                    inputs.append((yield self.eval(t)))
                lines.append(_cat(f"  {ctor.name}(", _join(", ", inputs), "),"))
            else:
                lines.append(f"  {ctor.name},")
        lines.append("}")
        return _join("\n", lines)

    def cell(self, cell: GlobalCell):
        annotation: Text = ""
        if cell.type is not None:
            annotation = _cat(": ", (yield self.eval(cell.type)))
        layout = _Layout(cell.init, 1)
        init = yield self.block(cell.init, layout, layout.root_block)
        if _multiline(init):
            init = _cat("{\n", _indent(1), init, "\n}")
        return _cat("global @", cell.name, annotation, " = ref(", init, ");")

    # ----------------------------------------------------------- expressions
    def top_expr(self, expr: Expr) -> str:
        layout = _Layout(expr, 0)
        text = run(self.block(expr, layout, layout.root_block))
        return str(text) + "\n" + self.metadata_section()

    def block(self, head: Expr, layout: _Layout, block: _Block, own: bool = False):
        """The lines of a block (its first line unindented, the rest indented).

        ``own``: the head is a shared let being printed at its graph binding."""
        indent = _indent(block.level)
        lines: list[Text] = []
        node = head
        shared = layout.shared
        while isinstance(node, Let) and (id(node) not in shared or (own and node is head)):
            var = node.var
            name = self.var_name(var)
            value = yield self.inline(node.value, layout, node, "value", block.level)
            line: Text
            if var.name_hint == "_" and var not in layout.used_vars and var.type_annotation is None:
                line = _cat(value, ";")
            else:
                annotation: Text = ""
                if var.type_annotation is not None:
                    annotation = _cat(": ", (yield self.eval(var.type_annotation)))
                line = _cat("let ", name, annotation, " = ", value, ";")
            if block.pending:
                lines.extend(block.pending)
                block.pending.clear()
            lines.append(line)
            node = node.body
        result = yield self.inline(node, layout, None, None, block.level)
        if block.pending:
            lines.extend(block.pending)
            block.pending.clear()
        lines.append(result)
        return _join("\n" + indent, lines)

    def inline(
        self, expr: Expr, layout: _Layout, parent: Expr | None, slot: Any, level: int
    ) -> Text | Computation[Text]:
        """Text of ``expr`` where it is used: an atom, a graph name, or
        itself. An atom's is returned at once (its hook's fast path: no
        generator for most operands); anything else is a computation."""
        if isinstance(expr, _ATOMS):
            return (self._plans.get(type(expr)) or self.plan(type(expr)))[0](self, expr)
        return self._inline(expr, layout, parent, slot, level)

    def _inline(
        self, expr: Expr, layout: _Layout, parent: Expr | None, slot: Any, level: int
    ) -> Computation[Text]:
        # ``eval(expr, layout, level)`` with the hook applied here: this is
        # the printer's hottest call.
        hook = (self._plans.get(type(expr)) or self.plan(type(expr)))[0]
        key = id(expr)
        if key in layout.shared:
            name = self.graph_names.get(key)
            if name is None:
                home = layout.placement.get(key)
                home_level = home.level if home is not None else level
                text = yield hook(self, expr, layout, home_level)
                name = f"%{self.graph_counter}"
                self.graph_counter += 1
                self.graph_names[key] = name
                line = _cat(name, " = ", text, ";")
                if home is not None:
                    home.pending.append(line)
            return name
        if isinstance(expr, Let):  # a let in a non-block position prints as { ... }
            block = layout.block_for(parent, slot, level + 1)
            body = yield self.block(expr, layout, block)
            return _cat("{\n", _indent(block.level), body, "\n", _indent(level), "}")
        return (yield hook(self, expr, layout, level))

    # One hook per expression class, ``(self, expr, layout, level)``: the
    # text of ``expr`` whose first line is at ``level``. An atom's returns at
    # once (no generator); a compound's yields its children's texts.
    @on(Var)
    def _var(self, expr: Var, *_: Any) -> str:
        return self.var_name(expr)

    @on(GlobalVar)
    def _global(self, expr: GlobalVar, *_: Any) -> str:
        return "@" + expr.name

    @on(Op, Constructor)
    def _named(self, expr: Op | Constructor, *_: Any) -> str:
        return expr.name

    @on(Constant)
    def constant(self, constant: Constant, *_: Any) -> str:
        text = format_scalar(constant.data)
        if text is not None:
            return text
        index = self.metadata_index.get(id(constant))
        if index is None:
            index = len(self.metadata)
            self.metadata.append(constant)
            self.metadata_index[id(constant)] = index
        return f"meta[relay.Constant][{index}]"

    @on(Call)
    def _call(self, expr: Call, layout: _Layout, level: int) -> Computation[Text]:
        if isinstance(expr.callee, Constructor) and _is_nullary_value(expr):
            return expr.callee.name  # Relay's spelling of a nullary constructor's value
        callee = yield self.inline(expr.callee, layout, expr, "callee", level)
        if id(expr.callee) not in layout.shared:
            if _is_nullary_value(expr.callee):
                callee = _cat(callee, "()")  # `Nil(%x)` would read as a call of the constructor
            elif isinstance(expr.callee, Function | If | Match):
                callee = _cat("(", callee, ")")
        parts: list[Text] = []
        for i, arg in enumerate(expr.args):
            parts.append((yield self.inline(arg, layout, expr, i, level)))
        parts.extend(self.call_attrs(expr))
        return _cat(callee, "(", _join(", ", parts), ")")

    @on(Tuple)
    def _tuple(self, expr: Tuple, layout: _Layout, level: int) -> Computation[Text]:
        parts = []
        for i, field in enumerate(expr.fields):
            parts.append((yield self.inline(field, layout, expr, i, level)))
        if len(parts) == 1:
            return _cat("(", parts[0], ",)")
        return _cat("(", _join(", ", parts), ")")

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, layout: _Layout, level: int) -> Computation[Text]:
        inner = yield self.inline(expr.tuple_value, layout, expr, "tuple", level)
        if isinstance(expr.tuple_value, Function | If | Match) or (
            isinstance(inner, str) and _BARE_INT.match(inner)
        ):
            inner = _cat("(", inner, ")")  # `1.0` would read back as a float literal
        return _cat(inner, f".{expr.index}")

    @on(Function)
    def _function(self, expr: Function, layout: _Layout, level: int) -> Computation[Text]:
        return _cat("fn ", (yield self.function_rest(expr, layout, level)))

    @on(If)
    def _if(self, expr: If, layout: _Layout, level: int) -> Computation[Text]:
        cond = yield self.inline(expr.cond, layout, expr, "cond", level)
        then_block = layout.block_for(expr, "then", level + 1)
        else_block = layout.block_for(expr, "else", level + 1)
        then_text = yield self.block(expr.then_branch, layout, then_block)
        else_text = yield self.block(expr.else_branch, layout, else_block)
        inner, outer = _indent(then_block.level), _indent(level)
        return _cat(
            "if (", cond, ") {\n", inner, then_text, "\n", outer, "} else {\n",
            _indent(else_block.level), else_text, "\n", outer, "}",
        )  # fmt: skip

    @on(Match)
    def _match(self, expr: Match, layout: _Layout, level: int) -> Computation[Text]:
        data = yield self.inline(expr.data, layout, expr, "data", level)
        keyword = "match" if expr.complete else "match?"
        lines: list[Text] = [_cat(keyword, " (", data, ") {")]
        clause_indent = _indent(level + 1)
        for i, clause in enumerate(expr.clauses):
            pattern = yield self.eval(clause.pattern)
            block = layout.block_for(expr, i, level + 2)
            body = yield self.block(clause.body, layout, block)
            if _multiline(body):
                body = _cat("{\n", _indent(block.level), body, "\n", clause_indent, "}")
            lines.append(_cat(clause_indent, pattern, " => ", body, ","))
        lines.append(_indent(level) + "}")
        return _join("\n", lines)

    @on(RefCreate)
    def _ref_create(self, expr: RefCreate, layout: _Layout, level: int) -> Computation[Text]:
        value = yield self.inline(expr.value, layout, expr, "value", level)
        return _cat("ref(", value, ")")

    @on(RefRead)
    def _ref_read(self, expr: RefRead, layout: _Layout, level: int) -> Computation[Text]:
        ref = yield self.inline(expr.ref, layout, expr, "ref", level)
        return _cat("ref_read(", ref, ")")

    @on(RefWrite)
    def _ref_write(self, expr: RefWrite, layout: _Layout, level: int) -> Computation[Text]:
        ref = yield self.inline(expr.ref, layout, expr, "ref", level)
        value = yield self.inline(expr.value, layout, expr, "value", level)
        return _cat("ref_write(", ref, ", ", value, ")")

    @on(Let)
    def _shared_let(self, expr: Let, layout: _Layout, level: int) -> Computation[Text]:
        """A shared let, printed at its graph binding (``inline`` prints any
        other let as a block)."""
        block = layout.content_blocks.get(id(expr)) or _Block(None, level + 1)
        body = yield self.block(expr, layout, block, own=True)
        return _cat("{\n", _indent(block.level), body, "\n", _indent(level), "}")

    def call_attrs(self, call: Call) -> list[str]:
        if not call.attrs:
            return []
        definition = lookup_op(call.callee.name) if isinstance(call.callee, Op) else None
        parts = []
        for name, value in call.attrs.items():
            if definition is not None and definition.is_default(name, value):
                continue
            parts.append(f"{name}={attr_text(value)}")
        return parts

    def function_rest(self, fn: Function, layout: _Layout, level: int):
        """``[T](%x: A, attr=v) -> R {`` body ``}`` (after ``fn`` or ``def @f``)."""
        head = self.type_params(fn.type_params)
        params: list[Text] = []
        for param in fn.params:
            text: Text = self.var_name(param)
            if param.type_annotation is not None:
                text = _cat(text, ": ", (yield self.eval(param.type_annotation)))
            params.append(text)
        params.extend(f"{k}={attr_text(v)}" for k, v in sorted(fn.attrs.items()))
        ret: Text = ""
        if fn.ret_type is not None:
            ret = _cat(" -> ", (yield self.eval(fn.ret_type)))
        one_line = _join(", ", params) if params else ""
        signature: Text
        if len(head) + _length(one_line) + _length(ret) > WRAP_SIGNATURE_AT and len(params) > 1:
            # One parameter a line, with a trailing comma, as black and rustfmt do.
            inner = _indent(level + 1)
            lines = [_cat(inner, p, ",\n") for p in params]
            signature = _cat(head, "(\n", *lines, _indent(level), ")")
        else:
            signature = _cat(head, "(", one_line, ")")
        block = layout.block_for(fn, "body", level + 1)
        body = yield self.block(fn.body, layout, block)
        return _cat(signature, ret, " {\n", _indent(block.level), body, "\n", _indent(level), "}")

    def type_params(self, params: tuple[TypeVar, ...]) -> str:
        if not params:
            return ""
        return "[" + ", ".join(self.type_var_name(tv) for tv in params) + "]"

    # -------------------------------------------------------------- patterns
    @on(PatternWildcard)
    def _wildcard(self, pattern: PatternWildcard) -> str:
        return "_"

    @on(PatternVar)
    def _pattern_var(self, pattern: PatternVar) -> Text | Computation[Text]:
        if pattern.var.type_annotation is None:
            return self.var_name(pattern.var)
        return self._annotated(pattern.var, pattern.var.type_annotation)

    def _annotated(self, var: Var, annotation: Type) -> Computation[Text]:
        name = self.var_name(var)
        return _cat(name, ": ", (yield self.eval(annotation)))

    @on(PatternConstructor)
    def _pattern_constructor(self, pattern: PatternConstructor) -> Text | Computation[Text]:
        if not pattern.patterns:
            return pattern.constructor.name
        return self._pattern_parts(pattern.constructor.name, pattern.patterns)

    @on(PatternTuple)
    def _pattern_tuple(self, pattern: PatternTuple) -> Computation[Text]:
        return self._pattern_parts("", pattern.patterns)

    def _pattern_parts(self, head: str, patterns: tuple[Pattern, ...]) -> Computation[Text]:
        parts: list[Text] = []
        for p in patterns:
            parts.append((yield self.eval(p)))
        if len(parts) == 1 and not head:
            return _cat("(", parts[0], ",)")
        return _cat(head, "(", _join(", ", parts), ")")

    # ----------------------------------------------------------------- types
    @on(TensorType)
    def _tensor_type(self, t: TensorType) -> str:
        if not t.shape:
            return t.dtype
        dims = ", ".join(str(d) for d in t.shape)
        return f"Tensor[({dims}), {t.dtype}]"

    @on(TupleType)
    def _tuple_type(self, t: TupleType) -> Computation[Text]:
        parts: list[Text] = []
        for field in t.fields:
            parts.append((yield self.eval(field)))
        if len(parts) == 1:
            return _cat("(", parts[0], ",)")
        return _cat("(", _join(", ", parts) if parts else "", ")")

    @on(FuncType)
    def _func_type(self, t: FuncType) -> Computation[Text]:
        head = self.type_params(t.type_params)
        args: list[Text] = []
        for a in t.arg_types:
            args.append((yield self.eval(a)))
        ret = yield self.eval(t.ret_type)
        effects = ""
        if t.effects is not None:
            effects = "{" + ", ".join(t.effects) + "} "
        return _cat("fn ", head, "(", _join(", ", args) if args else "", ") -> ", effects, ret)

    @on(RefType)
    def _ref_type(self, t: RefType) -> Computation[Text]:
        return _cat("Ref[", (yield self.eval(t.value)), "]")

    @on(KeyType)
    def _key_type(self, t: KeyType) -> str:
        return "Key"

    @on(IncompleteType)
    def _incomplete_type(self, t: IncompleteType) -> str:
        return "_"

    @on(TypeVar)
    def _type_var(self, t: TypeVar) -> str:
        return self.type_var_name(t)

    @on(GlobalTypeVar)
    def _global_type_var(self, t: GlobalTypeVar) -> str:
        return t.name

    @on(TypeCall)
    def _type_call(self, t: TypeCall) -> Text | Computation[Text]:
        if not t.args:
            return t.func.name
        return self._type_args(t)

    def _type_args(self, t: TypeCall) -> Computation[Text]:
        args: list[Text] = []
        for a in t.args:
            args.append((yield self.eval(a)))
        return _cat(t.func.name, "[", _join(", ", args), "]")


def astext(node: IRModule | Node) -> str:
    """Canonical text of a module, expression, type or other IR node."""
    with collector_paced():
        return _astext(node)


def _astext(node: IRModule | Node) -> str:
    printer = Printer()
    if isinstance(node, IRModule):
        return printer.module(node)
    if isinstance(node, Expr):
        return printer.top_expr(node)
    if isinstance(node, Type):
        return str(printer.evaluate(node))
    if isinstance(node, TypeData):
        return str(run(printer.type_def(node)))
    if isinstance(node, GlobalCell):
        return str(run(printer.cell(node))) + "\n" + printer.metadata_section()
    if isinstance(node, Pattern):
        return str(printer.evaluate(node))
    if isinstance(node, Clause):
        pattern = str(printer.evaluate(node.pattern))
        return pattern + " => " + printer.top_expr(node.body).rstrip()
    if isinstance(node, Attrs):  # pragma: no cover - convenience
        return ", ".join(f"{k}={attr_text(v)}" for k, v in node.items())
    raise TypeError(f"cannot print {type(node).__name__}")


register_renderer("text", astext)
