"""Gradients where a size is known only at run time: a dimension that may
be 1 (broadcast) or not, against central finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from tests.support.grad_harness import check_grad

MASKED = """#[version = "0.0.5"]
def @main(%x: Tensor[(n, 3), float64], %z: Tensor[(4, 3), float64], %keep: Tensor[(4), bool]) {
  let %y = boolean_mask(%z, %keep);
  sum(tanh(multiply(%x, %y)))
}
"""


@pytest.mark.parametrize(
    ("n", "keep"),
    [
        (5, [False, True, False, False]),  # %y's one row broadcast to n
        (2, [True, False, True, False]),  # no broadcast
        (1, [True, True, False, True]),  # %x's one row broadcast to %y's 3
    ],
)
def test_a_size_that_may_be_1_is_unbroadcast_at_run_time(n, keep):
    # before: "unbroadcast: cannot tell whether dimension ? of an argument
    # was broadcast to n" (a DifferentiationError)
    rng = np.random.default_rng(n)
    args = [rng.normal(size=(n, 3)), rng.normal(size=(4, 3)), np.array(keep)]
    check_grad(effir.parse(MASKED), args, ["x", "z"])


CONCATENATED = """#[version = "0.0.5"]
def @main(%a: Tensor[(n, 3), float64], %b: Tensor[(m, 3), float64], %w: Tensor[(3), float64]) {
  let %c = concatenate((%a, tanh(%b), %a), axis=0);
  sum(tanh(multiply(%c, %w)))
}
"""


@pytest.mark.parametrize(("n", "m"), [(2, 3), (0, 1), (1, 0)])
def test_concatenate_of_symbolic_sizes(n, m):
    # before: "concatenate: the size n of an input along axis 0 is known
    # only at run time (only the last input's may be)"
    rng = np.random.default_rng(n + 3 * m)
    args = [rng.normal(size=(n, 3)), rng.normal(size=(m, 3)), rng.normal(size=3)]
    check_grad(effir.parse(CONCATENATED), args, ["a", "b", "w"])


EMPTY_STEPS = """#[version = "0.0.5"]
def @main(%h0: Tensor[(3), float64], %limit: float64) {
  let %r = cf.while_loop(fn (%s: (Tensor[(3), float64], float64)) { less(%s.1, %limit) },
    fn (%s: (Tensor[(3), float64], float64)) {
      let %h = tanh(%s.0);
      (sum(%h), (%h, add(%s.1, 1f64)))
    }, (%h0, 0f64), max_iterations=10);
  add(sum(multiply(%r.0, %r.0)), sum(%r.1.0))
}
"""


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_a_run_time_size_of_0_is_a_size(steps):
    # before: at 0 steps "dyn.reshape: newshape (0, 0) copies dimension 1
    # (0), but the input has rank 1": the unbroadcast of the (?,) outputs'
    # product read their sizes at run time, and dyn.reshape took a 0 for
    # a copy of the input's dimension (allowzero now)
    rng = np.random.default_rng(steps)
    args = [rng.normal(size=3), np.float64(steps)]
    for mode in ("none", "loop", "sqrt"):
        check_grad(effir.parse(EMPTY_STEPS), args, ["h0"], checkpoint=mode)


def check_compiled_symbolic_gradients() -> None:
    """One build (a build is per binding of the entry's sizes: one size)."""
    g = effir.value_and_grad(effir.parse(CONCATENATED), wrt=["a", "b", "w"])
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(2, 3)), rng.normal(size=(3, 3)), rng.normal(size=3)]
    _, grads = effir.compile(g, entry="main_grad")(*args, entry="main_grad")
    _, want = effir.interpret(g, *args, entry="main_grad")
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    print("ok")


@pytest.mark.nightly  # a long build (dynamic shapes)
def test_compiled_symbolic_gradients_equal_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_symbolic import check_compiled_symbolic_gradients"
        "; check_compiled_symbolic_gradients()"
    )
    run.check()
    assert "ok" in run.stdout
