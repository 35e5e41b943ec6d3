"""simplify: local algebraic rewrites that keep every value bit-identical.

Requires a well-typed program (the pass runs ``effir.check`` on its input);
keeps A-normal form and A2. It is a peephole pass in the spirit of MLIR's
canonicalize: each rewrite looks at one expression and at what the
variables it uses are bound to, and replaces it by a cheaper expression
that computes the same bits on every input for which the original runs
without error. (An original that fails at run time may stop failing:
``reshape(reshape(x, a), b)`` no longer checks that ``x`` fits ``a``;
docs/semantics.md §4.1 allows that.)

The rewrites, and why each is exact:

1. **Tuples of projections.** ``(%t.0, %t.1, ..., %t.(n-1))``, or the same
   fields through variables bound to them (the A-normal form of it), is
   ``%t`` when ``%t`` has a tuple type of exactly ``n`` fields: a tuple value
   is its fields, and projections copy nothing.
2. **Arithmetic identities**, with the constant on either side where the
   operator commutes (``add``, ``multiply``) and on the right otherwise
   (``subtract``, ``divide``). Constant: a ``Constant``, or a variable bound
   to one, every element of which is the identity:

   - ``x * 1`` and ``x / 1``: exact in IEEE arithmetic for every ``x``
     (``-0.0``, infinities and NaN included) and in wrapping and truncating
     integer arithmetic. (A signalling NaN would come out quiet; effir
     never makes one.)
   - ``x - 0``: exact for integers, and for floats when the zero is ``+0.0``
     (``-0.0 - +0.0 = -0.0``); ``x - (-0.0)`` is ``x + 0.0``, see below.
   - ``x + 0``: exact for integers only. For floats ``-0.0 + +0.0 = +0.0``,
     so ``x + 0f`` is NOT ``x`` (its sign bit differs when ``x`` is
     ``-0.0``); ``x + (-0.0)`` is ``x`` for every float ``x`` and is rewritten.
   - Only when the result's type is exactly ``x``'s [RULE FOLD-TYPE]: ``x + zeros``
     that broadcasts ``x`` to a bigger shape is a new tensor, not ``x``.
3. **Shape operators.**

   - ``reshape(reshape(x, a), b)`` is ``reshape(x, b)``: a reshape keeps the
     row-major order of the elements, so only the last shape matters —
     except where ``b`` holds ``0`` ("copy the input's dimension"), which
     would then read ``x``'s dimension instead of the inner result's: such
     a ``b`` is left alone. ``reshape(x, b)`` whose type is ``x``'s own is
     ``x`` (the shape cannot differ: static sizes are equal, and the one
     ``-1`` is fixed by the element count).
   - ``transpose(transpose(x, p), q)`` is ``transpose(x, r)`` with
     ``r[i] = p[q[i]]`` (axes ``None`` are the reversal); a transpose by the
     identity permutation is ``x``.
   - ``squeeze(expand_dims(x, axis=a, num_newaxis=k), axis=s)`` is ``x``
     when ``s`` lists exactly the ``k`` axes ``expand_dims`` inserted (each of
     size 1 by construction, so the squeeze cannot fail).
   - ``cast(x, dtype)`` with ``x`` already of that dtype is ``x`` (numpy's
     ``astype`` to the same dtype copies the bits).
   - ``negative(negative(x))`` is ``x``: a sign flip twice for floats (NaN
     included), and ``-(-x) = x`` modulo ``2^bits`` for integers (the most
     negative int maps to itself twice).

4. **Atoms**, as in fold-constant: a ``let`` bound to a variable or a
   constant of its own type is substituted, so ``let %y = add(%x, 0)``
   leaves no ``let %y = %x`` behind.

Soundness rules (those of ``fold_constant``, whose walker this pass uses):
every replacement has exactly the type of what it replaces, checked with
the operators' own type relations where a call is rebuilt [RULE FOLD-TYPE]; only
atoms are moved, so nothing is evaluated twice or dropped except pure
operators [RULE FOLD-ATOM]. Of the bindings a rewrite leaves dead, those of atoms,
tuples of atoms and projections of atoms go [RULE FOLD-DEAD] (the ``let %a = %t.0``
of a tuple rebuilt as ``%t``: a key or world token held twice would break
linearity); others, such as the inner reshape's, are dead-code
elimination's to remove.

Operator names appear here, unlike in generic passes: an algebraic identity
is a fact about one operator. Each rewrite is a ``RewritePattern`` (listed
in ``PATTERNS``), run by the greedy driver of ``effir.ir.rewrite``; an
operator's rule names it in ``ops``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from effir.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var, is_atom
from effir.ir.module import IRModule
from effir.ir.op import call_op, op_def
from effir.ir.rewrite import PatternRewriter, RewritePattern, apply_patterns, same_type, type_of
from effir.ir.types import TensorType, TupleType
from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import module_pass


@module_pass(
    name="simplify",
    preserves={"anf", "a2", "bbnf"},  # a binding's value becomes an atom or one call
    doc="algebraic identities that keep every bit: x * 1, tuples of projections, "
    "reshape of reshape, transpose of transpose, casts to the same dtype...",
)
def simplify(module: IRModule) -> IRModule:
    """``module`` with the algebraic rewrites of the module doc applied.
    Returns ``module`` itself when nothing changed."""
    return apply_patterns(module, lambda: [p() for p in PATTERNS], check)


class TupleOfProjections(RewritePattern):
    """``(%t.0, ..., %t.(n-1))`` of an ``n``-tuple ``%t``: ``%t``."""

    roots = (Tuple,)

    def match_and_rewrite(self, tup: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(tup, Tuple)
        source: Var | None = None
        for i, field in enumerate(tup.fields):
            get = rw.resolve(field) if isinstance(field, Var) else field
            if not (isinstance(get, TupleGetItem) and get.index == i):
                return None
            if not isinstance(get.tuple_value, Var) or source not in (None, get.tuple_value):
                return None
            source = get.tuple_value
        if source is None:  # the unit ()
            return None
        source_type = type_of(source)
        if isinstance(source_type, TupleType) and len(source_type.fields) == len(tup.fields):
            if same_type(source, old):  # [RULE FOLD-TYPE]
                return source
        return None


# ---------------------------------------------------------------- helpers
def _producer(rw: PatternRewriter, expr: Expr, name: str) -> Call | None:
    """The call of operator ``name`` that ``expr`` is (directly, or as the
    value of the variable it is), when its argument is an atom [RULE FOLD-ATOM];
    else None."""
    value = rw.resolve(expr)
    if (
        isinstance(value, Call)
        and isinstance(value.callee, Op)
        and value.callee.name == name
        and is_atom(value.args[0])
    ):
        return value
    return None


def _constant(rw: PatternRewriter, expr: Expr) -> np.ndarray | None:
    value = rw.resolve(expr)
    return value.data if isinstance(value, Constant) else None


def _same_as_arg(x: Expr, old: Expr) -> Expr | None:
    """``x`` when it has exactly the call's type [RULE FOLD-TYPE]."""
    return x if same_type(x, old) else None


