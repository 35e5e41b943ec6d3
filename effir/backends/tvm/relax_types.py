"""The Relax side of effir's types, shared by the lowering's parts
(relax_lower.py, relax_loops.py, relax_dynamic.py).

[TYPES] Each effir type becomes a Relax type: a tensor of static shape a
tensor of that shape, one with a ``?`` (data-dependent) dimension a tensor
of known rank; a ``Key`` the ``uint32[2]`` tensor of its threefry words;
the world token an ``int64`` scalar tensor; tuples stay tuples; an ADT
value, a function value and a type parameter's are ``Object``s
(relax_adts.py [RULE ADT], relax_closures.py [RULE VMCLOSURE]).

[RULE SYMBOLIC] A dimension the build leaves symbolic (a loop's length) is
a TIR variable of the entry function; code that needs it static raises
``NeedsStatic``, and the build binds it (compile.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
from tvm import relax

from ...ir.printer import astext
from ...ir.types import (
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
from ...ir.visitor import pre_order
from .errors import BackendError


def relax_type(t: Type, symbols: dict[str, Any] | None = None) -> Any:
    """[TYPES] The Relax type of values of effir type ``t``; a dimension
    named in ``symbols`` is that symbolic variable [RULE SYMBOLIC]."""
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
        # a VM closure (relax_closures.py), an ADT value or a type
        # parameter's (relax_adts.py)
        return relax.ObjectType()
    raise BackendError(f"values of type {astext(t)} are not compiled")


class NeedsStatic(Exception):
    """[RULE SYMBOLIC] Lowering met code that needs these symbolic
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


def static(t: Type) -> bool:
    """Whether every tensor in ``t`` has a static shape."""
    return all(
        not isinstance(n, TensorType) or n.is_static for n in pre_order(t) if isinstance(n, Type)
    )


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


def block(bb: Any, build: Callable[[], Any]) -> Any:
    """The bindings ``build`` emits with ``bb``, ending in the value it
    returns, as a ``SeqExpr`` of their own: a function's body, a branch of
    an ``If``, a ``match`` clause.

    This is the one place effir opens a binding block itself, through
    ``BlockBuilder._begin_binding_block``/``_end_block``: TVM's public
    scopes cannot make these blocks. ``bb.function`` adds a global function
    once its body is done (a loop's level calls its own global while it is
    built: that global is declared first, ``declare``) and cannot hold
    another function's body while it is built; ``bb.dataflow`` makes a
    dataflow block, which may hold neither an ``If`` nor an impure call;
    nothing public makes the branch of an ``If``. Recording the bindings
    apart (``bb.normalize``, then ``relax.VarBinding``) would skip what the
    builder's own ``emit`` and ``match_cast`` keep (the symbolic variables
    a ``match_cast`` defines, the binding table), and a nested expression
    that normalising emits would land in the enclosing block."""
    bb._begin_binding_block()
    try:
        value = build()
    finally:
        bindings = bb._end_block()
    return relax.SeqExpr([bindings], value)
