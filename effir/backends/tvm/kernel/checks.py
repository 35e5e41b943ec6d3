"""Run-time checks of a kernel: where the interpreter fails on a value, the
compiled kernel fails too, on every target (runtime/errors.py [RULE RUNTIME-CHECK]).

A ``te`` rule states what it checks with ``require(shape, bad, message,
shown)``: the call fails when ``bad(*i)`` holds at some index ``i`` of
``shape`` (nothing fails over an empty shape, as the interpreter fails only
when an element is computed), with the interpreter's ``message`` whose
``{}``s show ``shown(*i)`` (one value, or a tuple: one per ``{}``) of the
first failing index (row-major order).
The rule's own result stays a safe value wherever the check fails (a
clipped index, a divisor made non-zero): the check decides, not the value.

The kernel being lowered collects the checks of its operator calls
(``collecting_checks``, ``check_site``) and ``error_output`` computes them
into one more output, ``effir_error``, an ``int64[1 + n]``: the code (0,
or ``k + 1`` for the first check ``k`` that fails, in the order of the
operator calls) and the values the failing check shows (``n``: the most
any of the kernel's checks shows, at least 1; ``error_shape``). Each check is one
reduction over its shape, before any loop of the program's own: never per
element inside a hot loop (a branch there stops vectorisation; a division
checked per element ran 4x slower).

- On the host (LLVM) the kernel itself calls ``effir.check`` with the
  failing check's message when the code is not 0 (a 0-d block, never
  inlined): nothing is called while every check passes.
- On a GPU the code is computed on the device; a kernel cannot stop the
  host, so the VM copies the numbers to the host after the kernel and
  calls ``effir.check`` per check (relax/dynamic.py ``_test_error_code``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import te, tirx

from ....ir.diagnostics import Span
from ..runtime.errors import CHECK_FUNCTION, VALUE_MARK, register_check_function, site_message
from ..schedule.common import KEEP

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor

register_check_function()  # what the kernels built here call

ERROR_OUTPUT = "effir_error"
"""The name of a checked kernel's extra output (its last parameter)."""


def error_shape(texts: Sequence[str]) -> tuple[int]:
    """The error output of a kernel whose checks' messages are ``texts``:
    the code, then the values the failing check's message shows (as many
    as the most any message shows, at least one)."""
    return (1 + max([1, *(t.count(VALUE_MARK) for t in texts)]),)


_NONE = np.iinfo(np.int64).max  # "no failing index"


@dataclass(frozen=True)
class Check:
    """One check of one operator call: its located message (runtime/errors.py
    ``site_message``, a VALUE_MARK where the value shows), and where it
    fails."""

    text: str
    shape: tuple[Any, ...]
    bad: Callable[..., PrimExpr]
    shown: Callable[..., PrimExpr | tuple[PrimExpr, ...]] | None


_state = threading.local()


@contextlib.contextmanager
def collecting_checks() -> Iterator[list[Check]]:
    """The checks the rules state while the block runs (one kernel's)."""
    previous = getattr(_state, "checks", None)
    checks: list[Check] = []
    _state.checks = checks
    try:
        yield checks
    finally:
        _state.checks = previous


@contextlib.contextmanager
def check_site(op: str, span: Span | None) -> Iterator[None]:
    """The operator call whose rule runs now: the site of its checks."""
    previous = getattr(_state, "site", None)
    _state.site = (op, span)
    try:
        yield
    finally:
        _state.site = previous


def require(
    shape: Sequence[Any],
    bad: Callable[..., PrimExpr],
    message: str,
    shown: Callable[..., PrimExpr | tuple[PrimExpr, ...]] | None = None,
) -> None:
    """Fail with the interpreter's ``message`` where ``bad(*i)`` holds for
    an index ``i`` of ``shape``; its ``{}`` shows ``shown(*i)`` (a tuple
    where it shows more than one value). Outside a kernel that collects
    checks nothing is checked."""
    checks = getattr(_state, "checks", None)
    if checks is None:
        return
    site = getattr(_state, "site", None) or ("compiled code", None)
    if any(isinstance(d, int | tirx.IntImm) and int(d) == 0 for d in shape):
        return  # nothing is computed, nothing fails
    text = site_message(site[0], message.replace("{}", VALUE_MARK), site[1])
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    checks.append(Check(text, tuple(shape), bad, shown))


def error_output(checks: Sequence[Check], on_host: bool) -> Tensor:
    """The ``effir_error`` output of a kernel with ``checks`` (see above)."""
    codes, values = _code_and_value(checks)
    shape = error_shape([c.text for c in checks])
    if on_host:
        raised = _raising(checks, codes, values)
        return te.compute(
            shape,
            lambda j: tirx.Select(j == 0, codes() + raised(), values(tirx.max(j, 1) - 1)),
            name=ERROR_OUTPUT,
        )
    return te.compute(
        shape,
        lambda j: tirx.Select(j == 0, codes(), values(tirx.max(j, 1) - 1)),
        name=ERROR_OUTPUT,
    )


