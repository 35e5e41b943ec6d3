"""Deep recursion without Python recursion: the one driver.

A recursive algorithm is written as generators that ``yield`` a
sub-computation (another generator) and receive its result back; ``run``
drives them with a list as the stack, so depth is limited by memory, not by
``sys.getrecursionlimit()``. Every functor of ``effir.ir`` that returns
results (``ExprFunctor``, ``Evaluator``) runs on it; the parser, which
walks text rather than IR, uses it directly.

What ``run`` does with what a generator yields or returns:

- a generator yielded is pushed and its result sent back;
- anything else yielded is sent back as it is: an immediate value (a
  functor's ``yield self.eval(atom)``, whose hook returned at once);
- a generator *returned* replaces the one that returned it (a proper tail
  call: a loop of tail calls runs in constant stack);
- an exception raised below is thrown into the generator that asked, so
  ``try``/``finally`` in a computation runs in order.

A computation must ``yield``, never ``yield from``, another one: each level
of a ``yield from`` chain is a level of C recursion when the chain
resumes.
"""

from __future__ import annotations

from collections.abc import Generator
from types import GeneratorType
from typing import Any, TypeVar, overload

T = TypeVar("T")

Computation = Generator[Any, Any, T]


@overload
def run(computation: Computation[T]) -> T: ...


@overload
def run(computation: T) -> T: ...


def run(computation: Any) -> Any:
    """Run a generator-based recursive computation to completion (a value
    that is not a generator is returned as it is)."""
    if type(computation) is not GeneratorType:
        return computation
    stack: list[Computation[Any]] = [computation]
    value: Any = None
    error: BaseException | None = None
    while True:
        top = stack[-1]
        try:
            if error is None:
                child = top.send(value)
            else:
                child, error = top.throw(error), None
        except StopIteration as stop:
            value = stop.value
            if type(value) is GeneratorType:  # a tail call: in its place
                stack[-1] = value
                value = None
                continue
            stack.pop()
            if not stack:
                return value
            continue
        except BaseException as exc:
            stack.pop()
            if not stack:
                raise
            error = exc
            continue
        if type(child) is GeneratorType:
            stack.append(child)
            value = None
        else:
            value = child  # an immediate value
