"""Whole programs through the interpreter, checked against numpy: a GRU over
a sequence (cf.foreach), a data-dependent while_loop, boolean masking, and an
effectful model (dropout and batch norm in training mode over global cells)."""

from pathlib import Path

import numpy as np

import effir
from effir.runtime import prng
from effir.runtime.values import PRNGKey
from tests.support.gru_programs import NEW_STATE, gates

HEADER = '#[version = "0.0.5"]\n'
EXAMPLE = Path(__file__).parents[2] / "examples" / "gru_lm.effir"


def module(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="t.effir"))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def gru_step(x, h, w, u, bias):
    gx = x @ w.T + bias
    gh = h @ u.T
    gx0, gx1, gx2 = np.split(gx, 3, axis=1)
    gh0, gh1, gh2 = np.split(gh, 3, axis=1)
    z = sigmoid(gx0 + gh0)
    r = sigmoid(gx1 + gh1)
    n = np.tanh(gx2 + r * gh2)
    return (1 - z) * n + z * h


GRU = f"""
def @gru_cell(%x: Tensor[(b, 3), float32], %h: Tensor[(b, 5), float32],
              %w: Tensor[(15, 3), float32], %u: Tensor[(15, 5), float32],
              %bias: Tensor[(15), float32]) -> (Tensor[(b, 5), float32], Tensor[(b, 5), float32]) {{
{gates(2)}
  let %h_new = {NEW_STATE};
  (%h_new, %h_new)
}}
def @main(%xs: Tensor[(t, b, 3), float32], %h0: Tensor[(b, 5), float32],
          %w: Tensor[(15, 3), float32], %u: Tensor[(15, 5), float32],
          %bias: Tensor[(15), float32]) {{
  let %step = fn (%x, %h) {{ @gru_cell(%x, %h, %w, %u, %bias) }};
  cf.foreach(%step, %xs, %h0)
}}
"""


