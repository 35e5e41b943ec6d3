"""ONNX types as effir types: tensor element types as dtypes, dimensions
(a ``dim_param`` is a symbolic dimension, an unknown one ``?``), sequences
as lists, optionals as options."""

from __future__ import annotations

from typing import Any

from ...ir.names import KEYWORDS
from ...ir.types import ANY, DTYPES, IncompleteType, TensorType, Type
from ..common.parts import identifier
from ..common.types import list_type, loose, option_type

# TensorProto.DataType -> effir dtype; the others have no effir dtype.
DTYPE_OF = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}
CODE_OF = {dtype: code for code, dtype in DTYPE_OF.items()}


class UnsupportedType(Exception):
    """An ONNX type effir has no type for (the message says which)."""


def dtype_of(code: int) -> str:
    dtype = DTYPE_OF.get(code)
    if dtype is None:
        raise UnsupportedType(f"the element type {type_name(code)} has no effir dtype")
    return dtype


def type_name(code: int) -> str:
    import onnx  # lazy: onnx loads when a model is read

    try:
        return onnx.TensorProto.DataType.Name(code).lower()
    except ValueError:
        return f"<element type {code}>"


def dim_of(dim: Any) -> int | str:
    """A ``TensorShapeProto.Dimension``: its value, its symbol, or ``?``."""
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return int(dim.dim_value) if dim.dim_value >= 0 else ANY
    if which == "dim_param" and dim.dim_param:
        return symbol(dim.dim_param)
    return ANY


def symbol(name: str) -> str:
    """A ``dim_param`` as an effir dimension name (an identifier that is
    not a keyword or a dtype)."""
    text = identifier(name, "d")
    return f"d_{text}" if text in KEYWORDS or text in DTYPES or text == "_" else text


def type_of(proto: Any, what: str) -> Type:
    """A ``TypeProto`` (of a graph input or output) as an effir type."""
    which = proto.WhichOneof("value")
    if which == "tensor_type":
        tensor = proto.tensor_type
        dtype = dtype_of(tensor.elem_type)
        if not tensor.HasField("shape"):
            raise UnsupportedType(f"{what} declares no shape: its rank must be known")
        return TensorType(tuple(dim_of(d) for d in tensor.shape.dim), dtype)
    if which == "sequence_type":
        inner = proto.sequence_type.elem_type
        if inner.WhichOneof("value") != "tensor_type":
            raise UnsupportedType(
                f"{what} is a sequence of {inner.WhichOneof('value')}s: only of tensors"
            )
        dtype = dtype_of(inner.tensor_type.elem_type)
        if not inner.tensor_type.HasField("shape") or not inner.tensor_type.shape.dim:
            # the elements' rank is not declared (or declared 0, which models
            # use for "unknown"): inferred from what the graph does with them
            return list_type(IncompleteType())
        return list_type(
            loose(TensorType(tuple(dim_of(d) for d in inner.tensor_type.shape.dim), dtype))
        )
    if which == "optional_type":
        return option_type(type_of(proto.optional_type.elem_type, f"what {what} holds"))
    raise UnsupportedType(
        f"{what} has the type {which or 'undefined'}: effir reads tensors, sequences and optionals"
    )
