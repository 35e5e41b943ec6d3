"""``from_torch``: an exported program's graph as ``@main``.

1. The program is listed (listing.py): every error and IR node from here
   on is located at an FX node's line.
2. ``@main`` takes the user inputs, annotated with their recorded types
   (a ``torch.export.Dim`` is a symbolic dimension of its name), then,
   with ``parameters="parameters"``, the module's parameters, named after
   them (``lin.weight`` is ``%lin_weight``). Constant tensors and buffers
   are constants, but buffers the program mutates (batch norm's running
   statistics in training mode, ``num_batches_tracked``, any buffer an
   in-place operator writes or the signature lists as a mutation): those
   are state cells, read at the start of a call and written at its end,
   so that a compiled call updates them as PyTorch's does.
3. The nodes are converted in order (graph.py), each by its operator's
   converter (registry.py, ops/); the result is the user output, or the
   tuple of the user outputs.
4. Bindings nothing uses are removed (``dce``) and the module is
   type-checked (``effir.check``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from effir.passes.analyses.infer_type import check
from effir.passes.transforms.dce import dce

from ...ir.expr import Function, RefRead, RefWrite, Var
from ...ir.trampoline import Computation, run
from ...ir.types import TupleType
from ..common.block import Block
from ..common.diagnostics import ModelImportError
from ..common.parts import identifier
from ..common.values import Value
from . import ops  # noqa: F401  (importing the converters registers them)
from .graph import ImportState, Scope, convert_nodes, param_type, tensor_constant
from .listing import list_program
from .registry import target_name

PARAMETERS = ("parameters", "constants")
MUTATING = {"aten.batch_norm": (3, 4), "aten._native_batch_norm_legit": (3, 4)}
"""Operators that write some of their arguments without saying so in their
schema (batch norm in training mode: its running statistics)."""


def from_torch(program: Any, *, parameters: str = "parameters") -> Any:
    """See ``effir.from_torch``."""
    try:
        import torch  # lazy: torch loads when a program is read
    except ImportError:
        raise ModelImportError(
            "reading torch.export programs needs the torch package (pip install torch)"
        ) from None

    if not isinstance(program, torch.export.ExportedProgram):
        raise ModelImportError(
            "from_torch reads a torch.export.ExportedProgram (torch.export.export(module, "
            f"args)), got {type(program).__name__}"
        )
    if parameters not in PARAMETERS:
        raise ModelImportError(
            f"parameters must be one of {', '.join(PARAMETERS)}, not {parameters!r}"
        )
    gm = program.graph_module
    state = ImportState(list_program(gm, "exported_program"), _dim_names(program))
    main = run(_main(state, program, parameters == "parameters"))
    return check(dce(state.parts.module(main)))


def parameter_values(program: Any) -> dict[str, np.ndarray]:
    """The parameters' arrays by their names in ``@main`` (in its order),
    for ``parameters="parameters"``."""
    from torch.export.graph_signature import InputKind  # lazy: torch loads when a program is read

    names = _input_names(program)
    out = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER:
            array = program.state_dict[spec.target].detach().cpu().numpy()
            out[names[spec.arg.name]] = np.array(array, copy=True, order="C")
    return out


def _input_names(program: Any) -> dict[str, str]:
    """The parameter name of each user input and parameter of ``@main``,
    by placeholder: the input's own name, the parameter's target
    (``lin.weight`` is ``lin_weight``), made distinct."""
    from torch.export.graph_signature import InputKind  # lazy: torch loads when a program is read

    taken: set[str] = set()
    names = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            names[spec.arg.name] = _fresh(spec.arg.name, taken)
        elif spec.kind == InputKind.PARAMETER:
            names[spec.arg.name] = _fresh(spec.target, taken)
    return names


def _dim_names(program: Any) -> Any:
    """The name of each size symbol: the ``torch.export.Dim`` it came from,
    or the symbol's own (``s77``) for one torch made up."""
    env = None
    for node in program.graph.nodes:
        val = node.meta.get("val")
        mode = getattr(val, "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            env = mode.shape_env
            break
    debug = dict(getattr(env, "source_name_to_debug_name", {}) or {})
    sources = dict(getattr(env, "var_to_sources", {}) or {})

    def name(symbol: Any) -> str:
        for source in sources.get(symbol, ()):
            found = debug.get(source.name() if callable(source.name) else source.name)
            if found:
                return identifier(found, "d")
        return identifier(str(symbol), "d")

    return name


def _mutated_buffers(program: Any) -> dict[str, Any]:
    """Placeholder names of the buffers the program writes, to their targets."""
    # lazy: torch loads when a program is read
    from torch.export.graph_signature import InputKind, OutputKind

    specs = program.graph_signature.input_specs
    buffers = {s.arg.name: s.target for s in specs if s.kind == InputKind.BUFFER}
    written = set()
    for spec in program.graph_signature.output_specs:
        if spec.kind == OutputKind.BUFFER_MUTATION:
            written.add(_buffer_input(program, spec.target))
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        for i in _written_arguments(node):
            if i < len(node.args) and hasattr(node.args[i], "name"):
                written.add(node.args[i].name)
    return {name: target for name, target in buffers.items() if name in written}


def _buffer_input(program: Any, target: str) -> str | None:
    from torch.export.graph_signature import InputKind  # lazy: torch loads when a program is read

    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.BUFFER and spec.target == target:
            return spec.arg.name
    return None


def _written_arguments(node: Any) -> list[int]:
    """The positions of the arguments ``node`` writes: its schema's
    ``Tensor(a!)`` ones; batch norm's running statistics in training."""
    name = target_name(node.target)
    if name in MUTATING:
        training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training", False)
        return list(MUTATING[name]) if training is True else []
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    return [
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]


def _main(state: ImportState, program: Any, weights_are_parameters: bool) -> Computation[Function]:
    # lazy: torch loads when a program is read
    from torch.export.graph_signature import InputKind, OutputKind

    gm = program.graph_module
    signature = program.graph_signature
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    mutated = _mutated_buffers(program)
    scope = Scope()
    block = Block(state.listing.span(None))
    users: list[Value] = []
    weights: list[Value] = []
    cells: list[tuple[Any, Any]] = []
    names = _input_names(program)
    for spec in signature.input_specs:
        node = placeholders[spec.arg.name]
        with block.builder.span(state.listing.span(node)):
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                if not hasattr(val, "shape"):
                    raise ModelImportError(
                        f"the input '{node.name}' is not a tensor: effir imports tensor inputs",
                        state.listing.span(node),
                    )
                value = _param(names[node.name], _typed(state, node, val))
                users.append(value)
            elif spec.kind == InputKind.PARAMETER and weights_are_parameters:
                tensor = program.state_dict[spec.target]
                value = _param(names[node.name], _typed(state, node, tensor))
                weights.append(value)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                tensor = _tensor_of(program, spec)
                value = tensor_constant(None, tensor)
                if spec.kind == InputKind.BUFFER and spec.arg.name in mutated:
                    value, cell = _buffer_cell(state, block, spec.target, value)
                    cells.append((node, cell))
                    state.mutable.add(node)
            elif spec.kind == InputKind.TOKEN:
                value = None  # effects are ordered by the program's let chain
            else:
                raise ModelImportError(
                    f"the input '{node.name}' ({spec.kind.name}) is not supported",
                    state.listing.span(node),
                )
            scope.bind(node, value)
    outputs = yield convert_nodes(state, gm, scope, block)
    results = []
    for spec, value in zip(signature.output_specs, outputs, strict=False):
        if spec.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT):
            results.append(value)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            if not isinstance(value, Value):
                raise ModelImportError(f"the buffer {spec.target} is written with no value")
            scope.rebind(placeholders[_buffer_input(program, spec.target)], value)
    for node, cell in cells:  # the buffers' final values, written back
        final = scope.lookup(node)
        block.emit(RefWrite(cell, final.expr, span=block.span), TupleType(()), "_")
    if any(not isinstance(r, Value) for r in results):
        raise ModelImportError("an output of the program is not a tensor", block.span)
    result = results[0] if len(results) == 1 else block.tuple(results, "outputs")
    params = tuple(v.expr for v in [*users, *weights])
    return Function(params, block.finish(result.expr), span=block.span)


def _tensor_of(program: Any, spec: Any) -> Any:
    if spec.target in program.state_dict:
        return program.state_dict[spec.target]
    return program.constants[spec.target]


def _typed(state: ImportState, node: Any, val: Any) -> Any:
    try:
        return param_type(state.dims, val)
    except ModelImportError as err:
        raise ModelImportError(err.message, state.listing.span(node)) from None


def _param(name: str, type_: Any) -> Value:
    return Value(Var(name, type_), type_)


def _fresh(base: str, taken: set[str]) -> str:
    name, k = identifier(base, "v"), 1
    unique = name
    while unique in taken:
        unique, k = f"{name}_{k}", k + 1
    taken.add(unique)
    return unique


def _buffer_cell(state: ImportState, block: Block, target: str, value: Value) -> tuple[Value, Any]:
    """A cell holding the buffer, and its value read at the call's start."""
    cell = state.parts.add_cell(identifier(target, "b"), value.expr, value.type, block.span)
    read = block.emit(RefRead(cell, span=block.span), value.type, identifier(target, "b"))
    return read, cell
