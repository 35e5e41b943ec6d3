"""A let chain seen as a block: its bindings in order, and its tail.

In effir a block is not a node (Relax has ``SeqExpr`` and its binding
blocks; Relay and effir nest ``let``s): ``let %a = ...; let %b = ...; %b``
is a ``Let`` whose body is a ``Let`` whose body is the tail. Nearly every
pass walks that chain, and written by hand each walk is the same loop
(``while isinstance(expr, Let): ...; expr = expr.body``) with its own
idea of where the tail starts. ``Block.of(expr)`` is that loop, once:

    block = Block.of(fn.body)
    for let in block.lets:        # each binding is its Let node:
        use(let.var, let.value)   # its variable, its value, its span
    block.tail                    # the expression the chain ends in

and ``block.rebuild(bindings, tail)`` puts a chain back together with the
loop ``LetBuilder.finish`` runs (``effir.ir.builder.let_chain``), keeping
each of this block's ``let`` nodes whose binding and everything after it
are unchanged, so a block that comes back as it was is the same node.

Both are loops, never recursion: a chain of 100,000 bindings is a list of
100,000 nodes. A block nested inside a value (a branch, a clause, a
function body) is a block of its own; ``Block.of`` does not enter it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .builder import Binding, let_chain
from .expr import Expr, Let


@dataclass(frozen=True, slots=True)
class Block:
    """The let chain ``lets`` (outermost first) ending in ``tail``."""

    lets: tuple[Let, ...]
    tail: Expr

    @staticmethod
    def of(expr: Expr, until: Callable[[Let], bool] | None = None) -> Block:
        """The block ``expr`` starts (no bindings when it is not a ``let``);
        ``until(let)`` true for a ``let`` after the first: that let starts a
        block of its own and is this block's tail (a let shared by several
        parents, in the text's graph form)."""
        lets: list[Let] = []
        append = lets.append
        if until is None:
            while type(expr) is Let:
                append(expr)
                expr = expr.body
        elif type(expr) is Let:
            append(expr)
            expr = expr.body
            while type(expr) is Let and not until(expr):
                append(expr)
                expr = expr.body
        return Block(tuple(lets), expr)

    def __len__(self) -> int:
        return len(self.lets)

    @property
    def expr(self) -> Expr:
        """The block as the expression it was read from."""
        return self.lets[0] if self.lets else self.tail

    def bindings(self) -> list[Binding]:
        """``(var, value)`` of each let, in order (``LetBuilder.bindings``'s shape)."""
        return [(let.var, let.value) for let in self.lets]

    def rebuild(self, bindings: Sequence[Binding], tail: Expr) -> Expr:
        """``bindings`` around ``tail`` as a let chain; where a binding is one
        of this block's (same variable, same value) and all after it are
        too, this block's ``let`` node is kept."""
        if not self.lets:
            return let_chain(bindings, tail)
        return let_chain(bindings, tail, {let.var: let for let in self.lets})


__all__ = ["Block"]
