"""``checkpoint="sqrt"`` for a static ``cf.foreach`` whose carry holds keys
(dropout inside an RNN step) or ADT values (a ``List`` it grows): the
forward stores each segment's start (its tensors stacked per segment, its
keys and ADT values on the tape), the backward recomputes each segment
from its start, replaying the forward's keys (so the forward's dropout
masks) and ADT values, and the three modes stay bit-identical
(docs/autodiff.md "Keys and ADT values carried by loops")."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.expr import Call, Op
from effir.ir.functor import post_order
from effir.ir.module import IRModule
from effir.passes.analyses.verify_linear import linearity_errors
from effir.passes.transforms.dce import dce
from effir.runtime.values import PRNGKey
from tests.support.grad_harness import (
    check_compiled_equals_interpreted,
    check_grad,
    stacked_elements,
)
from tests.support.tape_grad_programs import KEYED, KEYED_CELL, LISTED, MIXED, ONLY_KEY, T3

MODES = ("none", "loop", "sqrt")

KEYED_WRT = ["xs", "h0", "w", "v"]


def _keyed(length: int, hidden: int = 4):
    m = effir.parse(KEYED.replace("LEN", str(length)).replace("HID", str(hidden)))
    rng = np.random.default_rng(length)
    args = [
        rng.normal(size=(length, 3)),
        rng.normal(size=hidden),
        rng.normal(size=hidden),
        rng.normal(size=(3, hidden)) * 0.5,
        PRNGKey([0, length]),
    ]
    return m, args


CELL_WRT = ["xs", "h0", "w", "u", "b"]


def _keyed_cell(length: int):
    m = effir.parse(KEYED_CELL.replace("LEN", str(length)))
    rng = np.random.default_rng(100 + length)
    shapes = [(length, 2, 3), (2, 4), (4, 3), (4, 4), (4,)]
    return m, [*(rng.normal(size=s) * 0.5 for s in shapes), PRNGKey([1, length])]


def _listed(length: int):
    m = effir.parse(LISTED.replace("LEN", str(length)))
    rng = np.random.default_rng(200 + length)
    return m, [rng.normal(size=(length, 3)) * 0.5, rng.normal(size=3), rng.normal(size=3)]


def _grads(m, args, mode, wrt):
    g = effir.grad(m, wrt=list(wrt), checkpoint=mode, specialise=False)
    return [np.asarray(x) for x in effir.interpret(g, *args, entry="main_grad")]


def _assert_bit_identical(m, args, wrt, reference):
    for mode in MODES:
        for got, want in zip(_grads(m, args, mode, wrt), reference, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=mode)


def _loops(module) -> int:
    return sum(
        isinstance(n, Call) and isinstance(n.callee, Op) and n.callee.name == "cf.foreach"
        for n in post_order(module["main_grad"].body)
    )


def test_sqrt_segments_a_loop_that_carries_a_key():
    """Before: such a loop fell back to "loop" under "sqrt" (2 loops, every
    carry stored). Now: the segments' loop and its inner loop, the tail's,
    the segments' reverse loop with its recomputation and reverse, the
    tail's reverse."""
    m, _ = _keyed(7)  # k = 3: 2 segments and a tail of 1
    g = effir.grad(m, wrt=KEYED_WRT, checkpoint="sqrt", specialise=False)
    assert _loops(g) == 7
    text = effir.astext(g["main_grad"])
    assert "newshape=[0, 2, 3]" in text  # 6 steps as 2 segments of 3
    assert "GradPush(" in text


@pytest.mark.parametrize("mode", ["loop", "sqrt"])
def test_sqrt_stores_segment_starts_not_every_carry(mode):
    """The carry (32 elements) is stored once per segment under "sqrt"
    (about sqrt(T) of them), once per step under "loop"; per step, sqrt's
    stacks grow by less than one carry (the step's output and x's
    cotangent, 4 elements)."""

    def stored(length: int) -> int:
        m, _ = _keyed(length, hidden=32)
        g = effir.grad(m, wrt=KEYED_WRT, checkpoint=mode, specialise=False)
        return stacked_elements(effir.check(dce(g)))

    per_step = (stored(64) - stored(16)) / 48
    if mode == "sqrt":
        assert per_step < 16, per_step
    else:
        assert per_step >= 32, per_step


