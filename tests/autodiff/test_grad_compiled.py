"""The gradient program compiles (``effir.compile``) and equals the
interpreted one; a ``cf.foreach``'s backward is compiled as a loop kernel,
as its forward is. One small TVM build, in a separate process
(tests/support/isolated.py); in the nightly tier also a ``while_loop``'s backward
(as many steps as the forward ran), keys carried by loops on a tape, and
the GRU language model."""

from __future__ import annotations

import pytest

from tests.support.isolated import run_isolated

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)

RNN = """#[version = "0.0.5"]
def @main(%xs: Tensor[(n, 4, 8), float32], %h0: Tensor[(4, 8), float32],
          %w: Tensor[(8, 8), float32], %b: Tensor[(8), float32]) {
  let %step = fn (%x: Tensor[(4, 8), float32], %h: Tensor[(4, 8), float32]) {
    let %a = tanh(add(add(nn.dense(%h, %w), %x), %b));
    (sigmoid(%a), %a)
  };
  let %r = cf.foreach(%step, %xs, %h0);
  add(mean(%r.0), sum(multiply(%r.1, %r.1)))
}
"""


def check_compiled_gradient_equals_interpreted() -> None:
    import numpy as np

    import effir

    m = effir.parse(RNN)
    g = effir.value_and_grad(m, wrt=["xs", "h0", "w", "b"], checkpoint="loop")
    rng = np.random.default_rng(0)
    args = [
        rng.normal(size=(6, 4, 8)).astype("float32"),
        rng.normal(size=(4, 8)).astype("float32"),
        (rng.normal(size=(8, 8)) * 0.3).astype("float32"),
        rng.normal(size=8).astype("float32"),
    ]
    compiled = effir.compile(g, entry="main_grad")
    value, grads = compiled(*args, entry="main_grad")
    want_value, want = effir.interpret(g, *args, entry="main_grad")
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    (build,) = compiled.report.builds
    loops = build[3]
    # the forward loop, its reverse, and the loop over the run-time chunks
    # that sums the hoisted weight-gradient terms as "sqrt"'s segments do
    # (n is symbolic: runtime_segments.py)
    assert loops == 3, compiled.report.table()
    print("ok", compiled.report.table())


def check_while_loop_and_key_tape_gradients_compile() -> None:
    import numpy as np

    import effir
    from tests.support.loop_grad_programs import WHILE

    rng = np.random.default_rng(1)
    # a while_loop: its backward runs as many steps as the forward ran, 0 included
    g = effir.value_and_grad(effir.parse(WHILE), wrt=["x", "w"], checkpoint="loop")
    compiled = effir.compile(g, entry="main_grad")
    x, w = rng.normal(size=3), rng.normal(size=3)
    for limit in (0.0, 3.0, 20.0):
        value, grads = compiled(x, w, np.float64(limit), entry="main_grad")
        want_value, want = effir.interpret(g, x, w, np.float64(limit), entry="main_grad")
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        for got, ref in zip(grads, want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    # keys carried by loops (dropout in the bodies) go on a tape: it compiles
    from effir.runtime.values import PRNGKey
    from tests.support.loop_grad_programs import KEYED

    g = effir.value_and_grad(effir.parse(KEYED), wrt=["xs", "w"], checkpoint="loop")
    compiled = effir.compile(g, entry="main_grad")
    args = [rng.normal(size=(5, 3)), rng.normal(size=3), PRNGKey([0, 7]), np.int32(9)]
    value, grads = compiled(*args, entry="main_grad")
    want_value, want = effir.interpret(g, *args, entry="main_grad")
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    print("ok", compiled.report.table())


def test_compiled_gradient_equals_interpreted_and_the_backward_is_a_loop():
    run = run_isolated(
        "from tests.autodiff.test_grad_compiled import check_compiled_gradient_equals_interpreted"
        "; check_compiled_gradient_equals_interpreted()"
    )
    run.check()
    assert "ok" in run.stdout


PRINTING = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(3));
global @bn: Ref[(Tensor[(4), float32], Tensor[(4), float32])] =
  ref((zeros(shape=[4]), ones(shape=[4])));