def _rebuilt(old: Expr, name: str, x: Expr, **attrs: Any) -> Expr | None:
    """``name(x, **attrs)`` when its type (by the operator's relation) is
    the call's [RULE FOLD-TYPE]; it keeps the call's span."""
    x_type = type_of(x)
    if x_type is None:
        return None
    call = call_op(name, x, **attrs)
    try:
        new_type = op_def(name).rule("type")((x_type,), call.attrs)
    except Exception:  # a relation that rejects it: keep the original
        return None
    if not same_type(new_type, old):
        return None
    result = Call(call.callee, call.args, call.attrs, span=old.span)
    result.set_checked_type(new_type)
    return result


# ------------------------------------------------------------- arithmetic
def _all(c: np.ndarray | None, test: Callable[[np.ndarray], np.ndarray]) -> bool:
    if c is None or c.dtype == np.bool_:
        return False
    if c.size > _MEMO_ELEMENTS:
        return bool(np.all(test(c)))
    # Programs repeat a few small constants (1f, 0.5f) many times, and numpy
    # is slow on one element: remember the answer per test and bit pattern.
    key = (test, c.dtype.str, c.shape, c.tobytes())
    answer = _MEMO.get(key)
    if answer is None:
        if len(_MEMO) >= _MEMO_ENTRIES:
            _MEMO.clear()
        answer = _MEMO[key] = bool(np.all(test(c)))
    return answer


_MEMO: dict[tuple, bool] = {}
_MEMO_ELEMENTS = 16
_MEMO_ENTRIES = 4096


def _is_float(c: np.ndarray) -> bool:
    return c.dtype.kind == "f"


def _additive_identity(c: np.ndarray | None) -> bool:
    """``x + c == x`` bit for bit: integer 0, float -0.0."""
    if c is None:
        return False
    if _is_float(c):
        return _all(c, _is_negative_zero)
    return _all(c, _is_zero)


def _subtractive_identity(c: np.ndarray | None) -> bool:
    """``x - c == x`` bit for bit: integer 0, float +0.0."""
    if c is None:
        return False
    if _is_float(c):
        return _all(c, _is_positive_zero)
    return _all(c, _is_zero)


def _one(c: np.ndarray | None) -> bool:
    return _all(c, _is_one)


def _is_zero(a: np.ndarray) -> np.ndarray:
    return a == 0


def _is_negative_zero(a: np.ndarray) -> np.ndarray:
    return (a == 0) & np.signbit(a)


def _is_positive_zero(a: np.ndarray) -> np.ndarray:
    return (a == 0) & ~np.signbit(a)


