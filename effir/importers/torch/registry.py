"""Which converter reads which torch operator.

A converter is registered under the operator's qualified name without its
overload (``aten.linear``, ``higher_order.cond``, ``operator.getitem``):
the overloads of one ATen operator share a meaning and differ in how their
arguments are given, which the converter reads from the node. An operator
no converter lists is refused by name, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ConverterFn = Callable[[Any], Any]  # (NodeContext) -> outputs, or a computation of them

CONVERTERS: dict[str, ConverterFn] = {}


def converter(*names: str) -> Callable[[ConverterFn], ConverterFn]:
    """Register the decorated function as the converter of ``names``."""

    def register(fn: ConverterFn) -> ConverterFn:
        for name in names:
            if name in CONVERTERS:
                raise ValueError(f"torch operator {name} has two converters")
            CONVERTERS[name] = fn
        return fn

    return register


def target_name(target: Any) -> str:
    """The registry key of an FX node's target: ``aten.add`` for
    ``aten.add.Tensor``, ``higher_order.cond``, ``operator.getitem``."""
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:  # an OpOverload: aten.add.Tensor -> aten.add
        return str(packet)
    namespace = getattr(target, "namespace", None)
    if namespace is not None and hasattr(target, "name"):  # a HigherOrderOperator
        name = target.name() if callable(target.name) else target.name
        return f"{namespace}.{name}"
    module = getattr(target, "__module__", None) or ""
    if module in ("_operator", "operator"):
        return f"operator.{target.__name__}"
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def target_label(target: Any) -> str:
    """The target as torch prints it (``aten.add.Tensor``)."""
    return str(target) if hasattr(target, "overloadpacket") else target_name(target)
