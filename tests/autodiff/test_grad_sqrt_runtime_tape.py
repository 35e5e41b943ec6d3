"""``checkpoint="sqrt"`` for a loop whose number of steps is known only at
run time (a ``cf.foreach`` of symbolic length, a ``cf.while_loop``) and
whose carry holds keys (dropout inside a step) or ADT values (a ``List``):
the run-time segments (runtime_segments.py) store each segment's start,
its tensors stacked and its keys and ADT values on the tape, and the
backward's recomputation of a segment replays them (docs/autodiff.md
"Keys and ADT values carried by loops"). Before, these loops used
``"loop"`` under ``"sqrt"``."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.module import IRModule
from effir.ops import control
from effir.passes.analyses.verify_linear import linearity_errors
from effir.runtime.values import PRNGKey
from tests.support.grad_harness import assert_compiled_modes_agree, check_grad
from tests.support.loop_grad_programs import _leaves
from tests.support.tape_grad_programs import KEYED, KEYED_CELL, LISTED, MIXED, ONLY_KEY, T3

MODES = ("none", "loop", "sqrt")
LENGTHS = [0, 1, 2, 3, 4, 7, 9, 16, 17]

# dropout in the step of a foreach of symbolic length
DYN_KEYED = KEYED.replace("LEN", "n").replace("HID", "4")
KEYED_WRT = ["xs", "h0", "w", "v"]
# hoisted weights (nn.dense: chunked sums) and dropout, symbolic length
DYN_CELL = KEYED_CELL.replace("LEN", "n")
CELL_WRT = ["xs", "h0", "w", "u", "b"]
# a List and an Option the loop grows and reads, symbolic length
DYN_LISTED = LISTED.replace("LEN", "n")
LISTED_WRT = ["xs", "w", "h0"]

# a while_loop carrying a key: dropout in each step, a counter to a limit
WHILE_KEYED = """#[version = "0.0.5"]
def @main(%h0: Tensor[(2, 4), float64], %w: Tensor[(4, 4), float64], %b: Tensor[(4), float64],
          %k: Key, %limit: float64) {
  let %r = cf.while_loop(fn (%s: (Tensor[(2, 4), float64], Key, float64)) { less(%s.2, %limit) },
    fn (%s: (Tensor[(2, 4), float64], Key, float64)) {
      let %keys = random.split(%s.1);
      let %h = tanh(add(nn.dense(%s.0, %w), %b));
      let %d = random.dropout(%h, %keys.1, rate=0.5);
      (sum(%d), (%d, %keys.0, add(%s.2, 1f64)))
    }, (%h0, %k, 0f64), max_iterations=40);
  add(sum(%r.0), sum(multiply(%r.1.0, %r.1.0)))
}
"""
WHILE_WRT = ["h0", "w", "b"]

# a while_loop carrying a List it grows and reads
WHILE_LISTED = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%w: T3, %h0: T3, %limit: float64) {
  let %r = cf.while_loop(fn (%c: (T3, List[T3], float64)) { less(%c.2, %limit) },
    fn (%c: (T3, List[T3], float64)) {
      let %prev = match (%c.1) { Cons(%p, _) => %p, Nil => %w };
      let %n = tanh(add(multiply(%c.0, %w), multiply(%prev, 0.5f64)));
      (sum(%n), (%n, Cons(%n, %c.1), add(%c.2, 1f64)))
    }, (%h0, Nil, 0f64), max_iterations=40);
  let %last = match (%r.1.1) { Cons(%a, _) => %a, Nil => %w };
  add(sum(%r.0), sum(multiply(%r.1.0, %last)))
}
""".replace("T3", T3)

