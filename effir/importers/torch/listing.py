"""An exported program listed one line per FX node, each subgraph (the
branches and bodies of higher-order operators) indented after the graph
that reads it: what import errors and the imported IR's spans point at
(common/diagnostics.py). Each line ends with the Python source line torch
recorded for the node (``node.meta["stack_trace"]``)."""

from __future__ import annotations

from typing import Any

from ...ir.diagnostics import Span
from ..common.diagnostics import Listing
from .registry import target_label


class ProgramListing:
    """The listing, and each FX node's line (by the node's identity)."""

    __slots__ = ("listing", "lines", "indices", "name")

    def __init__(self, name: str) -> None:
        self.listing = Listing()
        self.lines: dict[int, int] = {}
        self.indices: dict[int, int] = {}  # a node's position in its graph
        self.name = name

    def span(self, node: Any | None) -> Span:
        line = 0 if node is None else self.lines.get(id(node), 0)
        return self.listing.span(line)


def source_line(node: Any) -> str | None:
    """``file:line: code`` of the innermost user frame torch recorded for
    ``node`` (frames of torch's own generated code skipped), or None."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return None
    lines = trace.strip().splitlines()
    found = None
    for k, text in enumerate(lines):
        text = text.strip()
        if text.startswith('File "') and "<eval_with_key>" not in text:
            path = text.split('"')[1]
            number = text.split(", line ")[1].split(",")[0] if ", line " in text else "?"
            code = lines[k + 1].strip() if k + 1 < len(lines) else ""
            found = f"{path}:{number}: {code}" if code else f"{path}:{number}"
    return found


def describe(node: Any) -> str:
    """``aten.linear.default(x, p_w, p_b)`` for a call; the node's op else."""
    if node.op in ("call_function", "call_method"):
        args = ", ".join(_arg(a) for a in node.args)
        return f"{target_label(node.target)}({args})"
    if node.op == "get_attr":
        return f"get_attr {node.target}"
    if node.op == "output":
        return f"output {_arg(node.args[0])}"
    return node.op


def _arg(a: Any) -> str:
    if hasattr(a, "op") and hasattr(a, "name"):
        return str(a.name)
    if isinstance(a, list | tuple):
        inner = ", ".join(_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner})"
    return repr(a)


def list_program(graph_module: Any, name: str) -> ProgramListing:
    """List ``graph_module``'s graph, then its subgraphs, indented (an
    explicit stack: nesting costs no Python recursion)."""
    out = ProgramListing(name)
    out.listing.add(f"exported program {name}")
    stack: list[tuple[Any, int]] = [(graph_module, 1)]
    while stack:
        module, depth = stack.pop()
        pending = []
        for index, node in enumerate(module.graph.nodes):
            where = source_line(node)
            text = f"node {index} '{node.name}': {describe(node)}"
            if where:
                text += f"  # {where}"
            out.lines[id(node)] = out.listing.add("  " * depth + text)
            out.indices[id(node)] = index
            if node.op == "get_attr":
                sub = getattr(module, str(node.target), None)
                if sub is not None and hasattr(sub, "graph"):
                    pending.append((sub, depth + 1))
        stack.extend(reversed(pending))
    out.listing.finish(name)
    return out
