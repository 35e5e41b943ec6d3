"""Python values meeting effir: type spellings (``effir.Tensor[(n, 8),
"float32"]``), module state cells, and the conversions between Python
values (numbers, numpy arrays, tuples, keys) and effir expressions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends.interpreter import Interpreter
from ..ir.diagnostics import FrontendError
from ..ir.expr import Call, Constant, Expr, GlobalCell, GlobalVar, Tuple, const
from ..ir.expr_functor import Computation, ExprFunctor
from ..ir.functor import on
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import call_op
from ..ir.types import DTYPES, KeyType, RefType, TensorType, TupleType, Type
from ..runtime import prng
from ..runtime.values import ADTValue, PRNGKey, RefValue
from .blocks import note_cell
from .spans import current_span


class _TensorSpelling:
    """``Tensor[(n, 256), "float32"]``: a tensor type (``Tensor[(3,)]`` is float32;
    a str dimension is symbolic, ``"?"`` unknown)."""

    def __getitem__(self, item: Any) -> TensorType:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
            shape, dtype = item
        else:
            shape, dtype = item, "float32"
        if isinstance(shape, int | str):
            shape = (shape,)
        if dtype not in DTYPES:
            raise FrontendError(
                f"unknown dtype {dtype!r}", current_span(), hint=f"one of {', '.join(DTYPES)}"
            )
        return TensorType(tuple(shape), dtype)

    def __repr__(self) -> str:
        return "effir.Tensor"


class _RefSpelling:
    """``Ref[T]``: the type of a reference cell holding a ``T``."""

    def __getitem__(self, item: Any) -> RefType:
        return RefType(as_type(item))

    def __repr__(self) -> str:
        return "effir.Ref"


class _TupleSpelling:
    """``TupleOf[A, B]``: a tuple type (a Python tuple of types works too)."""

    def __getitem__(self, item: Any) -> TupleType:
        items = item if isinstance(item, tuple) else (item,)
        return TupleType(tuple(as_type(t) for t in items))


Tensor = _TensorSpelling()
Ref = _RefSpelling()
TupleOf = _TupleSpelling()
Key = KeyType()


def as_type(spec: Any) -> Type:
    """A type from its Python spelling: a Type, a tuple of spellings, a dtype
    name (a scalar)."""
    if isinstance(spec, Type):
        return spec
    if isinstance(spec, tuple):
        return TupleType(tuple(as_type(t) for t in spec))
    if isinstance(spec, str) and spec in DTYPES:
        return TensorType((), spec)
    adt = getattr(spec, "__effir_adt__", None)  # an @effir.adt class (adts.py)
    if adt is not None:
        return adt.type_call()
    raise FrontendError(
        f"{spec!r} is not an effir type",
        current_span(),
        hint='write effir.Tensor[(n, 8), "float32"], effir.Key, effir.Ref[T], a tuple of '
        "types or an @effir.adt type",
    )


class Cell:
    """A module-level state cell, declared with its initial value: stands for
    ``@name`` in built code and for its ``RefValue`` when run eagerly."""

    def __init__(self, name: str, value: Any, type: Any = None) -> None:
        init = to_expr(value)
        value_type = as_type(type) if type is not None else static_type(init)
        self.name = name
        self.global_var = GlobalVar(name, span=current_span())
        self.declaration = GlobalCell(
            name,
            RefType(value_type) if value_type is not None else None,
            init,
            span=current_span(),
        )
        self._eager: RefValue | None = None

    @property
    def value_type(self) -> Type | None:
        t = self.declaration.type
        return t.value if isinstance(t, RefType) else None

    @property
    def eager(self) -> RefValue:
        """The cell's value for eager runs, created from the initial value."""
        if self._eager is None:
            init = self.declaration.init
            self._eager = RefValue(Interpreter(IRModule()).evaluate(init), self.name)
        return self._eager

    def __repr__(self) -> str:
        return f"<effir cell @{self.name}>"


def cell(name: str, value: Any, type: Any = None) -> Cell:
    """A state cell ``@name`` holding ``value`` (a number, a numpy array, a
    key from ``effir.random.key(seed)``, a tuple of these, or an expression);
    no ``RefCreate`` wrapping needed."""
    return Cell(name, value, type)


# ------------------------------------------------------------ conversions
_CONCRETE = (np.ndarray, np.generic, bool, int, float, PRNGKey, RefValue, Cell)


