"""Pure, keyed random-number operators (threefry2x32, as jax.random)."""

from ..ir.op import AttrSpec, register_op

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
