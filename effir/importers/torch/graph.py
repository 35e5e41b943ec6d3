"""FX graphs converted node by node.

A graph's nodes are converted in order into a ``Block``, each under its
node's span; each node is bound in a ``Scope`` to what its converter
returned: a ``Value``, a list of them (an operator with several results,
which ``operator.getitem`` picks from), or a ``Subgraph`` (a ``get_attr``
of a branch or a loop body). A subgraph is converted into a block of its
own in a scope whose parent is its node's. Converters of higher-order
operators are generators that ``yield`` their subgraphs' conversions to
effir's trampoline (ir/trampoline.py), so nesting costs no Python
recursion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any

import numpy as np

from ...ir.diagnostics import Span
from ...ir.trampoline import Computation
from ...ir.types import ANY, Dim, TensorType, Type
from ..common.block import Block
from ..common.diagnostics import ModelImportError
from ..common.effects import StateCells
from ..common.parts import ModuleParts, identifier
from ..common.values import Value, constant
from .listing import ProgramListing, source_line
from .registry import CONVERTERS, target_label, target_name
from .types import dtype_of


@dataclass(frozen=True)
class Subgraph:
    """A ``get_attr`` of a graph module: a branch or a loop body."""

    module: Any
    name: str


_MISSING = object()


class Scope:
    """FX nodes bound to what they computed; a subgraph's scope sees its
    enclosing graphs' through ``parent``."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: Scope | None = None) -> None:
        self.values: dict[Any, Any] = {}
        self.parent = parent

    def lookup(self, node: Any, missing: Any = None) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if node in scope.values:
                return scope.values[node]
            scope = scope.parent
        return missing

    def bind(self, node: Any, value: Any) -> None:
        self.values[node] = value

    def rebind(self, node: Any, value: Any) -> None:
        """``node`` holds ``value`` from here on (an in-place update), in
        the scope that bound it."""
        scope: Scope | None = self
        while scope is not None:
            if node in scope.values:
                scope.values[node] = value
                return
            scope = scope.parent
        self.values[node] = value


@dataclass
class ImportState:
    """What the whole import shares: the listing, the module's globals and
    state cells, the names of symbolic sizes, the buffers held in cells."""

    listing: ProgramListing
    dims: Any  # SymInt -> Dim
    parts: ModuleParts = field(default_factory=ModuleParts)
    cells: StateCells = field(init=False)
    mutable: set = field(default_factory=set)  # placeholder nodes of buffers held in cells

    def __post_init__(self) -> None:
        self.cells = StateCells(self.parts)


