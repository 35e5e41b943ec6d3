"""examples/rnn_dropout_bn.effir in Python: an Elman RNN with dropout on
the hidden state inside the loop (drawing from the global PRNG cell @rng at
every step) and batch norm after it (updating its running statistics in
@bn), written twice: with ``@effir.script`` (a Python for loop) and for
``effir.trace`` (``effir.foreach``). Both give the .effir program's results
bit for bit (tests/frontend/test_examples.py).

    python examples/rnn_dropout_bn.py    # prints the scripted module
"""

import numpy as np

import effir
from effir import Tensor

F32, I32 = "float32", "int32"
T, B, ANY = "t", "b", "?"  # symbolic dimensions (names in the text), and an unknown one
rng = effir.cell("rng", effir.random.key(0))
bn = effir.cell("bn", (np.zeros(16, F32), np.ones(16, F32)))


@effir.script
def main(
    xs: Tensor[(T, B, 8), F32],
    h0: Tensor[(B, 16), F32],
    w_x: Tensor[(16, 8), F32],
    w_h: Tensor[(16, 16), F32],
    bias: Tensor[(16,), F32],
    gamma: Tensor[(16,), F32],
    beta: Tensor[(16,), F32],
):
    h = h0
    hs = []
    for x in xs:
        pre = effir.nn.dense(x, w_x) + effir.nn.dense(h, w_h) + bias
        h = effir.nn.dropout(np.tanh(pre), rng, rate=0.2)
        hs.append(h)
    flat = np.reshape(np.stack(hs), (-1, 16))
    normed = effir.nn.batch_norm(flat, gamma, beta, bn, training=True)
    return normed, h


def model(xs, h0, w_x, w_h, bias, gamma, beta):
    """The same model for effir.trace (and eager runs on numpy)."""

    def step(x, h):
        pre = effir.nn.dense(x, w_x) + effir.nn.dense(h, w_h) + bias
        h_new = effir.nn.dropout(effir.op.tanh(pre), rng, rate=0.2)
        return h_new, h_new

    hs, h = effir.foreach(step, xs, h0)
    flat = effir.op.reshape(hs, newshape=[-1, 16])
    return effir.nn.batch_norm(flat, gamma, beta, bn, training=True), h


TYPES = (
    Tensor[(T, B, 8), F32],
    Tensor[(B, 16), F32],
    Tensor[(16, 8), F32],
    Tensor[(16, 16), F32],
    Tensor[(16,), F32],
    Tensor[(16,), F32],
    Tensor[(16,), F32],
)


def traced() -> effir.IRModule:
    return effir.trace(model, *TYPES, name="main").module


if __name__ == "__main__":
    print(effir.astext(main.module))
