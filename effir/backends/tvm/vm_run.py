"""Running a VM function: effir's run-time errors, and a native stack deep
enough for recursion.

[RULE CHECK] Compiled code checks what the interpreter checks at run time
(sequences of one length, the depth of a recursion) with a one-statement
TIR kernel ``assert ok, "effir.EvalError: <where>: <message>"``: TVM's
generated code returns the error, the VM raises it (a ``RuntimeError`` in
Python, a C++ exception in the C++ runner) and ``effir_errors`` turns it
into the ``effir.EvalError`` the interpreter raises. A TIR assert needs
nothing registered at run time, so exported programs check the same.

[RULE STACK] The Relax VM runs each call of a VM function as a native C++
recursion (vm.cc: InvokeBytecode -> RunLoop), about 3.5 KB of native stack
per call: a thread's 8 MB stack holds some 2,000 nested calls, and a deeper
recursion crashed the process. Loops are bounded by their levels
(relax_loops.py [RULE LEVELS]); a user's recursion needs a stack as deep
as it goes. So compiled recursion counts its depth and stops with an
``EvalError`` past ``MAX_DEPTH`` calls (relax_lower.py [RULE DEPTH]), and a
program whose call graph is recursive runs on a worker thread whose stack
(``STACK_BYTES``) holds ``MAX_DEPTH`` calls with room to spare. Programs
without recursion run on the caller's thread and pay nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

from tvm.script import tirx as T

from ...ir.diagnostics import EvalError

EVAL_ERROR = "effir.EvalError: "
"""How a message of [RULE CHECK] starts."""

MAX_DEPTH = 100_000
"""Nested calls of recursive functions a compiled program may make [RULE STACK]."""

STACK_BYTES = 1 << 30
"""The native stack of the threads that run recursive programs: 10 KB per
call of ``MAX_DEPTH`` (a call takes about 3.5 KB). Only the pages a run
touches are ever committed."""


def check_kernel(message: str) -> Any:
    """[RULE CHECK] A PrimFunc that fails with ``message`` when its ``bool``
    scalar argument is false."""
    text = EVAL_ERROR + message

    @T.prim_func(private=True, s_tir=True)
    def kernel(ok: T.Buffer((), "bool")):
        assert ok[()], text

    return kernel


def deeper_kernel(limit: int, message: str) -> Any:
    """[RULE CHECK] ``out = depth + 1``, failing with ``message`` when that
    passes ``limit``: the depth of recursion a call runs at, and its check,
    in one VM instruction (relax_lower.py [RULE DEPTH])."""
    text = EVAL_ERROR + message

    @T.prim_func(private=True, s_tir=True)
    def kernel(depth: T.Buffer((), "int64"), out: T.Buffer((), "int64")):
        assert depth[()] < T.int64(limit), text
        out[()] = depth[()] + T.int64(1)

    return kernel


def effir_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (a VM function) raising a failed check [RULE CHECK] as
    an ``EvalError``."""

    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except RuntimeError as err:
            text = str(err)
            if text.startswith(EVAL_ERROR):
                raise EvalError(text.removeprefix(EVAL_ERROR)) from None
            raise

    return call


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
