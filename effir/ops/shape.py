"""Shape manipulation and tensor creation, including the shape-tensor
(``dyn.``) variants whose output shape comes from a tensor's values."""

from ..ir.op import AttrSpec, register_op

_DTYPE = AttrSpec("dtype", "dtype", "float32")

register_op("reshape", 1, attrs=(AttrSpec("newshape", "ints"),), traits=("injective",))
register_op(
    "transpose", 1, attrs=(AttrSpec("axes", "ints", None, optional=True),), traits=("injective",)
)
register_op(
    "expand_dims",
    1,
    attrs=(AttrSpec("axis", "int"), AttrSpec("num_newaxis", "int", 1)),
    traits=("injective",),
)
register_op(
    "squeeze", 1, attrs=(AttrSpec("axis", "ints", None, optional=True),), traits=("injective",)
)
register_op(
    "concatenate",
    1,
    attrs=(AttrSpec("axis", "int", 0),),
    traits=("injective",),
    doc="concatenate a tuple of tensors",
)
register_op(
    "stack",
    1,
    attrs=(AttrSpec("axis", "int", 0),),
    traits=("injective",),
    doc="stack a tuple of tensors along a new axis",
)
register_op(
    "split",
    1,
    attrs=(AttrSpec("indices_or_sections", "int_or_ints"), AttrSpec("axis", "int", 0)),
    traits=("injective",),
    doc="split into a tuple of tensors",
)
register_op(
    "strided_slice",
    1,
    attrs=(
        AttrSpec("begin", "ints"),
        AttrSpec("end", "ints"),
        AttrSpec("strides", "ints", None, optional=True),
        AttrSpec("axes", "ints", None, optional=True),
        AttrSpec("slice_mode", "str", "end"),
    ),
    traits=("injective",),
)
register_op(
    "take",
    2,
    attrs=(AttrSpec("axis", "int", None, optional=True), AttrSpec("mode", "str", "clip")),
    traits=("injective",),
)
register_op("broadcast_to", 1, attrs=(AttrSpec("shape", "ints"),), traits=("broadcast",))
register_op("zeros", 0, attrs=(AttrSpec("shape", "ints"), _DTYPE), traits=("elementwise",))
register_op("ones", 0, attrs=(AttrSpec("shape", "ints"), _DTYPE), traits=("elementwise",))
register_op(
    "full",
    1,
    attrs=(AttrSpec("shape", "ints"), _DTYPE),
    traits=("broadcast",),
    doc="full(fill_value, shape=..., dtype=...)",
)
register_op(
    "shape_of",
    1,
    attrs=(AttrSpec("dtype", "dtype", "int32"),),
    traits=("opaque",),
    doc="the shape of a tensor as a 1-d tensor",
)
# Shape-tensor variants: the shape is a 1-d integer tensor argument.
register_op("dyn.zeros", 1, attrs=(_DTYPE,), traits=("dynamic_shape",))
register_op("dyn.ones", 1, attrs=(_DTYPE,), traits=("dynamic_shape",))
register_op("dyn.full", 2, attrs=(_DTYPE,), traits=("dynamic_shape",), doc="full(value, shape)")
register_op("dyn.reshape", 2, traits=("dynamic_shape",), doc="reshape(x, newshape_tensor)")
