"""Building IR in A-normal form: a let-builder and named tuple layouts.

Passes that produce new code (state passing, partial evaluation, explicate,
and the public Python builder) build let chains binding by binding. Written
by hand, that is a list of ``(var, value)`` pairs, ``span=span`` on every
node, and tuple fields known by position (``TupleGetItem(carry, 2)``). The
builder holds the three in one place, as Relax's ``BlockBuilder`` and
xDSL's ``Builder`` do:

- ``LetBuilder.emit(value, "x")`` binds ``value`` to a fresh variable and
  returns it; ``finish(result)`` nests the bindings around ``result``, with
  a loop (a chain of 100,000 bindings needs no recursion), each ``let``
  carrying its value's span, as ``to_anf`` gives it. ``let_chain`` is that
  loop, shared with ``effir.ir.block`` (a let chain taken apart and put
  back together).
- ``with b.span(node.span):`` sets the span that every node made through the
  builder's factories (``b.var``, ``b.tuple``, ``b.get``, ``b.call``, ...)
  carries; a pass locates what it generates at what it translates.
- ``TupleLayout`` names the fields of a tuple that a pass builds and takes
  apart in several places (a loop's carried state: ``state``, ``go``,
  ``counter...``, ``cells...``), so the positions are written once.

A builder is a plain mutable object; nested blocks (a branch, a function
body) get builders of their own (``b.child()``), which start in the
parent's span scope.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .diagnostics import Span
from .expr import Call, Constant, Expr, Function, If, Let, Tuple, TupleGetItem, Var, const
from .node import EMPTY_ATTRS, Attrs
from .op import call_op
from .types import Type

Binding = tuple[Var, Expr]


class LetBuilder:
    """Collects the bindings of one block; ``finish`` makes the let chain."""

    __slots__ = ("bindings", "_span")

    def __init__(self, span: Span | None = None) -> None:
        self.bindings: list[Binding] = []  # in order; read it, or append through ``bind``
        self._span = span

    # ------------------------------------------------------------ scope
    @property
    def current_span(self) -> Span | None:
        """The span the factories give the nodes they make."""
        return self._span

    @contextmanager
    def span(self, span: Span | None) -> Iterator[LetBuilder]:
        """Nodes built inside carry ``span`` (the previous span is restored)."""
        outer, self._span = self._span, span
        try:
            yield self
        finally:
            self._span = outer

    def child(self) -> LetBuilder:
        """A builder for a nested block, in this builder's span scope."""
        return LetBuilder(self._span)

    # --------------------------------------------------------- bindings
    def bind(self, var: Var, value: Expr) -> Var:
        """``let var = value`` for a variable made elsewhere; returns ``var``."""
        self.bindings.append((var, value))
        return var

    def emit(self, value: Expr, name_hint: str = "x", type_annotation: Type | None = None) -> Var:
        """``let %name_hint = value``, with a fresh variable, returned."""
        var = Var(name_hint, type_annotation, span=self._span)
        self.bindings.append((var, value))
        return var

    def pop(self) -> Binding:
        """Take back the last binding (a block's tail computation may end
        the chain instead of being bound)."""
        return self.bindings.pop()

    def __len__(self) -> int:
        return len(self.bindings)

    def finish(self, result: Expr, reuse: Mapping[Var, Let] | None = None) -> Expr:
        """The bindings as a let chain around ``result`` (``result`` itself
        when there are none): ``let_chain``."""
        return let_chain(self.bindings, result, reuse)

    # -------------------------------------------------------- factories
    def var(self, name_hint: str, type_annotation: Type | None = None) -> Var:
        """A fresh variable (not bound: a parameter, or bound with ``bind``)."""
        return Var(name_hint, type_annotation, span=self._span)

    def tuple(self, fields: Sequence[Expr]) -> Tuple:
        return Tuple(tuple(fields), span=self._span)

    def get(self, value: Expr, index: int) -> TupleGetItem:
        """The projection ``value.index`` (not bound)."""
        return TupleGetItem(value, index, span=self._span)

    def emit_get(self, value: Expr, index: int, name_hint: str = "x") -> Var:
        """``let %name_hint = value.index``."""
        return self.emit(TupleGetItem(value, index, span=self._span), name_hint)

    def call(self, callee: Expr, args: Sequence[Expr], attrs: Attrs = EMPTY_ATTRS) -> Call:
        return Call(callee, tuple(args), attrs, span=self._span)

    def call_op(self, name: str, *args: Expr, **attrs: Any) -> Call:
        """``op.call_op`` (attributes validated and normalised), located."""
        call = call_op(name, *args, **attrs)
        return Call(call.callee, call.args, call.attrs, span=self._span)

    def const(self, value: Any, dtype: str | None = None) -> Constant:
        """``expr.const`` (ints default to int32, floats to float32), located."""
        return dataclasses.replace(const(value, dtype), span=self._span)

    def function(
        self,
        params: Sequence[Var],
        body: Expr,
        ret_type: Type | None = None,
        attrs: Attrs = EMPTY_ATTRS,
    ) -> Function:
        return Function(tuple(params), body, ret_type, attrs=attrs, span=self._span)

    def if_(self, cond: Expr, then_branch: Expr, else_branch: Expr) -> If:
        return If(cond, then_branch, else_branch, span=self._span)


