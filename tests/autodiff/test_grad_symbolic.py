"""Gradients where a size is known only at run time: a dimension that may
be 1 (broadcast) or not, against central finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import effir

from .grad_harness import check_grad

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