def _is_one(a: np.ndarray) -> np.ndarray:
    return a == 1


class AddIdentity(RewritePattern):
    """``x + 0`` (integers) and ``x + (-0.0)`` (floats): ``x``."""

    roots = (Call,)
    ops = ("add",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        a, b = call.args
        if _additive_identity(_constant(rw, b)):
            return _same_as_arg(a, old)
        if _additive_identity(_constant(rw, a)):
            return _same_as_arg(b, old)
        return None


class SubtractIdentity(RewritePattern):
    """``x - 0`` (integers) and ``x - (+0.0)`` (floats): ``x``."""

    roots = (Call,)
    ops = ("subtract",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        a, b = call.args
        return _same_as_arg(a, old) if _subtractive_identity(_constant(rw, b)) else None


class MultiplyIdentity(RewritePattern):
    """``x * 1`` and ``1 * x``: ``x``."""

    roots = (Call,)
    ops = ("multiply",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        a, b = call.args
        if _one(_constant(rw, b)):
            return _same_as_arg(a, old)
        if _one(_constant(rw, a)):
            return _same_as_arg(b, old)
        return None


class DivideIdentity(RewritePattern):
    """``x / 1``: ``x``."""

    roots = (Call,)
    ops = ("divide",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        a, b = call.args
        return _same_as_arg(a, old) if _one(_constant(rw, b)) else None


# ------------------------------------------------------------------ shapes
class ReshapeOfReshape(RewritePattern):
    """``reshape(reshape(x, a), b)``: ``reshape(x, b)``; a reshape to ``x``'s own type: ``x``."""

    roots = (Call,)
    ops = ("reshape",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        (x,) = call.args
        newshape = call.attrs["newshape"]
        inner = _producer(rw, x, "reshape")
        if inner is not None and 0 not in newshape:
            x = inner.args[0]
            identity = _same_as_arg(x, old)
            return (
                identity
                if identity is not None
                else _rebuilt(old, "reshape", x, newshape=list(newshape))
            )
        return _same_as_arg(x, old)


def _permutation(axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(rank)))
    return tuple(a + rank if a < 0 else a for a in axes)


class TransposeOfTranspose(RewritePattern):
    """``transpose(transpose(x, p), q)``: one transpose; by the identity: ``x``."""

    roots = (Call,)
    ops = ("transpose",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        (x,) = call.args
        x_type = type_of(x)
        if not isinstance(x_type, TensorType):
            return None
        q = _permutation(call.attrs["axes"], x_type.ndim)
        inner = _producer(rw, x, "transpose")
        if inner is not None:
            x = inner.args[0]
            inner_p = _permutation(inner.attrs["axes"], x_type.ndim)
            q = tuple(inner_p[i] for i in q)
        if q == tuple(range(len(q))):
            return _same_as_arg(x, old)
        if inner is None:
            return None
        return _rebuilt(old, "transpose", x, axes=list(q))


class SqueezeOfExpandDims(RewritePattern):
    """``squeeze`` of the axes ``expand_dims`` inserted: ``x``."""

    roots = (Call,)
    ops = ("squeeze",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        (y,) = call.args
        inner = _producer(rw, y, "expand_dims")
        axes = call.attrs["axis"]
        if inner is None or axes is None:
            return None
        x = inner.args[0]
        x_type = type_of(x)
        if not isinstance(x_type, TensorType):
            return None
        rank = x_type.ndim
        axis, count = inner.attrs["axis"], inner.attrs["num_newaxis"]
        start = axis + rank + 1 if axis < 0 else axis
        squeezed = {a + rank + count if a < 0 else a for a in axes}
        if len(squeezed) == len(axes) and squeezed == set(range(start, start + count)):
            return _same_as_arg(x, old)
        return None


class CastToSameType(RewritePattern):
    """``cast`` to ``x``'s own dtype: ``x``."""

    roots = (Call,)
    ops = ("cast",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        (x,) = call.args
        return _same_as_arg(x, old)  # the same type means the same dtype


class NegativeOfNegative(RewritePattern):
    """``negative(negative(x))``: ``x``."""

    roots = (Call,)
    ops = ("negative",)

    def match_and_rewrite(self, call: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        assert isinstance(call, Call)
        inner = _producer(rw, call.args[0], "negative")
        return None if inner is None else _same_as_arg(inner.args[0], old)


PATTERNS: tuple[type[RewritePattern], ...] = (
    TupleOfProjections,
    AddIdentity,
    SubtractIdentity,
    MultiplyIdentity,
    DivideIdentity,
    ReshapeOfReshape,
    TransposeOfTranspose,
    SqueezeOfExpandDims,
    CastToSameType,
    NegativeOfNegative,
)
"""The rewrites of the module doc, one class each (operator rules keyed by
``ops``)."""
