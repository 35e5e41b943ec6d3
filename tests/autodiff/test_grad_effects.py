"""Gradients through effects: an A1 program (global cells) is taken
through the effect passes first; dropout's backward uses the forward's
key, so its mask is the forward's; batch norm's running statistics are
state, updated by the forward exactly as without ``grad``, never
differentiated."""

from __future__ import annotations

import numpy as np

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.analyses.verify_linear import linearity_errors
from tests.support.effect_grad_programs import GRU_WRT, _gru_args

A1 = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(3));
global @bn: Ref[(Tensor[(4), float64], Tensor[(4), float64])] =
  ref((zeros(shape=[4], dtype="float64"), ones(shape=[4], dtype="float64")));

def @main(%x: Tensor[(6, 3), float64], %w: Tensor[(4, 3), float64],
          %gamma: Tensor[(4), float64], %beta: Tensor[(4), float64]) {
  let %h = nn.dense(%x, %w);
  let %d = nn.dropout(tanh(%h), @rng, rate=0.5);
  let %n = nn.batch_norm(%d, %gamma, %beta, @bn, training=True);
  sum(multiply(%n, %n))
}
"""

WRT = ["x", "w", "gamma", "beta"]


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=(6, 3)),
        rng.normal(size=(4, 3)),
        rng.normal(size=4) + 1.0,
        rng.normal(size=4),
    ]


def _forward(a2, args):
    state = effir.State(a2)
    return interpret_a2(a2, *args, entry="main", state=state), state


def test_a1_program_gradients_against_finite_differences():
    g = effir.value_and_grad(effir.parse(A1), wrt=WRT)
    args = _args()
    (value, grads), _ = _call(g, args)
    expected, _ = _forward(g, args)
    np.testing.assert_array_equal(value, expected)
    eps = 1e-6
    for i, name in enumerate(WRT):
        numeric = np.zeros_like(args[i])
        for j in np.ndindex(args[i].shape):
            plus, minus = list(args), list(args)
            plus[i], minus[i] = args[i].copy(), args[i].copy()
            plus[i][j] += eps
            minus[i][j] -= eps
            numeric[j] = (_forward(g, plus)[0] - _forward(g, minus)[0]) / (2 * eps)
        np.testing.assert_allclose(grads[i], numeric, rtol=1e-6, atol=1e-7, err_msg=name)


def _call(g, args):
    state = effir.State(g)
    return interpret_a2(g, *args, entry="main_grad", state=state), state


def test_dropout_mask_is_the_forward_mask_and_state_is_only_threaded():
    m = effir.parse("""#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(11));
def @main(%x: Tensor[(64), float64], %c: Tensor[(64), float64]) {
  let %d = nn.dropout(%x, @rng, rate=0.5);
  (sum(multiply(%d, %c)), %d)
}""")
    g = effir.value_and_grad(m, wrt=["x"], output=0)
    rng = np.random.default_rng(1)
    x, c = rng.normal(size=64), rng.normal(size=64)
    forward_state = effir.State(g)
    _, dropped = interpret_a2(g, x, c, entry="main", state=forward_state)
    grad_state = effir.State(g)
    ((value, dropped_again), (gx,)) = interpret_a2(g, x, c, entry="main_grad", state=grad_state)
    np.testing.assert_array_equal(dropped_again, dropped)
    kept = dropped != 0
    assert 0 < kept.sum() < 64
    np.testing.assert_array_equal(gx != 0, kept)  # the forward's mask, bit for bit
    np.testing.assert_array_equal(gx[kept], c[kept] / 0.5)
    # the key advanced exactly as the forward advanced it
    assert grad_state["rng"] == forward_state["rng"]
    assert grad_state["rng"] != effir.State(g)["rng"]


def test_running_statistics_are_updated_as_by_the_forward_and_not_differentiated():
    g = effir.value_and_grad(effir.parse(A1), wrt=WRT)
    args = _args(5)
    _, forward_state = _forward(g, args)
    _, grad_state = _call(g, args)
    for a, b in zip(forward_state["bn"], grad_state["bn"], strict=True):
        np.testing.assert_array_equal(a, b)
    fn = g["main_grad"]
    assert fn.attrs["state_in"] == g["main"].attrs["state_in"]
    assert [p.name_hint for p in fn.params][-2:] == ["rng", "bn"]


def test_the_gru_language_model_example():
    """examples/gru_lm.effir (A1: dropout twice, batch norm, a print): the
    gradient program's value, key and statistics are the forward's."""
    m = effir.parse(open("examples/gru_lm.effir").read())
    g = effir.value_and_grad(m, wrt=GRU_WRT, checkpoint="loop")
    args = _gru_args()
    quiet = lambda *_: None  # noqa: E731
    forward_state, grad_state = effir.State(g), effir.State(g)
    expected = interpret_a2(g, *args[:-1], entry="main", state=forward_state, sink=quiet)
    value, grads = interpret_a2(g, *args, entry="main_grad", state=grad_state, sink=quiet)
    np.testing.assert_array_equal(value, expected)
    assert grad_state["rng"] == forward_state["rng"]
    for a, b in zip(forward_state["bn"], grad_state["bn"], strict=True):
        np.testing.assert_array_equal(a, b)
    shapes = [p.checked_type.shape for p in g["main"].params if p.name_hint in GRU_WRT]
    assert [x.shape for x in grads] == [tuple(s) for s in shapes]
    assert all(np.isfinite(x).all() and np.abs(x).max() > 0 for x in grads)
    assert linearity_errors(g) == []  # dropout's keys replayed by the backward


# ------------------------------------------------ linearity of the gradient
ISSUE_17 = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32], %w: Tensor[(4), float32]) -> float32 {
  let %y = nn.dropout(%x * %w, @rng, rate=0.5);
  debug.print(%y, label="y");
  sum(%y)
}
"""


def test_the_grad_pass_passes_the_linearity_verifier():
    """The backward reads dropout's key again (the forward's mask, on
    purpose): the gradient function is marked ``replays_keys`` and the
    verifier accepts it, where it reported "key %sub_key is used twice"."""
    m = effir.check(effir.parse(ISSUE_17))
    with effir.PassContext(verify=True):
        g = effir.pipeline("to-anf,explicate,state-passing,grad{entry=main,wrt=w}")(m)
    assert g["main_grad"].attrs["replays_keys"] is True
    assert "replays_keys" not in g["main"].attrs
    assert linearity_errors(effir.value_and_grad(effir.parse(A1), wrt=WRT)) == []


def test_keys_on_a_loop_tape_pass_the_linearity_verifier():
    from tests.support.loop_grad_programs import KEYED

    m = effir.parse(KEYED)
    for mode in ("none", "loop", "sqrt"):
        g = effir.grad(m, wrt=["xs", "w"], checkpoint=mode)
        assert linearity_errors(g) == [], mode


def test_a_key_reused_by_the_user_is_still_reported():
    """Only the functions grad generates replay keys: the same reuse in the
    user's function is reported once, where the user wrote it."""
    m = effir.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(4), float64], %k: Key) {
  let %a = random.dropout(%x, %k);
  let %b = random.dropout(%a, %k, rate=0.25);
  sum(%b)
}""")
    expected = [e.message for e in linearity_errors(m)]
    assert len(expected) == 1 and "key %k" in expected[0] and "used twice" in expected[0]
    g = effir.grad(m, wrt=["x"], specialise=False)
    assert [e.message for e in linearity_errors(g)] == expected
