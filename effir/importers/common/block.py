"""A block of bindings being imported, typed as it is built.

``Block.op(name, *args, **attrs)`` binds an operator call, computes its
type with the operator's own type relation (Relax's ``BlockBuilder``
normalises each binding so: the importer needs the types as it goes, to
choose attributes, widen branches and type loop states), and, when every
argument's contents are known and the result is small, its contents with
the operator's numpy rule: the importer folds what the model computes
from constants (shapes, above all), and the folded result is a constant
of the program, not a call. A relation's complaint is a
``ModelImportError`` at the node being imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ir.builder import LetBuilder
from ...ir.diagnostics import AttrError, Span
from ...ir.expr import Call, Constant, Expr, If, Tuple, TupleGetItem
from ...ir.op import op_def
from ...ir.types import TensorType, TupleType, Type
from ...ops.relations import NotReady, OpFailure, RelationError
from .diagnostics import ModelImportError
from .optionals import option_data
from .types import option_element
from .values import Value, constant

FOLD_LIMIT = 1024
"""The most elements a folded result may have (as ``fold-constant``'s):
past it the call stays in the program rather than a large constant."""

_RUN_TIME_FAILURES = (OpFailure, ValueError, IndexError, ZeroDivisionError, FloatingPointError)


class Block:
    """A let chain (``LetBuilder``) whose bindings carry their types."""

    __slots__ = ("builder",)

    def __init__(self, span: Span | None = None) -> None:
        self.builder = LetBuilder(span)

    @property
    def span(self) -> Span | None:
        return self.builder.current_span

    def error(self, message: str) -> ModelImportError:
        return ModelImportError(message, self.span)

    def child(self) -> Block:
        """A block for a nested body (a branch, a loop body), same span."""
        return Block(self.span)

    def finish(self, result: Expr) -> Expr:
        return self.builder.finish(result)

    # ------------------------------------------------------------ binding
    def emit(self, expr: Expr, type_: Type, name: str = "x") -> Value:
        """Bind ``expr`` (of type ``type_``, which the caller computed)."""
        if isinstance(expr, Constant):
            return Value(expr, type_, expr.data)
        return Value(self.builder.emit(expr, name), type_)

    def op(self, name: str, *args: Value, name_hint: str | None = None, **attrs: Any) -> Value:
        """``name(*args, **attrs)``, bound, typed, folded when it can be."""
        try:
            call = self.builder.call_op(name, *(a.expr for a in args), **attrs)
        except AttrError as err:
            raise self.error(err.message) from None
        definition = op_def(name)
        try:
            result = definition.rule("type")(tuple(a.type for a in args), call.attrs)
        except RelationError as err:
            raise self.error(_with_name(name, err.message)) from None
        except NotReady:
            raise self.error(f"{name}: the type of an argument is not known") from None
        folded = self._fold(definition, args, call.attrs, result)
        if folded is not None:
            return folded
        return self.emit(call, result, name_hint or _hint(name))

    def _fold(self, definition: Any, args: Sequence[Value], attrs: Any, result: Type) -> Any:
        """The result as constants, when every argument is known, the
        operator is pure, and the result has at most FOLD_LIMIT elements."""
        if definition.effect != "pure" or "control_flow" in definition.traits:
            return None
        if any(a.const is None for a in args) or not _tensors(result):
            return None
        if sum(a.const.size for a in args) > 64 * FOLD_LIMIT:  # type: ignore[union-attr]
            return None
        try:
            with np.errstate(all="ignore"):
                value = definition.rule("numpy")(tuple(a.const for a in args), attrs)
        except _RUN_TIME_FAILURES:
            return None  # it fails when (and if) the program reaches it
        parts = value if isinstance(value, tuple) else (value,)
        if sum(np.asarray(p).size for p in parts) > FOLD_LIMIT:
            return None
        if isinstance(value, tuple):
            return TupleValue(tuple(constant(np.asarray(p)) for p in parts))
        return constant(np.asarray(value))

    def widen(self, value: Value, target: Type) -> Value:
        """``value`` typed ``target``, a join of its type (types.py): the
        dimensions ``target`` has as ``?`` are forgotten (``forget_dims``);
        a list's elements are already typed by rank and dtype; a plain value
        widened to an option is present (``Some``)."""
        held = option_element(target)
        if held is not None and option_element(value.type) is None:
            some = option_data().constructors[0]
            inner = self.widen(value, held)
            call = Call(some, (inner.expr,), span=self.span)
            return self.emit(call, target, "present")
        if not (isinstance(value.type, TensorType) and isinstance(target, TensorType)):
            return Value(value.expr, target, value.const)
        axes = [
            i for i, (a, b) in enumerate(zip(value.type.shape, target.shape, strict=True)) if a != b
        ]
        if not axes:
            return value
        # emitted, never folded: a constant would have its static type back
        call = self.builder.call_op("forget_dims", value.expr, axes=axes)
        return Value(self.builder.emit(call, "widened"), target)

    # ------------------------------------------------------------- tuples
    def tuple(self, values: Sequence[Value], name: str = "t") -> Value:
        fields = tuple(v.expr for v in values)
        return self.emit(
            Tuple(fields, span=self.span), TupleType(tuple(v.type for v in values)), name
        )

    def get(self, value: Value, index: int, name: str = "x") -> Value:
        if isinstance(value, TupleValue):
            return value.fields[index]
        assert isinstance(value.type, TupleType), value.type
        field_type = value.type.fields[index]
        return self.emit(TupleGetItem(value.expr, index, span=self.span), field_type, name)

    def fields(self, value: Value, count: int, names: Sequence[str] | None = None) -> list[Value]:
        names = names or ["x"] * count
        return [self.get(value, i, names[i]) for i in range(count)]

    def if_(self, cond: Value, then: Expr, other: Expr, type_: Type, name: str = "r") -> Value:
        return self.emit(If(cond.expr, then, other, span=self.span), type_, name)


class TupleValue(Value):
    """A tuple of constant fields (a folded operator with several results):
    projections give the fields themselves."""

    __slots__ = ("fields",)

    def __init__(self, fields: tuple[Value, ...]) -> None:
        super().__init__(
            Tuple(tuple(f.expr for f in fields)), TupleType(tuple(f.type for f in fields))
        )
        object.__setattr__(self, "fields", fields)


def _tensors(t: Type) -> bool:
    if isinstance(t, TupleType):
        return all(_tensors(f) for f in t.fields)
    return isinstance(t, TensorType)


def _with_name(name: str, message: str) -> str:
    return message if message.startswith(name + ":") else f"{name}: {message}"


def _hint(name: str) -> str:
    return name.rsplit(".", 1)[-1]
