"""The base of every IR node, and immutable attribute maps.

Each node class lists its fields in ``FIELDS`` as ``(name, kind)`` pairs, so
that generic algorithms (structural equality and hashing, visitors, the
well-formedness check) need no per-class code. Kinds:

- ``node``: one child node (or ``None``);
- ``nodes``: a tuple of child nodes;
- ``def``/``defs``: binders (a ``Var`` or ``TypeVar`` introduced here);
- ``attr``: a plain value compared with ``==`` (names, indices, ``Attrs``);
- ``data``: a numpy array compared bit for bit.

Nodes compare by identity (``is``); use ``structural_equal`` for content.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .diagnostics import Span


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Node:
    """An immutable IR node; ``span`` records where it came from, if anywhere."""

    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()

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
        from .printer import astext  # printing is the readable repr

        return astext(self).rstrip("\n")

    def children(self) -> Iterator[Node]:
        """Direct child nodes (binders included), in field order."""
        for name, kind in self.FIELDS:
            value = getattr(self, name)
            if kind in ("node", "def"):
                if value is not None:
                    yield value
            elif kind in ("nodes", "defs"):
                yield from value

    def _repr_html_(self) -> str:
        """Jupyter shows a node as its highlighted text (effir/highlight.py)."""
        from ..highlight import html
        from .printer import astext

        return html(astext(self))


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
