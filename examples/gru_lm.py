"""examples/gru_lm.effir in Python: a GRU language model with dropout
(from the global PRNG cell @rng) and batch norm (running statistics in
@bn), written with ``@effir.script`` and for ``effir.trace``. Both give the
.effir program's results bit for bit (tests/frontend/test_examples.py).

    python examples/gru_lm.py    # prints the scripted module
"""

import numpy as np

import effir
from effir import Tensor

F32, I32 = "float32", "int32"
T, B, ANY = "t", "b", "?"  # symbolic dimensions (names in the text), and an unknown one
H = Tensor[(B, 64), F32]
rng = effir.cell("rng", effir.random.key(0))
bn = effir.cell("bn", (np.zeros(64, F32), np.ones(64, F32)))


@effir.script
def gru_cell(
    x: Tensor[(B, 32), F32],
    h: H,
    w: Tensor[(192, 32), F32],
    u: Tensor[(192, 64), F32],
    bias: Tensor[(192,), F32],
) -> (H, H):
    """One GRU step: (x_t, h) -> (out_t, h')."""
    gx = effir.nn.dense(x, w) + bias
    gh = effir.nn.dense(h, u)
    gxs = effir.op.split(gx, indices_or_sections=3, axis=1)
    ghs = effir.op.split(gh, indices_or_sections=3, axis=1)
    z = effir.op.sigmoid(gxs[0] + ghs[0])
    r = effir.op.sigmoid(gxs[1] + ghs[1])
    n = np.tanh(gxs[2] + r * ghs[2])
    h_new = (1.0 - z) * n + z * h
    return h_new, h_new


@effir.script
def main(
    tokens: Tensor[(T, B), I32],
    embed: Tensor[(1000, 32), F32],
    w: Tensor[(192, 32), F32],
    u: Tensor[(192, 64), F32],
    bias: Tensor[(192,), F32],
    gamma: Tensor[(64,), F32],
    beta: Tensor[(64,), F32],
    proj: Tensor[(1000, 64), F32],
    h0: H,
) -> Tensor[(ANY, 1000), F32]:
    xs = effir.op.take(embed, tokens, axis=0)
    xs_dropped = effir.nn.dropout(xs, rng, rate=0.1)
    h = h0
    hs = []
    for x_t in xs_dropped:
        out, h = gru_cell(x_t, h, w, u, bias)
        hs.append(out)
    flat = np.reshape(np.stack(hs), (-1, 64))
    normed = effir.nn.batch_norm(flat, gamma, beta, bn, training=True)
    dropped = effir.nn.dropout(normed, rng, rate=0.1)
    print("mean activation", np.mean(dropped))
    logits = effir.nn.dense(dropped, proj)
    return effir.nn.log_softmax(logits)  # (t * b, 1000) log-probabilities


def cell(x, h, w, u, bias):
    """gru_cell for effir.trace and eager runs."""
    gx = effir.nn.dense(x, w) + bias
    gh = effir.nn.dense(h, u)
    gx0, gx1, gx2 = effir.op.split(gx, indices_or_sections=3, axis=1)
    gh0, gh1, gh2 = effir.op.split(gh, indices_or_sections=3, axis=1)
    z = effir.op.sigmoid(gx0 + gh0)
    r = effir.op.sigmoid(gx1 + gh1)
    n = effir.op.tanh(gx2 + r * gh2)
    h_new = (1.0 - z) * n + z * h
    return h_new, h_new


def model(tokens, embed, w, u, bias, gamma, beta, proj, h0):
    xs = effir.nn.dropout(effir.op.take(embed, tokens, axis=0), rng, rate=0.1)
    hs, _ = effir.foreach(lambda x_t, h: cell(x_t, h, w, u, bias), xs, h0)
    normed = effir.nn.batch_norm(
        effir.op.reshape(hs, newshape=[-1, 64]), gamma, beta, bn, training=True
    )
    dropped = effir.nn.dropout(normed, rng, rate=0.1)
    effir.op.debug.print(effir.op.mean(dropped), label="mean activation")
    return effir.nn.log_softmax(effir.nn.dense(dropped, proj))


TYPES = tuple(main.fn.__annotations__[p] for p in list(main.fn.__annotations__)[:-1])


def traced() -> effir.IRModule:
    return effir.trace(model, *TYPES, name="main").module


if __name__ == "__main__":
    print(effir.astext(main.module))
