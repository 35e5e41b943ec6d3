"""numpy on traced values: ``effir.trace`` converts a numpy call through
numpy's own dispatch (``__array_ufunc__``, ``__array_function__``) with the
table ``@effir.script`` converts with (frontend/numpy_spellings.py), so the
same function traced and scripted gives the same IR; what neither converts
is a located FrontendError naming the effir.op function. ``==``/``!=`` on a
value being built is refused naming ``effir.op.equal``: its Python bool
would fix one branch of the program."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from tests.frontend.helpers import define, marked_line

F32 = "float32"
X = effir.Tensor[(3, 4), F32]
S = effir.Tensor[(), F32]


def reductions(x: X):
    return np.sum(np.tanh(x) * 2.0, axis=0) + np.mean(np.maximum(x, 0.0), axis=0)


def test_np_sum_on_a_traced_value_is_the_sum_operator():
    """The call numpy's TypeError escaped from ("operand 'Var' does not
    support ufuncs"), now the operators script converts it to."""
    traced = effir.trace(reductions)
    scripted = effir.script(reductions)
    effir.assert_structural_equal(traced.module, scripted.module)
    x = np.linspace(-1, 1, 12, dtype=F32).reshape(3, 4)
    np.testing.assert_allclose(traced.interpret(x), reductions(x), rtol=1e-6)


CONSTANT = np.array([0.5, -1.0, 2.0, 0.25], F32)