# a keyed foreach of symbolic length in a static foreach's body: its
# geometry is computed, and its tape built and replayed, per outer step
NESTED = """#[version = "0.0.5"]
def @main(%xs: Tensor[(3, n, 2), float64], %w: Tensor[(2), float64],
          %h0: Tensor[(2), float64], %k: Key) {
  let %outer = fn (%row: Tensor[(n, 2), float64], %c: (Tensor[(2), float64], Key)) {
    let %inner = cf.foreach(fn (%x: Tensor[(2), float64], %s: (Tensor[(2), float64], Key)) {
      let %ks = random.split(%s.1);
      let %a = random.dropout(tanh(add(%x, multiply(%s.0, %w))), %ks.1, rate=0.5);
      (sum(%a), (%a, %ks.0))
    }, %row, %c);
    (sum(%inner.0), %inner.1)
  };
  let %r = cf.foreach(%outer, %xs, (%h0, %k));
  add(sum(%r.0), sum(%r.1.0))
}
"""


def _keyed_args(length: int) -> list:
    rng = np.random.default_rng(length)
    shapes = [(length, 3), (4,), (4,), (3, 4)]
    return [*(rng.normal(size=s) * 0.7 for s in shapes), PRNGKey([0, length])]


def _cell_args(length: int) -> list:
    rng = np.random.default_rng(100 + length)
    shapes = [(length, 2, 3), (2, 4), (4, 3), (4, 4), (4,)]
    return [*(rng.normal(size=s) * 0.5 for s in shapes), PRNGKey([1, length])]


def _listed_args(length: int) -> list:
    rng = np.random.default_rng(200 + length)
    return [rng.normal(size=(length, 3)) * 0.5, rng.normal(size=3), rng.normal(size=3)]


def _while_args(steps: int) -> list:
    rng = np.random.default_rng(300 + steps)
    shapes = [(2, 4), (4, 4), (4,)]
    return [*(rng.normal(size=s) * 0.5 for s in shapes), PRNGKey([2, steps]), np.float64(steps)]


def _only_key_args(length: int) -> list:
    rng = np.random.default_rng(400 + length)
    return [rng.normal(size=(length, 3)), rng.normal(size=3), PRNGKey([5, length])]


def _mixed_args(length: int) -> list:
    rng = np.random.default_rng(500 + length)
    shapes = [(length, 3), (length, 2), (3,), (3,)]
    return [*(rng.normal(size=s) * 0.5 for s in shapes), PRNGKey([3, length])]


def _while_listed_args(steps: int) -> list:
    rng = np.random.default_rng(600 + steps)
    return [rng.normal(size=3), rng.normal(size=3), np.float64(steps)]


def _nested_args(length: int) -> list:
    rng = np.random.default_rng(700 + length)
    shapes = [(3, length, 2), (2,), (2,)]
    return [*(rng.normal(size=s) for s in shapes), PRNGKey([4, length])]


def _programs(source: str, wrt: list[str]) -> dict:
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