def @main(%x: Tensor[(6, 3), float32], %w: Tensor[(4, 3), float32],
          %gamma: Tensor[(4), float32], %beta: Tensor[(4), float32]) {
  let %d = nn.dropout(tanh(nn.dense(%x, %w)), @rng, rate=0.5);
  debug.print(%d, label="d");
  let %n = nn.batch_norm(%d, %gamma, %beta, @bn, training=True);
  sum(tanh(%n))
}
"""


def check_printing_a2_gradient_compiles_with_the_default_pipeline() -> None:
    """The module value_and_grad returns is A2 (io.print, the key and the
    statistics threaded); effir.compile's default pipeline runs state passing
    on it again, which must leave it as it is."""
    import numpy as np

    import effir
    from effir.backends.interpreter import interpret_a2

    g = effir.value_and_grad(effir.parse(PRINTING), wrt=["x", "w", "gamma", "beta"])
    rng = np.random.default_rng(2)
    shapes = [(6, 3), (4, 3), (4,), (4,)]
    args = [rng.normal(size=s).astype("float32") for s in shapes]
    want_state, got_state = effir.State(g), effir.State(g)
    want_prints: list = []
    got_prints: list = []
    want = interpret_a2(
        g, *args, entry="main_grad", state=want_state, sink=lambda *p: want_prints.append(p)
    )
    compiled = effir.compile(g, entry="main_grad")
    got = compiled(*args, entry="main_grad", state=got_state, sink=lambda *p: got_prints.append(p))
    (value, grads), (want_value, want_grads) = got, want
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for a, b in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())
    assert [label for label, _ in got_prints] == [label for label, _ in want_prints] == ["d"]
    np.testing.assert_allclose(got_prints[0][1], want_prints[0][1], rtol=1e-6)
    assert got_state["rng"] == want_state["rng"]
    for a, b in zip(got_state["bn"], want_state["bn"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    print("ok")


def test_printing_a2_gradient_compiles_with_the_default_pipeline():
    run = run_isolated(
        "from tests.autodiff.test_grad_compiled import "
        "check_printing_a2_gradient_compiles_with_the_default_pipeline"
        "; check_printing_a2_gradient_compiles_with_the_default_pipeline()"
    )
    run.check()
    assert "ok" in run.stdout


def check_gru_lm_gradient_compiles() -> None:
    import numpy as np

    import effir
    from effir.backends.interpreter import interpret_a2
    from tests.support.effect_grad_programs import GRU_WRT, _gru_args

    m = effir.parse(open("examples/gru_lm.effir").read())
    g = effir.value_and_grad(m, wrt=GRU_WRT, checkpoint="loop")
    args = _gru_args()
    quiet = lambda *_: None  # noqa: E731
    want_value, want = interpret_a2(g, *args, entry="main_grad", state=effir.State(g), sink=quiet)
    compiled = effir.compile(g, entry="main_grad")  # the default pipeline, on A2
    value, grads = compiled(*args, entry="main_grad", state=effir.State(g), sink=quiet)
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    # the forward loop, its reverse and the run-time chunks' loop (t is symbolic)
    assert compiled.report.builds[0][3] == 3, compiled.report.table()
    print("ok")


@pytest.mark.nightly  # two builds
def test_while_loop_and_key_tape_gradients_compile():
    run = run_isolated(
        "from tests.autodiff.test_grad_compiled import "
        "check_while_loop_and_key_tape_gradients_compile"
        "; check_while_loop_and_key_tape_gradients_compile()"
    )
    run.check()
    assert "ok" in run.stdout


@pytest.mark.nightly  # a long build
def test_gru_lm_gradient_compiles_and_equals_interpreted():
    run = run_isolated(
        "from tests.autodiff.test_grad_compiled import check_gru_lm_gradient_compiles"
        "; check_gru_lm_gradient_compiles()"
    )
    run.check()
    assert "ok" in run.stdout
