"""Checking ``effir.grad`` against central finite differences in float64."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import effir
from effir.ir.expr import Call, Op
from effir.ir.functor import post_order
from effir.ir.type_tree import leaves


def numeric_grad(module, args: Sequence, index: int, entry: str = "main", eps: float = 1e-6):
    """d(entry's scalar result)/d(args[index]) by central differences."""
    base = list(args)
    point = np.array(base[index], dtype=np.float64, copy=True)
    out = np.zeros_like(point)
    for j in np.ndindex(point.shape):
        plus, minus = list(base), list(base)
        plus[index], minus[index] = point.copy(), point.copy()
        plus[index][j] += eps
        minus[index][j] -= eps
        hi = float(effir.interpret(module, *plus, entry=entry))
        lo = float(effir.interpret(module, *minus, entry=entry))
        out[j] = (hi - lo) / (2 * eps)
    return out


def check_grad(
    module,
    args: Sequence,
    wrt: Sequence[str],
    checkpoint: str = "none",
    rtol: float = 1e-6,
    atol: float = 1e-7,
    specialise: bool = False,
):
    """``value_and_grad`` of ``@main`` equals the interpreter's value and the
    finite differences of every ``wrt`` parameter; returns the gradients.
    Not specialised by default: partial evaluation would unroll the short
    loops and inline the calls and closures these tests are about."""
    names = [p.name_hint for p in module["main"].params]
    g = effir.value_and_grad(module, wrt=list(wrt), checkpoint=checkpoint, specialise=specialise)
    value, grads = effir.interpret(g, *args, entry="main_grad")
    expected = effir.interpret(module, *args)
    np.testing.assert_array_equal(value, expected)
    assert len(grads) == len(wrt)
    for name, got in zip(wrt, grads, strict=True):
        want = numeric_grad(module, args, names.index(name))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"d/d{name}")
    return grads


def check_compiled_equals_interpreted(g, args: Sequence, rtol: float = 1e-12, atol: float = 1e-14):
    """``g``'s ``@main_grad`` (a ``value_and_grad`` module) compiled and
    interpreted on ``args``: the value and every gradient agree (float64);
    prints ``ok`` for a test that ran it in a process of its own."""
    check_compiled_runs_equal_interpreted(g, [args], rtol, atol)
    print("ok")


def check_compiled_runs_equal_interpreted(
    g, runs: Sequence[Sequence], rtol: float = 1e-12, atol: float = 1e-14
) -> None:
    """As ``check_compiled_equals_interpreted`` for each argument list of
    ``runs``, from one build (a while_loop's trip counts, say)."""
    compiled = effir.compile(g, entry="main_grad")
    for args in runs:
        value, grads = compiled(*args, entry="main_grad")
        want_value, want = effir.interpret(g, *args, entry="main_grad")
        np.testing.assert_allclose(value, want_value, rtol=rtol)
        for got, ref in zip(grads, want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def stacked_elements(module) -> int:
    """The elements of every per-step stack of every cf.foreach of the
    gradient function (nested ones too, per call): what a checkpoint mode
    stores, counted from the program's types."""
    total = 0
    for node in post_order(module["main_grad"].body):
        if (
            isinstance(node, Call)
            and isinstance(node.callee, Op)
            and node.callee.name == "cf.foreach"
        ):
            total += sum(int(np.prod(t.shape)) for t in leaves(node.checked_type.fields[0]))
    return total


def assert_compiled_modes_agree(programs) -> None:
    """For each ``(source, wrt, argument lists)``: the compiled gradients
    of checkpoint none, loop and sqrt agree bit for bit (a build per mode
    and program: run it isolated, nightly)."""
    for source, wrt, runs in programs:
        results = {}
        for mode in ("none", "loop", "sqrt"):
            g = effir.value_and_grad(effir.parse(source), wrt=wrt, checkpoint=mode)
            compiled = effir.compile(g, entry="main_grad")
            results[mode] = [
                np.asarray(leaf)
                for args in runs
                for leaf in _leaves(compiled(*args, entry="main_grad"))
            ]
        for mode in ("loop", "sqrt"):
            for a, b in zip(results["none"], results[mode], strict=True):
                assert a.tobytes() == b.tobytes(), (source, mode)


def _leaves(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]
