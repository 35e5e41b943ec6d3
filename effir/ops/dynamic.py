"""Operators whose output shape depends on input values."""

from typing import Any

import numpy as np

from ..ir.node import Attrs
from ..ir.op import register_op
from ..ir.types import ANY, TensorType, Type
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    describe,
    expect_dtype,
    expect_tensor,
    merge_dim,
    numpy_rule,
    type_rule,
    with_op_name,
)

register_op("boolean_mask", 2, traits=("dynamic_shape",), doc="x[mask]: a leading dimension of `?`")
register_op(
    "argwhere", 1, traits=("dynamic_shape",), doc="indices of nonzero elements, (?, ndim) int32"
)


# ====================================================================== rules
@type_rule("boolean_mask")
@with_op_name("boolean_mask")
def _boolean_mask_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """The selected rows are counted only at run time: a leading ``?``."""
    x = expect_tensor(args[0], "the data")
    mask = expect_tensor(args[1], "the mask")
    expect_dtype(mask, "b", "the mask")
    if mask.ndim > x.ndim:
        raise RelationError(
            f"the mask {describe(mask)} has a higher rank than the data {describe(x)}"
        )
    for i, (m, d) in enumerate(zip(mask.shape, x.shape, strict=False)):
        merge_dim(m, d, f"the mask's and the data's dimensions {i}")
    return TensorType((ANY,) + x.shape[mask.ndim :], x.dtype)


@numpy_rule("boolean_mask")
def _boolean_mask_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x, mask = as_tensor(args[0]), as_tensor(args[1])
    if mask.shape != x.shape[: mask.ndim]:
        raise OpFailure(f"the mask's shape {mask.shape} does not match the data's shape {x.shape}")
    return np.asarray(x[mask])


@type_rule("argwhere")
@with_op_name("argwhere")
def _argwhere_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """One row of indices per nonzero element; how many is known at run time."""
    x = expect_tensor(args[0])
    return TensorType((ANY, x.ndim), "int32")


@numpy_rule("argwhere")
def _argwhere_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return np.argwhere(as_tensor(args[0])).astype(np.int32)
