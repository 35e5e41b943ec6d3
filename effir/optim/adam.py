"""Adam (Kingma and Ba, 2015) as optax's ``adam`` computes it::

    t' = t + 1
    m' = b1 * m + (1 - b1) * g
    v' = b2 * v + (1 - b2) * g * g
    p' = p - lr * (m' / (1 - b1^t')) / (sqrt(v' / (1 - b2^t')) + eps)

The state is the step count ``t`` (an int32 scalar, so that it counts
exactly), then the first moments, then the second moments, all zero at the
start. The bias corrections are computed once per step from ``t'``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import frontend
from .base import Arrays, Optimizer

op = frontend.op


@dataclass(frozen=True)
class Adam(Optimizer):
    lr: float = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    name = "adam"

    def init(self, params: Sequence[np.ndarray]) -> Arrays:
        zeros = tuple(np.zeros_like(p) for p in params)
        return (np.zeros((), np.int32), *zeros, *(np.zeros_like(p) for p in params))

    def update(
        self, params: Sequence[Any], grads: Sequence[Any], state: Sequence[Any]
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        n = len(params)
        if len(state) != 2 * n + 1 or len(grads) != n:
            raise ValueError(
                f"Adam: {n} parameters need {n} gradients and {2 * n + 1} state values"
            )
        t = state[0] + np.int32(1)
        tf = op.cast(t, dtype="float32")
        correction1 = 1.0 - op.power(np.float32(self.b1), tf)
        correction2 = 1.0 - op.power(np.float32(self.b2), tf)
        new_params, new_m, new_v = [], [], []
        for p, g, m, v in zip(params, grads, state[1 : n + 1], state[n + 1 :], strict=True):
            m_new = m * self.b1 + g * (1.0 - self.b1)
            v_new = v * self.b2 + g * g * (1.0 - self.b2)
            m_hat = m_new / correction1
            v_hat = v_new / correction2
            new_params.append(p - m_hat / (op.sqrt(v_hat) + self.eps) * self.lr)
            new_m.append(m_new)
            new_v.append(v_new)
        return tuple(new_params), (t, *new_m, *new_v)
