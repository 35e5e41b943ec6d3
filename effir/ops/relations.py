"""Helpers for the operators' rules: type relations and numpy implementations.

Two rules are registered beside each operator's definition:

- ``rules["type"]``: the type relation, ``rel(args, attrs) -> Type``. ``args``
  are the argument types, resolved as far as inference knows them; the
  relation returns the result type or raises ``RelationError`` saying what is
  wrong (type inference adds the location). When an argument it needs is
  still an ``IncompleteType`` it raises ``NotReady`` and inference retries it
  later. Control-flow operators (trait ``control_flow``) take a third
  argument, the ``solver`` (``unify(a, b)``, ``resolve(t)``), because they
  must relate the types of the functions they are given.
- ``rules["numpy"]``: the reference implementation, ``impl(args, attrs) ->
  value`` on the values of ``effir.runtime.values``. I/O operators (effect
  ``io``) also receive ``sink=`` (a callable ``sink(label, value)``);
  control-flow operators are generators that yield ``(function, args)``
  requests and receive the call's result (see the interpreter).

Dimensions are ints, symbolic names (rigid: an unknown but fixed size) or
``?`` (unknown, checked at run time). Two dimensions are compatible when they
are equal or one is ``?``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from functools import wraps
from typing import Any, NoReturn

import numpy as np

from ..ir.op import op_def
from ..ir.printer import astext
from ..ir.types import ANY, Dim, IncompleteType, TensorType, TupleType, Type
from ..runtime.limits import tensor_too_large
from ..runtime.values import as_tensor

TypeRelation = Callable[..., Type]
NumpyImpl = Callable[..., Any]


class RelationError(Exception):
    """A type relation's complaint; inference turns it into a located TypeError."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotReady(Exception):
    """An argument type is not known yet; inference retries the relation later."""


def type_rule(*names: str) -> Callable[[TypeRelation], TypeRelation]:
    """Register the decorated function as the type relation of ``names``."""

    def register(fn: TypeRelation) -> TypeRelation:
        for name in names:
            op_def(name).rules["type"] = fn
        return fn

    return register


def numpy_rule(*names: str) -> Callable[[NumpyImpl], NumpyImpl]:
    """Register the decorated function as the numpy implementation of ``names``."""

    def register(fn: NumpyImpl) -> NumpyImpl:
        for name in names:
            op_def(name).rules["numpy"] = fn
        return fn

    return register


# ------------------------------------------------------------------ types
def describe(t: Type) -> str:
    return astext(t)


def expect_tensor(t: Type, what: str = "the argument") -> TensorType:
    """``t`` as a tensor type, NotReady if unknown, RelationError otherwise."""
    if isinstance(t, IncompleteType):
        raise NotReady
    if not isinstance(t, TensorType):
        raise RelationError(f"{what} must be a tensor, got {describe(t)}")
    return t


def expect_tensors(t: Type, what: str = "the argument") -> tuple[TensorType, ...]:
    """A tuple of tensors (concatenate, stack...)."""
    if isinstance(t, IncompleteType):
        raise NotReady
    if not isinstance(t, TupleType):
        raise RelationError(f"{what} must be a tuple of tensors, got {describe(t)}")
    return tuple(expect_tensor(f, f"field {i} of {what}") for i, f in enumerate(t.fields))


def expect_dtype(t: TensorType, kinds: str, what: str = "the argument") -> None:
    """Check the dtype's kind: any of ``kinds`` among 'b' (bool), 'i' (signed
    int), 'u' (unsigned), 'f' (float)."""
    if dtype_kind(t.dtype) not in kinds:
        names = {"b": "bool", "i": "signed integer", "u": "unsigned integer", "f": "float"}
        wanted = " or ".join(names[k] for k in kinds)
        raise RelationError(f"{what} must have a {wanted} dtype, got {t.dtype}")


