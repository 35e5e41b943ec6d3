"""Functions are first-class (effir/ir/program.py): ``effir.interpret``,
``effir.compile``, ``effir.grad``, ``effir.value_and_grad`` and
``effir.State`` take a scripted or traced function as they take a module,
the function's own name being the entry; ``effir.compile(module,
entry=...)`` sets what a call runs; an entry that does not exist is an
error listing the entries that do and naming ``entry=``. Compiled code
runs in a subprocess (tests/support/isolated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from tests.support.isolated import run_isolated

F32 = "float32"
VEC = effir.Tensor[("n",), F32]

rng = effir.cell("first_class_rng", effir.random.key(3))


@effir.script
def loss(x: VEC, w: VEC) -> effir.Tensor[(), F32]:
    return np.sum(np.tanh(x * w) ** 2.0)


@effir.script
def noisy(x: VEC) -> VEC:
    return effir.nn.dropout(x, rng, rate=0.5)


def scale(x: VEC, w: VEC):
    return effir.op.multiply(x, w)


X = np.array([0.5, -1.0, 2.0], F32)
W = np.array([1.0, 0.25, -0.5], F32)


def _numeric_grad(f, w: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    out = np.zeros_like(w)
    for i in range(w.size):
        up, down = w.copy(), w.copy()
        up[i] += eps
        down[i] -= eps
        out[i] = (f(up) - f(down)) / (2 * eps)
    return out


def test_interpret_takes_a_scripted_function():
    got = effir.interpret(loss, X, W)
    np.testing.assert_allclose(got, loss(X, W), rtol=1e-6)
    np.testing.assert_allclose(effir.interpret(loss, x=X, w=W), got)


def test_interpret_takes_a_traced_function():
    traced = effir.trace(scale)
    np.testing.assert_array_equal(effir.interpret(traced, X, W), X * W)


def test_state_of_a_function_holds_its_cells():
    state = effir.State(noisy)
    assert list(state) == ["first_class_rng"]
    first = effir.interpret(noisy, X, state=state)
    second = effir.interpret(noisy, X, state=state)
    fresh = effir.interpret(noisy, X, state=effir.State(noisy))
    np.testing.assert_array_equal(first, fresh)  # the same key from a fresh state
    assert state["first_class_rng"] != effir.State(noisy)["first_class_rng"]
    assert first.shape == second.shape == X.shape


def test_value_and_grad_of_a_function_is_a_program():
    program = effir.value_and_grad(loss, wrt=["w"])
    assert isinstance(program, effir.Program)
    assert program.entry == "loss_grad" and "loss" in program.module.functions
    value, (dw,) = effir.interpret(program, X, W)
    np.testing.assert_allclose(value, loss(X, W), rtol=1e-6)
    want = _numeric_grad(lambda w: float(loss(X, w)), W.astype(np.float64).astype(F32))
    np.testing.assert_allclose(dw, want, rtol=1e-2, atol=1e-3)
    (only,) = effir.interpret(effir.grad(loss, wrt="w"), X, W)
    np.testing.assert_array_equal(only, dw)


@effir.script
def noisy_loss(x: VEC, w: VEC) -> effir.Tensor[(), F32]:
    return np.sum(effir.nn.dropout(np.tanh(x * w), rng, rate=0.5))


def test_the_gradient_of_an_effectful_function_threads_its_state():
    # The gradient program is state-passing: effir.interpret runs it as a
    # compiled call does, the key in the State advancing.
    program = effir.value_and_grad(noisy_loss, wrt="w")
    state = effir.State(program)
    first, (dw,) = effir.interpret(program, X, W, state=state)
    eager_state = effir.State(noisy_loss)
    assert first == effir.interpret(noisy_loss, X, W, state=eager_state)
    assert state["first_class_rng"] == eager_state["first_class_rng"]
    again, _ = effir.interpret(program, X, W, state=state)
    assert again == effir.interpret(noisy_loss, X, W, state=eager_state)
    assert dw.shape == W.shape and state["first_class_rng"] == eager_state["first_class_rng"]


def test_grad_of_a_module_is_still_a_module():
    out = effir.grad(loss.module, entry="loss", wrt="w")
    assert isinstance(out, effir.IRModule) and "loss_grad" in out.functions


@pytest.mark.tvm
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: effir.interpret(loss.module, X, W), effir.EvalError),
        (lambda: effir.interpret(loss, X, W, entry="nope"), effir.EvalError),
        (lambda: effir.grad(loss.module), effir.DifferentiationError),
        (lambda: effir.value_and_grad(loss, entry="@nope"), effir.DifferentiationError),
        (lambda: effir.compile(loss.module), effir.CompileError),
    ],
)
def test_a_missing_entry_lists_the_functions_and_names_entry(call, error):
    with pytest.raises(error) as caught:
        call()
    message = caught.value.message
    assert "has no function @" in message
    assert "(its functions: @loss)" in message
    assert "entry= names the function to run" in message


@pytest.mark.tvm
def test_what_is_not_a_program_is_refused_by_name():
    with pytest.raises(effir.EvalError, match="effir.interpret takes an effir.IRModule or a"):
        effir.interpret(lambda x: x, X)
    with pytest.raises(effir.DifferentiationError, match="not function"):
        effir.value_and_grad(scale)
    with pytest.raises(effir.CompileError, match="not str"):
        effir.compile("def @main() { 0 }")


def test_a_bad_entry_type_is_an_argument_error():
    with pytest.raises(effir.ArgumentError, match="entry= names the function to run"):
        effir.interpret(loss, X, W, entry=3)
    with pytest.raises(effir.DifferentiationError, match="entry= names a function of the program"):
        effir.grad(loss, entry=3)


def test_a_state_of_what_is_not_a_program_is_refused():
    with pytest.raises(
        effir.backends.state.StateError, match="effir.State takes an effir.IRModule"
    ):
        effir.State("main")


# ---------------------------------------------------------------- compiled
def check_compile_a_function() -> None:
    compiled = effir.compile(loss)
    assert compiled.entry == "loss"
    np.testing.assert_allclose(compiled(X, W), effir.interpret(loss, X, W), rtol=1e-5)
    program = effir.value_and_grad(loss, wrt=["w"])
    value, (dw,) = effir.compile(program)(X, W)
    ref_value, (ref_dw,) = effir.interpret(program, X, W)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-5, atol=1e-6)
    traced = effir.compile(effir.trace(scale))
    np.testing.assert_array_equal(traced(X, W), X * W)
    noisy = effir.value_and_grad(noisy_loss, wrt="w")
    state, ref_state = effir.State(noisy), effir.State(noisy)
    for _ in range(2):
        value, (dw,) = effir.compile(noisy)(X, W, state=state)
        ref_value, (ref_dw,) = effir.interpret(noisy, X, W, state=ref_state)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(dw, ref_dw, rtol=1e-5, atol=1e-6)
        assert state["first_class_rng"] == ref_state["first_class_rng"]
    print("ok")


def check_entry_sets_what_a_call_runs() -> None:
    import tempfile

    module = effir.parse(
        """#[version = "0.0.5"]