@pytest.mark.parametrize("length", [4, 7, 9, 11])
def test_a_keyed_rnn_is_bit_identical_in_every_mode(length):
    m, args = _keyed(length)
    want = check_grad(m, args, KEYED_WRT, checkpoint="sqrt")
    _assert_bit_identical(m, args, KEYED_WRT, [np.asarray(x) for x in want])


def test_the_recomputed_dropout_masks_are_the_forward_masks():
    """Each step's key is the forward's: the gradient with respect to h0
    is zero exactly where the first step's dropout dropped, in every mode."""
    m, args = _keyed(9, hidden=16)
    g = effir.grad(m, wrt=["h0"], checkpoint="sqrt", specialise=False)
    (d_h0,) = effir.interpret(g, *args, entry="main_grad")
    keys = effir.interpret(
        effir.parse('#[version = "0.0.5"]\ndef @main(%k: Key) { random.split(%k) }'), args[4]
    )
    kept = effir.interpret(
        effir.parse(
            '#[version = "0.0.5"]\ndef @main(%k: Key) '
            '{ random.dropout(ones(shape=[16], dtype="float64"), %k, rate=0.5) }'
        ),
        keys[1],
    )
    np.testing.assert_array_equal(np.asarray(d_h0) == 0, np.asarray(kept) == 0)


@pytest.mark.parametrize("length", [7, 10])
def test_a_keyed_cell_with_hoisted_weights_is_bit_identical(length):
    m, args = _keyed_cell(length)
    if length == 7:  # with a tail; finite differences once
        want = [np.asarray(x) for x in check_grad(m, args, CELL_WRT, checkpoint="loop")]
    else:
        want = _grads(m, args, "none", CELL_WRT)
    _assert_bit_identical(m, args, CELL_WRT, want)


def test_loop_mode_with_keys_stores_chunks_of_hoisted_factors():
    """With hoisted weight terms, "loop" runs in segments with keys too:
    per step its stacks grow by the carry (8), the output (2) and x's
    cotangent (6), not by the hoisted factors (22 more)."""

    def stored(length: int) -> int:
        m, _ = _keyed_cell(length)
        g = effir.grad(m, wrt=CELL_WRT, checkpoint="loop", specialise=False)
        return stacked_elements(effir.check(dce(g)))

    per_step = (stored(64) - stored(16)) / 48
    assert per_step <= 20, per_step


@pytest.mark.parametrize("length", [5, 7, 9])
def test_a_loop_carrying_a_list_is_bit_identical_in_every_mode(length):
    m, args = _listed(length)
    want = check_grad(m, args, ["xs", "w", "h0"], checkpoint="sqrt")
    _assert_bit_identical(m, args, ["xs", "w", "h0"], [np.asarray(x) for x in want])


def test_sqrt_segments_a_loop_that_carries_a_list():
    m, _ = _listed(9)  # k = 3: 3 segments, no tail
    g = effir.grad(m, wrt=["w"], checkpoint="sqrt", specialise=False)
    assert _loops(g) == 5
    assert "newshape=[0, 3, 3]" in effir.astext(g["main_grad"])


NESTED = """#[version = "0.0.5"]
def @main(%xs: Tensor[(6, 4, 2), float64], %h0: T2, %w: T2, %k: Key) {
  let %r = cf.foreach(fn (%x: Tensor[(4, 2), float64], %s: (T2, Key)) {
    let %keys = random.split(%s.1);
    let %in = cf.foreach(fn (%y: T2, %t: (T2, Key)) {
      let %ks = random.split(%t.1);
      let %e = random.dropout(tanh(add(multiply(%t.0, %w), %y)), %ks.1, rate=0.5);
      (sum(%e), (%e, %ks.0))
    }, %x, (%s.0, %keys.1));
    let %d = random.dropout(sigmoid(multiply(%in.1.0, %w)), %in.1.1, rate=0.3);
    (sum(%in.0), (%d, %keys.0))
  }, %xs, (%h0, %k));
  add(sum(%r.0), sum(multiply(%r.1.0, %r.1.0)))
}
""".replace("T2", "Tensor[(2), float64]")