class NodeContext:
    """One FX node being converted: its arguments read from the scope, the
    block its bindings go into."""

    __slots__ = ("state", "node", "module", "block", "scope", "label")

    def __init__(self, state: ImportState, node: Any, module: Any, block: Block, scope: Scope):
        self.state = state
        self.node = node
        self.module = module
        self.block = block
        self.scope = scope
        index = state.listing.indices.get(id(node), -1)
        self.label = f"node {index} '{node.name}' ({target_label(node.target)})"

    # ------------------------------------------------------------ errors
    @property
    def span(self) -> Span | None:
        return self.block.span

    def error(self, message: str) -> ModelImportError:
        where = source_line(self.node)
        note = f" (from {where})" if where else ""
        return ModelImportError(
            f"{self.label}: {message}{note}", self.state.listing.span(self.node), node=self.label
        )

    @property
    def name(self) -> str:
        return identifier(self.node.name, "n")

    # ------------------------------------------------------------ arguments
    def arg(self, i: int, name: str, default: Any = None) -> Any:
        """Argument ``i`` (or keyword ``name``), nodes replaced by what
        they are bound to (in lists too)."""
        if i < len(self.node.args):
            raw = self.node.args[i]
        else:
            raw = self.node.kwargs.get(name, default)
        return self.read(raw)

    def has(self, i: int, name: str) -> bool:
        return i < len(self.node.args) or name in self.node.kwargs

    def read(self, raw: Any) -> Any:
        if _is_node(raw):
            value = self.scope.lookup(raw, _MISSING)
            if value is _MISSING:
                raise self.error(f"its argument '{raw.name}' is not defined before it")
            return value
        if isinstance(raw, list | tuple):
            return type(raw)(self.read(r) for r in raw)
        return raw

    def tensor(self, i: int, name: str, dtype: str | None = None) -> Value:
        """Argument ``i``, a tensor (a Python number becomes a constant of
        ``dtype``, or of the output's dtype)."""
        value = self.arg(i, name)
        return self.as_tensor(value, dtype, name)

    def as_tensor(self, value: Any, dtype: str | None, what: str) -> Value:
        if isinstance(value, Value):
            return value
        if isinstance(value, bool | int | float):
            return constant(np.asarray(value, dtype=dtype or self.out_dtype()))
        raise self.error(f"its argument {what} must be a tensor, got {type(value).__name__}")

    def raw(self, i: int, name: str, default: Any = None) -> Any:
        """Argument ``i`` as the graph gives it (nodes not read)."""
        if i < len(self.node.args):
            return self.node.args[i]
        return self.node.kwargs.get(name, default)

    def ints(self, i: int, name: str, default: Any = None) -> list[int] | None:
        """An int list argument known at import (one int: a list of one)."""
        value = self.arg(i, name, default)
        if value is None:
            return None
        values = value if isinstance(value, list | tuple) else [value]
        out = []
        for v in values:
            if isinstance(v, Value):
                sizes = v.sizes()
                if sizes is None or not all(isinstance(s, int) for s in sizes):
                    raise self.error(f"its argument {name} must be known when it is imported")
                out.extend(int(s) for s in sizes)
            else:
                out.append(int(v))
        return out

    def sizes(self, i: int, name: str) -> list[Dim] | None:
        """A size list argument: ints, and symbolic sizes (``batch``) where
        the graph computes them from an input's shape; None when a size is
        known only at run time."""
        value = self.arg(i, name)
        values = value if isinstance(value, list | tuple) else [value]
        out: list[Dim] = []
        for v in values:
            if isinstance(v, Value):
                sizes = v.sizes()
                if sizes is None:
                    return None
                out.extend(sizes)
            else:
                out.append(int(v))
        return out

    # ------------------------------------------------------------ outputs
    def out_meta(self) -> Any:
        return self.node.meta.get("val")

    def out_dtype(self) -> str:
        val = self.out_meta()
        if isinstance(val, list | tuple):
            val = val[0]
        dtype = getattr(val, "dtype", None)
        if dtype is None:
            return "float32"
        found = dtype_of(dtype)
        if found is None:
            raise self.error(f"its result's dtype {dtype} has no effir dtype")
        return found

    def out_type(self) -> TensorType:
        """The result's type as torch recorded it (symbolic sizes named)."""
        val = self.out_meta()
        return tensor_type(self, val)

    def dim(self, size: Any) -> Dim:
        return dim_of(self.state.dims, size)

    def subgraph(self, graph: Subgraph, inputs: Sequence[Value]) -> Computation[tuple[Block, list]]:
        """``graph`` converted into a block of its own, its placeholders
        bound to ``inputs``: the block and the graph's outputs."""
        block = self.block.child()
        outputs = yield convert_graph(self.state, graph.module, Scope(self.scope), block, inputs)
        return block, outputs


def tensor_type(ctx: NodeContext, val: Any) -> TensorType:
    shape = getattr(val, "shape", None)
    if shape is None:
        raise ctx.error("its result is not a tensor")
    dtype = dtype_of(val.dtype)
    if dtype is None:
        raise ctx.error(f"its result's dtype {val.dtype} has no effir dtype")
    return TensorType(tuple(ctx.dim(s) for s in shape), dtype)


