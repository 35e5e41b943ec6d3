"""The kernel that counts the depth of compiled recursion and stops it past
``MAX_DEPTH`` calls (runtime/stack.py [RULE RUNTIME-STACK], relax/lower.py [RULE LOWER-DEPTH])."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te, tirx

from ....ir.diagnostics import Span
from ..kernel.checks import check_site, collecting_checks, error_output, raising, require


def deeper_kernel(limit: int, callee: str, span: Span | None, on_host: bool) -> Any:
    """``out = depth + 1``, failing past ``limit`` as a call of ``callee`` at
    ``span``: the depth of recursion a call runs at, and its check, in one
    VM instruction (relax/lower.py [RULE LOWER-DEPTH]). A checked kernel
    (kernel/checks.py): on a GPU with an error output; on the host, where
    every recursive call runs it, the check's call folds into ``out``
    (no output more to allocate at every call). Returns the PrimFunc
    and the check's message."""
    depth = te.placeholder((), "int64", name="depth")
    message = f"recursion deeper than {limit} nested calls (the limit of compiled code)"
    with collecting_checks() as checks, check_site(callee, span):
        require((), lambda: depth() >= tirx.const(limit, "int64"), message)
    one = tirx.const(1, "int64")
    if on_host:
        raised = raising(checks)
        out = te.compute((), lambda: depth() + one + raised(), name="deeper")
        return te.create_prim_func([depth, out]).without_attr("global_symbol"), checks[0].text
    out = te.compute((), lambda: depth() + one, name="deeper")
    func = te.create_prim_func([depth, out, error_output(checks, on_host)])
    # one GPU thread computes it (relax/dynamic.py _on_target): no scratch
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    for name in ("check_0", "check_code", "check_value"):
        sch.compute_inline(sch.get_sblock(name))
    return sch.mod["main"].without_attr("global_symbol"), checks[0].text