class Expressions:
    """Random expressions over ``x`` and ``y`` (float32, (3, 4)) written
    with the numpy spellings of the shared table, a numpy array on the
    left of an operator included."""

    def __init__(self, draw) -> None:
        self.draw = draw

    def expr(self, depth: int = 0) -> str:
        kind = self.draw(st.integers(0, 7 if depth < 3 else 0))
        sub = lambda: self.expr(depth + 1)  # noqa: E731
        if kind == 0:
            # every leaf holds a traced value: numpy on constants alone is
            # numpy's when traced (it runs), an operator when scripted
            return self.draw(st.sampled_from(["x", "y", "(x * 0.5)", "(CONSTANT - y)"]))
        if kind == 1:
            fn = self.draw(st.sampled_from(["tanh", "negative", "exp"]))
            return f"np.{fn}(np.tanh({sub()}))"
        if kind == 2:
            fn = self.draw(st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum"]))
            return f"np.{fn}({sub()}, {sub()})"
        if kind == 3:
            fn = self.draw(st.sampled_from(["sum", "mean", "max", "min"]))
            axis = self.draw(st.sampled_from([0, 1]))
            return f"np.{fn}({sub()} + x, axis={axis}, keepdims=True)"
        if kind == 4:
            cmp = self.draw(st.sampled_from(["less", "greater", "less_equal", "greater_equal"]))
            a, b = sub(), sub()
            return f"np.where(np.{cmp}({a}, {b}), {a} + y, {b} + x)"
        if kind == 5:
            return f"(CONSTANT * {sub()} + y)"  # an ndarray on the left: __array_ufunc__
        if kind == 6:
            return f"np.stack([{sub()} + x, y])[1]"
        return f"np.transpose(np.reshape({sub()} + y, (4, 3)))"


@st.composite
def programs(draw) -> str:
    body = Expressions(draw).expr()
    return f"def f(x: X, y: X):\n    return {body}\n"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_traced_numpy_equals_scripted_and_eager(source: str) -> None:
    """The same function traced and scripted: structurally equal modules,
    and interpreted, numpy's own eager result."""
    fn = define(source, X=X, CONSTANT=CONSTANT)["f"]
    traced, scripted = effir.trace(fn), effir.script(fn)
    effir.assert_structural_equal(traced.module, scripted.module)
    rs = np.random.default_rng(len(source))
    x, y = (rs.uniform(-1, 1, (3, 4)).astype(F32) for _ in range(2))
    got = traced.interpret(x, y)
    np.testing.assert_allclose(got, fn(x, y), rtol=2e-5, atol=1e-6)


def cumsum(x: X):
    return np.cumsum(x)  # <-


def sum_with_initial(x: X):
    return np.sum(x, initial=1.0)  # <-


def add_reduce(x: X):
    return np.add.reduce(x)  # <-


def as_array(x: X):
    return np.float32(x)  # <-


def absolute(x: X):
    return np.abs(x)  # <-


@pytest.mark.parametrize(
    ("fn", "message", "hint"),
    [
        (cumsum, "np.cumsum is not supported on effir values", "write effir.op.cumsum"),
        (
            sum_with_initial,
            "np.sum is converted only as np.sum(x, axis=..., keepdims=...)",
            "effir.op.sum",
        ),
        (add_reduce, "np.add.reduce is not supported on effir values", "effir.op.sum"),
        (as_array, "a numpy array of an effir value", "effir.op.cast"),
        (absolute, "np.absolute is not supported", "effir.op.maximum(x, effir.op.negative(x))"),
    ],
)
def test_numpy_outside_the_table_is_a_located_frontend_error(fn, message, hint) -> None:
    line = marked_line(inspect.getsource(fn)) + inspect.getsourcelines(fn)[1] - 1
    with pytest.raises(effir.FrontendError) as err:
        effir.trace(fn)
    assert message in err.value.message and hint in err.value.hint, err.value
    assert (err.value.source_name, err.value.line) == (__file__, line)


def test_script_refuses_the_same_spellings_with_the_same_words() -> None:
    source = "def f(x: X):\n    return np.cumsum(x)\n"
    with pytest.raises(effir.FrontendError) as err:
        effir.script(define(source, X=X)["f"]).module  # noqa: B018 (converts)
    assert err.value.message == "np.cumsum is not supported on effir values"
    assert "write effir.op.cumsum" in err.value.hint and err.value.line == 2


def chooses(a: S, b: S):
    return effir.cond(a == b, lambda: a, lambda: b)  # <-


def differs(a: S, b: S):
    return effir.cond(a != b, lambda: a, lambda: b)  # <-


@pytest.mark.parametrize(
    ("fn", "symbol", "op"), [(chooses, "==", "equal"), (differs, "!=", "not_equal")]
)
def test_comparing_traced_values_with_python_equality_is_refused(fn, symbol, op) -> None:
    """``a == b`` was Python identity, and effir.cond took the bool: one
    branch baked in, silently."""
    line = marked_line(inspect.getsource(fn)) + inspect.getsourcelines(fn)[1] - 1
    with pytest.raises(effir.FrontendError) as err:
        effir.trace(fn)
    assert f"`{symbol}` on an effir value being built" in err.value.message
    assert f"effir.op.{op}(a, b)" in err.value.hint
    assert (err.value.source_name, err.value.line) == (__file__, line)


def test_python_equality_is_refused_in_builder_blocks_too() -> None:
    mb = effir.ModuleBuilder()
    a, b = effir.var("a", S), effir.var("b", S)
    with pytest.raises(effir.FrontendError, match="effir.op.equal"):
        with mb.function("main", [a, b]):
            mb.ret(effir.cond(a == b, lambda: a, lambda: b))


def test_equality_stays_identity_outside_building_and_inside_effir() -> None:
    """Nodes compare by identity where the IR's algorithms compare them (and
    in user code that is not building a function)."""
    a, b = effir.var("a", S), effir.var("b", S)
    assert a == a and a != b and not (a == b)
    assert {a: 1, b: 2}[b] == 2 and [a, b].index(b) == 1
    traced = effir.trace(lambda a, b: effir.op.equal(a, b), S, S)
    assert traced.interpret(np.float32(1), np.float32(1)) == np.True_


def test_generated_comparisons_compare_for_their_caller() -> None:
    """A dataclass's generated ``__eq__`` (code without a source) compares
    nodes on its caller's behalf: called by user code while building, the
    comparison is the user's, and refused."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Pair:
        left: object
        right: object

    def f(x: S, y: S):
        same = Pair(x, x) == Pair(x, y)  # the generated __eq__ compares x with y
        return effir.cond(same, lambda: x, lambda: y)

    with pytest.raises(effir.FrontendError, match="effir.op.equal"):
        effir.trace(f)
    a, b = effir.var("a", S), effir.var("b", S)
    assert Pair(a, a) != Pair(a, b)  # outside building: identity, as before
