"""The stack of let-chains being built, per thread: each block's bindings
and the global function (the root) it belongs to, with the names, hints,
cells and types that function uses. Below the conversions of values.py
(which note the cells they read) and the builder (which emits into the
blocks): both build on this module."""

from __future__ import annotations

import threading
from typing import Protocol

from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, GlobalCell, TypeData, Var
from ..ir.types import Type


class NotedCell(Protocol):
    """A state cell a function being built reads (``values.Cell``)."""

    name: str
    declaration: GlobalCell

    @property
    def value_type(self) -> Type | None: ...


_LOCAL = threading.local()


class _Root:
    """One global function being built: its used names and the cells it reads."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.counters: dict[str, int] = {}
        self.slots = 0  # places kept for closures (script.py) to fill at the end
        self.cells: dict[str, NotedCell] = {}
        self.hints: dict[int, tuple[Var, Type]] = {}
        self.weak: dict[int, Expr] = {}  # values that are Python numbers eagerly
        # Globals of scripted or traced functions this one calls (their modules).
        self.functions: dict[str, Function] = {}
        self.declarations: dict[str, GlobalCell] = {}
        self.adts: dict[str, TypeData] = {}  # the types it builds or matches (adts.py)


class _Block:
    """One let-chain being built (its bindings are a ``LetBuilder``'s)."""

    def __init__(self, root: _Root) -> None:
        self.root = root
        self.lets = LetBuilder()
        self.bindings: list[tuple[Var, Expr]] = self.lets.bindings


def _blocks() -> list[_Block]:
    blocks = getattr(_LOCAL, "blocks", None)
    if blocks is None:
        blocks = _LOCAL.blocks = []
    return blocks


def current_block() -> _Block | None:
    blocks = _blocks()
    return blocks[-1] if blocks else None


def building() -> bool:
    """Whether a function body is being built (operators emit bindings)."""
    return bool(_blocks())


def note_cell(cell: NotedCell) -> None:
    """Record that the function being built uses ``cell``."""
    block = current_block()
    if block is not None:
        block.root.cells[cell.name] = cell


def fresh_name(hint: str) -> str:
    block = current_block()
    hint = hint or "t"
    if block is None:
        return hint
    root = block.root
    names, counters = root.names, root.counters
    name, n = hint, counters.get(hint, 0)
    if n:
        name = f"{hint}{n}"
    while name in names:  # each hint's counter only moves forward: linear overall
        n += 1
        name = f"{hint}{n}"
    counters[hint] = n + 1
    names.add(name)
    return name
