"""Cotangents: which values get one, their types, and how they add up.

A cotangent is built lazily while the backward is generated: a value's
cotangent is ``None`` (zero, nothing emitted yet), an expression of the
value's cotangent type, or, for a tuple, a Python list with one cotangent
per field (a projection ``t.i`` contributes to one field without
materialising zeros for the others). Zeros are emitted only where a whole
cotangent must exist as a value (a pullback's argument, a loop's carry, the
gradients returned).

The cotangent type of a float tensor is its own type, of a tuple the tuple
of its fields' cotangent types, of an ADT with a float tensor in it a
generated cotangent ADT (``effir.autodiff.adt``), and of everything else
(integer and bool tensors, keys, functions, ADTs without float tensors)
the unit ``()``: such values get no gradient.
"""

from __future__ import annotations

from typing import Protocol, Union

from ..ir import type_tree
from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Tuple, TupleGetItem, Var
from ..ir.type_tree_emit import map_value
from ..ir.types import TensorType, TupleType, Type, TypeCall

CT = Union[None, Expr, list]  # noqa: UP007  (a recursive alias)

UNIT = TupleType(())


class Adts(Protocol):
    """The cotangent ADTs of a ``grad`` run (``adt.AdtCotangents``), passed
    to every function here that may meet an ADT type; None where ADT values
    get no gradient."""

    def differentiable(self, t: TypeCall) -> bool: ...
    def ct_type(self, t: TypeCall) -> Type: ...
    def add(self, b: LetBuilder, x: Expr, y: Expr, t: TypeCall) -> Expr: ...
    def zero(self, b: LetBuilder, t: TypeCall) -> Expr: ...


def _adt_differentiable(t: TypeCall, adts: Adts | None) -> bool:
    return adts is not None and adts.differentiable(t)


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def differentiable(t: Type, adts: Adts | None) -> bool:
    """Whether values of type ``t`` carry a gradient (some float tensor in it)."""
    for leaf in type_tree.leaves(t):
        if isinstance(leaf, TensorType) and is_float(leaf.dtype):
            return True
        if isinstance(leaf, TypeCall) and _adt_differentiable(leaf, adts):
            return True
    return False


def ct_type(t: Type, adts: Adts | None) -> Type:
    """The type of a cotangent of a value of type ``t``."""

    def leaf(ty: Type) -> Type:
        if isinstance(ty, TensorType):
            return ty if is_float(ty.dtype) else UNIT
        if isinstance(ty, TypeCall) and adts is not None and adts.differentiable(ty):
            return adts.ct_type(ty)
        return UNIT

    return type_tree.map_leaves(t, leaf)


def stackable(t: Type) -> bool:
    """Whether a loop may stack values of type ``t`` as per-step outputs."""
    return all(isinstance(leaf, TensorType) for leaf in type_tree.leaves(t))


def fields_of(b: LetBuilder, ct: CT, t: TupleType) -> list[CT]:
    """A tuple cotangent as one cotangent per field."""
    if ct is None:
        return [None] * len(t.fields)
    if isinstance(ct, list):
        return ct
    return [b.emit_get(ct, i, "ct") for i in range(len(t.fields))]


def accumulate(b: LetBuilder, old: CT, new: CT, t: Type, adts: Adts | None) -> CT:
    """``old + new`` for cotangents of a value of type ``t``."""
    if old is None:
        return new
    if new is None:
        return old
    if isinstance(t, TupleType):
        a, c = fields_of(b, old, t), fields_of(b, new, t)
        return [accumulate(b, x, y, f, adts) for x, y, f in zip(a, c, t.fields, strict=True)]
    if not differentiable(t, adts):
        return old
    assert isinstance(old, Expr) and isinstance(new, Expr)
    if isinstance(t, TypeCall):
        assert adts is not None
        return adts.add(b, old, new, t)
    return b.emit(b.call_op("add", old, new), "ct")


