"""effir.trace (hybridize): the same Python function runs eagerly on numpy
arrays and is recorded as IR; both agree. A Python if/while on a traced
value is refused at its line."""

import inspect

import numpy as np
import pytest

import effir

F32 = "float32"
S = effir.Tensor[(), F32]
I32 = effir.Tensor[(), "int32"]


def foo1(x, y):
    return effir.cond(x < y, lambda: x + y, lambda: y * y)


def foo2(n):
    def body(state):
        i, s = state
        return i + 1, s + i * n

    i, s = effir.while_loop(lambda state: state[0] < 10, body, (np.int32(0), np.int32(0)))
    return s


def test_textbook_examples_traced_and_eager():
    t1 = effir.trace(foo1, S, S)
    t2 = effir.trace(foo2, I32)
    for module in (t1.module, t2.module):
        effir.check(module)
        effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    for a, b in ((1.0, 2.0), (3.0, 2.0)):
        av, bv = np.float32(a), np.float32(b)
        assert t1.interpret(av, bv) == foo1(av, bv) == (a + b if a < b else b * b)
    assert t2.interpret(np.int32(2)) == foo2(np.int32(2)) == 90


rng = effir.cell("rng", effir.random.key(7))
bn = effir.cell("bn", (np.zeros(8, F32), np.ones(8, F32)))


def model(xs, h0, w_x, w_h, gamma, beta):
    """A 2-layer RNN step with dropout in a foreach and batch norm after."""

    def step(x, h):
        h = effir.op.tanh(effir.op.nn.dense(x, w_x) + effir.op.nn.dense(h, w_h))
        h = effir.op.nn.dropout(h, rng, rate=0.2)
        return h, h

    hs, h = effir.foreach(step, xs, h0)
    flat = effir.op.reshape(hs, newshape=[-1, 8])
    return effir.op.nn.batch_norm(flat, gamma, beta, bn, training=True), h


def test_model_eager_equals_traced():
    types = (
        effir.Tensor[("t", 2, 4), F32],
        effir.Tensor[(2, 8), F32],
        effir.Tensor[(8, 4), F32],
        effir.Tensor[(8, 8), F32],
        effir.Tensor[(8,), F32],
        effir.Tensor[(8,), F32],
    )
    traced = effir.trace(model, *types)
    module = traced.module
    assert set(module.cells) == {"rng", "bn"}
    effir.check(module)
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    rs = np.random.default_rng(1)
    args = [
        rs.standard_normal(t.shape if isinstance(t.shape[0], int) else (3, 2, 4)).astype(F32)
        for t in types
    ]
    state = effir.State(module)
    got = traced.interpret(*args, state=state)
    want = model(*args)  # eager: the cells' own state, from the same declarations
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["bn"][0], bn.eager.value[0], rtol=1e-5)
    assert state["rng"] == rng.eager.value


def python_if(x, y):
    if x < y:  # a Python if on a traced value
        return x
    return y


def python_while(x):
    while x < 10.0:
        x = x + 1.0
    return x


def test_python_control_flow_on_traced_values_is_refused():
    line = inspect.getsourcelines(python_if)[1] + 1
    with pytest.raises(effir.FrontendError) as err:
        effir.trace(python_if, S, S)
    assert err.value.line == line and err.value.source_name == __file__
    assert "effir.cond" in err.value.hint
    with pytest.raises(effir.FrontendError, match="while"):
        effir.trace(python_while, S)
    # eagerly the same functions run as Python
    assert python_if(np.float32(1), np.float32(2)) == 1


def test_trace_uses_annotations_and_names():
    def f(x: effir.Tensor[(3,), F32]):
        return effir.op.nn.relu(x) * 2.0

    traced = effir.trace(f)
    assert "f" in traced.module.functions
    x = np.array([-1, 0, 2], F32)
    np.testing.assert_array_equal(traced.interpret(x), f(x))
    with pytest.raises(effir.FrontendError, match="no type"):
        effir.trace(lambda x: x)


@effir.script
def scripted_step(
    x: effir.Tensor[(2, 4), F32], h: effir.Tensor[(2, 4), F32]
) -> (
    effir.Tensor[(2, 4), F32],
    effir.Tensor[(2, 4), F32],
):
    if np.sum(x) > 0.0:
        h = np.tanh(x + h)
    else:
        h = h * 0.5
    return h, h


def traced_model(xs, h0):
    outs, h = effir.foreach(scripted_step, xs, h0)  # a scripted function as a loop body
    return scripted_step(outs[0], h)


def test_trace_composes_with_scripted_functions():
    traced = effir.trace(traced_model, effir.Tensor[("t", 2, 4), F32], effir.Tensor[(2, 4), F32])
    module = traced.module
    assert set(module.functions) == {"traced_model", "scripted_step"}
    effir.check(module)
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    rs = np.random.default_rng(2)
    xs, h0 = rs.standard_normal((3, 2, 4)).astype(F32), rs.standard_normal((2, 4)).astype(F32)
    got = traced.interpret(xs, h0)
    want = traced_model(xs, h0)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
