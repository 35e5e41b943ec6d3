"""How an operator becomes a TVM tensor expression: the ``te`` rule.

Each operator's lowering is registered once, next to the others of its
family, as ``op_def(name).rules["te"]``, the same registry that holds its
type relation and numpy implementation; the kernel builder reads the rule
and never an operator's name.

A rule takes the operator's arguments as TE values and returns its result:

    rule(args: tuple[TEValue, ...], attrs: Attrs, out_type: Type) -> TEValue

where a ``TEValue`` is a ``te.Tensor`` (a tensor of the type's shape and
dtype; a scalar is a 0-d tensor) or a tuple of TE values (for tuple-typed
arguments and results, as ``stack`` takes and ``split`` gives). A ``Key`` is
a ``uint32`` tensor of shape ``(2,)``: the two threefry words, as
``PRNGKey.data`` holds them. ``out_type`` is the call's checked type, with
every dimension static (the kernel builder substitutes concrete shapes),
except inside ``symbolic_dims``: there a named dimension is a TIR variable
or an ``int64`` expression of them (``dim_value``), for kernels compiled
once for every size of a data-dependent dimension (relax/symbolic.py,
kernel/symbolic_shapes.py). A rule that needs a static size raises TypeError or
ValueError on such a dimension, and the program is then refused
(``CompileError`` naming the operator).

The rule must compute exactly what the numpy rule computes: bit for bit for
integers, booleans and random bits, to 1e-5 relative for floats.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from ....ir.node import Attrs
from ....ir.op import op_def
from ....ir.types import Type

TEValue = Any | tuple["TEValue", ...]  # te.Tensor or a tuple of them
TERule = Callable[[tuple[TEValue, ...], Attrs, Type], TEValue]


def te_rule(*names: str) -> Callable[[TERule], TERule]:
    """Register the decorated function as the ``te`` rule of ``names``."""

    def register(rule: TERule) -> TERule:
        for name in names:
            op_def(name).rules["te"] = rule
        return rule

    return register


_SYMBOLIC: ContextVar[Mapping[str, Any] | None] = ContextVar("effir_symbolic_dims", default=None)


@contextlib.contextmanager
def symbolic_dims(dims: Mapping[str, Any]) -> Iterator[None]:
    """Within: the dimension names in ``dims`` are these TIR variables (or
    expressions of them)."""
    token = _SYMBOLIC.set(dims)
    try:
        yield
    finally:
        _SYMBOLIC.reset(token)


def dim_value(d: int | str) -> Any:
    """A type's dimension as a rule uses it: an int, or the TIR variable
    (or expression) of a named dimension inside ``symbolic_dims``; None for
    any other name."""
    if isinstance(d, int):
        return d
    dims = _SYMBOLIC.get()
    return None if dims is None else dims.get(d)
