"""``checkpoint="sqrt"`` where the number of steps is known only at run
time: a ``cf.foreach`` of symbolic length and a ``cf.while_loop``
(effir/autodiff/runtime_segments.py). It stores about sqrt(T) carries, and
the three modes give bit-identical gradients (they sum the hoisted
weight-gradient terms in the same run-time chunks), equal to finite
differences; compiled equals interpreted."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ops import control
from tests.support.grad_harness import assert_compiled_modes_agree, check_grad
from tests.support.loop_grad_programs import RNN, SCAN_AND_MAP, WHILE, _leaves

MODES = ("none", "loop", "sqrt")

# hoisted terms of every kind: the weights' products (nn.dense), the bias's
# sum, and x's cotangent (ct @ u, computed after the loop)
DENSE = """#[version = "0.0.5"]
def @main(%xs: Tensor[(n, 2, 3), float64], %h0: Tensor[(2, 4), float64],
          %w: Tensor[(4, 4), float64], %u: Tensor[(4, 3), float64], %b: Tensor[(4), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(2, 3), float64], %h: Tensor[(2, 4), float64]) {
    let %a = tanh(add(add(nn.dense(%h, %w), nn.dense(%x, %u)), %b));
    (sum(multiply(%a, %a), axis=[1]), %a)
  }, %xs, %h0);
  add(sum(%r.0), sum(multiply(%r.1, %r.1)))
}
"""
DENSE_WRT = ["xs", "h0", "w", "u", "b"]

WHILE_DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float64], %w: Tensor[(4, 4), float64], %b: Tensor[(4), float64],
          %limit: float64) {
  let %r = cf.while_loop(fn (%s: (Tensor[(2, 4), float64], float64)) { less(%s.1, %limit) },
    fn (%s: (Tensor[(2, 4), float64], float64)) {
      let %h = tanh(add(nn.dense(%s.0, %w), %b));
      (sum(%h), (%h, add(%s.1, 1f64)))
    }, (%x, 0f64), max_iterations=40);
  add(sum(%r.0), sum(%r.1.0))
}
"""
WHILE_DENSE_WRT = ["x", "w", "b"]

LENGTHS = [0, 1, 2, 3, 4, 7, 9, 13, 16, 17]  # T < 4, squares, primes, 0 and 1 steps


def _dense_args(length: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed + length)
    shapes = [(length, 2, 3), (2, 4), (4, 4), (4, 3), (4,)]
    return [rng.normal(size=s) * 0.5 for s in shapes]


def _rnn_args(length: int) -> list:
    rng = np.random.default_rng(length)
    return [
        rng.normal(size=(length, 2, 3)) * 0.5,
        rng.normal(size=(2, 3)),
        rng.normal(size=3),
        (rng.normal(size=3), rng.normal(size=3)),
    ]


def _scan_args(length: int) -> list:
    """() outputs, a () carry, a tuple sequence with integers."""
    rng = np.random.default_rng(2)
    ints = np.arange(length, dtype="int32")
    return [rng.normal(size=(length, 2)), rng.normal(size=length), rng.normal(size=2), ints]


def _while_args(limit: float) -> list:
    rng = np.random.default_rng(3)
    return [
        rng.normal(size=(2, 4)),
        rng.normal(size=(4, 4)) * 0.5,
        rng.normal(size=4),
        np.float64(limit),
    ]


def _grad_programs(source: str, wrt: list[str]) -> dict:
    m = effir.parse(source)
    return {mode: effir.grad(m, wrt=wrt, checkpoint=mode, specialise=False) for mode in MODES}


def _assert_bit_identical(programs: dict, args: list) -> None:
    flat = {
        mode: [np.asarray(x) for x in _leaves(effir.interpret(g, *args, entry="main_grad"))]
        for mode, g in programs.items()
    }
    for mode in ("loop", "sqrt"):
        for a, b in zip(flat["none"], flat[mode], strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), mode  # bit for bit (signs of zeros too)


