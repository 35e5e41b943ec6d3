"""Which converter reads which operator, at which versions.

A converter is registered once per operator type with the versions
(``since_version`` of the operator's schemas) whose semantics it
implements. A node is read at the version its model's opset gives its
operator; a version no converter lists is refused by name, never read as
a neighbouring one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

ConverterFn = Callable[[Any], Any]  # (NodeContext) -> outputs, or a computation of them


@dataclass(frozen=True)
class Converter:
    op_type: str
    versions: tuple[int, ...]
    fn: ConverterFn


CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, versions: Sequence[int]) -> Callable[[ConverterFn], ConverterFn]:
    """Register the decorated function as the converter of ``op_types`` at
    the operator versions ``versions``."""

    def register(fn: ConverterFn) -> ConverterFn:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX operator {op_type} has two converters")
            CONVERTERS[op_type] = Converter(op_type, tuple(sorted(versions)), fn)
        return fn

    return register


@cache
def schema(op_type: str, opset: int, domain: str = "") -> Any | None:
    """The operator's schema at ``opset`` (the latest version it had by
    then), or None for an operator ONNX does not define."""
    import onnx  # lazy: onnx loads when a model is read

    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


@cache
def attribute_defaults(op_type: str, version: int, domain: str = "") -> dict[str, Any]:
    """The default values of the operator's attributes at ``version``."""
    import onnx  # lazy: onnx loads when a model is read

    found = schema(op_type, version, domain)
    if found is None:
        return {}
    defaults = {}
    for name, attribute in found.attributes.items():
        if attribute.default_value.type:
            defaults[name] = attribute_value(
                onnx.helper.get_attribute_value(attribute.default_value)
            )
    return defaults


def attribute_value(value: Any) -> Any:
    """An attribute's value with strings decoded (ONNX gives bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value
