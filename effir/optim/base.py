"""What every optimiser shares: turning its ``update`` into an effir function
of typed parameters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..frontend import ModuleBuilder, Tensor, var
from ..ir.module import IRModule

Arrays = tuple[np.ndarray, ...]


def tensor_type(like: np.ndarray) -> Any:
    """The effir type of a numpy array (static shape, its dtype)."""
    return Tensor[tuple(like.shape), str(like.dtype)]


class Optimizer:
    """Base of the optimisers: subclasses give ``init``, ``update`` and
    ``state_like`` (numpy arrays shaped as the state, for its types)."""

    name = "optimizer"

    def init(self, params: Sequence[np.ndarray]) -> Arrays:
        raise NotImplementedError

    def update(self, params: Sequence[Any], grads: Sequence[Any], state: Sequence[Any]):
        raise NotImplementedError

    def module(self, params: Sequence[np.ndarray], name: str | None = None) -> IRModule:
        """A module whose ``@name`` (default: the optimiser's name) takes
        ``(params..., grads..., state...)`` shaped as ``params`` and
        ``self.init(params)`` and returns ``((params...), (state...))``."""
        name = name or self.name
        state = self.init(params)
        p = [var(f"p{i}", tensor_type(a)) for i, a in enumerate(params)]
        g = [var(f"g{i}", tensor_type(a)) for i, a in enumerate(params)]
        s = [var(f"s{i}", tensor_type(a)) for i, a in enumerate(state)]
        mb = ModuleBuilder()
        with mb.function(name, [*p, *g, *s]):
            new_p, new_s = self.update(p, g, s)
            mb.ret((tuple(new_p), tuple(new_s)))
        return mb.get()
