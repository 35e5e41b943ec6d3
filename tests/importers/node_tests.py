"""The ONNX backend node tests of the constructs effir's importer reads,
generated from the installed ``onnx`` package's case generators, and how
each is run and checked: through the interpreter, through
``effir.compile``, through onnxruntime and TVM's ONNX frontend (the last
two for benchmarks/onnx_node_tests.py).

A deterministic test passes when every output equals the expected one
(``rtol=1e-3, atol=1e-7``, onnx's own backend tests' tolerance; dtypes
and shapes exactly). A random test (dropout in training mode, Bernoulli)
passes by its properties: shapes and dtypes, values the operator can
give (a dropped or scaled element; 0 or 1, certain where ``p`` is 0 or
1), and the same values from the same key: two runs from one seed agree
bit for bit, and the compiled program draws exactly the interpreter's.
The tests effir refuses by design (element types it has no dtype for,
a sequence whose elements differ in rank, ``Scan`` of opset 8) are in ``UNSUPPORTED``: their import
must fail with an error naming the node or the input.
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

GENERATORS = (
    "loop", "if_", "scan", "sequence_map", "sequenceinsert", "splittosequence", "identity",
    "rangeop", "gru", "lstm", "rnn", "dropout", "batch_normalization", "bernoulli", "abs",
    "cumsum", "mod", "sin", "cos", "gemm", "expand", "slice", "gather", "nonzero", "unique",
)  # fmt: skip
"""The modules of ``onnx.backend.test.case.node`` whose cases are run."""

GROUPS: tuple[tuple[str, Callable[[str, frozenset[str]], bool]], ...] = (
    ("Loop", lambda name, ops: "Loop" in ops and "SequenceMap" not in name),
    ("If", lambda name, ops: "If" in ops),
    ("Scan", lambda name, ops: "Scan" in ops),
    (
        "Sequences",
        lambda name, ops: (
            bool(ops & {"SequenceMap", "SequenceInsert", "SplitToSequence"}) or "sequence" in name
        ),
    ),
    ("RNN/GRU/LSTM", lambda name, ops: bool(ops & {"RNN", "GRU", "LSTM"})),
    ("Dropout", lambda name, ops: "Dropout" in ops),
    ("BatchNormalization", lambda name, ops: "BatchNormalization" in ops),
    ("Random", lambda name, ops: bool(ops & {"Bernoulli", "RandomUniformLike"})),
    ("Operators", lambda name, ops: True),
)
"""Construct groups, in order: a case belongs to the first that takes it
(by its name and the operators of its graph, subgraphs included)."""

UNSUPPORTED = {
    "test_scan_sum": "Scan-8",
    "test_loop16_seq_none": "ranks 0 and 1 differ",
    "test_range_bfloat16_type_positive_delta": "bfloat16",
    "test_range_bfloat16_type_positive_delta_expanded": "bfloat16",
    "test_unique_bfloat16_sorted_without_axis": "bfloat16",
}
"""Cases effir refuses, and a word the error message must contain."""

KNOWN_BACKEND_DEFECTS: dict[str, str] = {}
"""Sampled cases that import and interpret, whose compiled run fails on a
defect of the TVM backend (not of the importer), and the symptom it
shows: none at present. (The last, a list element read by an ``if``
branch that binds nothing returned None compiled, is
tests/backends/tvm/test_adts.py's ``LIST_AT``.)"""

COMPILED_SAMPLE = (
    "test_loop13_seq",
    "test_range_int32_type_negative_delta_expanded",
    "test_if_seq",
    "test_if_opt",
    "test_identity_opt",
    "test_scan9_sum",
    "test_sequence_map_add_2_sequences",
    "test_split_to_sequence_1",
    "test_gru_seq_length",
    "test_lstm_bidirectional",
    "test_training_dropout_mask",
    "test_batchnorm_example_training_mode",
    "test_bernoulli_seed",
    "test_slice_neg_steps",
    "test_nonzero_example",
    "test_unique_sorted_with_axis_3d",
    "test_cumsum_2d_int32",
    "test_loop11",
)
"""The compiled cases the test suite runs (one subprocess): a few per
group; benchmarks/onnx_node_tests.py compiles every case."""

RTOL, ATOL = 1e-3, 1e-7


@dataclass(frozen=True)
class Case:
    name: str
    model: Any
    data_sets: tuple[tuple[list[Any], list[Any]], ...]
    group: str

    @property
    def random(self) -> bool:
        return self.group == "Random" or (
            self.group == "Dropout"
            and self.name.startswith("test_training")
            and "zero" not in self.name
        )


def operator_types(graph: Any) -> frozenset[str]:
    found, stack = set(), [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            found.add(node.op_type)
            for attribute in node.attribute:
                if attribute.type == 5:
                    stack.append(attribute.g)
                stack.extend(attribute.graphs)
    return frozenset(found)


@cache
def cases() -> tuple[Case, ...]:
    """The cases of GENERATORS, generated once per process (about 1 s)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node = importlib.import_module("onnx.backend.test.case.node")
        for module in GENERATORS:
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    found = []
    for case in node._NodeTestCases:  # what the generators registered
        ops = operator_types(case.model.graph)
        group = next(g for g, takes in GROUPS if takes(case.name, ops))
        sets = tuple((list(i), list(o)) for i, o in case.data_sets or ())
        found.append(Case(case.name, case.model, sets, group))
    return tuple(sorted(found, key=lambda c: c.name))


def case(name: str) -> Case:
    return next(c for c in cases() if c.name == name)


def supported() -> list[Case]:
    return [c for c in cases() if c.name not in UNSUPPORTED]


# ------------------------------------------------------------ values
def to_effir(value: Any, declared: Any = None) -> Any:
    """A test input as effir takes it: a list is a ``List`` value, an
    input declared optional ``Some`` of its value (``None`` when absent)."""
    from effir.runtime.values import ADTValue

    if declared is not None and declared.WhichOneof("value") == "optional_type":
        if value is None:
            return ADTValue("None")
        return ADTValue("Some", (to_effir(value, declared.optional_type.elem_type),))
    if isinstance(value, list):
        out = ADTValue("Nil")
        for item in reversed(value):
            out = ADTValue("Cons", (np.asarray(item), out))
        return out
    return value


def from_effir(value: Any) -> Any:
    """An output as the tests expect it: a list of its elements, an
    option's value (``None`` when absent)."""
    from effir.runtime.values import ADTValue

    if isinstance(value, ADTValue) and value.constructor in ("Some", "None"):
        return from_effir(value.fields[0]) if value.constructor == "Some" else None
    if isinstance(value, ADTValue):
        items = []
        while value.constructor == "Cons":
            items.append(value.fields[0])
            value = value.fields[1]
        return items
    return value


def arguments(case: Case, inputs: list[Any]) -> list[Any]:
    """A data set's inputs as effir values, by the model's declared types."""
    declared = [i.type for i in case.model.graph.input]
    return [to_effir(v, t) for v, t in zip(inputs, declared, strict=False)]


def input_types(case: Case) -> dict[str, Any]:
    """Types for the sequence inputs whose element rank the model leaves
    out, from the test's data (what a user passes as ``input_types``)."""
    from effir.ir.types import ANY, TensorType

    types = {}
    inputs = case.data_sets[0][0] if case.data_sets else []
    for proto, value in zip(case.model.graph.input, inputs, strict=False):
        elem = proto.type.sequence_type.elem_type.tensor_type
        if proto.type.WhichOneof("value") == "sequence_type" and not elem.shape.dim and value:
            first = np.asarray(value[0])
            types[proto.name] = TensorType((ANY,) * first.ndim, str(first.dtype))
    return types


def import_case(case: Case) -> Any:
    import effir

    return effir.from_onnx(case.model, input_types=input_types(case) or None)


def as_outputs(result: Any, count: int) -> list[Any]:
    outs = list(result) if count > 1 else [result]
    return [from_effir(o) for o in outs]


# ------------------------------------------------------------ checks
def check_equal(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        if isinstance(e, list):
            assert isinstance(g, list) and len(g) == len(e), f"output {k}: {len(g)} != {len(e)}"
            check_equal(g, e)
            continue
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype, f"output {k}: dtype {g.dtype} != {e.dtype}"
        assert g.shape == e.shape, f"output {k}: shape {g.shape} != {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {k}")


def check_random(case: Case, inputs: list[Any], got: list[Any], expected: list[Any]) -> None:
    """The properties of a random case's outputs (see the module's docstring)."""
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, f"output {k}: {g.dtype}{g.shape}"
    if case.group == "Dropout":
        x = np.asarray(inputs[0])
        ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 else 0.5
        y = np.asarray(got[0])
        kept = y != 0
        np.testing.assert_allclose(y[kept], (x / (1 - ratio))[kept], rtol=1e-6)
        if len(got) > 1:
            mask = np.asarray(got[1])
            np.testing.assert_array_equal(y, np.where(mask, x / np.float32(1 - ratio), 0))
        return
    p = np.asarray(inputs[0])
    y = np.asarray(got[0])
    assert set(np.unique(y).tolist()) <= {0, 1}, np.unique(y)
    assert np.all(y[p == 0] == 0) and np.all(y[p == 1] == 1)


# ------------------------------------------------------------ running
def run_interpreted(case: Case) -> None:
    """Every data set through the interpreter; random cases from seed 0
    twice (bit-identical), deterministic ones against the expectations."""
    import effir

    module = import_case(case)
    for inputs, expected in case.data_sets:
        args = arguments(case, inputs)
        got = as_outputs(
            effir.interpret(module, *args, state=effir.State(module, seed=0)), len(expected)
        )
        if not case.random:
            check_equal(got, expected)
            continue
        check_random(case, inputs, got, expected)
        again = as_outputs(
            effir.interpret(module, *args, state=effir.State(module, seed=0)), len(expected)
        )
        for a, b in zip(got, again, strict=True):
            np.testing.assert_array_equal(a, b)


def compiled_entry(
    module: Any, inputs: list[Any], expected: list[Any], declared: list[Any] | None = None
) -> tuple[Any, list[Any]]:
    """A module whose ``@main`` effir.compile can take (tensors in and out):
    the model's ``@main`` renamed, called by a ``@main`` that builds each
    sequence input from one parameter per element (``Some`` of it where
    the model ``declared`` the input optional) and returns each sequence
    output's elements (as many as the test expects; an optional output's
    value read with a ``match?``); and its arguments."""
    import effir
    from effir.importers.common.sequences import library_functions
    from effir.importers.common.types import option_element
    from effir.ir.expr import (
        Call,
        Clause,
        Function,
        GlobalVar,
        Match,
        PatternConstructor,
        PatternVar,
        Tuple,
        TupleGetItem,
        Var,
        const,
    )
    from effir.ir.module import IRModule
    from effir.ir.op import call_op
    from effir.ir.types import TensorType, TupleType

    optional = [
        t is not None and t.WhichOneof("value") == "optional_type"
        for t in (declared or [None] * len(inputs))
    ]
    ret = module.functions["main"].checked_type.ret_type
    out_types = list(ret.fields) if len(expected) > 1 and isinstance(ret, TupleType) else [ret]
    if not any(isinstance(v, list) for v in [*inputs, *expected]) and not (
        any(optional) or any(option_element(t) is not None for t in out_types)
    ):
        return module, inputs
    cons, nil = (
        module.type_defs["List"].constructors if "List" in module.type_defs else (None, None)
    )
    some = module.type_defs["Option"].constructors[0] if "Option" in module.type_defs else None
    params, args, call_args = [], [], []
    for k, value in enumerate(inputs):
        if not isinstance(value, list):
            p = Var(f"in{k}", TensorType(np.shape(value), str(np.asarray(value).dtype)))
            params.append(p)
            args.append(value)
            call_args.append(Call(some, (p,)) if optional[k] else p)
            continue
        items = []
        for j, item in enumerate(value):
            item = np.asarray(item)
            p = Var(f"in{k}_{j}", TensorType(item.shape, str(item.dtype)))
            params.append(p)
            args.append(item)
            items.append(call_op("forget_dims", p))
        seq = Call(nil, ())
        for item in reversed(items):
            seq = Call(cons, (item, seq))
        call_args.append(Call(some, (seq,)) if optional[k] else seq)
    result = Call(GlobalVar("model"), tuple(call_args))
    outs = (
        [result] if len(expected) == 1 else [TupleGetItem(result, k) for k in range(len(expected))]
    )
    fields = []
    for out, want, t in zip(outs, expected, out_types, strict=True):
        if option_element(t) is not None:
            x = Var("present")
            clause = Clause(PatternConstructor(some, (PatternVar(x),)), x)
            out = Match(out, (clause,), complete=False)
        if isinstance(want, list):
            fields += [
                Call(GlobalVar("seq_at"), (out, const(j, "int64"))) for j in range(len(want))
            ]
        else:
            fields.append(out)
    functions = dict(module.functions)
    functions["model"] = functions.pop("main")
    functions.update(library_functions("seq_at"))
    functions["main"] = Function(tuple(params), Tuple(tuple(fields)))
    return effir.check(IRModule(functions, module.type_defs, module.cells)), args


def regroup(flat: list[Any], expected: list[Any]) -> list[Any]:
    out, at = [], 0
    for want in expected:
        if isinstance(want, list):
            out.append(list(flat[at : at + len(want)]))
            at += len(want)
        else:
            out.append(flat[at])
            at += 1
    return out


def run_compiled(case: Case) -> None:
    """Every data set through ``effir.compile`` (llvm): deterministic cases
    against the expectations, random ones by their properties and bit for
    bit against the interpreter from the same seed."""
    import effir

    module = import_case(case)
    for inputs, expected in case.data_sets:
        declared = [i.type for i in case.model.graph.input]
        entry, args = compiled_entry(module, inputs, expected, declared)
        compiled = effir.compile(entry)
        flat = compiled(*args, state=effir.State(entry, seed=0))
        flat = list(flat) if isinstance(flat, tuple) else [flat]
        got = (
            regroup(flat, expected)
            if len(flat) != len(expected) or any(isinstance(e, list) for e in expected)
            else flat
        )
        if not case.random:
            check_equal(got, expected)
            continue
        check_random(case, inputs, got, expected)
        reference = effir.interpret(entry, *args, state=effir.State(entry, seed=0))
        reference = list(reference) if isinstance(reference, tuple) else [reference]
        for a, b in zip(flat, reference, strict=True):
            np.testing.assert_array_equal(a, b)


def outcome(run: Callable[[Case], None], case: Case) -> tuple[str, str]:
    """``("pass", "")`` or ``("fail", why)``, never an exception."""
    try:
        run(case)
    except Exception as err:  # a failing case is a result here
        return "fail", f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    return "pass", ""


def matching(pattern: str) -> list[Case]:
    return [c for c in cases() if re.search(pattern, c.name)]