def dtype_kind(dtype: str) -> str:
    if dtype == "bool":
        return "b"
    if dtype.startswith("float"):
        return "f"
    if dtype.startswith("uint"):
        return "u"
    return "i"


def same_dtype(types: Sequence[TensorType], what: str = "the arguments") -> str:
    """The common dtype of ``types``; effir never promotes implicitly."""
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise RelationError(
            f"{what} must have the same dtype, got {', '.join(t.dtype for t in types)}"
        )
    return types[0].dtype


# ------------------------------------------------------------- dimensions
def show_dim(d: Dim) -> str:
    return str(d)


def merge_dim(a: Dim, b: Dim, what: str = "dimensions") -> Dim:
    """The more precise of two dimensions that must be equal (inside
    ``merging_sizes``: two that may be, as the given merge decides)."""
    if a == ANY:
        return b
    if b == ANY or a == b:
        return a
    merge = _MERGE.get()
    if merge is not None and not (is_static(a) and is_static(b)):
        return merge(a, b, what)
    raise RelationError(f"{what} do not match: {show_dim(a)} vs {show_dim(b)}")


SizeMerge = Callable[[Dim, Dim, str], Dim]
_MERGE: ContextVar[SizeMerge | None] = ContextVar("effir_merge_sizes", default=None)