def _code_and_value(checks: Sequence[Check]) -> tuple[Tensor, Tensor]:
    """The code of the first failing check (0 if none, a 0-d tensor) and
    the values its message shows (a 1-d tensor, 0 past its values)."""
    firsts = [_first_failing(c, k) for k, c in enumerate(checks)]
    zero = tirx.const(0, "int64")

    def failing(k: int) -> PrimExpr:
        return firsts[k]() < tirx.const(_NONE, "int64")

    def code() -> PrimExpr:
        out = zero
        for k in reversed(range(len(checks))):
            out = tirx.Select(failing(k), tirx.const(k + 1, "int64"), out)
        return out

    def value(j: PrimExpr) -> PrimExpr:
        out = zero
        for k in reversed(range(len(checks))):
            check = checks[k]
            if check.shown is not None:
                index = _unravel(firsts[k](), check.shape)
                shown = check.shown(*index)
                chosen = zero
                for n, v in reversed(list(enumerate(_values(shown)))):
                    chosen = tirx.Select(j == n, v.astype("int64"), chosen)
                out = tirx.if_then_else(failing(k), chosen, out)  # loads only where it fails
        return out

    width = error_shape([c.text for c in checks])[0] - 1
    return (
        te.compute((), code, name="check_code"),
        te.compute((width,), value, name="check_value"),
    )


def _values(shown: PrimExpr | tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
    return tuple(shown) if isinstance(shown, tuple | list) else (shown,)


def raising(checks: Sequence[Check]) -> Tensor:
    """A 0-d ``int64`` tensor, 0, whose computation calls ``effir.check``
    when one of ``checks`` fails: what a CPU kernel on a hot path (the depth
    of recursion, runtime/stack.py) adds to an output instead of an error output."""
    return _raising(checks, *_code_and_value(checks))


def _raising(checks: Sequence[Check], codes: Tensor, values: Tensor) -> Tensor:
    return te.compute((), lambda: _raise(checks, codes(), values), name="check", attrs={KEEP: 1})


def _raise(checks: Sequence[Check], code: PrimExpr, values: Tensor) -> PrimExpr:
    """0, after calling ``effir.check`` (which raises) with the message of
    the failing check, and its values, when ``code`` is not 0."""
    out = tirx.const(0, "int64")
    for k in reversed(range(len(checks))):
        shown = [values(n) for n in range(max(1, checks[k].text.count(VALUE_MARK)))]
        call = tirx.call_packed(CHECK_FUNCTION, tirx.const(0, "int64"), checks[k].text, *shown)
        # (compared, not cast: TVM folds a cast of the call as a constant)
        failed = tirx.Select(call == 0, tirx.const(0, "int64"), tirx.const(1, "int64"))
        out = tirx.if_then_else(code == tirx.const(k + 1, "int64"), failed, out)
    return out


def _first_failing(check: Check, k: int) -> Tensor:
    """A 0-d tensor: the row-major position of the first index where the
    check fails, or ``_NONE``. One reduction over the check's shape."""
    none = tirx.const(_NONE, "int64")
    if not check.shape:
        return te.compute(
            (),
            lambda: tirx.Select(check.bad(), tirx.const(0, "int64"), none),
            name=f"check_{k}",
        )
    axes = [te.reduce_axis((0, d), name=f"c{d_}") for d_, d in enumerate(check.shape)]
    flat = _ravel([a.var for a in axes], check.shape)
    return te.compute(
        (),
        lambda: te.min(tirx.Select(check.bad(*(a.var for a in axes)), flat, none), axis=axes),
        name=f"check_{k}",
    )


def _ravel(index: Sequence[PrimExpr], shape: Sequence[Any]) -> PrimExpr:
    flat: PrimExpr = tirx.const(0, "int64")
    for i, d in zip(index, shape, strict=True):
        flat = flat * tirx.Cast("int64", d) + tirx.Cast("int64", i)
    return flat


def _unravel(flat: PrimExpr, shape: Sequence[Any]) -> list[PrimExpr]:
    """The index of the row-major position ``flat``, each of the dtype of
    the loop variables over its dimension (int32 for a static one)."""
    index = []
    for d in reversed(shape):
        # (a size known at run time is a TIR variable, whose dtype is
        # ``ty``: ``.dtype`` is a buffer variable's only)
        dtype = "int32" if isinstance(d, int) else str(d.ty)
        size = tirx.Cast("int64", d)
        index.append(tirx.Cast(dtype, tirx.truncmod(flat, size)))
        flat = tirx.truncdiv(flat, size)
    return index[::-1]
