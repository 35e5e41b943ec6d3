"""Specialisation: a program's symbolic dimensions bound to the sizes of
one call's arguments.

Kernels are generated per concrete shape (DESIGN.md: "static code is
generated per concrete shape behind a runtime shape check"): the compiled
program keeps one specialisation per binding of the entry's symbolic
dimensions (``t``, ``b``), and checks each call's arguments against it.
Specialising is a substitution in the entry's type annotations followed by
type inference, which makes static what the binding determines (a
``reshape(%x, newshape=[-1, 64])`` of a ``(t, b, 64)`` tensor becomes
``(24, 64)`` once ``t = 6`` and ``b = 4``). What stays ``?`` depends on data
(``boolean_mask``, a ``while_loop``'s outputs) and is handled by the
executor at run time.
"""

from __future__ import annotations

from collections.abc import Mapping

from ....ir.dims import substitute_dims
from ....ir.expr import Expr, Var
from ....ir.functor import pre_order
from ....ir.module import IRModule
from ....passes.infer_type import check
from ....runtime.limits import static_bytes, too_large
from ..runtime.errors import BackendError
from .loop_bodies import literal_loop_bodies


def specialize(module: IRModule, entry: str, dims: Mapping[str, int]) -> IRModule:
    """``module`` with ``@entry``'s dimensions bound by ``dims`` (its own
    annotations and those inside it), type-checked again. Other functions
    keep their own dimensions (their calls bind them). Loop bodies that
    are not function literals are wrapped in one (``loop_bodies``)."""
    module = literal_loop_bodies(check(module))
    if not dims:
        return _check_sizes(check(module), entry)
    functions = dict(module.functions)
    functions[entry] = substitute_dims(module.functions[entry], dims)
    return _check_sizes(check(IRModule(functions, module.type_defs, module.cells)), entry)


def _check_sizes(module: IRModule, entry: str) -> IRModule:
    """Refuse a binding under which some value of ``@entry`` (an argument,
    an intermediate, a result) is larger than the size limit, before any
    code is built for it (runtime/limits.py)."""
    for node in pre_order(module.functions[entry]):
        if isinstance(node, Expr) and node.has_type:
            what = f"%{node.name_hint}" if isinstance(node, Var) else "a value of this program"
            message = too_large(static_bytes(node.checked_type), what)
            if message is not None:
                raise BackendError(message, node.span)
    return module