def test_nested_keyed_loops_are_bit_identical_in_every_mode():
    """The inner loop (4 steps: 2 segments) is differentiated inside each
    recomputed step of the outer one (6 steps: 2 segments of 3); the inner
    key comes from the outer tape, its steps' from the inner."""
    m = effir.parse(NESTED)
    rng = np.random.default_rng(7)
    args = [rng.normal(size=(6, 4, 2)), rng.normal(size=2), rng.normal(size=2), PRNGKey([2, 5])]
    want = check_grad(m, args, ["h0", "w"], checkpoint="sqrt")
    reference = _grads(m, args, "none", ["xs", "h0", "w"])
    for got, expected in zip(reference[1:], want, strict=True):
        np.testing.assert_array_equal(got, expected)
    _assert_bit_identical(m, args, ["xs", "h0", "w"], reference)
    g = effir.grad(m, wrt=["w"], checkpoint="sqrt", specialise=False)
    text = effir.astext(g["main_grad"])
    assert "newshape=[0, 0, 2, 3]" in text and "newshape=[0, 2, 2]" in text  # both segmented


def check_compiled_keyed_sqrt() -> None:
    """The sqrt gradient of a keyed RNN with a tail, compiled: equals the
    interpreted one. Not specialised: partial evaluation unrolls a loop of
    7 steps, which left no loop and no tape to compile."""
    m, args = _keyed(7)
    g = effir.value_and_grad(m, wrt=KEYED_WRT, checkpoint="sqrt", specialise=False)
    assert _loops(g) == 7 and "GradPush(" in effir.astext(g["main_grad"])
    check_compiled_equals_interpreted(g, args)
    # a key and ADT values in one nested carry, tuple xs, with a tail
    m, args = _mixed(10)
    g = effir.value_and_grad(m, wrt=MIXED_WRT, checkpoint="sqrt", specialise=False)
    assert "GradPush(" in effir.astext(g["main_grad"])
    check_compiled_equals_interpreted(g, args)


@pytest.mark.nightly  # a long build (loops with a tape)
def test_the_compiled_sqrt_gradient_with_keys_equals_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_sqrt_tape import check_compiled_keyed_sqrt"
        "; check_compiled_keyed_sqrt()"
    )
    run.check()
    assert "ok" in run.stdout


MIXED_WRT = ["xs", "ys", "w", "h0"]


def _mixed(length: int):
    m = effir.parse(MIXED.replace("LEN", str(length)))
    rng = np.random.default_rng(300 + length)
    return m, [
        rng.normal(size=(length, 3)) * 0.5,
        rng.normal(size=(length, 2)) * 0.5,
        rng.normal(size=3),
        rng.normal(size=3),
        PRNGKey([3, length]),
    ]


@pytest.mark.parametrize("length", [1, 2, 3, 5, 13])
def test_a_carry_that_is_only_a_key(length):
    m = effir.parse(ONLY_KEY.replace("LEN", str(length)))
    rng = np.random.default_rng(length)
    args = [rng.normal(size=(length, 3)), rng.normal(size=3), PRNGKey([4, length])]
    if length == 5:
        want = [np.asarray(x) for x in check_grad(m, args, ["xs", "w"], checkpoint="sqrt")]
    else:
        want = _grads(m, args, "none", ["xs", "w"])
    _assert_bit_identical(m, args, ["xs", "w"], want)


@pytest.mark.parametrize("length", [4, 7, 17])
def test_a_key_and_adt_values_in_one_carry_with_tuple_xs(length):
    """Only the final carry is read (the stacked outputs' cotangent is
    zero); with a tail, each parameter alone gives the same bits."""
    m, args = _mixed(length)
    if length == 7:
        want = [np.asarray(x) for x in check_grad(m, args, MIXED_WRT, checkpoint="sqrt")]
    else:
        want = _grads(m, args, "none", MIXED_WRT)
    _assert_bit_identical(m, args, MIXED_WRT, want)
    if length == 17:
        for name, expected in zip(MIXED_WRT, want, strict=True):
            _assert_bit_identical(m, args, [name], [expected])


def test_specialised_programs_are_bit_identical():
    """After partial evaluation (``specialise=True``), whose unrolling
    leaves a loop of more than 8 steps as it is."""
    m, args = _mixed(10)
    reference = None
    for mode in MODES:
        g = effir.grad(m, wrt=MIXED_WRT, checkpoint=mode)
        assert "GradPush(" in effir.astext(g["main_grad"]), mode
        got = [np.asarray(x) for x in effir.interpret(g, *args, entry="main_grad")]
        reference = reference or got
        for a, b in zip(got, reference, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=mode)


