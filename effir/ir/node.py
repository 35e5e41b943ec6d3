"""The base of every IR node, and immutable attribute maps.

Each node class lists its fields in ``FIELDS`` as ``(name, kind)`` pairs, so
that generic algorithms (structural equality and hashing, visitors, the
well-formedness check) need no per-class code. Kinds:

- ``node``: one child node (or ``None``);
- ``nodes``: a tuple of child nodes;
- ``def``/``defs``: binders (a ``Var`` or ``TypeVar`` introduced here);
- ``ctordefs``: the constructors an ADT defines (binders of their names;
  their ``inputs`` are compared where they are defined);
- ``attr``: a plain value compared with ``==`` (names, indices, ``Attrs``);
- ``data``: a numpy array compared bit for bit.

Nodes compare by identity (``is``); use ``structural_equal`` for content.

``child_slots(cls)`` is the one reading of ``FIELDS`` that walks use: which
fields hold child nodes, whether a tuple of them, whether binders, and
whether they hold types or patterns (from the field's annotation). Every
traversal (``effir.ir.functor``) goes through it, so every field kind is
handled the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from .diagnostics import Span
from .display import render


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Node:
    """An immutable IR node; ``span`` records where it came from, if anywhere."""

    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    # What a field of this class's type holds: "expr", "type" or "pattern"
    # (the Type and Pattern bases, defined above this module, say so).
    ROLE: ClassVar[str] = "expr"

    span: Span | None = field(default=None, kw_only=True)

    def __repr__(self) -> str:
        """``<Call: add(%x, 1f)>``: the node's kind and its text."""
        try:
            return f"<{type(self).__name__}: {self._text()}>"
        except Exception:  # a repr must never fail, even on a malformed node
            return f"<{type(self).__name__} at {id(self):#x}>"

    def __str__(self) -> str:
        """The node in the text format (what ``print`` shows)."""
        try:
            return self._text()
        except Exception:
            return repr(self)

    def _text(self) -> str:
        text = render("text", self)
        return object.__repr__(self) if text is None else text.rstrip("\n")

    def children(self) -> Iterator[Node]:
        """Direct child nodes (binders, types and constructor definitions
        included), in field order."""
        return iter(child_nodes(self))

    def _repr_html_(self) -> str | None:
        """Jupyter shows a node as its highlighted text (effir/highlight.py)."""
        return render("html", self)


# What each field kind holds: (a tuple of nodes, binders); None: no node.
_KINDS: dict[str, tuple[bool, bool] | None] = {
    "node": (False, False),
    "nodes": (True, False),
    "def": (False, True),
    "defs": (True, True),
    "ctordefs": (True, True),
    "attr": None,
    "data": None,
}

# Names in a field's annotation that only types are (``Type | None``,
# ``tuple[TypeVar, ...]``).
_TYPE_WORDS = frozenset({"Type", "TypeVar", "GlobalTypeVar", "None", "tuple"})

EXPR, TYPE, PATTERN = "expr", "type", "pattern"


class Slot(NamedTuple):
    """A field of a node class that holds child nodes."""

    name: str
    many: bool  # a tuple of nodes (else one node or None)
    binder: bool  # ``def``/``defs``/``ctordefs``: introduced here
    role: str  # EXPR (expressions, clauses, constructors), TYPE or PATTERN


_SLOTS: dict[type, tuple[Slot, ...]] = {}
_CHILD_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def child_nodes(node: Node) -> list[Node]:
    """``node.children()`` as a list (the walks' hot path)."""
    fields = _CHILD_FIELDS.get(type(node))
    if fields is None:
        fields = _CHILD_FIELDS[type(node)] = tuple(
            (s.name, s.many) for s in child_slots(type(node))
        )
    return nodes_in(node, fields)


def nodes_in(node: Node, fields: tuple[tuple[str, bool], ...]) -> list[Node]:
    """The nodes ``node`` holds in ``fields`` (``(name, holds a tuple)``,
    a subset of its ``child_slots``), in order: what every walk gathers."""
    found: list[Node] = []
    for name, many in fields:
        value = getattr(node, name)
        if many:
            found.extend(value)
        elif value is not None:
            found.append(value)
    return found


def child_slots(cls: type[Node]) -> tuple[Slot, ...]:
    """The child fields of ``cls`` in field order, computed once per class."""
    slots = _SLOTS.get(cls)
    if slots is None:
        annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        found = []
        for name, kind in cls.FIELDS:
            if kind not in _KINDS:
                raise TypeError(f"{cls.__name__}.{name}: unknown field kind {kind!r}")
            shape = _KINDS[kind]
            if shape is not None:
                found.append(Slot(name, *shape, _role(cls, annotations.get(name, ""))))
        slots = _SLOTS[cls] = tuple(found)
    return slots


def _role(cls: type, annotation: str) -> str:
    role = getattr(cls, "ROLE", EXPR)
    if role == TYPE:
        return TYPE
    words = set(re.findall(r"\w+", annotation))
    if role == PATTERN or "Pattern" in words:
        return PATTERN
    if words and words <= _TYPE_WORDS:
        return TYPE
    return EXPR


def _freeze_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze_value(v) for v in value)
    return value


def _typed(value: Any) -> Any:
    """A comparison key that tells ``True`` from ``1`` and ``1`` from ``1.0``."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_typed(v) for v in value))
    return (type(value).__name__, value)


class Attrs(Mapping[str, Any]):
    """An immutable, ordered attribute map (operator or function attributes).

    Values are ``None``, bool, int, float, str or tuples of these.
    """

    __slots__ = ("_items", "_index", "_hash")

    def __init__(self, items: Mapping[str, Any] | tuple[tuple[str, Any], ...] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items = tuple((str(k), _freeze_value(v)) for k, v in pairs)
        self._index = {k: v for k, v in self._items}
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._index[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self):  # ordered, unlike a view over the index
        return self._items

    def key(self) -> tuple:
        return tuple(sorted((k, _typed(v)) for k, v in self._items))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self.key() == other.key()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.key())
        return self._hash

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"


EMPTY_ATTRS = Attrs()