def @decode(%x: Tensor[(n), float32]) -> Tensor[(n), float32] { negative(%x) }
def @encode(%x: Tensor[(n), float32]) -> Tensor[(n), float32] { exp(%x) }
"""
    )
    compiled = effir.compile(module, entry="decode")
    np.testing.assert_array_equal(compiled(X), -X)
    np.testing.assert_allclose(compiled(X, entry="encode"), np.exp(X), rtol=1e-6)
    try:
        compiled(X, entry="nope")
    except effir.ArgumentError as err:  # as the interpreter and an artifact raise
        assert "(its functions: @decode, @encode)" in err.message, err.message
        assert "entry=" in err.message
    else:
        raise AssertionError("a missing entry ran")
    with tempfile.TemporaryDirectory() as tmp:
        alone = effir.compile(module, entry="decode")
        alone(X)
        alone.export(f"{tmp}/decode")
        np.testing.assert_array_equal(effir.load(f"{tmp}/decode")(X), -X)
    print("ok")


@pytest.mark.tvm
@pytest.mark.parametrize("check", ["check_compile_a_function", "check_entry_sets_what_a_call_runs"])
def test_compiled(check: str) -> None:
    done = run_isolated(f"from tests.frontend.test_first_class import {check}; {check}()")
    assert done.check().stdout.strip().endswith("ok")
