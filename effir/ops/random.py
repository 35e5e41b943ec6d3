"""Pure, keyed random-number operators (threefry2x32, as jax.random)."""

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import IncompleteType, KeyType, TensorType, TupleType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime import prng
from ..runtime.limits import objects_too_large
from ..runtime.values import PRNGKey, as_tensor
from .relations import (
    NotReady,
    OpFailure,
    RelationError,
    allocation,
    check_dims,
    describe,
    dtype_kind,
    expect_dtype,
    expect_scalar,
    expect_tensor,
    numpy_rule,
    to_result,
    type_rule,
)

_SHAPE = AttrSpec("shape", "ints", ())
_FLOAT = AttrSpec("dtype", "dtype", "float32")

register_op("random.key", 1, traits=("opaque",), doc="a key from an integer seed")
register_op(
    "random.split",
    1,
    attrs=(AttrSpec("num", "int", 2),),
    traits=("opaque",),
    doc="a tuple of `num` new keys",
)
register_op("random.fold_in", 2, traits=("opaque",), doc="fold an integer into a key")
register_op(
    "random.uniform",
    1,
    attrs=(_SHAPE, _FLOAT, AttrSpec("low", "float", 0.0), AttrSpec("high", "float", 1.0)),
    traits=("opaque",),
)
register_op("random.normal", 1, attrs=(_SHAPE, _FLOAT), traits=("opaque",))
register_op("random.bernoulli", 1, attrs=(AttrSpec("p", "float", 0.5), _SHAPE), traits=("opaque",))
register_op(
    "random.dropout",
    2,
    attrs=(AttrSpec("rate", "float", 0.5),),
    traits=("opaque",),
    doc="dropout(x, key): where(bernoulli(key, 1 - rate), x / (1 - rate), 0), as flax",
)


# ------------------------------------------------------------------ rules
# Keys are ``PRNGKey`` values (two uint32 words) and every operator is a pure
# function of its key, computed by ``effir.runtime.prng`` as JAX 0.10 computes
# it on CPU in its default configuration (threefry2x32, partitionable
# counters): bit for bit, except float64 normals (within a few ulp). A seed or
# fold-in tensor keeps JAX's meaning for its dtype: an int32 seed gives JAX's
# ``PRNGKey(seed)``, an int64 seed what JAX gives for an int64 seed (x64
# enabled: its high word is used too). Probabilities outside [0, 1] are type
# errors rather than JAX's silent all-True/all-False masks.


def _expect_key(t: Type, name: str) -> KeyType:
    """Keys are their own type, never a uint32 tensor: say so by name."""
    if isinstance(t, IncompleteType):
        raise NotReady
    if not isinstance(t, KeyType):
        raise RelationError(f"{name} expects a Key, got {describe(t)}")
    return t


def _expect_integer_scalar(t: Type, what: str) -> TensorType:
    """Seeds and fold-in data: one integer of any width (bool is not one)."""
    scalar = expect_scalar(t, what)
    expect_dtype(scalar, "iu", what)
    return scalar


def _float_dtype(attrs: Attrs, name: str) -> str:
    """The samplers build floats from mantissa bits: no integer dtypes."""
    dtype = attrs["dtype"]
    if dtype_kind(dtype) != "f":
        raise RelationError(f"{name} draws floats: dtype must be a float dtype, got {dtype}")
    return dtype


def _check_probability(value: float, what: str) -> None:
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise RelationError(f"{what} must be in [0, 1], got {value}")


@type_rule("random.key")
def _key_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    _expect_integer_scalar(args[0], "the seed of random.key")
    return KeyType()


@type_rule("random.split")
def _split_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    _expect_key(args[0], "random.split")
    num = attrs["num"]
    if num < 0:
        raise RelationError(f"random.split: num must be >= 0, got {num}")
    # The type lists one Key per new key: refuse a count no memory holds.
    if (message := objects_too_large(num, "random.split: the new keys")) is not None:
        raise RelationError(message)
    return TupleType(tuple(KeyType() for _ in range(num)))


@type_rule("random.fold_in")
def _fold_in_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    _expect_key(args[0], "random.fold_in")
    _expect_integer_scalar(args[1], "the data of random.fold_in")
    return KeyType()


