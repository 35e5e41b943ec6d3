"""What the evaluator decides statically: folding a pure operator on
constants (its own numpy rule, bit-identical to the interpreter), matching
a pattern against a known value, and a foreach's static length. (The
inferred types given to residual parameters and to context-typed values,
``annotated``, are ``effir.ir.context_types``'s.)"""

from __future__ import annotations

from typing import Literal

import numpy as np

from effir.ir.expr import (
    Call,
    Expr,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
)
from effir.ir.types import TensorType, TupleType
from effir.passes.transforms.partial_eval.values import MAX_ELEMENTS, PV


def leading_length(expr: Expr) -> int | None:
    """The static number of steps of a ``cf.foreach`` sequence, if known."""
    if not expr.has_type:
        return None
    t = expr.checked_type
    while isinstance(t, TupleType) and t.fields:
        t = t.fields[0]
    if isinstance(t, TensorType) and t.shape and isinstance(t.shape[0], int):
        return t.shape[0]
    return None


def fold(definition, call: Call, args: list[PV], values: tuple | None = None) -> np.ndarray | None:
    """The value of a pure operator on constants (``values``: the arguments
    as the numpy rule takes them, when not the constants themselves), or None."""
    if definition.effect != "pure" or not all(a.const is not None for a in args):
        return None
    if definition.name.startswith("random."):
        return None
    try:
        given = tuple(a.const for a in args) if values is None else values
        result = definition.rule("numpy")(given, call.attrs)
    except Exception:  # a failure stays a run-time failure
        return None
    if not isinstance(result, np.ndarray | np.generic):
        return None
    result = np.asarray(result)
    if result.size > MAX_ELEMENTS:
        return None
    return result


def fold_tuple(definition, call: Call, fields: tuple[PV, ...]) -> np.ndarray | None:
    """The value of a pure operator taking one tuple of constants, or None."""
    return fold(
        definition, call, [PV(call.args[0], const=np.empty(0))], (tuple(f.const for f in fields),)
    )


def static_match(pattern: Pattern, data: PV) -> dict[Var, PV] | Literal[False] | None:
    """Bindings if ``pattern`` surely matches ``data``, False if it surely
    does not, None if that is not known statically."""
    work = [(pattern, data)]
    bound: dict[Var, PV] = {}
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            bound[p.var] = v
        elif isinstance(p, PatternConstructor):
            if v.ctor is None:
                return None
            if v.ctor.name != p.constructor.name:
                return False
            assert v.fields is not None
            work.extend(zip(p.patterns, v.fields, strict=True))
        elif isinstance(p, PatternTuple):
            if v.fields is None:
                return None
            work.extend(zip(p.patterns, v.fields, strict=True))
        else:
            return None
    return bound
