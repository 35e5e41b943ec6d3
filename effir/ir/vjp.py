"""Vector-Jacobian product rules: the contract between operators and ``grad``.

Each differentiable operator registers, beside its other rules in
``effir/ops/<family>.py``, a ``"vjp"`` rule written in effir's own
operators, so that the backward program is optimised and compiled like any
other (JAX's ``primitive_transposes``/``defvjp`` tables, Relay's
``FPrimalGradient``). An operator that has no derivative (comparisons,
integer and key operators, ``argwhere``, random bits) registers
``NOT_DIFFERENTIABLE`` instead, so that "no rule" always means "forgotten".

A rule is called once per forward call, after the forward program has been
type-checked::

    @defvjp("exp")
    def _exp_vjp(ctx, args, attrs, out, ct):
        return (ctx.op("multiply", ct, out),)

- ``args``: the call's arguments (atoms of the forward program: variables
  and constants; ``ctx.type_of`` gives their types);
- ``attrs``: the call's normalised attributes;
- ``out``: the forward result (an atom), for rules that reuse it;
- ``ct``: the cotangent of the result, an expression of the result's type;
  for an operator returning a tuple, a Python tuple with one entry per
  field, ``None`` where that field has no cotangent (zero).

It returns one entry per argument: the cotangent of that argument (an
expression of the argument's type), or ``None`` for zero (an integer
index, a key, an argument the result does not depend on smoothly).
Everything the rule computes is emitted through ``ctx`` into the backward
block, so each value is bound once and located at the forward call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .builder import LetBuilder
from .diagnostics import Error, Span
from .expr import Call, Expr, Op
from .node import Attrs
from .op import lookup_op
from .types import ANY, TensorType, Type

Args = tuple[Expr, ...]  # a forward call's arguments
Grads = Sequence["Expr | None"]  # one cotangent per argument; None is zero
VjpRule = Callable[["VjpContext", Args, Attrs, Expr, Any], Grads]


class _NotDifferentiable:
    """The ``"vjp"`` rule of an operator that has no derivative."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_DIFFERENTIABLE"


NOT_DIFFERENTIABLE = _NotDifferentiable()


class DifferentiationError(Error):
    """A program cannot be differentiated as asked (names what and where)."""


def defvjp(*names: str) -> Callable[[VjpRule], VjpRule]:
    """Register the decorated function as the ``"vjp"`` rule of ``names``."""

    def register(rule: VjpRule) -> VjpRule:
        for name in names:
            definition = lookup_op(name)
            if definition is None:
                raise ValueError(f"defvjp: unknown operator {name!r}")
            if "vjp" in definition.rules:
                raise ValueError(f"defvjp: operator {name} already has a vjp rule")
            definition.rules["vjp"] = rule
        return rule

    return register


def not_differentiable(*names: str) -> None:
    """Declare that ``names`` have no derivative (their inputs get none)."""
    for name in names:
        definition = lookup_op(name)
        if definition is None:
            raise ValueError(f"not_differentiable: unknown operator {name!r}")
        definition.rules["vjp"] = NOT_DIFFERENTIABLE


def vjp_rule(call: Call) -> VjpRule | _NotDifferentiable:
    """The rule of ``call``'s operator, or a DifferentiationError naming the
    operator and the call's location."""
    definition = lookup_op(getattr(call.callee, "name", ""))
    rule = None if definition is None else definition.rules.get("vjp")
    if rule is None:
        name = getattr(call.callee, "name", type(call.callee).__name__)
        raise DifferentiationError(
            f"operator {name} has no vjp rule: it cannot be differentiated", call.span
        )
    return rule