def zeros(b: LetBuilder, like: Expr, t: TensorType) -> Expr:
    """A zero tensor shaped as the forward value ``like`` (of type ``t``)."""
    if t.is_static:
        return b.emit(b.call_op("zeros", shape=list(t.shape), dtype=t.dtype), "zero")
    # where(false, like, 0) has like's type, symbolic dimensions included
    # (dyn.zeros would make every dimension ``?``, which a compiled loop
    # cannot iterate over), and is 0 even where like is inf or nan.
    no = b.const(False, "bool")
    zero = b.const(0, t.dtype)
    return b.emit(b.call_op("where", no, like, zero), "zero")


def materialize(b: LetBuilder, ct: CT, like: Expr, t: Type, adts: Adts | None) -> Expr:
    """The cotangent ``ct`` of the forward value ``like`` (of type ``t``) as
    one expression of type ``ct_type(t)``, zeros filled in."""
    if isinstance(t, TensorType):
        if not is_float(t.dtype):
            return b.emit(b.tuple([]), "unit")
        if ct is None:
            return zeros(b, like, t)
        assert isinstance(ct, Expr)
        if not t.is_static:
            # A rule may build a symbolic shape from shape_of (all ``?``);
            # the annotation restores the forward's dimensions, which a
            # compiled loop needs to iterate over a stack of cotangents.
            return b.emit(ct, "ct", type_annotation=t)
        return ct
    if isinstance(t, TupleType):
        if isinstance(ct, Expr):
            return ct
        if ct is None and not differentiable(t, adts):
            return b.emit(b.tuple([materialize(b, None, like, f, adts) for f in t.fields]), "unit")
        parts = fields_of(b, ct, t)
        out = []
        for i, (part, field) in enumerate(zip(parts, t.fields, strict=True)):
            needs_like = differentiable(field, adts) and not _static(field)
            sub = b.emit(TupleGetItem(like, i), "fwd") if needs_like else like  # shapes only
            out.append(materialize(b, part, sub, field, adts))
        return b.emit(Tuple(tuple(out)), "ct")
    if isinstance(t, TypeCall) and differentiable(t, adts):
        if ct is not None:
            assert isinstance(ct, Expr)
            return ct
        assert adts is not None
        return adts.zero(b, t)
    return b.emit(b.tuple([]), "unit")


def shaped_as(b: LetBuilder, ct: Expr, like: Expr, t: Type, adts: Adts | None) -> Expr:
    """``ct`` with the type of ``like``'s cotangent, symbolic dimensions
    included: a rule may build a shape with ``shape_of`` (every dimension
    ``?``), and a compiled loop cannot iterate over such a sequence. An
    annotation does not survive the optimiser's rebinding;
    ``where(false, like, ct)`` has ``like``'s shape and ``ct``'s values."""
    if isinstance(t, TupleType):
        if all(not differentiable(f, adts) or _static(f) for f in t.fields):
            return ct
        parts = [
            shaped_as(b, b.emit_get(ct, i, "ct"), b.emit_get(like, i, "fwd"), f, adts)
            if differentiable(f, adts)
            else b.emit_get(ct, i, "ct")
            for i, f in enumerate(t.fields)
        ]
        return b.emit(b.tuple(parts), "ct")
    if not isinstance(t, TensorType) or not differentiable(t, adts) or t.is_static:
        return ct
    no = b.const(False, "bool")
    return b.emit(b.call_op("where", no, like, ct), "ct")


def _static(t: Type) -> bool:
    """Whether every tensor in ``t`` has a static shape."""
    return all(not isinstance(leaf, TensorType) or leaf.is_static for leaf in type_tree.leaves(t))


def reverse(b: LetBuilder, value: Expr, t: Type) -> Expr:
    """``value`` (stacked per-step values) with its leading axis reversed."""
    big = -(2**31) + 1  # before the first element, whatever the length

    def leaf(bb: LetBuilder, x: Expr, ty: Type) -> Expr:
        step = bb.call_op("strided_slice", x, begin=[-1], end=[big], strides=[-1], axes=[0])
        return bb.emit(step, "rev")

    return map_value(b, value, t, leaf, "seq", "seq")


def type_of(expr: Expr) -> Type:
    return expr.checked_type


def is_var(expr: Expr) -> bool:
    return isinstance(expr, Var)