def is_concrete(value: Any) -> bool:
    """A value eager execution can compute with (no expression inside);
    iterative: an ADT value (a list) may nest as deep as it is long."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple | list):
            stack.extend(v)
        elif isinstance(v, ADTValue):
            stack.extend(v.fields)
        elif not isinstance(v, _CONCRETE):
            return False
    return True


def is_symbolic(value: Any) -> bool:
    """Whether an expression is inside ``value`` (iterative, as ``is_concrete``)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple | list):
            stack.extend(v)
        elif isinstance(v, Expr):
            return True
    return False


_ADT_EXPRESSIONS: list[Callable[[Any], Expr | None]] = []
"""How an ADT value made in Python becomes an expression: registered by
adts.py, whose constructor classes build with the builder, which converts
with this module."""


def register_adt_expressions(convert: Callable[[Any], Expr | None]) -> None:
    """Let ``to_expr`` convert what ``convert`` does not answer None for (an
    ADT value, a bare constructor); registering it again replaces it."""
    _ADT_EXPRESSIONS[:] = [convert]


def to_expr(value: Any, dtype: str | None = None) -> Expr:
    """``value`` as an expression; a Python number takes ``dtype`` (the other
    operand's) when given, else int32 / float32."""
    if isinstance(value, Expr):
        return value
    span = current_span()
    if isinstance(value, Cell):
        note_cell(value)
        return value.global_var
    if isinstance(value, bool):
        return Constant(np.asarray(value), span=span)
    if isinstance(value, int | float):
        if dtype is not None and dtype != "bool":
            if isinstance(value, float) and not dtype.startswith("float"):
                dtype = "float32"
            return Constant(np.asarray(value, dtype=dtype), span=span)
        return Constant(const(value).data, span=span)
    if isinstance(value, np.ndarray | np.generic):
        return Constant(np.asarray(value), span=span)
    if isinstance(value, tuple | list):
        return Tuple(tuple(to_expr(v, dtype) for v in value), span=span)
    if isinstance(value, PRNGKey):
        return _key_expr(value)
    for convert in _ADT_EXPRESSIONS:
        made = convert(value)
        if made is not None:
            return made
    raise FrontendError(
        f"a Python {type(value).__name__} cannot be used as an effir value",
        span,
        hint="use numbers, numpy arrays, tuples, keys or effir values",
    )


def _key_expr(key: PRNGKey) -> Expr:
    """``random.key(seed)`` of the seed that makes ``key``: an int32 seed
    where one does, else the int64 of the key's 64 bits (every key is the
    key of one: ``prng.key``)."""
    hi, lo = int(key.data[0]), int(key.data[1])
    seed = (hi << 32) | lo
    for value, dtype in ((lo, "int32"), (seed, "int64"), (seed - (1 << 64), "int64")):
        try:
            array = np.asarray(value, dtype=dtype)
        except OverflowError:
            continue
        if int(array) == value and np.array_equal(prng.key(array), key.data):
            return call_op("random.key", Constant(array, span=current_span()))
    raise AssertionError(f"{key!r}: every key is the key of an int64 seed")


def to_value(value: Any) -> Any:
    """``value`` for a numpy rule: arrays (Python numbers as int32/float32),
    tuples, keys, the eager ``RefValue`` of a cell."""
    if isinstance(value, Cell):
        return value.eager
    if isinstance(value, tuple | list):
        return tuple(to_value(v) for v in value)
    if isinstance(value, bool | int | float):
        return const(value).data
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        return value.view(np.ndarray)  # an eager run's EagerArray (eager.py)
    return value


def static_type(expr: Expr) -> Type | None:
    """The type of a constant-like expression, if simple to tell."""
    return _StaticType().evaluate(expr)


class _StaticType(ExprFunctor):
    """``static_type``'s walk (on the trampoline: tuples nest as deep as the
    Python value they were made of)."""

    @on(Constant)
    def _constant(self, expr: Constant) -> Type:
        return TensorType(expr.data.shape, str(expr.data.dtype))

    @on(Tuple)
    def _tuple(self, expr: Tuple) -> Computation[Type | None]:
        fields = []
        for f in expr.fields:
            fields.append((yield self.eval(f)))
        return None if any(f is None for f in fields) else TupleType(tuple(fields))

    @on(Call)
    def _call(self, expr: Call) -> Type | None:
        return KeyType() if getattr(expr.callee, "name", None) == "random.key" else None

    @on(Node)
    def _other(self, expr: Node) -> None:
        return None
