"""Graphs converted node by node.

A graph's nodes are converted in order into a ``Block``, each under its
node's span, each output name bound in a ``Scope`` to the ``Value`` its
converter returned. A subgraph (a branch of ``If``, the body of ``Loop``
or ``Scan``) is converted into a block of its own in a scope whose
parent is its node's: names of the enclosing graphs are captured as
effir closures capture variables. Converters of nodes with subgraphs are
generators that ``yield`` the subgraph's conversion, run on effir's
trampoline (ir/trampoline.py), so graphs nested thousands deep convert
without Python recursion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any

import numpy as np

from ...ir.diagnostics import Span
from ...ir.expr import Var
from ...ir.trampoline import Computation
from ...ir.types import Type
from ..common.block import Block
from ..common.diagnostics import ModelImportError
from ..common.effects import StateCells
from ..common.parts import ModuleParts, identifier
from ..common.types import LIST, OPTION, adts_in
from ..common.values import Value, constant
from .listing import ModelListing, node_key, node_label, subgraph_key
from .model import DEFAULT_DOMAINS, Model
from .registry import CONVERTERS, attribute_defaults, attribute_value, schema
from .types import CODE_OF, UnsupportedType, type_of


class Scope:
    """Names of a graph bound to values; a subgraph's scope sees its
    enclosing graphs' names through ``parent``."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: Scope | None = None) -> None:
        self.values: dict[str, Value] = {}
        self.parent = parent

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.values.get(name)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def bind(self, name: str, value: Value) -> None:
        if name:
            self.values[name] = value


@dataclass
class ImportState:
    """What the whole import shares: the model, its listing, the module's
    globals and state cells."""

    model: Model
    listing: ModelListing
    parts: ModuleParts = field(default_factory=ModuleParts)
    cells: StateCells = field(init=False)

    def __post_init__(self) -> None:
        self.cells = StateCells(self.parts)