@contextlib.contextmanager
def merging_sizes(merge: SizeMerge) -> Iterator[None]:
    """Within: ``merge_dim`` of two different dimensions, not both static,
    is ``merge(a, b, what)`` instead of an error. A compiler typing code
    whose names stand for sizes known only at run time (the TVM backend's
    kernels after a mask) checks there that they are equal."""
    token = _MERGE.set(merge)
    try:
        yield
    finally:
        _MERGE.reset(token)


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """numpy's rule, with symbolic and unknown dimensions: 1 stretches; ``?``
    may be 1 or the other size; two different symbols do not broadcast (they
    are not known to be equal)."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a == ANY:
        return ANY if b == 1 else b
    if b == ANY:
        return a
    raise RelationError(f"cannot broadcast dimensions {show_dim(a)} and {show_dim(b)}")


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = [1] * rank
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        try:
            result = [broadcast_dim(x, y) for x, y in zip(result, padded, strict=True)]
        except RelationError:
            raise RelationError(
                "shapes " + " and ".join(_show_shape(s) for s in shapes) + " do not broadcast"
            ) from None
    return tuple(result)


def _show_shape(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(show_dim(d) for d in shape) + ")"


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[0, rank)``; negative axes count from the end."""
    if not -rank <= axis < rank:
        raise RelationError(f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """Sorted, distinct axes; None means all axes."""
    if axes is None:
        return tuple(range(rank))
    result = sorted({normalize_axis(a, rank) for a in axes})
    if len(result) != len(axes):
        raise RelationError(f"repeated axis in {list(axes)}")
    return tuple(result)


class OpFailure(Exception):
    """A run-time failure inside a numpy rule (an index out of range, a shape
    that does not match at run time...); the interpreter reports it as an
    ``effir.EvalError`` naming the operator and the source location."""


# ------------------------------------------ shape-family helpers
def raise_at_run_time(err: RelationError) -> NoReturn:
    """A RelationError found only at run time (a numpy rule re-checks
    attributes when no type inference ran) is an OpFailure there."""
    raise OpFailure(err.message) from None


def with_op_name(name: str) -> Callable[[TypeRelation], TypeRelation]:
    """Prefix a relation's RelationError messages with ``name: `` so that the
    checks it delegates (``expect_tensor``...) say which operator complained.
    (OpFailure needs no prefix: the interpreter names the operator.)"""

    def wrap(fn: TypeRelation) -> TypeRelation:
        @wraps(fn)
        def relation(*args: Any, **kwargs: Any) -> Type:
            try:
                return fn(*args, **kwargs)
            except RelationError as err:
                raise RelationError(f"{name}: {err.message}") from None

        return relation

    return wrap


def show_shape(shape: Sequence[Dim]) -> str:
    """``(2, n, ?)``: a shape as messages print it."""
    return _show_shape(shape)


def is_static(d: Dim) -> bool:
    """An int dimension (``True`` and ``False`` are never dimensions)."""
    return isinstance(d, int) and not isinstance(d, bool)


def expect_scalar(t: Type, what: str = "the argument") -> TensorType:
    """A rank-0 tensor (a fill value...)."""
    tensor = expect_tensor(t, what)
    if tensor.ndim != 0:
        raise RelationError(f"{what} must be a scalar (rank 0), got {describe(tensor)}")
    return tensor


def check_dims(shape: Sequence[int], what: str = "shape") -> tuple[int, ...]:
    """A shape given as an attribute: every size must be >= 0."""
    for d in shape:
        if d < 0:
            raise RelationError(f"negative size {d} in {what} {show_shape(shape)}")
    return tuple(shape)


# ------------------------------------------------------------ numpy rules
def compute_dtype(dtype: str | np.dtype) -> np.dtype:
    """The dtype the numpy rules accumulate in: float16 is computed in float32
    and rounded back once (as numpy's own ``mean`` does), so that a long sum
    does not lose its low bits at every step; other dtypes compute in themselves."""
    dt = np.dtype(dtype)
    return np.dtype(np.float32) if dt == np.float16 else dt


def to_result(value: Any, dtype: str | np.dtype) -> np.ndarray:
    """``value`` as an ndarray of exactly ``dtype``: numpy returns numpy scalars
    from 0-d operations and may change the dtype, values never do."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtype, copy=False)


def broadcast_values(*arrays: np.ndarray) -> tuple[int, ...]:
    """The broadcast shape of run-time values; OpFailure when shapes that
    type checking allowed (``?`` dims) turn out not to broadcast."""
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        shapes = " and ".join(str(tuple(a.shape)) for a in arrays)
        raise OpFailure(f"shapes {shapes} do not broadcast") from None


def mean_over(x: np.ndarray, axes: int | tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """Mean in ``x``'s own dtype, computed as sum / count so that an empty
    axis gives NaN silently (numpy's ``mean`` warns)."""
    axes_t = (axes,) if isinstance(axes, int) else axes
    count = 1
    for a in axes_t:
        count *= x.shape[a]
    with np.errstate(all="ignore"):
        total = np.sum(x, axis=axes_t, keepdims=keepdims, dtype=x.dtype)
        return np.asarray(total / x.dtype.type(count))


# ------------------------------------------------------------ shape tensors
def shape_tensor_rank(t: Type, what: str = "the shape") -> int:
    """A 1-d integer tensor whose length (the result's rank) is static."""
    shape = expect_tensor(t, what)
    expect_dtype(shape, "iu", what)
    if shape.ndim != 1:
        raise RelationError(f"{what} must be a 1-d tensor, got {describe(shape)}")
    if not is_static(shape.shape[0]):
        raise RelationError(
            f"{what} must have a static length (the result's rank), got {describe(shape)}"
        )
    return shape.shape[0]


def allocation(shape: Sequence[int], dtype: str | np.dtype) -> tuple[int, ...]:
    """``shape`` for a new tensor of ``dtype`` that a rule creates, after the
    size limit (runtime/limits.py) has agreed to it: a size the program
    chooses is refused before numpy is asked for it."""
    message = tensor_too_large(shape, dtype, "the result")
    if message is not None:
        raise OpFailure(message)
    return tuple(int(d) for d in shape)


def shape_value(value: Any) -> tuple[int, ...]:
    """A run-time shape tensor's sizes; they must be >= 0."""
    sizes = tuple(int(v) for v in as_tensor(value).reshape(-1))
    if any(s < 0 for s in sizes):
        raise OpFailure(f"negative size in shape {sizes}")
    return sizes
