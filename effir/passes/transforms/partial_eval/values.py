"""Partially static values: what the evaluator knows of a value (``PV``),
the identity of a reference (``RefId``), and what the store knows of one
(``Entry``); the limits that keep the pass linear."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from effir.ir.expr import Constructor, Expr, Function, Var

MAX_ELEMENTS = 1024
MAX_INLINE = 200
MAX_UNROLL = 8


class LocalRef:
    """The identity of one ``ref(...)`` evaluated by the pass."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"LocalRef({self.name})"


RefId = str | LocalRef  # a global cell's name, or a local reference


@dataclass
class PV:
    """A partially static value: its residual atom and what is known."""

    atom: Expr
    const: np.ndarray | None = None
    fields: tuple[PV, ...] | None = None
    ctor: Constructor | None = None
    fn: Function | None = None
    env: dict[Var, PV] | None = None  # a closure's free variables
    ref: RefId | None = None


@dataclass
class Entry:
    """What the store knows of one reference: its contents, whether they
    still have to be written back, and the atom to write them through."""

    value: PV
    dirty: bool
    target: Expr
