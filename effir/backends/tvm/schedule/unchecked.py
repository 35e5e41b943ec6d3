"""[RULE SCHED-UNCHECKED] effir's schedules call TVM's schedule primitives
without TVM's Python type checks of their arguments.

Why: every primitive of ``tvm.s_tir.Schedule`` (``get_sblock``, ``split``,
``compute_inline``, ...) is wrapped by TVM in a check, written in Python,
that binds the call's arguments to the signature and walks each one's type
hint; a kernel's schedule makes some 70 such calls, and the checks were
three quarters of the time effir spent scheduling (about 0.2 s of CPU of a
cold compile of the MLP gradient of benchmarks/mlp_scan.py, measured with
cProfile). They only turn a call of the wrong types into a Python
``TypeError`` before TVM's C++ would reject it, and effir's scheduling code
is tested: the checks find nothing there.

``unchecked_schedule(func)`` is a ``Schedule`` whose primitives are TVM's
own, unwrapped (``__wrapped__``, which ``functools.wraps`` keeps). A copy
of it (``sch.copy()``) is an ordinary, checked ``Schedule``: TVM makes it
in C++ and Python cannot change its class, which costs time, never
results. TVM's ``Schedule`` everywhere else in the process keeps its
checks."""

from __future__ import annotations

from typing import Any

from tvm import s_tir


class _UncheckedSchedule(s_tir.Schedule):
    """``tvm.s_tir.Schedule`` with its primitives' type checks left out."""


for _name, _method in vars(s_tir.Schedule).items():
    if callable(_method) and hasattr(_method, "__wrapped__"):
        setattr(_UncheckedSchedule, _name, _method.__wrapped__)


def unchecked_schedule(func: Any) -> Any:
    """A schedule of ``func`` (a PrimFunc or an IRModule) whose primitives
    skip TVM's Python type checks [RULE SCHED-UNCHECKED]."""
    return _UncheckedSchedule(func)