def _sample_relation(name: str) -> Callable[[tuple[Type, ...], Attrs], Type]:
    """The relation of a float sampler: ``Tensor[shape, dtype]`` from a key."""

    def relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
        _expect_key(args[0], name)
        dtype = _float_dtype(attrs, name)
        return TensorType(check_dims(attrs["shape"], f"the shape of {name}"), dtype)

    return relation


type_rule("random.uniform")(_sample_relation("random.uniform"))
type_rule("random.normal")(_sample_relation("random.normal"))


@type_rule("random.bernoulli")
def _bernoulli_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    _expect_key(args[0], "random.bernoulli")
    _check_probability(attrs["p"], "random.bernoulli: p")
    return TensorType(check_dims(attrs["shape"], "the shape of random.bernoulli"), "bool")


@type_rule("random.dropout")
def _dropout_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x, key = args
    tensor = expect_tensor(x, "the input of random.dropout")
    expect_dtype(tensor, "f", "the input of random.dropout")
    _expect_key(key, "random.dropout")
    _check_probability(attrs["rate"], "random.dropout: rate")
    return tensor


def _key_data(value: Any, name: str) -> np.ndarray:
    """The key's two words; a run-time failure if the value is not a key."""
    if not isinstance(value, PRNGKey):
        raise OpFailure(f"{name} expects a PRNG key, got {type(value).__name__}")
    return value.data


@numpy_rule("random.key")
def _key_numpy(args: tuple[Any, ...], attrs: Attrs) -> PRNGKey:
    return PRNGKey(prng.key(as_tensor(args[0])))


@numpy_rule("random.split")
def _split_numpy(args: tuple[Any, ...], attrs: Attrs) -> tuple[PRNGKey, ...]:
    key = _key_data(args[0], "random.split")
    if (message := objects_too_large(attrs["num"], "random.split: the new keys")) is not None:
        raise OpFailure(message)
    keys = prng.split(key, attrs["num"])
    return tuple(PRNGKey(row) for row in keys)


@numpy_rule("random.fold_in")
def _fold_in_numpy(args: tuple[Any, ...], attrs: Attrs) -> PRNGKey:
    key = _key_data(args[0], "random.fold_in")
    return PRNGKey(prng.fold_in(key, as_tensor(args[1])))


@numpy_rule("random.uniform")
def _uniform_numpy(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    key = _key_data(args[0], "random.uniform")
    shape = allocation(attrs["shape"], attrs["dtype"])
    values = prng.uniform(key, shape, attrs["dtype"], attrs["low"], attrs["high"])
    return to_result(values, attrs["dtype"])


@numpy_rule("random.normal")
def _normal_numpy(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    key = _key_data(args[0], "random.normal")
    shape = allocation(attrs["shape"], attrs["dtype"])
    return to_result(prng.normal(key, shape, attrs["dtype"]), attrs["dtype"])


@numpy_rule("random.bernoulli")
def _bernoulli_numpy(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    key = _key_data(args[0], "random.bernoulli")
    shape = allocation(attrs["shape"], "bool")
    return to_result(prng.bernoulli(key, attrs["p"], shape), "bool")


@numpy_rule("random.dropout")
def _dropout_numpy(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    key = _key_data(args[1], "random.dropout")
    rate = attrs["rate"]
    if not 0.0 <= rate <= 1.0:
        raise OpFailure(f"random.dropout: rate must be in [0, 1], got {rate}")
    return to_result(prng.dropout(key, x, rate), x.dtype)


# ------------------------------------------------------------------- vjp
# Keys and random bits have no derivative. Dropout is linear in x for a
# fixed key: its backward is dropout of the cotangent with the SAME key,
# which draws the same bits and so the same mask (and the same 1/(1-rate)
# scale). Nothing is stored between the forward and the backward: this is
# the property that passing the key as an explicit value (state passing)
# buys; an effect hidden in a global generator would have to save the mask
# or replay the generator's state.


@defvjp("random.dropout")
def _dropout_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    _, key = args
    return (ctx.op("random.dropout", ct, key, rate=attrs["rate"]), None)


not_differentiable(
    "random.key", "random.split", "random.fold_in",
    "random.uniform", "random.normal", "random.bernoulli",
)  # fmt: skip