def let_chain(
    bindings: Sequence[Binding], result: Expr, reuse: Mapping[Var, Let] | None = None
) -> Expr:
    """``bindings`` nested around ``result`` by one loop, last first (a
    chain of 100,000 bindings needs no recursion). A new ``let`` carries its
    value's span, as ``to_anf`` gives it. ``reuse`` names the let that
    bound a variable before a rewrite (``Block.lets``): where a binding and
    everything after it are unchanged, that let node is kept (its span too),
    so an unchanged block comes back as the very node it was."""
    if not reuse:
        for var, value in reversed(bindings):
            result = Let(var, value, result, span=value.span)
        return result
    for var, value in reversed(bindings):
        let = reuse.get(var)
        if let is not None and let.value is value and let.body is result:
            result = let
        else:
            result = Let(var, value, result, span=value.span)
    return result


def fresh_name(base: str, taken: Container[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken``
    (for global names; local variables are distinct by identity)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


class TupleLayout:
    """The named fields of a tuple a pass builds and takes apart.

    An entry is a name (one field) or ``(name, count)`` (a group of
    ``count`` consecutive fields, possibly none)::

        carry = TupleLayout("state", "go", ("counter", 1), ("cells", 2))
        value = carry.build(b, state=s, go=g, counter=[k], cells=[c1, c2])
        go = carry.get(b, value, "go")               # let %go = value.1
        c1, c2 = carry.get_group(b, value, "cells")  # value.3, value.4

    Reading a field emits the projection through the builder, so it is
    bound once and located in the builder's span scope."""

    __slots__ = ("_start", "_count", "_names", "_size")

    def __init__(self, *entries: str | tuple[str, int]) -> None:
        self._start: dict[str, int] = {}
        self._count: dict[str, int | None] = {}  # None: a single field
        self._names: list[str] = []
        position = 0
        for entry in entries:
            name, count = (entry, None) if isinstance(entry, str) else entry
            if name in self._start:
                raise ValueError(f"tuple layout: field {name!r} named twice")
            self._start[name] = position
            self._count[name] = count
            self._names.append(name)
            position += 1 if count is None else count
        self._size = position

    def __len__(self) -> int:
        """The number of tuple fields."""
        return self._size

    def __repr__(self) -> str:
        parts = [n if self._count[n] is None else f"{n}*{self._count[n]}" for n in self._names]
        return "TupleLayout(" + ", ".join(parts) + ")"

    def index(self, name: str) -> int:
        """The position of the single field ``name``."""
        if self._count.get(name, 0) is not None:
            raise KeyError(f"tuple layout: {name!r} is not a single field of {self!r}")
        return self._start[name]

    def positions(self, name: str) -> range:
        """The positions of the group ``name``."""
        count = self._count.get(name)
        if count is None:
            raise KeyError(f"tuple layout: {name!r} is not a group of {self!r}")
        start = self._start[name]
        return range(start, start + count)

    def item(self, b: LetBuilder, value: Expr, name: str) -> TupleGetItem:
        """The projection of the single field ``name`` (not bound)."""
        return b.get(value, self.index(name))

    def get(self, b: LetBuilder, value: Expr, name: str, name_hint: str | None = None) -> Var:
        """``let %name_hint = value.i`` for the single field ``name``."""
        return b.emit_get(value, self.index(name), name if name_hint is None else name_hint)

    def get_group(
        self, b: LetBuilder, value: Expr, name: str, name_hints: Sequence[str] | None = None
    ) -> list[Var]:
        """One binding per field of the group ``name``, in order."""
        where = self.positions(name)
        hints = [name] * len(where) if name_hints is None else name_hints
        if len(hints) != len(where):
            raise ValueError(f"tuple layout: {len(hints)} names for group {name!r} of {self!r}")
        return [b.emit_get(value, i, hint) for i, hint in zip(where, hints, strict=True)]

    def build(self, b: LetBuilder, **values: Expr | Sequence[Expr]) -> Tuple:
        """The tuple with these fields (a sequence for each group)."""
        return b.tuple(self.fields(values))

    def fields(self, values: Mapping[str, Expr | Sequence[Expr]]) -> list[Expr]:
        """The fields in order, from one value per name (a sequence per group)."""
        if set(values) != set(self._names):
            missing = sorted(set(self._names) - set(values))
            extra = sorted(set(values) - set(self._names))
            raise KeyError(f"tuple layout {self!r}: missing {missing}, unknown {extra}")
        out: list[Expr] = []
        for name in self._names:
            value = values[name]
            count = self._count[name]
            if count is None:
                assert isinstance(value, Expr)
                out.append(value)
                continue
            assert not isinstance(value, Expr)
            group = list(value)
            if len(group) != count:
                raise ValueError(
                    f"tuple layout: group {name!r} of {self!r} takes {count}, got {len(group)}"
                )
            out.extend(group)
        return out