@pytest.mark.parametrize(
    ("source", "wrt", "make_args"),
    [
        (DENSE, DENSE_WRT, _dense_args),
        (RNN.replace("LEN", "n"), ["xs", "h0", "w", "c"], _rnn_args),  # a branch, tuples
        (
            SCAN_AND_MAP.replace("(4, 2)", "(t, 2)").replace("(4)", "(t)"),
            ["xs", "ys", "h0"],
            _scan_args,
        ),
    ],
    ids=["dense", "rnn", "scan_and_map"],
)
def test_symbolic_foreach_checkpoint_modes_are_bit_identical(source, wrt, make_args):
    programs = _grad_programs(source, wrt)
    for length in LENGTHS:
        _assert_bit_identical(programs, make_args(length))


@pytest.mark.parametrize(
    ("source", "wrt"), [(WHILE_DENSE, WHILE_DENSE_WRT), (WHILE, ["x", "w"])], ids=["dense", "plain"]
)
def test_while_loop_checkpoint_modes_are_bit_identical(source, wrt):
    programs = _grad_programs(source, wrt)
    rng = np.random.default_rng(7)
    plain = [rng.normal(size=3), rng.normal(size=3)]
    for steps in [0, 1, 2, 3, 4, 9, 13, 16, 40]:  # max_iterations: 40 for dense, 6 for plain
        if source is WHILE_DENSE:
            args = _while_args(float(steps))
        else:
            args = [*plain, np.float64(steps)]
        _assert_bit_identical(programs, args)


@pytest.mark.parametrize("length", [1, 5, 10])
def test_symbolic_foreach_sqrt_against_finite_differences(length):
    check_grad(effir.parse(DENSE), _dense_args(length), DENSE_WRT, checkpoint="sqrt")


@pytest.mark.parametrize("limit", [0.0, 2.0, 7.0])
def test_while_loop_sqrt_against_finite_differences(limit):
    args = _while_args(limit)
    check_grad(effir.parse(WHILE_DENSE), args, WHILE_DENSE_WRT, checkpoint="sqrt")


NESTED = """#[version = "0.0.5"]
def @main(%xs: Tensor[(3, n, 2), float64], %w: Tensor[(2, 2), float64], %h0: Tensor[(2), float64]) {
  let %outer = fn (%row: Tensor[(n, 2), float64], %h: Tensor[(2), float64]) {
    let %inner = cf.foreach(fn (%x: Tensor[(2), float64], %g: Tensor[(2), float64]) {
      let %a = tanh(add(%x, multiply(%g, sum(%w, axis=[0]))));
      (sum(%a), %a)
    }, %row, %h);
    let %m = cf.while_loop(fn (%s: (Tensor[(2), float64], float64)) { less(%s.1, 3f64) },
      fn (%s: (Tensor[(2), float64], float64)) {
        let %q = tanh(multiply(%s.0, sum(%w, axis=[1])));
        (%q, (%q, add(%s.1, 1f64)))
      }, (%inner.1, 0f64));
    (sum(%inner.0), %m.1.0)
  };
  let %r = cf.foreach(%outer, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}
"""


def test_run_time_segments_inside_a_loop_body():
    """A symbolic-length foreach and a while_loop in a static foreach's
    body: their geometry is computed in each outer step."""
    programs = _grad_programs(NESTED, ["xs", "w", "h0"])
    for n in [0, 1, 3, 5, 10]:
        rng = np.random.default_rng(n)
        args = [rng.normal(size=(3, n, 2)), rng.normal(size=(2, 2)), rng.normal(size=2)]
        _assert_bit_identical(programs, args)
    check_grad(effir.parse(NESTED), args, ["xs", "w", "h0"], checkpoint="sqrt")


