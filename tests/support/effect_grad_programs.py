"""Helpers first written for tests/autodiff/test_grad_effects.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import numpy as np


def _gru_args(t: int = 4, b: int = 2):
    rng = np.random.default_rng(0)

    def f32(*shape, scale=0.1):
        return (rng.normal(size=shape) * scale).astype("float32")

    tokens = rng.integers(0, 1000, size=(t, b)).astype("int32")
    args = [tokens, f32(1000, 32), f32(192, 32), f32(192, 64), np.zeros(192, "float32")]
    args += [np.ones(64, "float32"), np.zeros(64, "float32"), f32(1000, 64)]
    args += [np.zeros((b, 64), "float32"), f32(t * b, 1000, scale=1.0)]  # h0, cotangent
    return args


GRU_WRT = ["embed", "w", "u", "bias", "gamma", "beta", "proj"]