CASES = {
    "keyed": (DYN_KEYED, KEYED_WRT, _keyed_args),
    "cell": (DYN_CELL, CELL_WRT, _cell_args),
    "listed": (DYN_LISTED, LISTED_WRT, _listed_args),
    "while": (WHILE_KEYED, WHILE_WRT, _while_args),
    "only_key": (ONLY_KEY.replace("LEN", "n"), ["xs", "w"], _only_key_args),
    "mixed": (MIXED.replace("LEN", "n"), ["xs", "ys", "w", "h0"], _mixed_args),
    "while_listed": (WHILE_LISTED, ["w", "h0"], _while_listed_args),
    "nested": (NESTED, ["xs", "w", "h0"], _nested_args),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_modes_are_bit_identical(case):
    source, wrt, make_args = CASES[case]
    programs = _programs(source, wrt)
    for length in LENGTHS:
        _assert_bit_identical(programs, make_args(length))


@pytest.mark.parametrize(
    ("case", "length"),
    [("keyed", 5), ("listed", 7), ("while", 6), ("mixed", 5), ("while_listed", 5), ("nested", 3)],
)
def test_sqrt_against_finite_differences(case, length):
    source, wrt, make_args = CASES[case]
    check_grad(effir.parse(source), make_args(length), wrt, checkpoint="sqrt")


@pytest.mark.parametrize("case", sorted(CASES))
def test_sqrt_runs_in_segments_with_a_tape(case):
    """The forward (a while_loop's: the backward's rerun) is an outer loop
    over the run-time segments, storing each start's keys and ADT values
    on the tape; the backward recomputes each segment from its start."""
    source, wrt, _ = CASES[case]
    text = effir.astext(_programs(source, wrt)["sqrt"]["main_grad"])
    assert "sqrt(" in text  # k = ceil(sqrt(T)) at run time
    assert "%segment_loop = cf.foreach" in text
    assert "%recompute = cf.foreach" in text
    assert "GradPush(" in text and "GradEnd" in text


@pytest.mark.parametrize("case", ["mixed", "while"])
def test_generated_functions_pass_the_linearity_verifier(case):
    """The run-time segments' tape is threaded linearly: the gradient
    function rereads the forward's keys only as marked (``replays_keys``)."""
    source, wrt, _ = CASES[case]
    g = _programs(source, wrt)["sqrt"]
    assert g["main_grad"].attrs["replays_keys"] is True
    alone = IRModule({"main_grad": g["main_grad"]}, g.type_defs, g.cells)
    assert linearity_errors(alone) == []


def _stored_rows(monkeypatch, source: str, wrt: list[str], args: list, mode: str, shape) -> int:
    """The most rows of any stack of per-step values of ``shape`` (the
    carry's tensor) that a loop of ``mode``'s gradient program returns."""
    rows = [0]
    finish = control._finish

    def recording(outs, state, out_type):
        result = finish(outs, state, out_type)
        for leaf in _leaves(result[0]):
            if np.shape(leaf)[1:] == shape:
                rows.append(np.shape(leaf)[0])
        return result

    monkeypatch.setattr(control, "_finish", recording)
    g = effir.grad(effir.parse(source), wrt=wrt, checkpoint=mode, specialise=False)
    effir.interpret(g, *args, entry="main_grad")
    return max(rows)


@pytest.mark.parametrize(("case", "shape"), [("keyed", (4,)), ("listed", (3,)), ("while", (2, 4))])
def test_sqrt_stores_about_sqrt_t_carries(monkeypatch, case, shape):
    """T = 30: k = 6, 5 segments; "sqrt" stacks at most k carries (the
    starts, one segment's recomputed carries), "loop" all T."""
    source, wrt, make_args = CASES[case]
    args = make_args(30)
    assert _stored_rows(monkeypatch, source, wrt, args, "loop", shape) == 30
    assert _stored_rows(monkeypatch, source, wrt, args, "sqrt", shape) == 6


def check_compiled_runtime_tape() -> None:
    """Two builds: the keyed symbolic foreach and the keyed while_loop (every
    trip count from one build), sqrt, compiled against interpreted."""
    from tests.support.grad_harness import (
        check_compiled_equals_interpreted,
        check_compiled_runs_equal_interpreted,
    )

    g = effir.value_and_grad(effir.parse(DYN_KEYED), wrt=KEYED_WRT, checkpoint="sqrt")
    check_compiled_equals_interpreted(g, _keyed_args(7))
    g = effir.value_and_grad(effir.parse(WHILE_KEYED), wrt=WHILE_WRT, checkpoint="sqrt")
    check_compiled_runs_equal_interpreted(g, [_while_args(steps) for steps in (0, 1, 5, 17)])


@pytest.mark.nightly  # two long builds (a tape, dynamic shapes)
def test_compiled_sqrt_with_a_tape_equals_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_sqrt_runtime_tape import check_compiled_runtime_tape"
        "; check_compiled_runtime_tape()"
    )
    run.check()
    assert "ok" in run.stdout


def check_compiled_modes_with_a_tape() -> None:
    """Six builds: each mode of the keyed symbolic foreach and the keyed
    while_loop; the compiled modes agree bit for bit."""
    assert_compiled_modes_agree(
        [
            (DYN_KEYED, KEYED_WRT, [_keyed_args(7)]),
            (WHILE_KEYED, WHILE_WRT, [_while_args(steps) for steps in (0, 5, 17)]),
        ]
    )
    print("ok")


@pytest.mark.nightly  # six long builds
def test_compiled_checkpoint_modes_with_a_tape_are_bit_identical():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_sqrt_runtime_tape import check_compiled_modes_with_a_tape"
        "; check_compiled_modes_with_a_tape()"
    )
    run.check()
    assert "ok" in run.stdout