class VjpContext:
    """What a rule emits its backward computation through: a let-builder in
    the forward call's span scope, plus the helpers most rules need."""

    __slots__ = ("builder", "call")

    def __init__(self, builder: LetBuilder, call: Call) -> None:
        self.builder = builder
        self.call = call

    @property
    def span(self) -> Span | None:
        return self.call.span

    # ------------------------------------------------------------ emitting
    def emit(self, value: Expr, name_hint: str = "g") -> Expr:
        """Bind ``value`` in the backward block; returns the variable."""
        with self.builder.span(self.call.span):
            return self.builder.emit(value, name_hint)

    def op(self, name: str, *args: Expr, **attrs: Any) -> Expr:
        """Emit ``name(*args, **attrs)`` (attributes validated); returns the variable."""
        with self.builder.span(self.call.span):
            return self.builder.emit(self.builder.call_op(name, *args, **attrs), "g")

    def const(self, value: Any, dtype: str) -> Expr:
        with self.builder.span(self.call.span):
            return self.builder.const(value, dtype)

    def get(self, value: Expr, index: int) -> Expr:
        """Emit the projection ``value.index``."""
        with self.builder.span(self.call.span):
            return self.builder.emit_get(value, index, "g")

    # --------------------------------------------------------------- types
    def type_of(self, atom: Expr) -> Type:
        """The checked type of a forward atom (argument or result)."""
        return atom.checked_type

    def tensor_type(self, atom: Expr) -> TensorType:
        ty = atom.checked_type
        if not isinstance(ty, TensorType):
            raise DifferentiationError(
                f"expected a tensor, got {type(ty).__name__}", self.call.span
            )
        return ty

    # ------------------------------------------------------------- helpers
    def zeros_like(self, atom: Expr) -> Expr:
        """A zero tensor of ``atom``'s (forward) type; symbolic shapes read
        the shape at run time."""
        ty = self.tensor_type(atom)
        if ty.is_static:
            return self.op("zeros", shape=list(ty.shape), dtype=ty.dtype)
        shape = self.op("shape_of", atom, dtype="int64")
        return self.op("dyn.zeros", shape, dtype=ty.dtype)

    def unbroadcast(self, grad: Expr, grad_type: TensorType, like: Expr) -> Expr:
        """Sum ``grad`` (of ``grad_type``, a broadcast result's shape) down to
        the shape of ``like``: the adjoint of numpy broadcasting."""
        target = self.tensor_type(like)
        extra = grad_type.ndim - target.ndim
        if extra < 0:
            raise DifferentiationError(
                "unbroadcast: the gradient has fewer axes than the argument", self.call.span
            )
        if extra:
            grad = self.op("sum", grad, axis=list(range(extra)), keepdims=False)
        kept, unknown, mismatched = [], [], False
        pairs = zip(grad_type.shape[extra:], target.shape, strict=True)
        others = self._operand_dims(target.ndim)
        for axis, (have, want) in enumerate(pairs):
            if want == 1 and have != 1:
                kept.append(axis)
            elif have != want or want == ANY or others[axis] - {want, 1}:
                # (two ``?`` may differ at run time; an operand's ``?`` or
                # other size may have been the result's where ``want`` is 1)
                mismatched = True
                if not isinstance(want, int):  # symbolic: it may be 1 at run time
                    unknown.append(axis)
                # else the argument's size is not 1, so this axis was not broadcast
        if kept:
            grad = self.op("sum", grad, axis=kept, keepdims=True)
        if unknown:
            grad = self._unbroadcast_at_run_time(grad, like, target.ndim, unknown)
        if mismatched:  # the argument's type (static), or its shape read at run time
            grad = self.reshape_like(grad, like)
        return grad

    def _operand_dims(self, rank: int) -> list[set]:
        """Per axis of a rank-``rank`` argument (aligned from the right, as
        broadcasting aligns), the sizes the call's tensor operands have
        there: the result's type may name a symbolic size ``n`` where an
        operand's ``?`` was larger at run time (``n`` being 1)."""
        dims: list[set] = [set() for _ in range(rank)]
        callee = self.call.callee
        definition = lookup_op(callee.name) if isinstance(callee, Op) else None
        if definition is None or "broadcast" not in definition.traits:
            return dims  # (nn.matmul broadcasts its batch axes only: its result's)
        for arg in self.call.args:
            ty = arg.checked_type if arg.has_type else None
            if not isinstance(ty, TensorType):
                continue
            for i, d in enumerate(ty.shape[max(0, ty.ndim - rank) :]):
                dims[rank - min(ty.ndim, rank) + i].add(d)
        return dims

    def _unbroadcast_at_run_time(
        self, grad: Expr, like: Expr, rank: int, axes: Sequence[int]
    ) -> Expr:
        """Sum ``grad`` over those of ``axes`` where ``like`` has size 1 at
        run time, with no branch: each such axis of size ``g`` is reshaped
        to ``(d, g / max(d, 1))`` for the argument's size ``d`` and the
        second part summed. Broadcasting makes ``g == d`` (a sum over 1,
        the identity) or ``d == 1`` (the sum over all ``g``): exact either way."""
        have = self.op("shape_of", grad, dtype="int64")
        want = self.op("shape_of", like, dtype="int64")
        one = self.const(1, "int64")
        pieces, summed = [], []
        for axis in range(rank):
            g = self.op("strided_slice", have, begin=[axis], end=[axis + 1])
            if axis not in axes:
                pieces.append(g)
                continue
            d = self.op("strided_slice", want, begin=[axis], end=[axis + 1])
            pieces += [d, self.op("divide", g, self.op("maximum", d, one))]
            summed.append(len(pieces) - 1)
        shape = self.op("concatenate", self.tuple(pieces), axis=0)
        grad = self.op("dyn.reshape", grad, shape, allowzero=True)  # sizes read at run time
        return self.op("sum", grad, axis=summed, keepdims=False)

    # ------------------------------------------- helpers added for the rules
    # (shapes read at run time where the forward's are symbolic, so that a
    # rule works wherever its forward type-checks)
    def is_float(self, atom: Expr) -> bool:
        """Whether ``atom`` is a float tensor (only those have cotangents)."""
        ty = atom.checked_type
        return isinstance(ty, TensorType) and ty.dtype.startswith("float")

    def zeros_of(self, ty: TensorType, like: Expr) -> Expr:
        """A zero tensor of type ``ty``; when ``ty`` is not static, its shape
        is read at run time from ``like`` (a value of that shape)."""
        if ty.is_static:
            return self.op("zeros", shape=list(ty.shape), dtype=ty.dtype)
        shape = self.op("shape_of", like, dtype="int64")
        return self.op("dyn.zeros", shape, dtype=ty.dtype)

    def reshape_like(self, value: Expr, like: Expr) -> Expr:
        """``value`` reshaped to the (forward) shape of ``like``."""
        ty = self.tensor_type(like)
        if ty.is_static:
            return self.op("reshape", value, newshape=list(ty.shape))
        shape = self.op("shape_of", like, dtype="int64")
        return self.op("dyn.reshape", value, shape, allowzero=True)  # an empty like's 0s are sizes

    def broadcast_like(self, value: Expr, like: Expr) -> Expr:
        """``value`` broadcast (numpy's rules) to the shape of ``like``."""
        ty = self.tensor_type(like)
        if ty.is_static:
            return self.op("broadcast_to", value, shape=list(ty.shape))
        return self.op("add", value, self.zeros_like(like))

    def restore_axes(self, value: Expr, axes: Sequence[int]) -> Expr:
        """Size-1 axes put back at the (sorted, normalised) positions
        ``axes`` that a reduction without ``keepdims`` removed."""
        for axis in sorted(axes):
            value = self.op("expand_dims", value, axis=axis, num_newaxis=1)
        return value

    def count(self, atom: Expr, axes: Sequence[int], dtype: str) -> Expr:
        """The number of elements of ``atom`` over ``axes``, a scalar of
        ``dtype`` (a constant when those dimensions are static)."""
        shape = self.tensor_type(atom).shape
        dims = [shape[a] for a in axes]
        if all(isinstance(d, int) for d in dims):
            total = 1
            for d in dims:
                total *= int(d)
            return self.const(total, dtype)
        sizes = self.op("shape_of", atom, dtype="int64")
        picked = self.op("take", sizes, self.const(list(axes), "int64"), axis=0)
        return self.op("cast", self.op("prod", picked), dtype=dtype)

    def along(self, vector: Expr, axis: int, rank: int) -> Expr:
        """A 1-d ``vector`` given trailing size-1 axes so that it broadcasts
        along axis ``axis`` (normalised) of a rank-``rank`` tensor."""
        trailing = rank - 1 - axis
        if trailing:
            vector = self.op("expand_dims", vector, axis=1, num_newaxis=trailing)
        return vector

    def tuple(self, fields: Sequence[Expr]) -> Expr:
        """Emit a tuple of ``fields`` (the cotangent of a tuple argument)."""
        with self.builder.span(self.call.span):
            return self.builder.emit(self.builder.tuple(fields), "g")
