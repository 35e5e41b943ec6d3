"""Where a use is, for the messages: a ``Var`` node is shared by all its
uses and carries its binder's span, so a use is found in its parent's text."""

from __future__ import annotations

import re

from effir.ir.diagnostics import Span
from effir.ir.expr import Var
from effir.ir.node import Node, child_slots
from effir.passes.analyses.verify_linear.places import Site


def slots(node: Node) -> list[tuple[bool, Node]]:
    """A node's children, each with whether it is a binder, in field order
    (a ``Site``'s index counts in this list)."""
    out: list[tuple[bool, Node]] = []
    for slot in child_slots(type(node)):
        value = getattr(node, slot.name)
        if slot.many:
            out.extend((slot.binder, v) for v in value)
        elif value is not None:
            out.append((slot.binder, value))
    return out


_LOCAL_RES: dict[str, re.Pattern] = {}


def locate(parent: Node, index: int) -> Span | None:
    """The text of a variable's use: a ``Var`` node is shared by all its
    uses and carries its binder's span, so find ``%name`` in the parent's
    text after the children that precede it."""
    span = parent.span
    if span is None:
        return None
    source, cursor = span.source, span.start
    for i, (binder, child) in enumerate(slots(parent)):
        if isinstance(child, Var) and not binder:
            pattern = _LOCAL_RES.get(child.name_hint)
            if pattern is None:
                pattern = re.compile(r"%" + re.escape(child.name_hint) + r"(?![A-Za-z0-9_])")
                _LOCAL_RES[child.name_hint] = pattern
            found = pattern.search(source.text, cursor)
            if found is None:
                return None
            if i == index:
                return Span(source, found.start(), found.end())
            cursor = found.end()
        else:
            if i == index:
                return child.span
            sp = child.span
            if sp is not None and sp.source is source and sp.start >= cursor:
                cursor = sp.end
    return None


def site_span(site: Site | None) -> Span | None:
    if site is None:
        return None
    node, parent, index, ctx = site
    if not isinstance(node, Var) and node.span is not None:
        return node.span
    if isinstance(node, Var) and parent is not None:
        found = locate(parent, index)
        if found is not None:
            return found
    if parent is not None and parent.span is not None:
        return parent.span
    return ctx


def cell_list(cells: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{c}"' for c in cells) + "]"


def full_location(span: Span | None) -> str:
    return str(span) if span is not None else "<unknown>"


def short_location(span: Span | None, ref: Span | None) -> str:
    if span is None:
        return "<unknown>"
    if ref is not None and ref.source.name == span.source.name:
        return f"{span.line}:{span.column}"
    return str(span)
