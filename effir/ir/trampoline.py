"""Deep recursion without Python recursion.

Recursive algorithms over IR (the parser and printer) are written as
generators that ``yield`` a sub-computation (another generator) and receive
its result back; ``run`` drives them with a list as the stack. Depth is then
limited by memory, not by ``sys.getrecursionlimit()``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

T = TypeVar("T")

Computation = Generator[Any, Any, T]


def run(computation: Computation[T]) -> T:
    """Run a generator-based recursive computation to completion."""
    stack: list[Computation[Any]] = [computation]
    value: Any = None
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            value = stop.value
            continue
        stack.append(child)
        value = None
