"""The backward of ``cf.foreach`` and ``cf.while_loop`` against finite
differences, and the three checkpointing modes bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.vjp import DifferentiationError
from tests.support.grad_harness import check_grad
from tests.support.loop_grad_programs import KEYED, RNN, SCAN_AND_MAP, WHILE, _leaves

MODES = ("none", "loop", "sqrt")


def _rnn(length: int):
    m = effir.parse(RNN.replace("LEN", str(length)))
    rng = np.random.default_rng(length)
    args = [
        rng.normal(size=(length, 2, 3)) * 0.5,
        rng.normal(size=(2, 3)),
        rng.normal(size=3),
        (rng.normal(size=3), rng.normal(size=3)),
    ]
    return m, args


def _grads(m, args, mode, wrt=("xs", "h0", "w")):
    g = effir.grad(m, wrt=list(wrt), checkpoint=mode, specialise=False)
    return effir.interpret(g, *args, entry="main_grad")


@pytest.mark.parametrize("mode", MODES)
def test_foreach_against_finite_differences(mode):
    m, args = _rnn(5)
    check_grad(m, args, ["xs", "h0", "w"], checkpoint=mode)


@pytest.mark.parametrize("length", [1, 4, 7, 9, 10])
def test_checkpoint_modes_are_bit_identical(length):
    m, args = _rnn(length)
    results = {mode: _grads(m, args, mode, ("xs", "h0", "w", "c")) for mode in MODES}
    flat = {mode: [np.asarray(x) for x in _leaves(r)] for mode, r in results.items()}
    for mode in ("loop", "sqrt"):
        for a, b in zip(flat["none"], flat[mode], strict=True):
            np.testing.assert_array_equal(a, b)


SIMPLE = """#[version = "0.0.5"]
def @main(%xs: Tensor[(9, 3), float64], %h0: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(3), float64], %h: Tensor[(3), float64]) {
    let %a = tanh(add(multiply(%x, %w), %h));
    (exp(%a), %a)
  }, %xs, %h0);
  sum(%r.0)
}
"""


def test_checkpointing_changes_what_the_forward_stores():
    """none stacks residuals, loop only the carries, sqrt one carry per segment."""
    m = effir.parse(SIMPLE)
    text = {
        mode: effir.astext(effir.grad(m, wrt=["w"], checkpoint=mode, specialise=False)["main_grad"])
        for mode in MODES
    }
    assert text["none"].count("cf.foreach") == 2  # the forward and its reverse
    assert "%per_step = (%out, %exp" in text["none"]  # residuals
    assert "tanh" not in text["none"].split("cf.foreach")[2]  # no recomputation
    assert text["loop"].count("cf.foreach") == 2
    assert "%per_step = (%out, %h" in text["loop"]  # the step's starting carry
    assert "tanh" in text["loop"].split("cf.foreach")[2]  # recomputed
    assert text["sqrt"].count("cf.foreach") == 5  # segments of 3 steps, their reverses
    assert "newshape=[0, 3, 3]" in text["sqrt"]  # 9 steps as 3 segments of 3


def test_a_branch_in_a_loop_body_falls_back_to_recomputation():
    """A pullback closure cannot be stacked: "none" recomputes such a step."""
    m, args = _rnn(3)
    text = effir.astext(effir.grad(m, wrt=["w"], checkpoint="none", specialise=False)["main_grad"])
    assert "if (" in text.split("cf.foreach")[2]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", [0.0, 3.0, 20.0])  # no step, 3 steps, max_iterations
def test_while_loop_runs_its_backward_exactly_as_many_steps(mode, limit):
    rng = np.random.default_rng(7)
    m = effir.parse(WHILE)
    args = [rng.normal(size=3), rng.normal(size=3), np.float64(limit)]
    grads = check_grad(m, args, ["x", "w"], checkpoint=mode)
    if limit == 0.0:
        np.testing.assert_array_equal(grads[1], np.zeros(3))


def test_nested_loops():
    m = effir.parse("""#[version = "0.0.5"]
def @main(%xs: Tensor[(3, 2, 2), float64], %w: Tensor[(2), float64]) {
  let %outer = fn (%row: Tensor[(2, 2), float64], %h: Tensor[(2), float64]) {
    let %inner = fn (%x: Tensor[(2), float64], %g: Tensor[(2), float64]) {
      let %n = tanh(add(multiply(%x, %w), %g));
      (%n, %n)
    };
    let %r = cf.foreach(%inner, %row, %h);
    (sum(%r.0), %r.1)
  };
  let %o = cf.foreach(%outer, %xs, %w);
  add(sum(%o.0), sum(%o.1))
}""")
    rng = np.random.default_rng(8)
    args = [rng.normal(size=(3, 2, 2)), rng.normal(size=2)]
    for mode in MODES:
        check_grad(m, args, ["xs", "w"], checkpoint=mode)


def test_keys_carried_by_loops_go_on_a_tape():
    """A key in the carried state (dropout inside the body) cannot be
    stacked: the forward pushes each step's keys on a tape the backward
    pops, so each recomputed dropout draws the forward's mask."""
    from effir.runtime.values import PRNGKey

    m = effir.parse(KEYED)
    rng = np.random.default_rng(9)
    results = {}
    for limit in (0, 9):  # the while_loop: no step, max_iterations steps
        args = [rng.normal(size=(5, 3)), rng.normal(size=3), PRNGKey([0, 7]), np.int32(limit)]
        results["none"] = check_grad(m, args, ["xs", "w"], checkpoint="none")
        for mode in ("loop", "sqrt"):
            results[mode] = _grads(m, args, mode, ("xs", "w"))
            for a, b in zip(results["none"], results[mode], strict=True):
                np.testing.assert_array_equal(a, b)
    text = effir.astext(effir.grad(m, wrt=["w"], checkpoint="loop", specialise=False))
    assert "type GradTape[A]" in text and "GradPush(" in text


def test_a_function_in_a_recomputed_loop_carry_is_a_located_error():
    # (an ADT value there goes on the tape: test_grad_adt.py)
    m = effir.parse("""#[version = "0.0.5"]
def @g(%v: Tensor[(2), float64]) -> Tensor[(2), float64] { tanh(%v) }
def @main(%xs: Tensor[(3, 2), float64], %w: Tensor[(2), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(2), float64],
                          %s: (Tensor[(2), float64], fn (Tensor[(2), float64]) -> Tensor[(2), float64])) {
    let %y = tanh(add(%x, %s.0));
    (%y, (%y, %s.1))
  }, %xs, (%w, @g));
  sum(%r.0)
}""")
    with pytest.raises(DifferentiationError, match="carried state") as info:
        effir.grad(m, wrt=["xs"], checkpoint="loop", specialise=False)
    assert "cf.foreach" in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_scan_a_map_and_a_tuple_sequence_with_integers(mode):
    """() outputs (a scan) and a () carry (a map) are not iterated over by
    the reverse loop; an integer field of the sequence gets no gradient."""
    rng = np.random.default_rng(2)
    args = [rng.normal(size=(4, 2)), rng.normal(size=4), rng.normal(size=2)]
    args.append(np.arange(4, dtype="int32"))
    check_grad(effir.parse(SCAN_AND_MAP), args, ["xs", "ys", "h0"], checkpoint=mode)
