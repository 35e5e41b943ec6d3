"""Exhaustiveness of ``match``: a plain ``match`` must cover every value of
its type (``match?`` may fail at run time instead).

The algorithm is Maranget's "usefulness" ("Warnings for pattern matching",
JFP 2007): a match is exhaustive exactly when a wildcard row is *not* useful
after its clauses. Usefulness specialises the pattern matrix by each
constructor of the first column's type; when the column's constructors do
not cover the type, the default matrix (rows starting with a wildcard)
decides, and the missing constructor gives the witness shown to the user.
Tuples are a type with one constructor. ``_Usefulness`` is an
``ExprFunctor``: a pattern's head is its ``@on`` hook's result, and the
recursion (over pattern depth) is a computation on the functor's driver,
the trampoline.
"""

from __future__ import annotations

from effir.ir.expr import (
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from effir.ir.expr_functor import Computation, ExprFunctor
from effir.ir.functor import on
from effir.ir.module import IRModule

Head = tuple[str, tuple[Pattern, ...], "str | None"]
"""A refutable pattern's constructor name, sub-patterns and ADT (None for a
tuple)."""
Row = tuple[Head | None, ...]  # None stands for a wildcard
_TUPLE = "(tuple)"


def missing_case(match: Match, module: IRModule) -> str | None:
    """A value (as pattern text, ``_`` for anything) that no clause of
    ``match`` matches, or None when the match is exhaustive."""
    return _Usefulness(module).witness(match)


class _Usefulness(ExprFunctor):
    """Maranget's usefulness over a pattern matrix. The hooks read a
    pattern's head (None for an irrefutable one) and return at once; the
    recursion over the matrix is a computation on the same driver."""

    patterns = True

    def __init__(self, module: IRModule) -> None:
        super().__init__()
        self.module = module

    def witness(self, match: Match) -> str | None:
        rows: list[Row] = [(self.eval(c.pattern),) for c in match.clauses]
        witness = self.drive(self.useful(rows, 1))
        return None if witness is None else witness[0]

    @on(PatternWildcard, PatternVar)
    def _irrefutable(self, p: Pattern) -> None:
        return None

    @on(PatternTuple)
    def _tuple(self, p: PatternTuple) -> Head:
        return _TUPLE, p.patterns, None

    @on(PatternConstructor)
    def _constructor(self, p: PatternConstructor) -> Head:
        return p.constructor.name, p.patterns, p.constructor.adt

    def specialise(self, rows: list[Row], name: str, arity: int) -> list[Row]:
        out = []
        for row in rows:
            first = row[0]
            if first is None:
                out.append((None,) * arity + row[1:])
            elif first[0] == name:
                out.append(tuple(self.eval(s) for s in first[1]) + row[1:])
        return out

    def signature(self, rows: list[Row]) -> list[tuple[str, int]] | None:
        """Every constructor of the first column's type, when the column
        names any constructor (None when it has only wildcards)."""
        for row in rows:
            first = row[0]
            if first is None:
                continue
            name, subs, adt = first
            if adt is None:
                return [(_TUPLE, len(subs))]
            data = self.module.type_defs.get(adt)
            if data is None:  # unknown ADT: reported elsewhere; assume covered
                return sorted({(r[0][0], len(r[0][1])) for r in rows if r[0] is not None})
            return [(c.name, len(c.inputs)) for c in data.constructors]
        return None

    def useful(self, rows: list[Row], width: int) -> Computation:
        """A witness row (pattern texts) that a wildcard row of ``width``
        columns matches and no row of ``rows`` does, or None."""
        if width == 0:
            return None if rows else ()
        signature = self.signature(rows)
        present = {r[0][0] for r in rows if r[0] is not None}
        if signature is not None and all(name in present for name, _ in signature):
            for name, arity in signature:
                found = yield self.useful(self.specialise(rows, name, arity), arity + width - 1)
                if found is not None:
                    return (_show(name, found[:arity]),) + found[arity:]
            return None
        default = [r[1:] for r in rows if r[0] is None]
        found = yield self.useful(default, width - 1)
        if found is None:
            return None
        if signature is None:
            return ("_",) + found
        name, arity = next((n, a) for n, a in signature if n not in present)
        return (_show(name, ("_",) * arity),) + found


def _show(name: str, args: tuple[str, ...]) -> str:
    if name == _TUPLE:
        return "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
    return name + ("(" + ", ".join(args) + ")" if args else "")
