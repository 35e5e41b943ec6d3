"""Exhaustiveness of ``match``: a plain ``match`` must cover every value of
its type (``match?`` may fail at run time instead).

The algorithm is Maranget's "usefulness" ("Warnings for pattern matching",
JFP 2007): a match is exhaustive exactly when a wildcard row is *not* useful
after its clauses. Usefulness specialises the pattern matrix by each
constructor of the first column's type; when the column's constructors do
not cover the type, the default matrix (rows starting with a wildcard)
decides, and the missing constructor gives the witness shown to the user.
Tuples are a type with one constructor. Recursion is over pattern depth and
runs on the trampoline.
"""

from __future__ import annotations

from ..ir.expr import (
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from ..ir.module import IRModule
from ..ir.trampoline import run

Row = tuple[Pattern | None, ...]  # None stands for a wildcard
_TUPLE = "(tuple)"


def missing_case(match: Match, module: IRModule) -> str | None:
    """A value (as pattern text, ``_`` for anything) that no clause of
    ``match`` matches, or None when the match is exhaustive."""
    rows = [(_normal(c.pattern),) for c in match.clauses]
    witness = run(_useful(rows, 1, module))
    return None if witness is None else witness[0]


def _normal(p: Pattern) -> Pattern | None:
    return None if isinstance(p, PatternWildcard | PatternVar) else p


def _head(p: Pattern) -> tuple[str, int]:
    """(constructor name, arity) of a refutable pattern."""
    if isinstance(p, PatternTuple):
        return _TUPLE, len(p.patterns)
    assert isinstance(p, PatternConstructor)
    return p.constructor.name, len(p.patterns)


def _specialize(rows: list[Row], name: str, arity: int) -> list[Row]:
    out = []
    for row in rows:
        first = row[0]
        if first is None:
            out.append((None,) * arity + row[1:])
        elif _head(first)[0] == name:
            subs = first.patterns  # type: ignore[union-attr]
            out.append(tuple(_normal(s) for s in subs) + row[1:])
    return out


def _signature(rows: list[Row], module: IRModule) -> list[tuple[str, int]] | None:
    """Every constructor of the first column's type, when the column names
    any constructor (None when it has only wildcards)."""
    for row in rows:
        first = row[0]
        if first is None:
            continue
        if isinstance(first, PatternTuple):
            return [(_TUPLE, len(first.patterns))]
        assert isinstance(first, PatternConstructor)
        data = module.type_defs.get(first.constructor.adt)
        if data is None:  # unknown ADT: reported elsewhere; assume covered
            return sorted({_head(r[0]) for r in rows if r[0] is not None})  # type: ignore[arg-type]
        return [(c.name, len(c.inputs)) for c in data.constructors]
    return None


def _show(name: str, args: tuple[str, ...]) -> str:
    if name == _TUPLE:
        return "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
    return name + ("(" + ", ".join(args) + ")" if args else "")


def _useful(rows: list[Row], width: int, module: IRModule):
    """Generator: a witness row (pattern texts) that a wildcard row of
    ``width`` columns matches and no row of ``rows`` does, or None."""
    if width == 0:
        return None if rows else ()
    signature = _signature(rows, module)
    present = {_head(r[0])[0] for r in rows if r[0] is not None}
    if signature is not None and all(name in present for name, _ in signature):
        for name, arity in signature:
            found = yield _useful(_specialize(rows, name, arity), arity + width - 1, module)
            if found is not None:
                return (_show(name, found[:arity]),) + found[arity:]
        return None
    default = [r[1:] for r in rows if r[0] is None]
    found = yield _useful(default, width - 1, module)
    if found is None:
        return None
    if signature is None:
        return ("_",) + found
    name, arity = next((n, a) for n, a in signature if n not in present)
    return (_show(name, ("_",) * arity),) + found
