"""Running a VM function: a native stack deep enough for recursion
(relax/depth.py has the kernel that counts the depth).

[RULE RUNTIME-STACK] The Relax VM runs each call of a VM function as a native C++
recursion (vm.cc: InvokeBytecode -> RunLoop), about 3.5 KB of native stack
per call: a thread's 8 MB stack holds some 2,000 nested calls, and a deeper
recursion crashed the process. Loops are bounded by their levels
(relax/loops.py [RULE LOOP-LEVELS]); a user's recursion needs a stack as deep
as it goes. So compiled recursion counts its depth and stops with an
``EvalError`` past ``MAX_DEPTH`` calls (relax/lower.py [RULE LOWER-DEPTH]; the
check is a kernel's, runtime/errors.py [RULE RUNTIME-CHECK]), and a
program whose call graph is recursive runs on a worker thread whose stack
(``STACK_BYTES``) holds ``MAX_DEPTH`` calls with room to spare. So does
a program that builds ADT values linking to others (relax/adts.py
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

from .printing import current_sink, printing_to

MAX_DEPTH = 100_000
"""Nested calls of recursive functions a compiled program may make [RULE RUNTIME-STACK]."""

STACK_BYTES = 1 << 30
"""The native stack of the threads that run recursive programs: 10 KB per
call of ``MAX_DEPTH`` (a call takes about 3.5 KB). Only the pages a run
touches are ever committed."""


_pool: ThreadPoolExecutor | None = None
_worker = threading.local()
_pool_lock = threading.Lock()


def on_large_stack(
    function: Callable[..., Any], context: Callable[[], AbstractContextManager[Any]]
) -> Callable[..., Any]:
    """``function`` run on a thread with a ``STACK_BYTES`` stack
    [RULE RUNTIME-STACK], inside ``context()`` there (what the caller's thread-local
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


def runner(function: Any, recursive: bool) -> Any:
    """A VM function as a call runs it (runtime/stack.py): a recursive program
    runs on a thread with a large stack, printing where this thread prints.
    (The caller turns a failed check into an ``EvalError``: runtime/errors.py
    ``run_time_error``.)"""
    if not recursive:
        return function
    sink = current_sink()
    return on_large_stack(function, lambda: printing_to(sink))
