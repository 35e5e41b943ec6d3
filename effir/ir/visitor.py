"""The names older code imports: ``pre_order``/``post_order``, the free
variable analyses and ``ExprMutator``, now on ``effir.ir.functor`` and
``effir.ir.analysis`` (write new code against those).

``ExprMutator`` is a ``Mutator`` that walks every field kind (binders and
types included) and takes its hooks from methods named
``visit_<NodeClass>(new, old)``, resolved once per class when the class is
created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .analysis import block_heads, free_vars, free_vars_by_function
from .functor import Mutator, post_order, pre_order
from .node import Node


def _node_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    stack: list[type] = [Node]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.__name__, cls)
        stack.extend(cls.__subclasses__())
    return found


class ExprMutator(Mutator):
    """Bottom-up rewriting with ``visit_<NodeClass>(new, old) -> Node`` hooks."""

    binders = True
    types = True
    patterns = True

    @classmethod
    def extra_rules(cls) -> dict[type, Callable[..., Any]]:
        classes = _node_classes()
        rules: dict[type, Callable[..., Any]] = {}
        for name in dir(cls):
            if name.startswith("visit_") and name[6:] in classes:
                rules[classes[name[6:]]] = getattr(cls, name)
        return rules


__all__ = [
    "ExprMutator",
    "block_heads",
    "free_vars",
    "free_vars_by_function",
    "post_order",
    "pre_order",
]
