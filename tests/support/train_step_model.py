"""Helpers first written for tests/train/test_train_step.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import numpy as np

import effir
from effir import Tensor

B, D, H = 8, 3, 4


F32 = "float32"


WRT = ["w", "gamma", "beta", "v"]


bn = effir.cell("bn", (np.zeros(H, "float32"), np.ones(H, "float32")))


rng = effir.cell("rng", effir.random.key(0))


@effir.script
def loss(
    x: Tensor[(B, D), F32],
    w: Tensor[(H, D), F32],
    gamma: Tensor[(H,), F32],
    y: Tensor[(B,), F32],
    beta: Tensor[(H,), F32],
    v: Tensor[(1, H), F32],
):
    """A small regression with batch norm and dropout: the parameters and
    the data interleaved, to check the step puts each where it belongs."""
    h = effir.nn.batch_norm(effir.nn.dense(x, w), gamma, beta, bn, training=True)
    h = effir.nn.dropout(np.tanh(h), rng, rate=0.25)
    p = np.reshape(effir.nn.dense(h, v), (B,))
    return np.sum((p - y) * (p - y)) / 8.0


def initial_params(seed: int) -> dict[str, np.ndarray]:
    rs = np.random.default_rng(seed)
    return {
        "w": rs.standard_normal((H, D)).astype("f4"),
        "gamma": np.ones(H, "f4"),
        "beta": np.zeros(H, "f4"),
        "v": rs.standard_normal((1, H)).astype("f4"),
    }


def batch(seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.default_rng([seed, step])
    x = rs.standard_normal((B, D)).astype("f4")
    return x, (x.sum(axis=1) + 0.1 * rs.standard_normal(B)).astype("f4")
