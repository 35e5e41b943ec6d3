"""Running a VM function: a native stack deep enough for recursion, and
the kernel that counts its depth.

[RULE STACK] The Relax VM runs each call of a VM function as a native C++
recursion (vm.cc: InvokeBytecode -> RunLoop), about 3.5 KB of native stack
per call: a thread's 8 MB stack holds some 2,000 nested calls, and a deeper
recursion crashed the process. Loops are bounded by their levels
(relax_loops.py [RULE LEVELS]); a user's recursion needs a stack as deep
as it goes. So compiled recursion counts its depth and stops with an
``EvalError`` past ``MAX_DEPTH`` calls (relax_lower.py [RULE DEPTH]; the
check is a kernel's, errors.py [RULE CHECK]), and a
program whose call graph is recursive runs on a worker thread whose stack
(``STACK_BYTES``) holds ``MAX_DEPTH`` calls with room to spare. So does
a program that builds ADT values linking to others (relax_adts.py
``links_values``): a list grown by a loop, a gradient's key tape, is a
chain as long as the loop ran, and TVM's runtime frees a chain by one
native call per link (about 64 bytes each: 8 MB held some 130,000). Other programs run on the caller's thread
and pay nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import tvm
from tvm import te, tirx

from ...ir.diagnostics import Span
from .te_checks import check_site, collecting_checks, error_output, raising, require

MAX_DEPTH = 100_000
"""Nested calls of recursive functions a compiled program may make [RULE STACK]."""

STACK_BYTES = 1 << 30
"""The native stack of the threads that run recursive programs: 10 KB per
call of ``MAX_DEPTH`` (a call takes about 3.5 KB). Only the pages a run
touches are ever committed."""


def deeper_kernel(limit: int, callee: str, span: Span | None, on_host: bool) -> Any:
    """``out = depth + 1``, failing past ``limit`` as a call of ``callee`` at
    ``span``: the depth of recursion a call runs at, and its check, in one
    VM instruction (relax_lower.py [RULE DEPTH]). A checked kernel
    (te_checks.py): on a GPU with an error output; on the host, where
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
    # one GPU thread computes it (relax_dynamic.py _on_target): no scratch
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    for name in ("check_0", "check_code", "check_value"):
        sch.compute_inline(sch.get_sblock(name))
    return sch.mod["main"].without_attr("global_symbol"), checks[0].text


_pool: ThreadPoolExecutor | None = None
_worker = threading.local()
_pool_lock = threading.Lock()


def on_large_stack(
    function: Callable[..., Any], context: Callable[[], AbstractContextManager[Any]]
) -> Callable[..., Any]:
    """``function`` run on a thread with a ``STACK_BYTES`` stack [RULE
    STACK], inside ``context()`` there (what the caller's thread-local
    settings are, such as where prints go); the caller waits for it."""

    def call(*args: Any) -> Any:
        if getattr(_worker, "active", False):  # already on a large stack (a nested call)
            return function(*args)

        def work() -> Any:
            _worker.active = True
            with context():
                return function(*args)

        return _submit(work)

    return call


def _submit(work: Callable[[], Any]) -> Any:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(thread_name_prefix="effir-deep-stack")
        # The pool starts a thread, if it needs one, inside submit: the
        # size applies to it alone (a thread another caller starts at the
        # same moment gets the same reservation, which costs it nothing).
        previous = threading.stack_size(STACK_BYTES)
        try:
            future = _pool.submit(work)
        finally:
            threading.stack_size(previous)
    return future.result()
