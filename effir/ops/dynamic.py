"""Operators whose output shape depends on input values."""

from ..ir.op import register_op

register_op("boolean_mask", 2, traits=("dynamic_shape",), doc="x[mask]: a leading dimension of `?`")
register_op(
    "argwhere", 1, traits=("dynamic_shape",), doc="indices of nonzero elements, (?, ndim) int32"
)
