"""``effir.while_loop``'s ``max_iterations`` known at run time (an effir
value: the operator's fourth argument) and ``pad_outputs``, traced and run
eagerly: the same results, the eager run shaped as the interpreter's."""

import numpy as np
import pytest

import effir
from effir import Tensor

F32 = "float32"
K = Tensor[(), "int32"]
M = Tensor[(), "int64"]


def halve(k: K, m: M):
    """At most ``m`` steps halving a vector while the counter is below ``k``."""

    def body(state):
        i, v = state
        return (v, effir.op.sum(v, axis=0)), (i + 1, v * 0.5)

    return effir.while_loop(
        lambda s: s[0] < k,
        body,
        (np.int32(0), np.ones(3, F32)),
        max_iterations=m,
        outputs=True,
        pad_outputs=True,
    )


def limited(k: K, m: M):
    return effir.while_loop(
        lambda s: s < k, lambda s: (s * 2, s + 1), np.int32(0), max_iterations=m, outputs=True
    )


def assert_same(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("k", "m"), [(0, 0), (0, 3), (2, 4), (5, 3), (4, 4)])
def test_traced_and_eager_agree_on_run_time_limits_and_padding(k, m) -> None:
    args = (np.int32(k), np.int64(m))
    traced = effir.trace(halve)
    assert ", %m, pad_outputs=True)" in effir.astext(traced.module)  # the fourth argument
    got = traced.interpret(*args)
    assert_same(halve(*args), got)
    (vs, sums), _, count = got
    assert vs.shape == (m, 3) and sums.shape == (m,) and count == min(k, m)
    assert not vs[min(k, m) :].any()  # the padding rows are zeros
    assert_same(limited(*args), effir.trace(limited).interpret(*args))


def test_padding_without_outputs_and_a_negative_eager_limit_are_refused() -> None:
    with pytest.raises(effir.FrontendError, match="pad_outputs=True pads the stacked outputs"):
        effir.while_loop(lambda s: s < 3, lambda s: s + 1, np.int32(0), 4, pad_outputs=True)
    with pytest.raises(effir.EvalError, match="max_iterations must be >= 0, got -1"):
        limited(np.int32(2), np.int64(-1))


def test_a_max_iterations_that_is_not_an_integer_is_refused_eagerly_and_traced() -> None:
    s = Tensor[(), "int32"]
    with pytest.raises(effir.EvalError, match="max_iterations must be an integer scalar"):
        effir.while_loop(lambda s: s < 3, lambda s: s + 1, np.int32(0), 2.5)
    with pytest.raises(effir.FrontendError, match="'max_iterations' expects an integer"):
        effir.trace(lambda x: effir.while_loop(lambda s: s < 3, lambda s: s + 1, x, 2.5), s)
    traced = effir.trace(lambda x: effir.while_loop(lambda s: s < 9, lambda s: s + 1, x, 4), s)
    assert "max_iterations=4" in effir.astext(traced.module)
    # a numpy value is a constant argument, checked when the program runs
    held = effir.trace(
        lambda x: effir.while_loop(lambda s: s < 9, lambda s: s + 1, x, np.asarray(-1)), s
    )
    with pytest.raises(effir.EvalError, match="max_iterations must be >= 0, got -1"):
        held.interpret(np.int32(0))
