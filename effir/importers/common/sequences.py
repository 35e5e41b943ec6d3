"""Sequences as lists: the prelude's ``List`` ADT and the functions an
imported sequence operator calls, written in effir and added to the
imported module only when used.

Positions are ``int64`` scalars. The functions assume a position in range
(``@seq_at`` and ``@seq_erase`` are partial, a ``match?``): the importer
normalises a negative position and checks it against the length first
(``checked_position``), so that a position out of range is a located
run-time error naming it, as ONNX requires.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ...ir.expr import Function, TypeData
from ...ir.module import IRModule
from ...ir.parser import parse
from .block import Block
from .types import list_type
from .values import Value, constant

LIBRARY = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

def @seq_length_from[A](%xs: List[A], %n: Tensor[(), int64]) -> Tensor[(), int64] {
  match (%xs) {
    Cons(_, %rest) => @seq_length_from(%rest, add(%n, 1i64)),
    Nil => %n,
  }
}

def @seq_length[A](%xs: List[A]) -> Tensor[(), int64] {
  @seq_length_from(%xs, 0i64)
}

def @seq_at[A](%xs: List[A], %i: Tensor[(), int64]) -> A {
  match? (%xs) {
    Cons(%x, %rest) => if (equal(%i, 0i64)) { %x } else { @seq_at(%rest, subtract(%i, 1i64)) },
  }
}

def @seq_insert[A](%xs: List[A], %i: Tensor[(), int64], %x: A) -> List[A] {
  if (equal(%i, 0i64)) {
    Cons(%x, %xs)
  } else {
    match? (%xs) {
      Cons(%y, %rest) => Cons(%y, @seq_insert(%rest, subtract(%i, 1i64), %x)),
    }
  }
}

def @seq_erase[A](%xs: List[A], %i: Tensor[(), int64]) -> List[A] {
  match? (%xs) {
    Cons(%y, %rest) => if (equal(%i, 0i64)) { %rest } else { Cons(%y, @seq_erase(%rest, subtract(%i, 1i64))) },
  }
}

def @seq_reverse_onto[A](%xs: List[A], %acc: List[A]) -> List[A] {
  match (%xs) {
    Cons(%x, %rest) => @seq_reverse_onto(%rest, Cons(%x, %acc)),
    Nil => %acc,
  }
}
"""

_NEEDS = {"seq_length": ("seq_length_from",)}


@cache
def library() -> IRModule:
    """The sequence functions and the ``List`` type, parsed once."""
    return parse(LIBRARY, source_name="effir/importers/common/sequences.py")


def list_data() -> TypeData:
    return library().type_defs["List"]


def library_functions(name: str) -> dict[str, Function]:
    """``@name`` and the library functions it calls."""
    found = {name: library().functions[name]}
    for other in _NEEDS.get(name, ()):
        found.update(library_functions(other))
    return found


def checked_position(block: Block, position: Value, length: Value, allow_end: bool) -> Value:
    """``position`` (int64; negative counts from the end) as an index in
    ``[0, length)`` (``[0, length]`` with ``allow_end``: an insertion), or a
    run-time error naming it (``take`` of the valid indices, which fails
    with the index and the size when it is out of range)."""
    zero, one = constant(np.int64(0)), constant(np.int64(1))
    shifted = block.op("add", position, length, name_hint="from_end")
    index = block.op("where", block.op("less", position, zero), shifted, position)
    end = block.op("add", length, one) if allow_end else length
    valid = block.op("dyn.arange", zero, end, one, name_hint="positions")
    return block.op("take", valid, index, axis=0, mode="fast", name_hint="position")


__all__ = ["checked_position", "library", "library_functions", "list_data", "list_type"]
