"""The output operators' rules: debug.print and its state-passing form
io.print, which threads the world token; and the explicate rules of the
surface operators (their A1 expansions)."""

from __future__ import annotations

import numpy as np
import pytest

from effir.ir.expr import Call, GlobalVar, Let, RefRead, RefWrite, Var
from effir.ir.op import op_def
from effir.ir.types import KeyType, TensorType, TupleType
from effir.ops.relations import RelationError

from .rules import T, rel


def printed_by(name: str, *args):
    definition = op_def(name)
    seen = []
    result = definition.rule("numpy")(
        tuple(args),
        definition.normalize_attrs({"label": "x"}),
        sink=lambda label, value: seen.append((label, value)),
    )
    return result, seen


def test_debug_print_prints_and_returns_its_argument():
    x = np.arange(3, dtype=np.float32)
    result, seen = printed_by("debug.print", x)
    assert result is x and seen == [("x", x)]
    assert rel("debug.print", T((3,))).shape == (3,)


def test_io_print_advances_the_world_token():
    x = np.arange(3, dtype=np.float32)
    (world, value), seen = printed_by("io.print", np.int64(4), x)
    assert world.dtype == np.int64 and int(world) == 5
    assert value is x and seen == [("x", x)]


def test_io_print_types():
    t = rel("io.print", TensorType((), "int64"), T((2, 3)))
    assert isinstance(t, TupleType)
    assert t.fields[0].shape == () and t.fields[0].dtype == "int64"
    assert t.fields[1].shape == (2, 3)


@pytest.mark.parametrize("world", [TensorType((), "int32"), TensorType((1,), "int64"), KeyType()])
def test_io_print_rejects_anything_but_the_world_token(world):
    with pytest.raises(RelationError, match="must be the world token"):
        rel("io.print", world, T((2,)))


def test_io_print_is_an_output_operator_with_a_state_output():
    definition = op_def("io.print")
    assert definition.effect == "io"
    assert definition.rules["state_outputs"] == (0,)
    assert op_def("debug.print").rules["world_form"] == "io.print"


def _chain(expr):
    bindings = []
    while isinstance(expr, Let):
        bindings.append(expr.value)
        expr = expr.body
    return bindings, expr


def test_the_dropout_expansion_reads_splits_writes_and_drops():
    x, cell = Var("x"), GlobalVar("rng")
    call = Call(op_def("nn.dropout").op, (x, cell), op_def("nn.dropout").normalize_attrs({}))
    bindings, result = _chain(op_def("nn.dropout").rules["explicate"](call))
    assert isinstance(bindings[0], RefRead) and bindings[0].ref is cell
    assert bindings[1].callee.name == "random.split"
    assert isinstance(bindings[4], RefWrite) and bindings[4].ref is cell
    assert result.callee.name == "random.dropout" and result.attrs["rate"] == 0.5


@pytest.mark.parametrize("training", [True, False])
def test_the_batch_norm_expansion_writes_only_in_training(training):
    args = (Var("x"), Var("g"), Var("b"), GlobalVar("bn"))
    definition = op_def("nn.batch_norm")
    call = Call(definition.op, args, definition.normalize_attrs({"training": training}))
    bindings, result = _chain(definition.rules["explicate"](call))
    writes = [b for b in bindings if isinstance(b, RefWrite)]
    ops = [b.callee.name for b in bindings if isinstance(b, Call)]
    if training:
        assert len(writes) == 1 and ops == ["nn.batch_norm_train"]
    else:
        assert not writes and result.callee.name == "nn.batch_norm_infer"


def test_loop_operators_declare_how_they_thread_state():
    """state passing and the linearity verifier read this rule, not names."""
    foreach = op_def("cf.foreach").rules["loop"]
    assert (foreach.init, foreach.final) == (2, 1)
    (body,) = foreach.bodies
    assert (body.arg, body.params, body.state_param, body.step) == (0, 2, 1, True)
    while_loop = op_def("cf.while_loop").rules["loop"]
    roles = {b.role: (b.arg, b.params, b.state_param, b.step) for b in while_loop.bodies}
    assert roles == {"body": (1, 1, 0, True), "condition": (0, 1, 0, False)}
