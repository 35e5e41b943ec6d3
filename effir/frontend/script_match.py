"""Python's ``match`` statement in ``@effir.script``: an effir ``match``.

Each ``case`` is a clause; its pattern becomes an effir pattern and its
body a branch, as an ``if``'s branches are converted (script_stmts.py): the
names the cases assign that are live after the statement are the
``match``'s result, and a case that returns takes the rest of the block
(a ``match`` whose cases return moves the statements after it into the
cases that do not).

Patterns: a constructor class with positional or keyword sub-patterns
(``Tree.Node(left, right=r)``; a field not given is ``_``), a capture
(``x``), ``_``, a tuple (``(a, b)``) and, at the top only, ``pattern as
name`` (the name is the value matched). Nested freely. Refused with a
hint: literal and value patterns, ``|``, ``*rest``, mappings, guards.

As the IR's ``match``, a scripted ``match`` must cover every value: one
that does not is refused at its line with the exhaustiveness check's
witness (passes/analyses/exhaustiveness.py), where Python would silently run no
case.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Protocol

from effir.passes.analyses.exhaustiveness import missing_case

from ..ir.expr import (
    Clause,
    Expr,
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
)
from . import builder as B
from .adts import adt_module, is_constructor, note_adt
from .liveness import assigned, match_outputs
from .script_stmts import _always_returns
from .script_values import Converting, Return
from .spans import span_scope
from .values import to_expr

REFUSED_PATTERNS = {
    ast.MatchValue: ("a literal or value pattern", "compare with if/elif: if x == 0:"),
    ast.MatchSingleton: ("a None/True/False pattern", "compare with if/elif"),
    ast.MatchOr: ("an or-pattern (|)", "write one case per constructor"),
    ast.MatchStar: ("a *rest pattern", "name each field of the tuple"),
    ast.MatchMapping: ("a mapping pattern", "match constructors or tuples"),
}


class Matching(Converting, Protocol):
    """What the ``match`` rules use of the converter they are part of: its
    shared parts and their own helpers (the type of ``self`` below)."""

    def _subject(self, stmt: ast.Match, env: dict[str, Any]) -> Expr: ...

    def _build(
        self,
        stmt: ast.Match,
        data: Expr,
        env: dict[str, Any],
        case_body: Callable[[ast.match_case, dict[str, Any]], Callable[[], Any]],
    ) -> Any: ...

    def _pattern(
        self,
        node: ast.pattern,
        bound: dict[str, Any],
        data: Expr,
        types: set[str],
        env: dict[str, Any],
        top: bool = False,
    ) -> Pattern: ...

    def _class_pattern(
        self,
        node: ast.MatchClass,
        bound: dict[str, Any],
        data: Expr,
        types: set[str],
        env: dict[str, Any],
    ) -> Pattern: ...

    def _capture(self, name: str, node: ast.AST) -> Var: ...


class MatchConverter:
    """The ``match`` statement's part of ``Converter`` (script_convert.py)."""

    def plain_match(
        self: Matching, stmt: ast.Match, env: dict[str, Any], live_after: set[str]
    ) -> None:
        """A ``match`` after which the block goes on: the live names its
        cases assign are its result."""
        data = self._subject(stmt, env)
        outs = match_outputs(stmt, live_after)
        for name in outs:
            every = all(
                name in assigned(c.body) or name in _captures(c.pattern) for c in stmt.cases
            )
            if name not in env and not every:
                raise self.error(
                    stmt,
                    f"{name} is assigned in only some cases of this match and used after it",
                    f"give {name} a value before the match, or in every case",
                )
        results: dict[str, Any] = {}

        def case_body(case: ast.match_case, bound: dict[str, Any]) -> Callable[[], Any]:
            def run() -> Any:
                inner = {**env, **bound}
                self.block(case.body, inner, set(outs) | live_after)
                values = []
                for n in outs:
                    v = inner[n]
                    if not isinstance(v, Expr) and n in results:  # a number: the first's dtype
                        dtype = B.dtype_hint(results[n])
                        v = to_expr(v, dtype) if dtype else v
                    results.setdefault(n, v)
                    values.append(self.value_expr(v, stmt))
                return tuple(values)

            return run

        got = self._build(stmt, data, env, case_body)
        for name, value in zip(outs, got, strict=True):
            env[name] = value

    def returning_match(
        self: Matching,
        stmt: ast.Match,
        rest: list[ast.stmt],
        env: dict[str, Any],
        live_out: set[str],
    ) -> Return:
        """A ``match`` whose cases return: each case's body, the rest of the
        block after it where it does not return, gives the result."""
        data = self._subject(stmt, env)

        def case_body(case: ast.match_case, bound: dict[str, Any]) -> Callable[[], Any]:
            stmts = case.body if _always_returns(case.body) else case.body + rest

            def run() -> Any:
                result = self.block(stmts, {**env, **bound}, live_out)
                if result is None:
                    raise self.error(
                        case.pattern,
                        "this case of the match does not return a value",
                        "return in every case (or after the match)",
                    )
                return self.value_expr(result.value, stmt)

            return run

        return Return(self._build(stmt, data, env, case_body))

    # ------------------------------------------------------------ helpers
    def _subject(self: Matching, stmt: ast.Match, env: dict[str, Any]) -> Expr:
        value = self.expr(stmt.subject, env)
        with span_scope(self.span(stmt.subject)):
            return B.emit(to_expr(value)) if B.building() else to_expr(value)

    def _build(
        self: Matching,
        stmt: ast.Match,
        data: Expr,
        env: dict[str, Any],
        case_body: Callable[[ast.match_case, dict[str, Any]], Callable[[], Any]],
    ) -> Any:
        """The effir ``match`` of ``stmt`` on ``data``, each case's body
        built by ``case_body(case, names its pattern binds)``; refused
        before any body is built when it is not exhaustive."""
        patterns = []
        types: set[str] = set()
        for case in stmt.cases:
            if case.guard is not None:
                raise self.error(
                    case.guard,
                    "a guard (case ... if ...) is not supported in @effir.script",
                    "test the condition with an if inside the case",
                )
            bound: dict[str, Any] = {}
            pattern = self._pattern(case.pattern, bound, data, types, env, top=True)
            patterns.append((pattern, bound))
        shape = Match(data, tuple(Clause(p, data) for p, _ in patterns))
        missing = missing_case(shape, adt_module(types, _noted()))
        if missing is not None:
            raise self.error(
                stmt,
                f"match is not exhaustive: no case matches {missing}",
                "add a case for it, or end with `case _:`",
            )
        clauses = [
            (pattern, case_body(case, bound))
            for case, (pattern, bound) in zip(stmt.cases, patterns, strict=True)
        ]
        with span_scope(self.span(stmt)):
            return B.match_clauses(data, clauses)

    def _pattern(
        self: Matching,
        node: ast.pattern,
        bound: dict[str, Any],
        data: Expr,
        types: set[str],
        env: dict[str, Any],
        top: bool = False,
    ) -> Pattern:
        """``node`` as an effir pattern; the names it captures into
        ``bound``, the types it tests into ``types``. Recursive in the
        nesting of the pattern as written (as Python's parser is)."""
        span = self.span(node)
        refused = REFUSED_PATTERNS.get(type(node))
        if refused is not None:
            raise self.error(node, f"{refused[0]} is not supported in @effir.script", refused[1])
        if isinstance(node, ast.MatchAs):
            if node.pattern is None:
                if node.name is None:
                    return PatternWildcard(span=span)
                var = self._capture(node.name, node)
                bound[node.name] = var
                return PatternVar(var, span=span)
            if not top:
                raise self.error(
                    node,
                    "an `as` pattern inside another pattern is not supported",
                    "name the part where it is: case Tree.Node(left, right):",
                )
            inner = self._pattern(node.pattern, bound, data, types, env)
            if node.name is not None:
                bound[node.name] = data
            return inner
        if isinstance(node, ast.MatchSequence):
            subs = tuple(self._pattern(p, bound, data, types, env) for p in node.patterns)
            return PatternTuple(subs, span=span)
        if isinstance(node, ast.MatchClass):
            return self._class_pattern(node, bound, data, types, env)
        raise self.error(node, f"a {type(node).__name__} pattern is not supported")

    def _class_pattern(
        self: Matching,
        node: ast.MatchClass,
        bound: dict[str, Any],
        data: Expr,
        types: set[str],
        env: dict[str, Any],
    ) -> Pattern:
        ctor = self.expr(node.cls, env)
        if not is_constructor(ctor):
            raise self.error(
                node.cls,
                f"{ast.unparse(node.cls)} is not the constructor of an effir type",
                "declare the type with @effir.adt and match its constructors (Tree.Leaf(...))",
            )
        fields = ctor.field_names
        shown = f"{ctor.adt.name}.{ctor.__name__}"
        if len(node.patterns) > len(fields):
            raise self.error(
                node,
                f"{shown} has {len(fields)} field(s), this pattern gives {len(node.patterns)}",
                f"{shown}({', '.join(fields)})",
            )
        subs: list[ast.pattern | None] = [
            *node.patterns,
            *[None] * (len(fields) - len(node.patterns)),
        ]
        for attr, sub in zip(node.kwd_attrs, node.kwd_patterns, strict=True):
            if attr not in fields:
                raise self.error(
                    sub, f"{shown} has no field {attr}", f"its fields: {', '.join(fields)}"
                )
            index = fields.index(attr)
            if subs[index] is not None:
                raise self.error(sub, f"the field {attr} of {shown} is matched twice")
            subs[index] = sub
        note_adt(ctor.adt)
        types.add(ctor.adt.name)
        parts = tuple(
            PatternWildcard(span=self.span(node))
            if sub is None
            else self._pattern(sub, bound, data, types, env)
            for sub in subs
        )
        constructor = ctor.adt.constructor(ctor.ir_name)
        return PatternConstructor(constructor, parts, span=self.span(node))

    def _capture(self: Matching, name: str, node: ast.AST) -> Var:
        with span_scope(self.span(node)):
            return B.new_var(name)


def _captures(pattern: ast.pattern) -> set[str]:
    return {n.name for n in ast.walk(pattern) if isinstance(n, ast.MatchAs) and n.name}


def _noted() -> dict[str, Any]:
    block = B.current_block()
    return dict(block.root.adts) if block is not None else {}
