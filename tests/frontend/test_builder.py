"""The public builder: variables and types, operators on expressions, the
generated ``effir.op`` namespace, let-chains, control flow from Python
callables, module cells; printed text parses back equal; spans name the
Python line; eager runs equal interpreted ones."""

import inspect

import numpy as np
import pytest

import effir
from effir.ir import IRModule
from effir.ir.types import KeyType, RefType, TensorType, TupleType

F32 = "float32"


def roundtrip(module: IRModule) -> None:
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)


def test_type_spellings():
    assert effir.structural_equal(effir.Tensor[("n", 256), F32], TensorType(("n", 256), F32))
    assert effir.structural_equal(effir.Tensor[3], TensorType((3,), F32))
    assert isinstance(effir.Key, KeyType)
    assert effir.structural_equal(effir.Ref[effir.Key], RefType(KeyType()))
    t = effir.var("t", (effir.Key, effir.Tensor[(2,), "int32"])).type_annotation
    assert isinstance(t, TupleType) and len(t.fields) == 2
    with pytest.raises(effir.FrontendError, match="not an effir type"):
        effir.var("x", 3.5)


def test_operators_build_let_chain_that_round_trips_and_runs():
    mb = effir.ModuleBuilder()
    x = effir.var("x", effir.Tensor[(2, 3), F32])
    w = effir.var("w", effir.Tensor[(3, 3), F32])
    with mb.function("main", [x, w]):
        y = (x + 1) * 2 - x / 4
        z = -((y @ w) ** 2)
        mb.ret((z, x < y, x >= 1.5))
    module = mb.get()
    roundtrip(module)
    effir.check(module)
    xv = np.arange(6, dtype=F32).reshape(2, 3)
    wv = np.eye(3, dtype=F32) * 0.5
    z, lt, ge = effir.interpret(module, xv, wv)
    y = (xv + 1) * 2 - xv / 4
    np.testing.assert_allclose(z, -((y @ wv) ** 2), rtol=1e-6)
    np.testing.assert_array_equal(lt, xv < y)
    np.testing.assert_array_equal(ge, xv >= 1.5)


def test_python_numbers_take_the_other_operands_dtype():
    mb = effir.ModuleBuilder()
    x = effir.var("x", effir.Tensor[(2,), "float64"])
    with mb.function("main", [x]):
        mb.ret(x * 2 + 1.5)
    effir.check(mb.get())
    out = effir.interpret(mb.get(), np.array([1.0, 2.0]))
    assert out.dtype == np.float64


def test_op_namespace_covers_registry_with_signatures_and_docs():
    from effir.ir import all_ops

    for definition in all_ops():
        space = effir.op
        for part in definition.name.split("."):
            space = getattr(space, part)
        assert callable(space)
    sig = inspect.signature(effir.op.random.split)
    assert list(sig.parameters) == ["x0", "num"] and sig.parameters["num"].default == 2
    assert "indices_or_sections" in effir.op.split.__doc__
    assert "dense" in dir(effir.op.nn)


def test_attributes_are_validated_at_the_python_line():
    x = effir.var("x", effir.Tensor[(4,), F32])
    with pytest.raises(effir.FrontendError) as err:
        effir.op.sum(x, axis="zero")
    assert "axis" in err.value.message
    assert err.value.source_name == __file__
    with pytest.raises(effir.FrontendError, match="unknown attribute"):
        effir.op.random.split(x, nmu=3)
    with pytest.raises(effir.FrontendError, match="takes 2 argument"):
        effir.op.nn.dense(x)


def test_spans_point_at_the_building_line():
    mb = effir.ModuleBuilder()
    x = effir.var("x", effir.Tensor[(4,), F32])
    with mb.function("main", [x]):
        y = effir.op.tanh(x)  # the line
        mb.ret(y)
    line = inspect.currentframe().f_lineno - 2
    body = mb.get()["main"].body  # tanh(%x): the chain's last value ends it
    assert body.span.source.name == __file__ and body.span.line == line
    # a type error found later points at the Python line
    with mb.function("bad", [x]):
        mb.ret(effir.op.nn.dense(x, x))  # ill-typed
    bad_line = inspect.currentframe().f_lineno - 1
    with pytest.raises(effir.TypeError) as err:
        effir.check(mb.get())
    assert err.value.span.source.name == __file__ and err.value.line == bad_line


def test_eager_ops_match_interpreted():
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    np.testing.assert_array_equal(effir.op.tanh(x), np.tanh(x))
    parts = effir.op.split(x, indices_or_sections=3, axis=1)
    assert isinstance(parts, tuple) and len(parts) == 3
    k1, k2, k3 = effir.random.split(effir.random.key(0), num=3)
    assert k1 != k2
    with pytest.raises(effir.EvalError, match="nn.dense"):
        effir.op.nn.dense(x, x[:, :2])


