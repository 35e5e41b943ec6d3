"""Summing a reverse loop's contributions to loop-invariant values after it.

A loop body closes over values that do not change from step to step (a
GRU's weights). The backward of step t adds to their cotangents terms that
VJP rules compute from the step's cotangent and a residual of the step:
``nn.dense``'s weight cotangent ``ct_t^T x_t``, a broadcast bias's
``sum(ct_t, axis=0)``. Accumulated in the reverse loop's carry, each step
runs a small product and carries a weight-sized sum. Both are linear in
per-step values, so the sum over the steps is one operation on the stacked
values: ``sum_t ct_t^T x_t = CT^T X`` with CT, X the (T*B, .) stacks, and
``sum_t sum_b ct_t = sum(CT, axis=0)``. The reverse loop outputs the
per-step factors (as ``cf.foreach`` per-step outputs) and one large,
well-shaped product or reduction after the loop computes the total, as a
hand-written backward does.

``plan`` splits each free variable's per-step cotangent (a chain of ``add``
as ``accumulate`` builds it) into its terms and recognises the hoistable
ones: ``nn.matmul(a, c, transpose_a=True)`` and a ``sum`` over leading axes,
whose operands are computed inside the step. The other terms stay in the
loop's accumulator. Only the summation order changes; every checkpoint
mode stacks the same factors in the same step order (``sqrt`` joins its
segments' stacks), so the three modes stay bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.builder import LetBuilder
from ..ir.expr import Call, Expr, Op, Var
from ..ir.types import TensorType


@dataclass(frozen=True)
class Term:
    """A hoisted term: ``kind`` ("matmul" or "sum"), the indices of its
    operands among the plan's stacks, and the original call's attributes."""

    kind: str
    operands: tuple[int, ...]
    call: Call


@dataclass
class Plan:
    """What one reverse loop hoists (see the module docstring)."""

    stacks: list[Var] = field(default_factory=list)  # per-step values output by the loop
    trailing: list[tuple[int, ...]] = field(default_factory=list)  # their non-step axes
    terms: list[list[Term]] = field(default_factory=list)  # per free variable
    in_loop: list[list[Expr]] = field(default_factory=list)  # per free variable
    x_terms: list[Term] = field(default_factory=list)  # the whole ct of x_t, if hoisted
    x_shape: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.stacks)

    @property
    def hoisted(self) -> list[int]:
        """The free variables (indices) that have hoisted terms."""
        return [j for j, terms in enumerate(self.terms) if terms]

    def x_part(self, b: LetBuilder, flats: list[Expr]) -> Expr:
        """The cotangents of the x_t of one chunk of steps (``flats``: its
        factors, flattened), as rows: ``ct_t @ W`` for them as one product."""
        result = None
        for term in self.x_terms:
            args = [flats[term.operands[0]], term.call.args[1]]
            value = Call(term.call.callee, tuple(args), term.call.attrs, span=b.current_span)
            part = b.emit(value, "ct_hoisted")
            result = part if result is None else b.emit(b.call_op("add", result, part), "ct")
        assert result is not None
        return result

    def x_steps(self, b: LetBuilder, parts: list[Expr]) -> Expr:
        """The rows of ``x_part`` of consecutive chunks (in the reverse
        loop's step order) as the stacked cotangents of their x_t."""
        shaped = [
            b.emit(b.call_op("reshape", p, newshape=[-1, *self.x_shape]), "ct_steps") for p in parts
        ]
        if len(shaped) == 1:
            return shaped[0]
        return b.emit(b.call_op("concatenate", b.tuple(shaped), axis=0), "ct_steps")

    def _stack(self, var: Var, trailing: tuple[int, ...]) -> int:
        for i, (v, t) in enumerate(zip(self.stacks, self.trailing, strict=True)):
            if v is var and t == trailing:
                return i
        self.stacks.append(var)
        self.trailing.append(trailing)
        return len(self.stacks) - 1

    def flat(self, b: LetBuilder, stacked: Expr, index: int) -> Expr:
        """A stacked factor (steps, possibly segmented, first) as (-1, *trailing)."""
        shape = [-1, *self.trailing[index]]
        return b.emit(b.call_op("reshape", stacked, newshape=shape), "stacked")

    def chunk_parts(self, b: LetBuilder, flats: list[Expr]) -> list[Expr]:
        """Per hoisted free variable (``hoisted``), the sum of its hoisted
        terms over one chunk of steps, each term one operation on the
        chunk's flattened factors ``flats``."""
        parts = []
        for j in self.hoisted:
            result = None
            for term in self.terms[j]:
                part = b.emit(self._term_value(b, term, flats), "ct_hoisted")
                result = part if result is None else b.emit(b.call_op("add", result, part), "ct")
            assert result is not None
            parts.append(result)
        return parts

    def _term_value(self, b: LetBuilder, term: Term, flats: list[Expr]) -> Expr:
        args = [flats[i] for i in term.operands]
        if term.kind == "matmul" and _plain(term.call):
            # A^T C as nn.dense(A^T, C^T): TVM's dense kernel took 49 ms
            # where matmul(transpose_a) took 74 for the GRU's weight
            # (docs/performance.md)
            at, ct = (b.emit(b.call_op("transpose", x), "t") for x in args)
            return b.call_op("nn.dense", at, ct)
        if term.kind == "matmul":
            return Call(term.call.callee, tuple(args), term.call.attrs, span=b.current_span)
        attrs = {k: v for k, v in term.call.attrs.items() if k != "axis"}
        return b.call_op("sum", args[0], axis=[0], **attrs)

    def total(self, b: LetBuilder, j: int, acc: Expr, hoisted: Expr | None) -> Expr:
        """The cotangent of free variable ``j``: the loop's accumulator
        ``acc`` (when it received terms) plus ``hoisted``, the sum over
        the chunks of its hoisted terms (``chunk_parts``), if it has any."""
        result = acc if self.in_loop[j] or not self.terms[j] else None
        if hoisted is None:
            assert result is not None
            return result
        return hoisted if result is None else b.emit(b.call_op("add", result, hoisted), "ct")


def _plain(call: Call) -> bool:
    """A matmul with no attribute but its transposes (no ``out_dtype``)."""
    skip = ("transpose_a", "transpose_b")
    return all(v in (None, "") for k, v in call.attrs.items() if k not in skip)


def _is_op(value: Expr, name: str) -> bool:
    return isinstance(value, Call) and isinstance(value.callee, Op) and value.callee.name == name


def _split(bound: dict, g: Expr) -> list[Expr]:
    """The terms of the ``add`` chain ``g`` (an explicit stack: chains may
    be long). Cotangents of one value add up: both operands have its type."""
    terms, pending = [], [g]
    while pending:
        e = pending.pop()
        value = bound.get(e) if isinstance(e, Var) else None
        if value is not None and _is_op(value, "add") and all(a in bound for a in value.args):
            pending.extend(reversed(value.args))
        else:
            terms.append(e)
    return terms


def _x_plan(out: Plan, bound: dict, x_ct: Expr, x_type: TensorType) -> None:
    """Hoist the cotangent of x_t when every term of it is ``ct_t @ W``
    with ``W`` loop-invariant (``nn.dense``'s input cotangent)."""
    found = []
    for e in _split(bound, x_ct):
        value = bound.get(e) if isinstance(e, Var) else None
        if not (value is not None and _is_op(value, "nn.matmul")):
            return
        a, w = value.args
        wt = w.checked_type if isinstance(w, Var) and w.has_type else None
        if a not in bound or w in bound or not isinstance(wt, TensorType):
            return
        if value.attrs.get("transpose_a") is not False or len(wt.shape) != 2:
            return
        k = wt.shape[1] if value.attrs.get("transpose_b") else wt.shape[0]
        if not isinstance(k, int):
            return
        found.append((a, k, value))
    out.x_terms = [Term("x", (out._stack(a, (k,)),), value) for a, k, value in found]
    out.x_shape = tuple(x_type.shape)


def plan(
    nb: LetBuilder,
    free: list[Var],
    cts: list[Expr],
    x_ct: Expr | None = None,
    x_type: TensorType | None = None,
) -> Plan:
    """Split the per-step cotangents ``cts`` of the free variables ``free``
    (expressions bound in the step's builder ``nb``) into in-loop and
    hoisted terms; and, given ``x_type`` (x_t's static 2-D type), hoist
    x_t's cotangent ``x_ct`` where it is only products with invariants."""
    bound = {v: value for v, value in nb.bindings}
    out = Plan()
    for f, g in zip(free, cts, strict=True):
        terms: list[Term] = []
        in_loop: list[Expr] = []
        t = f.checked_type if f.has_type else None
        if not (isinstance(t, TensorType) and t.is_static):
            out.terms.append(terms)
            out.in_loop.append([g])
            continue
        for e in _split(bound, g):
            value = bound.get(e) if isinstance(e, Var) else None
            term = _term(out, bound, value, t) if value is not None else None
            if term is None:
                in_loop.append(e)
            else:
                terms.append(term)
        out.terms.append(terms)
        out.in_loop.append(in_loop)
    if not any(out.terms):
        out.stacks.clear()
        out.trailing.clear()
    elif x_type is not None and x_ct is not None:
        _x_plan(out, bound, x_ct, x_type)
    return out


def _term(out: Plan, bound: dict, value: Expr, t: TensorType) -> Term | None:
    """``value`` (one term of a cotangent of type ``t``) as a hoisted term,
    or None. Operands must be computed in the step (bound in it)."""
    if not isinstance(value, Call) or not all(a in bound for a in value.args):
        return None
    if _is_op(value, "nn.matmul") and len(t.shape) == 2:
        a, c = value.args
        attrs = value.attrs
        if attrs.get("transpose_a") is not True or attrs.get("transpose_b") is not False:
            return None
        # (B, M)^T (B, N) -> (M, N) = t: stacked over steps, B grows to T*B
        ia = out._stack(a, (t.shape[0],))
        ic = out._stack(c, (t.shape[1],))
        return Term("matmul", (ia, ic), value)
    if _is_op(value, "sum"):
        axis = value.attrs.get("axis")
        if value.attrs.get("keepdims") is not False or value.attrs.get("exclude", False):
            return None
        if not axis or list(axis) != list(range(len(axis))):
            return None
        # sum over the leading axes: the result, t, is the trailing shape
        return Term("sum", (out._stack(value.args[0], tuple(t.shape)),), value)
    return None


__all__ = ["Plan", "plan"]