def test_gru_over_a_sequence():
    mod = module(GRU)
    assert effir.astext(mod["main"].body.checked_type) == (
        "(Tensor[(t, b, 5), float32], Tensor[(b, 5), float32])"
    )
    rng = np.random.default_rng(0)
    t, b = 7, 2
    xs = rng.standard_normal((t, b, 3), dtype=np.float32)
    h0 = rng.standard_normal((b, 5), dtype=np.float32)
    w = rng.standard_normal((15, 3), dtype=np.float32)
    u = rng.standard_normal((15, 5), dtype=np.float32)
    bias = rng.standard_normal(15, dtype=np.float32)
    hs, last = effir.interpret(mod, xs, h0, w, u, bias)
    h, expected = h0, []
    for step in range(t):
        h = gru_step(xs[step], h, w, u, bias)
        expected.append(h)
    np.testing.assert_allclose(hs, np.stack(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last, h, rtol=1e-5, atol=1e-6)
    assert hs.dtype == np.float32


COLLATZ = """
def @main(%start: int64) {
  let %cond = fn (%n: int64) { %n != 1i64 };
  let %body = fn (%n: int64) {
    let %next = if (%n - %n / 2i64 * 2i64 == 0i64) { %n / 2i64 } else { 3i64 * %n + 1i64 };
    (%next, %next)
  };
  cf.while_loop(%cond, %body, %start, max_iterations=1000)
}
"""


def collatz(n):
    out = []
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        out.append(n)
    return out


def test_while_loop_output_length_depends_on_data():
    mod = module(COLLATZ)
    assert effir.astext(mod["main"].body.checked_type) == "(Tensor[(?), int64], int64)"
    for start in (6, 7, 27):
        outs, final = effir.interpret(mod, np.int64(start))
        assert outs.tolist() == collatz(start)
        assert int(final) == 1


MASK = """
def @main(%x: Tensor[(n, 3), float32]) {
  let %keep = greater(sum(%x, axis=[1]), 0f);
  let %rows = boolean_mask(%x, %keep);
  let %idx = argwhere(%keep);
  (%rows, mean(%rows, axis=[0]), %idx, shape_of(%rows))
}
"""


def test_boolean_mask_program():
    mod = module(MASK)
    assert effir.astext(mod["main"].body.checked_type) == (
        "(Tensor[(?, 3), float32], Tensor[(3), float32], Tensor[(?, 1), int32], Tensor[(2), int32])"
    )
    x = np.random.default_rng(1).standard_normal((10, 3), dtype=np.float32)
    rows, mean, idx, shape = effir.interpret(mod, x)
    keep = x.sum(axis=1) > 0
    np.testing.assert_array_equal(rows, x[keep])
    np.testing.assert_allclose(mean, x[keep].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(idx, np.argwhere(keep))
    assert shape.tolist() == [int(keep.sum()), 3]


EFFECTFUL = """
global @rng: Ref[Key] = ref(random.key(42));
global @bn: Ref[(Tensor[(4), float32], Tensor[(4), float32])] = ref((zeros(shape=[4]), ones(shape=[4])));
def @main(%x: Tensor[(8, 4), float32], %gamma: Tensor[(4), float32], %beta: Tensor[(4), float32]) {
  let %h = nn.dropout(%x, @rng, rate=0.25);
  let %y = nn.batch_norm(%h, %gamma, %beta, @bn, training=True);
  nn.dropout(nn.relu(%y), @rng, rate=0.5)
}
"""


def reference_dropout(key, x, rate):
    new, sub = prng.split(key, 2)
    return new, prng.dropout(sub, x, rate)


def reference_batch_norm(x, gamma, beta, mean, var, eps=1e-5, momentum=0.1):
    batch_mean = x.mean(axis=0)
    batch_var = x.var(axis=0)
    y = (x - batch_mean) / np.sqrt(batch_var + eps) * gamma + beta
    n = x.shape[0]
    new_mean = (1 - momentum) * mean + momentum * batch_mean
    new_var = (1 - momentum) * var + momentum * batch_var * n / (n - 1)
    return y, new_mean, new_var


def test_effectful_model_over_global_cells():
    mod = module(EFFECTFUL)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4), dtype=np.float32)
    gamma = rng.standard_normal(4, dtype=np.float32)
    beta = rng.standard_normal(4, dtype=np.float32)
    state = effir.State(mod)
    out = effir.interpret(mod, x, gamma, beta, state=state)

    key = prng.key(42)
    key, h = reference_dropout(key, x, 0.25)
    y, mean, var = reference_batch_norm(h, gamma, beta, np.zeros(4), np.ones(4))
    key, expected = reference_dropout(key, np.maximum(y, 0).astype(np.float32), 0.5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # The masks are bit-exact: zeros in the same places.
    np.testing.assert_array_equal(out == 0, expected == 0)
    assert state["rng"] == PRNGKey(key)
    np.testing.assert_allclose(state["bn"][0], mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state["bn"][1], var, rtol=1e-5)

    # A second call continues from the updated state: new masks, new statistics.
    again = effir.interpret(mod, x, gamma, beta, state=state)
    assert not np.array_equal(again == 0, out == 0)
    assert state["rng"] != PRNGKey(key)


def test_the_gru_language_model_example():
    mod = effir.check(effir.parse(EXAMPLE.read_text(), source_name=str(EXAMPLE)))
    rng = np.random.default_rng(3)
    t, b = 5, 2
    tokens = rng.integers(0, 1000, (t, b)).astype(np.int32)
    embed = (rng.standard_normal((1000, 32)) * 0.1).astype(np.float32)
    w = (rng.standard_normal((192, 32)) * 0.1).astype(np.float32)
    u = (rng.standard_normal((192, 64)) * 0.1).astype(np.float32)
    bias = np.zeros(192, np.float32)
    gamma = np.ones(64, np.float32)
    beta = np.zeros(64, np.float32)
    proj = (rng.standard_normal((1000, 64)) * 0.1).astype(np.float32)
    h0 = np.zeros((b, 64), np.float32)
    printed = []
    out = effir.interpret(
        mod,
        tokens,
        embed,
        w,
        u,
        bias,
        gamma,
        beta,
        proj,
        h0,
        sink=lambda label, value: printed.append((label, float(value))),
    )

    key = prng.key(0)
    key, xs = reference_dropout(key, embed[tokens], 0.1)
    h, hs = h0, []
    for step in range(t):
        h = gru_step(xs[step], h, w, u, bias)
        hs.append(h)
    flat = np.stack(hs).reshape(-1, 64)
    y, _, _ = reference_batch_norm(flat, gamma, beta, np.zeros(64), np.ones(64))
    key, dropped = reference_dropout(key, y.astype(np.float32), 0.1)
    logits = dropped @ proj.T
    shifted = logits - logits.max(axis=1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert printed[0][0] == "mean activation"
    np.testing.assert_allclose(printed[0][1], dropped.mean(), rtol=1e-4, atol=1e-6)