def dim_of(names: Any, size: Any) -> Dim:
    """A torch size as an effir dimension: an int, the name of the symbol
    it is (``torch.export.Dim``'s), or ``?`` for an expression of them."""
    if isinstance(size, int):
        return size
    expr = getattr(getattr(size, "node", None), "expr", None)
    if expr is not None and getattr(expr, "is_Integer", False):
        return int(expr)
    if expr is not None and getattr(expr, "is_Symbol", False):
        return names(expr)
    return ANY


def _is_node(raw: Any) -> bool:
    return hasattr(raw, "op") and hasattr(raw, "graph") and hasattr(raw, "users")


def convert_graph(
    state: ImportState, module: Any, scope: Scope, block: Block, inputs: Sequence[Any]
) -> Computation[list[Any]]:
    """Convert ``module``'s graph into ``block``: its placeholders bound to
    ``inputs``, its nodes in order; the values its output lists."""
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ModelImportError(
            f"the graph takes {len(placeholders)} input(s), given {len(inputs)}",
            state.listing.span(placeholders[0] if placeholders else None),
        )
    for node, value in zip(placeholders, inputs, strict=True):
        scope.bind(node, value)
    outputs = yield convert_nodes(state, module, scope, block)
    return outputs


def convert_nodes(state: ImportState, module: Any, scope: Scope, block: Block) -> Computation[Any]:
    """Each node of ``module``'s graph but its placeholders, in order; what
    the output node lists (flattened)."""
    for node in module.graph.nodes:
        if node.op == "placeholder":
            continue
        with block.builder.span(state.listing.span(node)):
            ctx = NodeContext(state, node, module, block, scope)
            if node.op == "output":
                return _flatten(ctx.read(node.args[0]))
            if node.op == "get_attr":
                scope.bind(node, _attribute(ctx, module, node))
                continue
            if node.op != "call_function":
                raise ctx.error(f"FX nodes of kind {node.op} are not supported")
            fn = CONVERTERS.get(target_name(node.target))
            if fn is None:
                raise ctx.error(
                    f"the operator {target_label(node.target)} is not supported by effir's importer"
                )
            try:
                result = fn(ctx)
                if type(result) is GeneratorType:
                    result = yield result
            except ModelImportError as err:
                if err.node is not None:  # a node's own error (this one's or a subgraph's)
                    raise
                raise ctx.error(err.message) from None
        scope.bind(node, result)
    raise ModelImportError("the graph has no output node", state.listing.span(None))


def _attribute(ctx: NodeContext, module: Any, node: Any) -> Any:
    found = getattr(module, str(node.target), None)
    if found is not None and hasattr(found, "graph"):
        return Subgraph(found, str(node.target))
    import torch  # lazy: torch loads when a program is read

    if isinstance(found, torch.Tensor):
        return tensor_constant(ctx, found)
    raise ctx.error(f"its attribute {node.target} is neither a graph nor a tensor")


def tensor_constant(ctx: NodeContext | None, tensor: Any) -> Value:
    """A torch tensor's contents as a constant."""
    array = tensor.detach().cpu().numpy()
    if dtype_of(tensor.dtype) is None:
        message = f"a tensor of dtype {tensor.dtype} has no effir dtype"
        raise ctx.error(message) if ctx is not None else ModelImportError(message)
    return constant(np.array(array, copy=True, order="C"))


def _flatten(value: Any) -> list[Any]:
    out: list[Any] = []
    stack = [value]
    while stack:
        top = stack.pop()
        if isinstance(top, list | tuple):
            stack.extend(reversed(top))
        else:  # None too: an effect token's place
            out.append(top)
    return out


def param_type(ctx_or_names: Any, val: Any) -> Type:
    """A placeholder's type from its recorded example value."""
    dtype = dtype_of(val.dtype)
    if dtype is None:
        raise ModelImportError(f"an input of dtype {val.dtype} has no effir dtype")
    return TensorType(tuple(dim_of(ctx_or_names, s) for s in val.shape), dtype)
