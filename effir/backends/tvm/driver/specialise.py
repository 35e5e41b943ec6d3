"""Specialisation: a program's symbolic dimensions bound to the sizes of
one call's arguments.

Kernels are generated per concrete shape, behind a run-time shape check
(docs/architecture.md, the decisions table): the compiled
program keeps one specialisation per binding of the entry's symbolic
dimensions (``t``, ``b``), and checks each call's arguments against it.
Specialising is a substitution in the entry's type annotations followed by
type inference, which makes static what the binding determines (a
``reshape(%x, newshape=[-1, 64])`` of a ``(t, b, 64)`` tensor becomes
``(24, 64)`` once ``t = 6`` and ``b = 4``). The functions the entry calls
are copied per binding of their own dimensions at each call
(passes/transforms/specialise_dims.py), so that they are bound too. What stays ``?``
depends on data (``boolean_mask``, a ``while_loop``'s outputs) and is
handled by the executor at run time.
"""

from __future__ import annotations

from collections.abc import Mapping

from effir.passes.analyses.call_graph import reachable
from effir.passes.analyses.infer_type import check
from effir.passes.transforms.specialise_dims import specialise_dims

from ....ir.expr import Expr, Var
from ....ir.functor import pre_order
from ....ir.module import IRModule
from ....runtime.limits import static_bytes, too_large
from ..runtime.errors import BackendError
from .loop_bodies import literal_loop_bodies


def specialise(module: IRModule, entry: str, dims: Mapping[str, int]) -> IRModule:
    """``module`` with ``@entry``'s dimensions bound by ``dims`` (its own
    annotations and those inside it), type-checked again, and every
    function it calls copied per binding of that function's dimensions at
    its calls (passes/transforms/specialise_dims.py): a callee's kernels are then
    written in the entry's sizes, and one whose sizes stay symbolic asks
    for them as the entry's do (relax/types.py [RULE LOWER-SYMBOLIC]). Loop
    bodies that are not function literals are wrapped in one afterwards
    (``loop_bodies``), and the result checked again."""
    module = literal_loop_bodies(specialise_dims(module, entry, dims))
    return _check_sizes(check(module), entry)


def _check_sizes(module: IRModule, entry: str) -> IRModule:
    """Refuse a binding under which some value the entry computes (an
    argument, an intermediate, a result, in it or a function it calls) is
    larger than the size limit, before any code is built for it
    (runtime/limits.py)."""
    functions = [module.functions[name] for name in reachable(module, entry)]
    for node in pre_order(*functions):
        if isinstance(node, Expr) and node.has_type:
            what = f"%{node.name_hint}" if isinstance(node, Var) else "a value of this program"
            message = too_large(static_bytes(node.checked_type), what)
            if message is not None:
                raise BackendError(message, node.span)
    return module
