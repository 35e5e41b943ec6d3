"""Stochastic gradient descent with (heavy-ball) momentum, as PyTorch's
``torch.optim.SGD`` and optax's ``sgd(momentum=...)`` define it::

    v' = momentum * v + g
    p' = p - lr * v'

The state is one velocity per parameter, zero at the start."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import Arrays, Optimizer


@dataclass(frozen=True)
class SGD(Optimizer):
    lr: float = 0.1
    momentum: float = 0.9
    name = "sgd"

    def init(self, params: Sequence[np.ndarray]) -> Arrays:
        return tuple(np.zeros_like(p) for p in params)

    def update(
        self, params: Sequence[Any], grads: Sequence[Any], state: Sequence[Any]
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        new_params, new_state = [], []
        for p, g, v in zip(params, grads, state, strict=True):
            v_new = v * self.momentum + g
            new_state.append(v_new)
            new_params.append(p - v_new * self.lr)
        return tuple(new_params), tuple(new_state)