def _stored_carries(monkeypatch, source: str, wrt: list[str], args: list, mode: str) -> int:
    """The most rows of any stack of carries, shape (rows, 2, 4), that a
    loop of ``mode``'s gradient program stacks (every stack a foreach or a
    while_loop returns is recorded)."""
    rows = [0]
    finish = control._finish

    def recording(outs, state, out_type):
        result = finish(outs, state, out_type)
        for leaf in _leaves(result[0]):
            if np.shape(leaf)[1:] == (2, 4):
                rows.append(np.shape(leaf)[0])
        return result

    monkeypatch.setattr(control, "_finish", recording)
    g = effir.grad(effir.parse(source), wrt=wrt, checkpoint=mode, specialise=False)
    effir.interpret(g, *args, entry="main_grad")
    return max(rows)


def test_sqrt_stores_about_sqrt_t_carries(monkeypatch):
    """T = 30: k = 6, 5 segments; "sqrt" stacks at most k carries (the
    starts, one segment's recomputed carries, its factors), "loop" all T.
    Before, both loops below fell back to "loop" under "sqrt"."""
    dense = (DENSE, DENSE_WRT, _dense_args(30))
    while_args = _while_args(30.0)
    looping = (WHILE_DENSE, WHILE_DENSE_WRT, while_args)
    for source, wrt, args in (dense, looping):
        assert _stored_carries(monkeypatch, source, wrt, args, "loop") == 30
        assert _stored_carries(monkeypatch, source, wrt, args, "sqrt") == 6


def test_sqrt_of_a_symbolic_foreach_runs_in_segments():
    """The forward is an outer loop over the segments (their number computed
    when the program runs), each an inner loop over its steps; the segments'
    reverse loop recomputes each segment from its start."""
    g = effir.grad(effir.parse(DENSE), wrt=["w"], checkpoint="sqrt", specialise=False)
    text = effir.astext(g["main_grad"])
    assert "shape_of(%xs" in text and "sqrt(" in text  # k = ceil(sqrt(T)) at run time
    assert "%segment_loop = cf.foreach" in text  # the inner loop of the forward's segments
    assert "%recompute = cf.foreach" in text  # a segment recomputed in the backward
    loop = effir.astext(
        effir.grad(effir.parse(DENSE), wrt=["w"], checkpoint="loop", specialise=False)["main_grad"]
    )
    assert "%segment_loop" not in loop and "%recompute" not in loop
    assert "%chunks = cf.foreach" in loop  # the same run-time chunks, summed after the loop


def check_compiled_sqrt_runtime_gradients() -> None:
    """Two builds: the symbolic foreach (one length: a build binds n) and
    the while_loop (every trip count, 0 included, from one build)."""
    from tests.support.grad_harness import (
        check_compiled_equals_interpreted,
        check_compiled_runs_equal_interpreted,
    )

    m = effir.parse(DENSE)
    g = effir.value_and_grad(m, wrt=DENSE_WRT, checkpoint="sqrt", specialise=False)
    check_compiled_equals_interpreted(g, _dense_args(7))  # 2 segments of 3 steps, a tail of 1
    g = effir.value_and_grad(effir.parse(WHILE_DENSE), wrt=WHILE_DENSE_WRT, checkpoint="sqrt")
    check_compiled_runs_equal_interpreted(
        g, [_while_args(limit) for limit in (0.0, 1.0, 5.0, 40.0)]
    )


@pytest.mark.nightly  # two long builds (dynamic shapes)
def test_compiled_sqrt_runtime_gradients_equal_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_sqrt_runtime import check_compiled_sqrt_runtime_gradients"
        "; check_compiled_sqrt_runtime_gradients()"
    )
    run.check()
    assert "ok" in run.stdout


def check_compiled_modes_are_bit_identical() -> None:
    """Six builds: each mode of each program."""
    assert_compiled_modes_agree(
        [
            (DENSE, DENSE_WRT, [_dense_args(7)]),
            (WHILE_DENSE, WHILE_DENSE_WRT, [_while_args(limit) for limit in (0.0, 5.0, 40.0)]),
        ]
    )
    print("ok")


@pytest.mark.nightly  # six long builds
def test_compiled_checkpoint_modes_are_bit_identical():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_sqrt_runtime import check_compiled_modes_are_bit_identical"
        "; check_compiled_modes_are_bit_identical()"
    )
    run.check()
    assert "ok" in run.stdout
