"""``effir.train_step`` (effir/train/step.py): one program for forward,
backward, optimiser update, next key and running statistics.

The step is checked against its definition, composed by hand from the
parts the library already has: ``effir.value_and_grad`` interpreted, then
the optimiser's update run eagerly on its gradients (numpy through effir's
operators). Both run the same operators on the same values, so they agree
bit for bit, over random optimisers, hyperparameters, data and numbers of
steps (hypothesis); the compiled step agrees with the interpreted one to
float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir import Tensor
from effir.backends.interpreter import interpret_a2
from effir.optim import SGD, Adam
from effir.train import TrainingError
from tests.support.isolated import run_isolated
from tests.support.train_step_model import WRT, H, batch, initial_params, loss


def by_hand(optimizer, params, seed, steps):
    """The step's definition: value_and_grad interpreted, the update eager."""
    module = effir.value_and_grad(loss.module, entry="loss", wrt=WRT)
    state = effir.State(module, seed=seed)
    values = [params[n] for n in WRT]
    opt_state = optimizer.init(values)
    losses = []
    for i in range(steps):
        x, y = batch(seed, i)
        named = dict(zip(WRT, values, strict=True))
        value, grads = interpret_a2(
            module,
            x,
            named["w"],
            named["gamma"],
            y,
            named["beta"],
            named["v"],
            entry="loss_grad",
            state=state,
        )
        values, opt_state = optimizer.update(values, grads, opt_state)
        losses.append(value)
    return losses, dict(zip(WRT, values, strict=True)), opt_state, state


optimizers = st.one_of(
    st.builds(
        SGD,
        lr=st.floats(1e-3, 0.5),
        momentum=st.floats(0.0, 0.99),
    ),
    st.builds(
        Adam,
        lr=st.floats(1e-4, 0.1),
        b1=st.floats(0.5, 0.95),
        b2=st.floats(0.9, 0.9999),
    ),
)


@settings(max_examples=12, deadline=None)
@given(optimizer=optimizers, seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 4))
def test_the_step_is_value_and_grad_then_the_update(optimizer, seed, steps) -> None:
    step = effir.train_step(loss, optimizer, wrt=WRT, target=None)
    run = step.init(initial_params(seed), seed=seed)
    losses = [step(run, *batch(seed, i)) for i in range(steps)]
    want_losses, want_params, want_opt, want_state = by_hand(
        optimizer, initial_params(seed), seed, steps
    )
    for got, want in zip(losses, want_losses, strict=True):
        np.testing.assert_array_equal(got, want)
    for n in WRT:
        np.testing.assert_array_equal(run.params[n], want_params[n], err_msg=n)
    for got, want in zip(run.opt_state, want_opt, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run.state["rng"].data, want_state["rng"].data)
    for got, want in zip(run.state["bn"], want_state["bn"], strict=True):
        np.testing.assert_array_equal(got, want)
    assert run.step == steps


def test_data_may_be_passed_by_name_and_the_loss_falls() -> None:
    step = effir.train_step(loss, Adam(lr=0.05), wrt=WRT, target=None)
    assert step.signature.data == ("x", "y")
    run = step.init([initial_params(0)[n] for n in WRT], seed=0)
    x, y = batch(0, 0)
    losses = [float(step(run, y=y, x=x)) for _ in range(30)]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses


def test_the_callers_arrays_are_not_the_runs() -> None:
    params = initial_params(0)
    step = effir.train_step(loss, SGD(lr=0.1), wrt=WRT, target=None)
    run = step.init(params, seed=0)
    params["w"][...] = 7.0
    assert not np.any(run.params["w"] == 7.0)


def test_a_module_and_its_entry_are_a_loss_too() -> None:
    module = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @fit(%x: Tensor[(4), float32], %a: Tensor[(4), float32]) {\n"
        "  sum(multiply(subtract(%a, %x), subtract(%a, %x)))\n}\n"
    )
    step = effir.train_step(module, SGD(lr=0.25, momentum=0.0), wrt=["a"], entry="fit", target=None)
    run = step.init({"a": np.zeros(4, "f4")})
    target = np.arange(4, dtype="f4")
    for _ in range(20):
        step(run, target)
    np.testing.assert_allclose(run.params["a"], target, atol=1e-4)
    # the step's module keeps the loss, so the run can be evaluated with it
    assert float(step.call("fit", target, run.params["a"])) < 1e-7


