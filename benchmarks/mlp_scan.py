"""The MLP of benchmarks/compile_latency.py written in effir: a 16-unit MLP
applied at each step of a scan, with batch norm in training mode (running
statistics in a cell) and dropout (keys from a cell), as a Python user
writes it with ``@effir.script``. (A module of its own: the benchmark's
JAX processes do not import effir.)"""

from __future__ import annotations

import numpy as np

import effir
from effir import Tensor

T, B, D, H, C = 16, 32, 8, 16, 4  # steps, batch, features, units, classes
F32 = "float32"
WRT = ["w1", "b1", "gamma", "beta", "w2", "b2"]

rng = effir.cell("rng", effir.random.key(0))
bn = effir.cell("bn", (np.zeros(H, F32), np.ones(H, F32)))


@effir.script
def loss(
    xs: Tensor[(T, B, D), F32],
    ys: Tensor[(T, B, C), F32],
    w1: Tensor[(H, D), F32],
    b1: Tensor[(H,), F32],
    gamma: Tensor[(H,), F32],
    beta: Tensor[(H,), F32],
    w2: Tensor[(C, H), F32],
    b2: Tensor[(C,), F32],
):
    total = np.zeros((), F32)
    for x, y in zip(xs, ys):  # noqa: B905  (a scripted loop: zip of tensors)
        h = effir.nn.batch_norm(effir.nn.dense(x, w1) + b1, gamma, beta, bn, training=True)
        h = effir.nn.dropout(effir.nn.relu(h), rng, rate=0.1)
        logp = effir.nn.log_softmax(effir.nn.dense(h, w2) + b2)
        total = total - np.sum(y * logp)
    return total / float(T * B)