IN_BRANCH = """#[version = "0.0.5"]
def @main(%xs: Tensor[(10, 3), float64], %h0: T3, %w: T3, %k: Key, %c: bool) {
  let %v = if (%c) {
    let %r = cf.foreach(fn (%x: T3, %s: (T3, Key)) {
      let %ks = random.split(%s.1);
      let %d = random.dropout(tanh(add(multiply(%s.0, %w), %x)), %ks.1, rate=0.5);
      (sum(%d), (%d, %ks.0))
    }, %xs, (%h0, %k));
    add(sum(%r.0), sum(%r.1.0))
  } else {
    sum(multiply(%h0, %w))
  };
  multiply(%v, %v)
}
""".replace("T3", T3)


@pytest.mark.parametrize("taken", [True, False])
def test_a_keyed_loop_inside_an_if_branch(taken):
    m = effir.parse(IN_BRANCH)
    rng = np.random.default_rng(11)
    args = [rng.normal(size=(10, 3)), rng.normal(size=3), rng.normal(size=3), PRNGKey([5, 1])]
    args.append(np.array(taken))
    want = _grads(m, args, "none", ["xs", "h0", "w"])
    _assert_bit_identical(m, args, ["xs", "h0", "w"], want)
    assert np.any(want[0] != 0) == taken


# an inner keyed loop of 5 steps (2 segments of 2 and a tail) inside each
# step of an outer loop of 7 (2 of 3 and a tail) carrying a key and a List
NESTED_TAILS = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%xs: Tensor[(7, 5, 2), float64], %h0: T2, %w: T2, %k: Key) {
  let %r = cf.foreach(fn (%x: Tensor[(5, 2), float64], %s: (T2, Key, List[T2])) {
    let %keys = random.split(%s.1);
    let %in = cf.foreach(fn (%y: T2, %t: (Key, T2)) {
      let %ks = random.split(%t.0);
      let %e = random.dropout(tanh(add(multiply(%t.1, %w), %y)), %ks.1, rate=0.5);
      (sum(%e), (%ks.0, %e))
    }, %x, (%keys.1, %s.0));
    let %p = match (%s.2) { Cons(%a, _) => %a, Nil => %w };
    let %d = random.dropout(sigmoid(multiply(%in.1.1, %p)), %in.1.0, rate=0.3);
    (sum(%in.0), (%d, %keys.0, Cons(%d, %s.2)))
  }, %xs, (%h0, %k, Nil));
  add(sum(%r.0), sum(multiply(%r.1.0, %r.1.0)))
}
""".replace("T2", "Tensor[(2), float64]")


def test_nested_keyed_loops_with_tails():
    m = effir.parse(NESTED_TAILS)
    rng = np.random.default_rng(12)
    args = [rng.normal(size=(7, 5, 2)), rng.normal(size=2), rng.normal(size=2), PRNGKey([6, 2])]
    want = [np.asarray(x) for x in check_grad(m, args, ["h0", "w"], checkpoint="sqrt")]
    _assert_bit_identical(m, args, ["h0", "w"], want)


def test_generated_functions_replay_keys_and_pass_the_linearity_verifier():
    """grad's functions reread the forward's keys on purpose (the tape, the
    recomputed dropout): they are marked so, and nothing else is reported
    in them (the user's own ``@main`` is the verifier's to judge)."""
    m, _ = _mixed(7)
    for mode in MODES:
        g = effir.grad(m, wrt=MIXED_WRT, checkpoint=mode, specialise=False)
        assert g["main_grad"].attrs["replays_keys"] is True
        alone = IRModule({"main_grad": g["main_grad"]}, g.type_defs, g.cells)
        assert linearity_errors(alone) == [], mode


def test_the_gradient_program_does_not_grow_with_the_length():
    """Segments are loops over a reshaped sequence: 16 steps (4 segments of
    4) and 1024 (32 of 32) give gradient programs of the same size."""

    def size(length: int) -> int:
        m, _ = _keyed(length)
        g = effir.grad(m, wrt=KEYED_WRT, checkpoint="sqrt", specialise=False)
        return sum(1 for _ in post_order(g["main_grad"].body))

    assert size(16) == size(1024)