@pytest.mark.tvm
def test_the_compiled_step_equals_the_interpreted_one() -> None:
    seed = 5
    runs = []
    for target in (None, "llvm"):
        step = effir.train_step(loss, Adam(lr=0.01), wrt=WRT, target=target)
        assert (step.program is None) == (target is None)
        run = step.init(initial_params(seed), seed=seed)
        runs.append((run, [float(step(run, *batch(seed, i))) for i in range(3)]))
    (interpreted, li), (compiled, lc) = runs
    np.testing.assert_allclose(lc, li, rtol=1e-5)
    for n in WRT:
        np.testing.assert_allclose(compiled.params[n], interpreted.params[n], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(compiled.state["rng"].data, interpreted.state["rng"].data)
    np.testing.assert_allclose(compiled.state["bn"][1], interpreted.state["bn"][1], rtol=1e-5)


F32 = "float32"
SEQUENCE = ("t", 2, 4)  # of a symbolic length t


@effir.script
def sequence_loss(xs: Tensor[SEQUENCE, F32], w: Tensor[(3, 4), F32]) -> Tensor[(), F32]:
    total = np.float32(0.0)
    for x in xs:
        total = total + np.sum(effir.nn.dense(x, w))
    return total


SYMBOLIC_LENGTH = """
import numpy as np, effir
from effir.optim import SGD
from tests.train.test_train_step import sequence_loss

runs = []
for target in (None, "llvm"):
    step = effir.train_step(sequence_loss, SGD(lr=0.01), wrt=["w"], target=target)
    assert (step.program is None) == (target is None)
    run = step.init({"w": np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)})
    rng = np.random.default_rng(0)
    losses = [float(step(run, rng.standard_normal((t, 2, 4)).astype("float32"))) for t in (3, 5, 1)]
    runs.append((losses, run.params["w"]))
(li, wi), (lc, wc) = runs
np.testing.assert_allclose(lc, li, rtol=1e-5)
np.testing.assert_allclose(wc, wi, rtol=1e-5, atol=1e-6)
print("same")
"""


def test_a_compiled_step_of_a_loss_looping_over_a_symbolic_length() -> None:
    """A loss looping over a sequence of symbolic length ``t``: the compiled
    step (built for each length it is called with) equals the interpreted
    one. Its specialisation once failed with "cannot infer the argument
    types of this call"."""
    assert run_isolated(SYMBOLIC_LENGTH).check().stdout.split()[-1] == "same"


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"wrt": "w"}, r"wrt must name the trained parameters, as a list .*not the string 'w'"),
        ({"wrt": []}, r"wrt must name the trained parameters"),
        ({"wrt": ["w"], "entry": "nope"}, r"the module has no function @nope \(its functions: "),
        ({"wrt": ["w"], "name": "loss"}, r"the module already has a @loss: pass another name="),
    ],
)
def test_a_step_asked_for_wrongly_is_refused(kwargs, message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        effir.train_step(loss, SGD(), target=None, **kwargs)


def test_a_parameter_that_is_not_the_losses_is_refused_by_value_and_grad() -> None:
    with pytest.raises(effir.DifferentiationError, match=r"the entry has no parameter %u"):
        effir.train_step(loss, SGD(), wrt=["w", "u"], target=None)


def test_a_loss_that_is_no_function_is_refused() -> None:
    with pytest.raises(TrainingError, match="the loss must be an IRModule or an @effir.script"):
        effir.train_step(lambda x: x, SGD(), wrt=["x"], target=None)


def test_a_parameter_of_symbolic_shape_cannot_be_trained() -> None:
    module = effir.parse(
        '#[version = "0.0.5"]\ndef @main(%a: Tensor[(n), float32]) { sum(multiply(%a, %a)) }\n'
    )
    with pytest.raises(TrainingError, match=r"%a is a tensor of shape \(n\): a trained parameter"):
        effir.train_step(module, SGD(), wrt=["a"], target=None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"w": 1}, r"init: the parameters are w, gamma, beta, v; missing gamma, beta, v"),
        ({**initial_params(0), "u": 1}, r"no parameter 'u'"),
        ([1, 2], r"init: 4 parameters \(w, gamma, beta, v\), got 2"),
        (
            {**initial_params(0), "v": np.zeros((H, 1), "f4")},
            r"parameter v is a float32 array of shape \(4, 1\), where the loss takes float32 "
            r"of shape \(1, 4\)",
        ),
    ],
)
def test_parameters_that_are_not_the_losses_are_refused(params, message: str) -> None:
    step = effir.train_step(loss, SGD(), wrt=WRT, target=None)
    with pytest.raises(TrainingError, match=message):
        step.init(params)


def test_a_step_takes_the_run_first() -> None:
    step = effir.train_step(loss, SGD(), wrt=WRT, target=None)
    x, y = batch(0, 0)
    with pytest.raises(TrainingError, match=r"a step takes the run first \(step\(run, \*data\)\)"):
        step(x, y)
    with pytest.raises(effir.ArgumentError, match=r"@train_step takes 2 argument\(s\), got 1"):
        step(step.init(initial_params(0)), x)


# ------------------------------------------------------------------ a step written by hand
HAND = """#[version = "0.0.5"]
def @step(%x: Tensor[(4), float32], %a: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  let %g = multiply(2f, subtract(%a, %x));
  let %v1 = add(multiply(%v, 0.5f), %g);
  (sum(multiply(subtract(%a, %x), subtract(%a, %x))), (subtract(%a, multiply(%v1, 0.1f)),), (%v1,))
}
"""


def test_a_step_written_by_hand_runs_as_one_made_from_a_loss() -> None:
    from effir.train import TrainStep, step_signature

    module = effir.check(effir.parse(HAND))
    optimizer = SGD(lr=0.1, momentum=0.5)
    signature = step_signature(module, "step", ["a"], optimizer)
    assert signature.data == ("x",)
    step = TrainStep(module, signature, optimizer, name="step", target=None)
    run = step.init({"a": np.zeros(4, "f4")})
    target = np.arange(4, dtype="f4")
    for _ in range(40):
        step(run, target)
    np.testing.assert_allclose(run.params["a"], target, atol=1e-3)


@pytest.mark.parametrize(
    ("wrt", "optimizer", "message"),
    [
        (["a", "x"], SGD(), r"@step's parameters \(x, a, v\) do not take a, x in a row, after"),
        (["v"], SGD(), r"@step takes 0 value\(s\) after its parameters, where sgd's state is 1"),
        (["a"], Adam(), r"@step takes 1 value\(s\) after its parameters, where adam's state is 3"),
    ],
)
def test_a_step_that_breaks_the_convention_is_refused(wrt, optimizer, message: str) -> None:
    from effir.train import step_signature

    with pytest.raises(TrainingError, match=message):
        step_signature(effir.check(effir.parse(HAND)), "step", wrt, optimizer)
    with pytest.raises(TrainingError, match=r"the module has no function @nope"):
        step_signature(effir.check(effir.parse(HAND)), "nope", wrt, optimizer)
