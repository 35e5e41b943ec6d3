"""State passing through loops whose condition writes state, for every
max_iterations that matters (none, zero, fewer or more than the condition
allows): the same tests, steps, draws and prints in the same order."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.transforms.state_passing import state_passing

from .equivalence import assert_same_run

PROGRAM = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
global @n: Ref[int32] = ref(0);
def @main(%x: Tensor[(4), float32]) {
  let %cond = fn (%s: Tensor[(4), float32]) {
    ref_write(@n, add(ref_read(@n), 1));
    let %d = nn.dropout(%s, @rng);
    debug.print(%d, label="test");
    less(ref_read(@n), 4)
  };
  let %body = fn (%s: Tensor[(4), float32]) {
    let %y = nn.dropout(%s, @rng, rate=0.25f);
    debug.print(%y, label="step");
    (%y, add(%y, 1f))
  };
  cf.while_loop(%cond, %body, %x LIMIT)
}
"""


@pytest.mark.parametrize("limit", [None, 0, 1, 2, 3, 4, 10])
def test_a_condition_that_draws_counts_and_prints(limit):
    text = PROGRAM.replace("LIMIT", "" if limit is None else f", max_iterations={limit}")
    a1 = effir.check(effir.parse(text))
    a2 = state_passing(a1)
    verify_linear(a2)
    for seed in (None, 5):
        assert_same_run(a1, a2, (np.linspace(-1, 1, 4, dtype=np.float32),), seed=seed)


def test_a_global_function_as_the_condition():
    text = """#[version = "0.0.5"]
    global @n: Ref[int32] = ref(0);
    def @more(%s: int32) -> bool {
      ref_write(@n, add(ref_read(@n), %s));
      less(ref_read(@n), 10)
    }
    def @main(%x: int32) {
      let %body = fn (%s: int32) { (%s, add(%s, 1)) };
      cf.while_loop(@more, %body, %x, max_iterations=8)
    }
    """
    a1 = effir.check(effir.parse(text))
    a2 = state_passing(a1)
    verify_linear(a2)
    assert_same_run(a1, a2, (np.int32(1),))


RUN_TIME = PROGRAM.replace(
    "def @main(%x: Tensor[(4), float32])", "def @main(%x: Tensor[(4), float32], %m: int64)"
)
STEP_DRAWS = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32], %m: int64) {
  let %cond = fn (%s: Tensor[(4), float32]) { less(sum(%s), 20f) };
  let %body = fn (%s: Tensor[(4), float32]) {
    let %y = nn.dropout(%s, @rng, rate=0.25f);
    (%y, add(%y, 1f))
  };
  cf.while_loop(%cond, %body, %x, %m LIMIT)
}
"""


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("limit", [0, 1, 2, 3, 4, 10])
def test_a_run_time_max_iterations_and_padded_outputs(limit, pad):
    """max_iterations as the loop's fourth argument (known only at run
    time: 0 tests nothing), and outputs padded to it: a condition that
    draws (the test moves into the step) and a step that draws."""
    padding = ", pad_outputs=True" if pad else ""
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    for text in (RUN_TIME.replace("LIMIT", ", %m" + padding), STEP_DRAWS.replace("LIMIT", padding)):
        a1 = effir.check(effir.parse(text))
        a2 = state_passing(a1)
        verify_linear(a2)
        for seed in (None, 5):
            assert_same_run(a1, a2, (x, np.int64(limit)), seed=seed)


@pytest.mark.parametrize("limit", [0, 2, 10])
def test_padded_outputs_with_a_static_max_iterations(limit):
    text = PROGRAM.replace("LIMIT", f", max_iterations={limit}, pad_outputs=True")
    a1 = effir.check(effir.parse(text))
    a2 = state_passing(a1)
    verify_linear(a2)
    assert_same_run(a1, a2, (np.linspace(-1, 1, 4, dtype=np.float32),), seed=3)
