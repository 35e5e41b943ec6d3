"""A model's listing: one line per graph and per node, the text that
import errors (and the imported IR's spans) point into
(common/diagnostics.py). Subgraphs are listed under their node, indented,
walked with an explicit stack (a model may nest them deeply)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ...ir.diagnostics import Span
from ..common.diagnostics import Listing

GRAPH_KINDS = (5, 10)  # AttributeProto.GRAPH, GRAPHS


@dataclass
class ModelListing:
    """Where each graph and node of a model is listed, by its key: ``""``
    for the main graph, ``graph#index`` for a node of ``graph``,
    ``node/attribute`` for a node's subgraph (protobuf gives a new Python
    object at each access, so the keys are paths, not identities)."""

    listing: Listing = field(default_factory=Listing)
    lines: dict[str, int] = field(default_factory=dict)

    def span(self, key: str) -> Span | None:
        line = self.lines.get(key)
        return None if line is None else self.listing.span(line)


def node_key(graph_key: str, index: int) -> str:
    return f"{graph_key}#{index}"


def subgraph_key(node: str, attribute: str) -> str:
    return f"{node}/{attribute}"


def subgraphs(node: Any) -> Iterator[tuple[str, Any]]:
    """A node's graph attributes, by attribute name."""
    for attribute in node.attribute:
        if attribute.type == 5:
            yield attribute.name, attribute.g
        elif attribute.type == 10:
            for k, graph in enumerate(attribute.graphs):
                yield f"{attribute.name}[{k}]", graph


def node_label(node: Any, index: int) -> str:
    """``node 3 'name'``: how errors name a node (its index in its graph,
    and its name when it has one)."""
    return f"node {index} '{node.name}'" if node.name else f"node {index}"


def list_model(proto: Any, name: str, opset: int) -> ModelListing:
    out = ModelListing()
    graph = proto.graph
    producer = f"; produced by {proto.producer_name} {proto.producer_version}".rstrip()
    out.listing.add(f"model {name} (opset {opset}{producer if proto.producer_name else ''})")
    # work items: a graph to list (its header, then its nodes), or the rest of
    # a graph's nodes; a node's subgraphs are listed right after it
    stack: list[tuple[Any, ...]] = [("graph", graph, "", 0, f"graph '{graph.name}'")]
    while stack:
        item = stack.pop()
        if item[0] == "graph":
            _, sub, key, depth, what = item
            _header(out, sub, key, depth, what)
            stack.append(("nodes", iter(enumerate(sub.node)), key, depth + 1))
            continue
        _, nodes, key, depth = item
        entry = next(nodes, None)
        if entry is None:
            continue
        stack.append(item)
        index, node = entry
        label = node_label(node, index)
        signature = f"{node.op_type}({', '.join(node.input)}) -> ({', '.join(node.output)})"
        here = node_key(key, index)
        out.lines[here] = out.listing.add("  " * depth + f"{label}: {signature}")
        for attribute, sub in reversed(list(subgraphs(node))):
            sub_key = subgraph_key(here, attribute)
            stack.append(("graph", sub, sub_key, depth + 1, f"{attribute} of {label}"))
    out.listing.finish(name)
    return out


def _header(out: ModelListing, graph: Any, key: str, depth: int, what: str) -> None:
    inputs = ", ".join(i.name for i in graph.input)
    outputs = ", ".join(o.name for o in graph.output)
    out.lines[key] = out.listing.add(
        "  " * depth + f"{what}: inputs ({inputs}) outputs ({outputs})"
    )
