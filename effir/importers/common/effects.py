"""Randomness and running statistics as state cells.

A model's random operators draw from a key held in a state cell, as
``nn.dropout`` does (docs/semantics.md §4.2): each draw reads the key,
splits it, writes one half back and draws from the other, so a compiled
model draws fresh values at every call and the same values from the same
key (``effir.State(module, seed=...)`` seeds every key cell). Draws
without a seed of their own share the module's ``@rng``; an operator
given a seed gets a cell of its own, started from ``random.key(seed)``.
Running statistics updated in training mode live in a cell of
``(mean, var)``, started from the model's values.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...ir.expr import Constant, GlobalVar, RefRead, RefWrite, Tuple
from ...ir.op import call_op
from ...ir.types import KeyType, TensorType, TupleType
from .block import Block
from .parts import ModuleParts
from .values import Value

SPLIT = {"num": 2}


class StateCells:
    """The key and statistics cells of the module being imported."""

    __slots__ = ("parts", "_shared")

    def __init__(self, parts: ModuleParts) -> None:
        self.parts = parts
        self._shared: GlobalVar | None = None

    def key_cell(self, block: Block, seed: int | None, owner: str) -> GlobalVar:
        """The key cell a draw reads: the shared ``@rng``, or with ``seed``
        a cell of ``owner``'s own started from ``random.key(seed)``."""
        if seed is None:
            if self._shared is None:
                self._shared = self._key(block, "rng", 0)
            return self._shared
        return self._key(block, f"rng_{owner}", seed)

    def _key(self, block: Block, base: str, seed: int) -> GlobalVar:
        word = np.asarray(seed, dtype=np.int32 if -(2**31) <= seed < 2**31 else np.int64)
        init = dataclasses.replace(call_op("random.key", Constant(word)), span=block.span)
        return self.parts.add_cell(base, init, KeyType(), block.span)

    def draw(self, block: Block, cell: GlobalVar) -> Value:
        """A fresh key: ``(new, sub) = random.split(!cell); cell := new``; ``sub``."""
        key = block.emit(RefRead(cell, span=block.span), KeyType(), "key")
        keys = block.op("random.split", key, name_hint="keys", **SPLIT)
        new, sub = block.fields(keys, 2, ["new_key", "sub_key"])
        block.emit(RefWrite(cell, new.expr, span=block.span), TupleType(()), "_")
        return sub

    def stats_cell(self, block: Block, owner: str, mean: np.ndarray, var: np.ndarray) -> GlobalVar:
        """A cell of ``(running_mean, running_var)`` started from these."""
        init = Tuple((Constant(mean), Constant(var)), span=block.span)
        content = TupleType(tuple(TensorType(a.shape, str(a.dtype)) for a in (mean, var)))
        return self.parts.add_cell(f"bn_{owner}", init, content, block.span)
