"""The Python GRU LM and RNN-with-dropout-and-batch-norm (examples/*.py,
written with @effir.script and for effir.trace) equal the .effir examples
bit for bit for the same seed: results, final PRNG key and running
statistics, in effectful form and after state passing."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.transforms.state_passing import state_passing
from effir.runtime.values import PRNGKey

EXAMPLES = Path(__file__).parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rnn_args(seed: int):
    rs = np.random.default_rng(seed)

    def normal(*shape, scale=1.0):
        return (rs.standard_normal(shape) * scale).astype(np.float32)

    return (
        normal(5, 3, 8),
        normal(3, 16),
        normal(16, 8, scale=0.3),
        normal(16, 16, scale=0.3),
        normal(16, scale=0.1),
        1 + normal(16, scale=0.1),
        normal(16, scale=0.1),
    )


def gru_args(seed: int):
    rs = np.random.default_rng(seed)

    def normal(*shape, scale=0.1):
        return (rs.standard_normal(shape) * scale).astype(np.float32)

    return (
        rs.integers(0, 1000, (4, 2)).astype(np.int32),
        normal(1000, 32),
        normal(192, 32),
        normal(192, 64),
        normal(192),
        1 + normal(64),
        normal(64),
        normal(1000, 64),
        normal(2, 64),
    )


CASES = {"rnn_dropout_bn": rnn_args, "gru_lm": gru_args}


def same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, PRNGKey):
        assert a == b
    else:
        assert np.asarray(a).dtype == np.asarray(b).dtype
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def run(module, args, a2=False):
    state = effir.State(module)
    printed = []
    sink = lambda label, v: printed.append((label, v))  # noqa: E731
    if a2:
        result = interpret_a2(module, *args, state=state, sink=sink)
    else:
        result = effir.interpret(module, *args, state=state, sink=sink)
    return result, {name: state[name] for name in module.cells}, printed


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_examples_equal_the_effir_examples_bit_for_bit(name):
    example = load(name)
    reference = effir.check(effir.parse((EXAMPLES / f"{name}.effir").read_text()))
    scripted = effir.check(example.main.module)
    traced = effir.check(example.traced())
    for module in (scripted, traced):
        effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    for seed in (0, 1):
        args = CASES[name](seed)
        want = run(reference, args)
        for module in (scripted, traced):
            got = run(module, args)
            same(got[0], want[0])
            for cell in want[1]:
                same(got[1][cell], want[1][cell])
            assert [p[0] for p in got[2]] == [p[0] for p in want[2]]
    # after state passing (A2) too
    args = CASES[name](2)
    want = run(state_passing(reference), args, a2=True)
    got = run(state_passing(scripted), args, a2=True)
    same(got[0], want[0])


def test_python_examples_run_eagerly():
    example = load("rnn_dropout_bn")
    args = rnn_args(3)
    normed, h = example.model(*args)
    assert normed.shape == (15, 16) and h.shape == (3, 16)
    normed2, _ = example.main(*args)  # the scripted function's Python, eagerly
    assert normed2.shape == (15, 16)


def check_compiled(name: str) -> None:
    """The scripted and the traced example compiled by TVM give the
    interpreter's results, key and statistics, and the compiled .effir
    example's bit for bit (run in a process of its own: compiled code)."""
    example = load(name)
    reference = effir.check(effir.parse((EXAMPLES / f"{name}.effir").read_text()))
    args = CASES[name](4)
    s_ref = effir.State(reference)
    ref = effir.compile(reference)(*args, state=s_ref)
    for module in (effir.check(example.main.module), effir.check(example.traced())):
        s_int, s_comp = effir.State(module), effir.State(module)
        want = effir.interpret(module, *args, state=s_int)
        got = effir.compile(module)(*args, state=s_comp)
        for g, w in zip(_leaves(got), _leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        same(got, ref)
        for cell in module.cells:
            same(s_comp[cell], s_ref[cell])
            if isinstance(s_int[cell], PRNGKey):
                assert s_int[cell] == s_comp[cell]
    print("ok")


def _leaves(value):
    return [leaf for v in value for leaf in _leaves(v)] if isinstance(value, tuple) else [value]


@pytest.mark.tvm
@pytest.mark.parametrize("name", sorted(CASES))
def test_scripted_and_traced_examples_compile_and_agree(name):
    from tests.support.isolated import run_isolated

    result = run_isolated(
        f"from tests.frontend.test_examples import check_compiled; check_compiled({name!r})"
    )
    result.check()
    assert "ok" in result.stdout


@pytest.mark.tvm
def test_scripted_examples_through_the_pass_pipeline():
    """Every registered optimisation, after the effect passes, on the scripted
    models (verified after each pass) keeps their results bit for bit."""
    from effir.passes.infra.pipeline import run_pipeline
    from effir.passes.infra.transform import PassContext, registered_passes

    passes = registered_passes()
    # grad is a transformation, not an optimisation (it adds a gradient
    # function, and these models return tuples: it needs output=)
    skipped = ("split-keys", "explicate", "state-passing", "grad")
    names = [n for n in sorted(passes) if n not in skipped]
    steps = [s for n in names for s in (["to-anf"] if passes[n].requires else []) + [n]]
    for name, make_args in sorted(CASES.items()):
        a1 = effir.check(load(name).main.module)
        context = PassContext(verify=True)
        a2 = run_pipeline(a1, "explicate,state-passing", context)
        optimised = effir.check(run_pipeline(a2, ",".join(steps), context))
        args = make_args(5)
        want = run(a1, args)
        got = run(optimised, args, a2=True)
        same(got[0], want[0])
        for cell in want[1]:
            same(got[1][cell], want[1][cell])