class NodeContext:
    """One node being converted: its attributes (defaults filled in), its
    inputs' values, the block its bindings go into."""

    __slots__ = ("state", "node", "key", "version", "block", "scope", "attrs", "inputs", "label")

    def __init__(
        self,
        state: ImportState,
        node: Any,
        key: str,
        index: int,
        version: int,
        block: Block,
        scope: Scope,
    ) -> None:
        self.state = state
        self.node = node
        self.key = key
        self.version = version
        self.block = block
        self.scope = scope
        opset = state.model.opset
        self.label = f"{node_label(node, index)} ({node.op_type}-{version}, opset {opset})"
        self.attrs = dict(attribute_defaults(node.op_type, version))
        import onnx  # lazy: onnx loads when a model is read

        for attribute in node.attribute:
            self.attrs[attribute.name] = attribute_value(onnx.helper.get_attribute_value(attribute))
        self.inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                self.inputs.append(None)
                continue
            value = scope.lookup(name)
            if value is None:
                raise self.error(f"its input '{name}' is not defined before it")
            self.inputs.append(value)

    # ------------------------------------------------------------ errors
    @property
    def span(self) -> Span | None:
        return self.block.span

    def error(self, message: str) -> ModelImportError:
        span = self.state.listing.span(self.key)
        return ModelImportError(f"{self.label}: {message}", span, node=self.label)

    # ------------------------------------------------------------ inputs
    @property
    def name(self) -> str:
        """A name for what the node makes: its name, or its first output's."""
        return identifier(self.node.name or (self.node.output[0] if self.node.output else "n"), "n")

    def input(self, i: int, what: str = "") -> Value:
        value = self.optional(i)
        if value is None:
            raise self.error(f"its input {i} {what}is missing".replace("  ", " "))
        return value

    def optional(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def tensor(self, i: int, what: str = "") -> Value:
        value = self.input(i, what)
        if not value.is_tensor:
            raise self.error(f"its input {i} must be a tensor")
        return value

    def known(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i``'s contents when the import knows them (None when the
        input is absent); an error naming ``what`` when they are computed
        at run time."""
        value = self.optional(i)
        if value is None:
            return None
        if value.const is None:
            raise self.error(f"{what} must be known when the model is imported (a constant)")
        return value.const

    def output_count(self) -> int:
        """How many outputs the node asks for (trailing ones may be left out)."""
        return len(self.node.output)

    def wants(self, i: int) -> bool:
        """Whether output ``i`` is used (listed, with a name)."""
        return i < len(self.node.output) and bool(self.node.output[i])

    def subgraph(
        self, attribute: str, inputs: Sequence[Value]
    ) -> Computation[tuple[Block, list[Value]]]:
        """The node's subgraph ``attribute`` converted into a block of its
        own, in a scope inside the node's, its inputs bound to ``inputs``:
        the block and the subgraph's outputs."""
        block = self.block.child()
        key = subgraph_key(self.key, attribute)
        graph = self.graph(attribute)
        outputs = yield convert_graph(self.state, graph, key, Scope(self.scope), block, inputs)
        return block, outputs

    def graph(self, attribute: str) -> Any:
        graph = self.attrs.get(attribute)
        if graph is None:
            raise self.error(f"its attribute '{attribute}' (a graph) is missing")
        return graph


def convert_graph(
    state: ImportState, graph: Any, key: str, scope: Scope, block: Block, inputs: Sequence[Value]
) -> Computation[list[Value]]:
    """Convert ``graph`` into ``block``: its inputs bound to ``inputs``, its
    initializers to constants, its nodes in order; its outputs' values."""
    if len(inputs) != len(graph.input):
        raise ModelImportError(
            f"the graph takes {len(graph.input)} input(s), given {len(inputs)}",
            state.listing.span(key),
        )
    for proto, value in zip(graph.input, inputs, strict=True):
        scope.bind(proto.name, value)
    bind_initializers(state, graph, key, scope)
    yield convert_nodes(state, graph, key, scope, block)
    return graph_outputs(state, graph, key, scope)


def bind_initializers(state: ImportState, graph: Any, key: str, scope: Scope) -> None:
    from onnx import numpy_helper  # lazy: onnx loads when a model is read

    for initializer in graph.initializer:
        scope.bind(initializer.name, initializer_value(state, key, initializer, numpy_helper))


def convert_nodes(
    state: ImportState, graph: Any, key: str, scope: Scope, block: Block
) -> Computation[None]:
    """Each node of ``graph`` in order, its outputs bound in ``scope``."""
    for index, node in enumerate(graph.node):
        here = node_key(key, index)
        with block.builder.span(state.listing.span(here)):
            ctx = _context(state, node, here, index, block, scope)
            try:
                outputs = _converter(ctx)(ctx)
                if type(outputs) is GeneratorType:
                    outputs = yield outputs
            except ModelImportError as err:
                if err.node is not None:  # a node's own error (this one's or a subgraph's)
                    raise
                raise ctx.error(err.message) from None
        outputs = list(outputs)
        if len(outputs) < len(node.output) and any(node.output[len(outputs) :]):
            raise ctx.error(f"its outputs from {len(outputs)} on are not supported")
        for name, value in zip(node.output, outputs, strict=False):
            if name and value is not None:
                scope.bind(name, value)


def graph_outputs(state: ImportState, graph: Any, key: str, scope: Scope) -> list[Value]:
    results = []
    for proto in graph.output:
        value = scope.lookup(proto.name)
        if value is None:
            raise ModelImportError(
                f"the graph's output '{proto.name}' is not defined", state.listing.span(key)
            )
        results.append(value)
    return results


def initializer_value(state: ImportState, key: str, proto: Any, numpy_helper: Any) -> Value:
    try:
        array = numpy_helper.to_array(proto)
    except (ValueError, TypeError, KeyError) as err:
        raise ModelImportError(
            f"the initializer '{proto.name}' cannot be read: {err}", state.listing.span(key)
        ) from None
    if str(array.dtype) not in CODE_OF:
        raise ModelImportError(
            f"the initializer '{proto.name}' has the type {array.dtype}: not an effir dtype",
            state.listing.span(key),
        )
    return constant(array)


def _context(
    state: ImportState, node: Any, key: str, index: int, block: Block, scope: Scope
) -> NodeContext:
    if node.domain not in DEFAULT_DOMAINS:
        raise ModelImportError(
            f"{node_label(node, index)}: the operator {node.domain}.{node.op_type} is not of "
            "the default ONNX domain: not supported",
            state.listing.span(key),
        )
    found = schema(node.op_type, state.model.opset)
    version = found.since_version if found is not None else state.model.opset
    return NodeContext(state, node, key, index, version, block, scope)


def _converter(ctx: NodeContext) -> Any:
    found = CONVERTERS.get(ctx.node.op_type)
    if schema(ctx.node.op_type, ctx.state.model.opset) is None:
        raise ctx.error(f"{ctx.node.op_type} is not an ONNX operator at this opset")
    if found is None:
        raise ctx.error(f"the operator {ctx.node.op_type} is not supported by effir's importer")
    if ctx.version not in found.versions:
        known = ", ".join(str(v) for v in found.versions)
        raise ctx.error(
            f"{ctx.node.op_type}-{ctx.version} is not supported (effir reads the versions {known})"
        )
    return found.fn


def param_value(name: str, type_: Type) -> Value:
    """A parameter of a function: a variable annotated with ``type_``."""
    return Value(Var(identifier(name, "v"), type_), type_)


def declared_type(state: ImportState, proto: Any, what: str, key: str) -> Type:
    """A graph input's or output's declared type, or a located error."""
    try:
        found = type_of(proto.type, what)
    except UnsupportedType as err:
        raise ModelImportError(str(err), state.listing.span(key)) from None
    adts = adts_in(found)
    if LIST in adts:
        state.parts.constructors()
    if OPTION in adts:
        state.parts.option_constructors()
    return found
