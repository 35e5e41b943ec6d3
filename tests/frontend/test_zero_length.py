"""Zero-length sequences through the frontends: a loop that runs zero times
gives empty outputs of the per-step output's shape (docs/semantics.md
§7.1), from a scripted, traced or parsed module the user did not check
(the interpreter types it when an empty loop needs the type), and eagerly
(the body traced aside once for its output's type: nothing runs)."""

import numpy as np
import pytest

import effir
from effir import Tensor

F32 = "float32"
EMPTY = np.zeros((0, 3), F32)
XS = Tensor[("t", 3), F32]
H = Tensor[(3,), F32]
N = Tensor[(), "int32"]


@effir.script
def doubled(xs: XS, h: H):
    outs = []
    for x in xs:
        h = np.tanh(x + h)
        outs.append(h * 2.0)
    return outs, h


def mapped(xs: XS, h: H):
    def step(x, s):
        return (x * 2.0, effir.op.sum(x, axis=0)), s + x

    return effir.foreach(step, xs, h)


def counted(n: N):
    """A while_loop whose condition is false at once when n <= 0."""

    def body(state):
        i, acc = state
        return effir.op.cast(i, dtype="float32") * acc, (i + 1, acc * 0.5)

    return effir.while_loop(lambda s: s[0] < n, body, (np.int32(0), np.ones(4, F32)), outputs=True)


def assert_same(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_array_equal(got, want)


def test_scripted_loop_over_nothing_runs_without_a_check() -> None:
    h = np.ones(3, F32)
    outs, final = doubled.interpret(EMPTY, h)
    assert outs.shape == (0, 3) and outs.dtype == np.float32
    np.testing.assert_array_equal(final, h)
    assert_same(effir.interpret(doubled.module, EMPTY, h, entry="doubled"), (outs, final))


def test_traced_loops_over_nothing_run_without_a_check_and_eagerly_alike() -> None:
    traced = effir.trace(mapped)
    h = np.arange(3, dtype=F32)
    got = traced.interpret(EMPTY, h)
    assert_same(got, ((np.zeros((0, 3), F32), np.zeros((0,), F32)), h))
    assert_same(mapped(EMPTY, h), got)  # the same Python run eagerly
    ones = np.ones((2, 3), F32)
    assert_same(mapped(ones, h), traced.interpret(ones, h))

    looped = effir.trace(counted)
    for n in (0, -2, 3):
        got = looped.interpret(np.int32(n))
        assert_same(counted(np.int32(n)), got)
    assert looped.interpret(np.int32(0))[0].shape == (0, 4)


def test_parsed_module_with_an_empty_loop_runs_without_a_check() -> None:
    module = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @main(%xs: Tensor[(t, 3), float32]) {\n"
        "  cf.foreach(fn (%x, %s: ()) { (sum(%x, axis=[0], keepdims=True), %s) }, %xs, ()).0\n"
        "}\n"
    )
    assert_same(effir.interpret(module, EMPTY), np.zeros((0, 1), F32))


def test_an_ill_typed_module_with_an_empty_loop_says_why() -> None:
    """The interpreter runs a module that does not type-check until the
    empty loop needs a type the module cannot give."""
    module = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @main(%xs: Tensor[(t, 3), float32], %n: int32) {\n"
        "  let %unused = fn () { add(%n, 1f) };\n"
        "  cf.foreach(fn (%x, %s: ()) { (%x, %s) }, %xs, ()).0\n"
        "}\n",
        source_name="bad.effir",
    )
    with pytest.raises(effir.EvalError) as err:
        effir.interpret(module, EMPTY, np.int32(1))
    assert err.value.location == "bad.effir:4:3"
    assert "the loop ran zero times and the program does not type-check" in err.value.message
