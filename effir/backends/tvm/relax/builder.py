"""The Relax lowering's builder: TVM's ``BlockBuilder`` for the module,
with blocks of bindings effir opens itself, through TVM's public API only.

The lowering builds blocks TVM's public scopes cannot: ``bb.function``
adds a global only once its body is done and cannot hold another
function's body while it is built (a loop's level calls its own global
while it is built), ``bb.dataflow`` makes a dataflow block, which holds
neither an ``If`` nor an impure call, and nothing public makes the branch
of an ``If`` or a ``match`` clause. So ``Builder.block(build)`` collects
the bindings ``build`` emits in a frame of its own and returns them as a
``SeqExpr``; ``Builder.nested(computation)`` does the same for a
computation on effir's trampoline (effir.ir.trampoline), so that blocks
nested as deep as the program (branches of branches) cost no Python
recursion; both open and close the frame with ``open``/``close``. ``emit`` normalises an expression with TVM's normaliser
(``bb.normalize``: its type deduced) and binds it to a variable named by
the module's name table (``bb.get_unique_name``, as TVM's ``emit`` names
them); ``match_cast`` binds a ``MatchCast`` the same way. The module, its
globals and everything else stay TVM's (``add_func``, ``update_func``,
``finalize`` ... are the wrapped builder's).

[RULE LOWER-FLAT] Every binding is emitted in a block of ``block``; TVM's
builder never has a block open. An expression whose arguments are not
atoms would make TVM's normaliser emit them into the builder's open block:
with none open it refuses ("Cannot normalize non-leaf without a scope"),
so such an expression fails loudly instead of being bound in the wrong
block. The lowering emits atoms' calls only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax

from ....ir.trampoline import Computation
from ..runtime.errors import BackendError
from .constants import constant

MAX_NESTED_BLOCKS = 500
"""How deep blocks (``if`` branches, ``match`` clauses) may nest. effir
builds them without Python recursion, but TVM's builder checks a function
(``update_func``) by a native recursion per nested ``If``, about 12 KB of
C stack each: on a thread's 8 MB stack, some 650 nested ``If``s crashed
the process. Deeper code is a CompileError (run it with the interpreter)."""

_MODULE_METHODS = frozenset(
    {"add_func", "update_func", "get", "finalize", "normalize", "get_unique_name", "call_te"}
)
"""What ``Builder`` takes from TVM's builder as it is: the module's functions,
normalising, fresh names, a TE function added as a PrimFunc."""


class Builder:
    """A ``relax.BlockBuilder`` whose bindings go to effir's own blocks."""

    def __init__(self) -> None:
        self._bb = relax.BlockBuilder()
        self._frames: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        """The module's methods are TVM's builder's; the others of TVM's
        (``emit_te``, ``emit_output``, ...) would bind into a block of
        TVM's, which is never open [RULE LOWER-FLAT], so they are refused here."""
        if name in _MODULE_METHODS:
            return getattr(self._bb, name)
        raise AttributeError(
            f"Builder.{name}: bind with emit or match_cast inside Builder.block (relax/builder.py)"
        )

    def open(self) -> int:
        """Open a block: the bindings emitted from now on go to it, until
        ``close``. Returns how many blocks are open, for ``close`` to check.
        Past ``MAX_NESTED_BLOCKS``, a BackendError."""
        if len(self._frames) >= MAX_NESTED_BLOCKS:
            raise BackendError(
                f"blocks (if branches, match clauses) nested more than {MAX_NESTED_BLOCKS} "
                "deep are not compiled: TVM's builder would overflow the native stack; "
                "run this program with the interpreter"
            )
        self._frames.append([])
        return len(self._frames)

    def close(self, opened: int) -> list[Any]:
        """Close the block ``open`` returned ``opened`` for (the innermost:
        blocks nest): its bindings."""
        if len(self._frames) != opened:
            raise RuntimeError(
                f"Builder.close: block {opened} closed with {len(self._frames)} open"
            )
        return self._frames.pop()

    def block(self, build: Callable[[], Any]) -> Any:
        """The bindings ``build`` emits, ending in the value it returns, as a
        ``SeqExpr`` of their own: a function's body, a small block of the
        lowering's own making."""
        opened = self.open()
        try:
            value = build()
        finally:
            bindings = self.close(opened)
        return relax.SeqExpr([relax.BindingBlock(bindings)], value)

    def nested(self, computation: Computation[Any]) -> Computation[Any]:
        """``block`` for a computation on the trampoline (a generator not
        started yet): yield this and receive the ``SeqExpr`` of what the
        computation emits. An ``If``'s branch, a ``match`` clause: blocks
        nested as deep as the program."""
        opened = self.open()
        try:
            value = yield computation
        finally:
            bindings = self.close(opened)
        return relax.SeqExpr([relax.BindingBlock(bindings)], value)

    def emit(self, expr: Any, name_hint: str = "") -> Any:
        """A new variable bound to ``expr`` (normalised) in the open block."""
        if isinstance(expr, list | tuple):
            expr = relax.Tuple(list(expr))
        value = self._bb.normalize(expr)
        var = relax.Var(self._name(name_hint), value.ty)
        self._frame().append(relax.VarBinding(var, value))
        return var

    def constant(self, data: np.ndarray) -> Any:
        """``data`` as a Relax value. [RULE LOWER-EMPTY] A constant of no elements
        (and rank 2 or more) cannot be read back from a built module: TVM
        writes it, then fails to load it ("Invalid DLTensor file format")
        when the program first runs. It has no data to keep: its shape and
        dtype make it, ``zeros`` emitted in the open block."""
        dtype = str(data.dtype)
        if data.size == 0:
            return self.emit(relax.op.zeros(relax.ShapeExpr(list(data.shape)), dtype), "empty")
        return constant(data, dtype)

    def match_cast(self, value: Any, ty: Any, name_hint: str = "") -> Any:
        """A new variable of type ``ty`` bound to ``value``, checked by the VM
        (``MatchCast``), in the open block."""
        value = self._bb.normalize(value)
        var = relax.Var(self._name(name_hint), ty)
        self._frame().append(relax.MatchCast(var, value, ty))
        return var

    def _name(self, hint: str) -> str:
        return str(self._bb.get_unique_name(hint or "gv"))

    def _frame(self) -> list[Any]:
        if not self._frames:
            raise RuntimeError("a binding emitted outside Builder.block")
        return self._frames[-1]
