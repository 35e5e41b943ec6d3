"""The Relax side of effir's types, shared by the lowering's parts
(relax/lower.py, relax/loops.py, relax/dynamic.py).

[TYPES] Each effir type becomes a Relax type: a tensor of static shape a
tensor of that shape, one with a ``?`` (data-dependent) dimension a tensor
of known rank; a ``Key`` the ``uint32[2]`` tensor of its threefry words;
the world token an ``int64`` scalar tensor; tuples stay tuples; an ADT
value, a function value and a type parameter's are ``Object``s
(relax/adts.py [RULE LOWER-ADT], relax/closures.py [RULE LOWER-VMCLOSURE]).

[RULE LOWER-SYMBOLIC] A dimension the build leaves symbolic (a loop's length) is
a TIR variable of the entry function; code that needs it static raises
``NeedsStatic``, and the build binds it (driver/compile.py).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from ....ir.printer import astext
from ....ir.types import (
    ANY,
    FuncType,
    GlobalTypeVar,
    KeyType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from ....ir.visitor import pre_order
from ..runtime.errors import BackendError


def relax_type(t: Type, symbols: dict[str, Any] | None = None) -> Any:
    """[TYPES] The Relax type of values of effir type ``t``; a dimension
    named in ``symbols`` is that symbolic variable [RULE LOWER-SYMBOLIC]."""
    if isinstance(t, TensorType):
        if t.is_static:
            return relax.TensorType([int(d) for d in t.shape], t.dtype)
        if symbols and all(isinstance(d, int) or d in symbols for d in t.shape):
            shape = [d if isinstance(d, int) else symbols[d] for d in t.shape]
            return relax.TensorType(shape, t.dtype)
        return relax.TensorType(dtype=t.dtype, ndim=t.ndim)
    if isinstance(t, KeyType):
        return relax.TensorType([2], "uint32")
    if isinstance(t, TupleType):
        return relax.TupleType([relax_type(f, symbols) for f in t.fields])
    if isinstance(t, FuncType | TypeCall | GlobalTypeVar | TypeVar):
        # a VM closure (relax/closures.py), an ADT value or a type
        # parameter's (relax/adts.py)
        return relax.ObjectType()
    raise BackendError(f"values of type {astext(t)} are not compiled")


class NeedsStatic(Exception):
    """[RULE LOWER-SYMBOLIC] Lowering met code that needs these symbolic
    dimensions static (a kernel of their shapes): specialise them and
    lower again."""

    def __init__(self, dims: set[str]) -> None:
        super().__init__(f"needs static {', '.join(sorted(dims))}")
        self.dims = dims


def named_dims(t: Type) -> set[str]:
    """The symbolic dimension names in ``t`` (not ``?``)."""
    return {
        d
        for n in pre_order(t)
        if isinstance(n, TensorType)
        for d in n.shape
        if isinstance(d, str) and d != ANY
    }


def unknown_shape(shape: Any) -> str:
    """What a shape the lowering needs and does not have is, in words: a
    symbolic dimension (a name: a size the caller chooses, which nothing
    bound here) is not a data-dependent one (``?``: known only once the
    program computed it)."""
    names = [d for d in shape if isinstance(d, str) and d != ANY]
    if names:
        return (
            f"a symbolic shape ({', '.join(names)}: a size of the function's caller that "
            "nothing binds here)"
        )
    return "a data-dependent shape (?)"


# ================================================================ program


def scheduled(func: Any) -> Any:
    """``func`` marked as scheduled, so that Relax's default GPU schedule
    (for the operators it legalises itself) leaves it alone."""
    return func.with_attr("tirx.is_scheduled", True)


def is_const(value: Any) -> bool:
    return isinstance(value, tvm.ir.expr.Constant)


def declare(bb: Any, params: list[Any], ret: Any, name: str) -> Any:
    """A function's global, declared by a stub to define later (so that
    recursive calls refer to it). The stub carries its name: the
    BlockBuilder returns the global of an existing structurally equal
    function, and two stubs of one signature would otherwise be one."""
    stub = relax.Function(params, relax.SeqExpr([], relax.op.null_value()), ret, False)
    return bb.add_func(stub.with_attr("effir_stub", name), name)