def test_cells_without_ref_create_and_eager_state():
    mb = effir.ModuleBuilder()
    rng = mb.add_cell("rng", effir.random.key(0))
    mb.add_cell("bn_mean", np.zeros(16, F32))
    mb.add_cell("pair", (np.ones(2, F32), 3))
    x = effir.var("x", effir.Tensor[(8,), F32])
    with mb.function("main", [x]):
        mb.ret(effir.op.nn.dropout(x, rng, rate=0.5))
    module = mb.get()
    text = effir.astext(module)
    assert "global @rng: Ref[Key] = ref(random.key(0));" in text
    roundtrip(module)
    effir.check(module)
    xv = np.ones(8, F32)
    state = effir.State(module)
    built = effir.interpret(module, xv, state=state)
    eager = effir.op.nn.dropout(xv, rng, rate=0.5)  # the cell's own eager state
    np.testing.assert_array_equal(built, eager)
    assert state["rng"] == rng.eager.value


def foo1(x, y):
    return effir.cond(x < y, lambda: x + y, lambda: y * y)


def foo2(n):
    i, s = effir.while_loop(
        lambda st: st[0] < 10, lambda st: (st[0] + 1, st[1] + st[0] * n), (np.int32(0), np.int32(0))
    )
    return s


def test_control_flow_eager_and_built_agree():
    mb = effir.ModuleBuilder()
    x, y = effir.var("x", effir.Tensor[(), F32]), effir.var("y", effir.Tensor[(), F32])
    with mb.function("foo1", [x, y]):
        mb.ret(foo1(x, y))
    n = effir.var("n", effir.Tensor[(), "int32"])
    with mb.function("foo2", [n]):
        mb.ret(foo2(n))
    module = mb.get()
    roundtrip(module)
    effir.check(module)
    for a, b in ((1.0, 2.0), (3.0, 2.0)):
        av, bv = np.float32(a), np.float32(b)
        assert effir.interpret(module, av, bv, entry="foo1") == foo1(av, bv)
    assert effir.interpret(module, np.int32(3), entry="foo2") == foo2(np.int32(3)) == 135


def rnn(xs, h0, w):
    def step(x, h):
        h = effir.op.tanh(x + h @ w)
        return h * 2, h

    return effir.foreach(step, xs, h0)


def test_foreach_with_tuple_state_and_outputs():
    mb = effir.ModuleBuilder()
    xs = effir.var("xs", effir.Tensor[("t", 1, 3), F32])
    h0 = effir.var("h0", effir.Tensor[(1, 3), F32])
    w = effir.var("w", effir.Tensor[(3, 3), F32])
    with mb.function("main", [xs, h0, w]):
        mb.ret(rnn(xs, h0, w))
    module = mb.get()
    roundtrip(module)
    effir.check(module)
    rs = np.random.default_rng(0)
    args = [rs.standard_normal(s).astype(F32) for s in ((5, 1, 3), (1, 3), (3, 3))]
    outs, h = effir.interpret(module, *args)
    e_outs, e_h = rnn(*args)
    np.testing.assert_allclose(outs, e_outs, rtol=1e-6)
    np.testing.assert_allclose(h, e_h, rtol=1e-6)


def test_emit_outside_a_function_is_refused():
    with pytest.raises(effir.FrontendError, match="emit outside"):
        effir.emit(effir.op.tanh(effir.var("x")))


def test_a_deep_expression_built_outside_a_function():
    """No recursion proportional to the expression: type hints look a few
    levels deep only."""
    x = effir.var("x", effir.Tensor[(3,), F32])
    acc = x
    for _ in range(3000):
        acc = acc + 1.0
    mb = effir.ModuleBuilder()
    with mb.function("main", [x]):
        mb.ret(acc)
    out = effir.interpret(mb.get(), np.zeros(3, F32))
    np.testing.assert_array_equal(out, np.full(3, 3000, F32))


def test_the_static_type_of_a_deep_tuple_needs_no_recursion(default_recursion_limit) -> None:
    """``static_type`` (a cell's type from its initial value) walks a tuple
    expression on the trampoline: 3,000 nested tuples, under CPython's
    default recursion limit."""
    from effir.frontend.values import static_type
    from effir.ir.expr import Tuple, const

    expr = const(1.0)
    for _ in range(3000):
        expr = Tuple((expr, const(2)))
    t = static_type(expr)
    depth = 0
    while isinstance(t, TupleType):
        scalar = t.fields[1]
        assert isinstance(scalar, TensorType) and scalar.dtype == "int32"
        t, depth = t.fields[0], depth + 1
    assert depth == 3000 and isinstance(t, TensorType) and t.dtype == "float32"
