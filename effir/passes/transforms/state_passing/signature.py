"""The state-passing calling convention, shared by the analysis and the
translation: which cells a function takes and returns (``Signature``), the
attributes that record it, and the tuple a function with ``state_out``
returns (``returns``: ``(result, new_1, ..., new_k)``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from effir.ir.builder import TupleLayout
from effir.ir.diagnostics import Span
from effir.ir.expr import Var
from effir.ir.node import Attrs


@dataclass(frozen=True)
class Signature:
    """The cells a function takes (``state_in``) and returns (``state_out``)."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reads)


@lru_cache(maxsize=64)
def returns(count: int) -> TupleLayout:
    """What a function returning ``count`` new cell values returns (an
    ``if``/``match`` writing them evaluates to the same):
    ``(result, cells...)``."""
    return TupleLayout("result", ("cells", count))


# A loop step returns ``(out, new_state)`` (``LoopBody``'s contract).
STEP = TupleLayout("out", "state")


@lru_cache(maxsize=64)
def carry(count: int) -> TupleLayout:
    """The state a loop carries when its steps write ``count`` cells: the
    user's loop state, then the cells' values."""
    return TupleLayout("state", ("cells", count))


def state_attrs(attrs: Attrs, sig: Signature) -> Attrs:
    """``attrs`` recording ``sig`` (``state_in``/``state_out``, replaced)."""
    if not sig:
        return attrs
    items = [(k, v) for k, v in attrs.items() if k not in ("state_in", "state_out")]
    return Attrs(tuple(items) + (("state_in", sig.reads), ("state_out", sig.writes)))


def cell_hint(cell: str) -> str:
    """The name of a variable holding a cell's value (``%ref0`` -> ``ref0``)."""
    return cell.lstrip("%")


def out_name(var: Var) -> str:
    """The name of the variable holding ``(result, new...)`` for ``var``."""
    return "out" if var.name_hint == "_" else var.name_hint + "_out"


def where(span: Span | None) -> str:
    return str(span) if span is not None else "an unknown location"
