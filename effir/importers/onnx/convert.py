"""``from_onnx``: a model's main graph as ``@main``.

1. The model is read (model.py) and listed (listing.py): every error and
   every IR node from here on is located at a node's line.
2. ``@main`` takes the graph's inputs (those an initializer does not
   give, with ``initializers="constants"``; then the initializers, with
   ``"parameters"``), each annotated with its declared type: a
   ``dim_param`` is a symbolic dimension; with ``"parameters"`` the
   weights follow (``_is_weight``: float tensors other than running
   statistics; shapes, axes and scalars stay constants).
3. The nodes are converted in order (graph.py), each by the converter its
   operator version has (registry.py, ops/); the result is the graph's
   output, or the tuple of its outputs.
4. The module is type-checked (``effir.check``): what the importer built
   is a program like any other. Bindings nothing uses (what only decided
   an attribute, a shape read for a reshape) are then removed (``dce``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from effir.passes.analyses.infer_type import check
from effir.passes.transforms.dce import dce

from ...ir.expr import Function
from ...ir.module import IRModule
from ...ir.trampoline import Computation, run
from ...ir.types import TensorType, Type, TypeCall
from ..common.block import Block
from ..common.diagnostics import ModelImportError
from ..common.parts import identifier
from ..common.types import list_element, list_type, loose
from ..common.values import Value
from . import ops  # noqa: F401  (importing the converters registers them)
from .graph import (
    ImportState,
    Scope,
    bind_initializers,
    convert_nodes,
    declared_type,
    graph_outputs,
    initializer_value,
    param_value,
)
from .listing import list_model
from .model import load

INITIALIZERS = ("constants", "parameters")


def from_onnx(
    model_or_path: Any,
    *,
    opset: int | None = None,
    initializers: str = "constants",
    input_types: Mapping[str, Type] | None = None,
) -> IRModule:
    """See ``effir.from_onnx``."""
    if initializers not in INITIALIZERS:
        raise ModelImportError(
            f"initializers must be one of {', '.join(INITIALIZERS)}, not {initializers!r}"
        )
    model = load(model_or_path, opset)
    state = ImportState(model, list_model(model.proto, model.name, model.opset))
    main = run(_main(state, initializers == "parameters", dict(input_types or {})))
    module = check(state.parts.module(main))
    # what only decided an attribute (a shape read to reshape) is left unused;
    # dce after the check: effect inference is linear on a typed module only
    cleaned = dce(module)
    return module if cleaned is module else check(cleaned)


def initializer_values(model_or_path: Any) -> dict[str, np.ndarray]:
    """The initializers' arrays by their parameter names (``_names``)."""
    from onnx import numpy_helper  # lazy: onnx loads when a model is read

    model = load(model_or_path, None)
    graph = model.proto.graph
    inputs = [i.name for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    names = _names(inputs + [t.name for t in graph.initializer])
    arrays = {
        names[len(inputs) + k]: (t.name, numpy_helper.to_array(t))
        for k, t in enumerate(graph.initializer)
    }
    return {name: a for name, (onnx_name, a) in arrays.items() if _is_weight(graph, onnx_name, a)}


def _is_weight(graph: Any, name: str, array: np.ndarray) -> bool:
    """Whether an initializer is a weight (a parameter with
    ``initializers="parameters"``): a float tensor of rank 1 or more that
    no batch normalisation reads as its running statistics (those are
    state: a cell). Scalars (ratios, constants of the arithmetic), integer
    initializers (shapes, axes, counts) stay constants."""
    if array.dtype.kind != "f" or array.ndim == 0:
        return False
    return not any(
        node.op_type == "BatchNormalization" and name in node.input[3:5] for node in graph.node
    )


def _main(
    state: ImportState, weights_are_parameters: bool, input_types: dict[str, Type]
) -> Computation[Function]:
    from onnx import numpy_helper  # lazy: onnx loads when a model is read

    graph = state.model.proto.graph
    given = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in given]
    names = _names([i.name for i in inputs] + [t.name for t in graph.initializer])
    scope = Scope()
    params: list[Value] = []
    unknown = sorted(set(input_types) - {i.name for i in inputs})
    if unknown:
        raise ModelImportError(f"input_types names {', '.join(unknown)}: not inputs of the model")
    for k, proto in enumerate(inputs):
        declared = declared_type(state, proto, f"the input '{proto.name}'", "")
        if proto.name in input_types:
            declared = _given_type(proto.name, declared, input_types[proto.name])
        if list_element(declared) is not None:
            state.parts.constructors()  # the List type
        params.append(param_value(names[k], declared))
        scope.bind(proto.name, params[-1])
    bind_initializers(state, graph, "", scope)
    if weights_are_parameters:
        for k, proto in enumerate(graph.initializer):
            if _is_weight(graph, proto.name, numpy_helper.to_array(proto)):
                known = initializer_value(state, "", proto, numpy_helper)
                params.append(param_value(names[len(inputs) + k], known.type))
                scope.bind(proto.name, params[-1])
    block = Block(state.listing.span(""))
    yield convert_nodes(state, graph, "", scope, block)
    outputs = graph_outputs(state, graph, "", scope)
    result = outputs[0] if len(outputs) == 1 else block.tuple(outputs, "outputs")
    return Function(tuple(p.expr for p in params), block.finish(result.expr), span=block.span)


def _given_type(name: str, declared: Type, given: Type) -> Type:
    """The type ``input_types`` gives an input; for a sequence, the type of
    its elements (a tensor type) or of the sequence."""
    if list_element(declared) is not None and isinstance(given, TensorType):
        return list_type(loose(given))
    if isinstance(given, TensorType | TypeCall):
        return given
    raise ModelImportError(f"input_types['{name}'] must be an effir tensor type, got {given!r}")


def _names(names: list[str]) -> list[str]:
    """ONNX value names as distinct parameter names (identifiers)."""
    taken: set[str] = set()
    out = []
    for name in names:
        base = identifier(name, "v")
        unique, k = base, 1
        while unique in taken:
            unique, k = f"{base}_{k}", k + 1
        taken.add(unique)
        out.append(unique)
    return out
