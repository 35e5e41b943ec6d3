"""A whole cf.foreach compiled into one TVM function (effir/backends/tvm/loop/),
checked against the interpreter: a GRU (fused, symbolic batch, one build per
batch and none per length; lengths 0, 1 and not a multiple of the row tile;
as the interpreter's loop kernel; as effir.compile's pipeline leaves it;
unaligned and strided inputs), an LSTM-like tuple state with tuple outputs
(serial and on the thread pool), a scan with () outputs and a scalar state,
a map with () state, a key carried as state (bit-exact random numbers), a
captured primitive function, and the errors a user can meet."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.backends.tvm.driver.compile import PIPELINE
from effir.backends.tvm.loop import LoopKernel, build_loop, lower_loop
from effir.backends.tvm.loop.cpu import schedule as cpu_schedule
from effir.backends.tvm.runtime.errors import BackendError
from effir.ir.expr import Call
from effir.ir.visitor import free_vars
from effir.passes.infra.pipeline import run_pipeline
from effir.runtime.values import PRNGKey
from tests.support.loop_programs import (
    GRU,
    assert_close,
    foreach_of,
    gru_inputs,
    module,
    uniform,
)


@pytest.fixture(scope="module")
def gru() -> tuple[effir.IRModule, Call, LoopKernel]:
    mod = module(GRU)
    call, body, _ = foreach_of(mod)
    return mod, call, build_loop(body, module=mod)


@pytest.mark.parametrize(("t", "b"), [(11, 2), (1, 8), (0, 2), (16, 8)])
def test_gru_matches_the_interpreter(gru, t: int, b: int) -> None:
    """Lengths around the prologue's row tile of 8; batches that tile the
    rows (8) and that do not (2): one build per batch, none per length."""
    mod, _, kernel = gru
    xs, h0, w, u, bias = gru_inputs(np.random.default_rng(t * 10 + b), t, b)
    assert [v.name_hint for v in kernel.captured] == ["w", "u", "bias"]
    if t:
        expected = effir.interpret(mod, xs, h0, w, u, bias)
    else:  # the interpreter cannot tell the shape of no outputs of symbolic shape
        expected = (np.zeros((0, b, 16), np.float32), h0)
    assert_close(kernel(xs, h0, w, u, bias), expected)
    assert kernel.builds <= 2
    assert kernel.specialise({"b": b}).lowered.unscheduled == []  # every block got its schedule


def test_gru_runs_as_the_interpreters_foreach_kernel(gru) -> None:
    """The interpreter's hook: the whole loop runs compiled, the captured
    weights read from the body closure's environment."""
    mod, call, kernel = gru
    args = gru_inputs(np.random.default_rng(1), 5, 2)
    compiled = effir.interpret(mod, *args, kernels={call: kernel.run_foreach})
    assert_close(compiled, effir.interpret(mod, *args))


def test_the_body_as_effir_compile_leaves_it() -> None:
    """After the executor's whole pipeline (O2, fuse, lower-tvm): every
    operator in a primitive function, the cell inlined by partial-eval."""
    source = module(GRU, passes="")
    mod = effir.check(run_pipeline(source, PIPELINE))
    call, body, bound = foreach_of(mod)
    kernel = build_loop(body, functions=bound, module=mod)
    args = gru_inputs(np.random.default_rng(3), 6, 2)
    compiled = effir.interpret(mod, *args, kernels={call: kernel.run_foreach})
    assert_close(compiled, effir.interpret(source, *args))


def test_inputs_need_not_be_aligned_or_contiguous(gru) -> None:
    """numpy arrays at odd addresses, a strided view: zero-copy where the
    layout allows, and no misaligned vector access ([RULE LOOPFN-ALIGN])."""
    mod, _, kernel = gru
    xs, h0, w, u, bias = gru_inputs(np.random.default_rng(2), 9, 2)
    raw = np.empty(w.size + 1, np.float32)
    shifted = raw[1:].reshape(w.shape)
    shifted[...] = w
    strided = np.repeat(u, 2, axis=1)[:, ::2]
    assert_close(kernel(xs, h0, shifted, strided, bias), effir.interpret(mod, xs, h0, w, u, bias))


# --------------------------------------------------- state and output shapes
LSTM = """
def @main(%xs: Tensor[(t, 2, 8), float32], %h0: Tensor[(2, 16), float32],
          %c0: Tensor[(2, 16), float32], %w: Tensor[(64, 8), float32],
          %u: Tensor[(64, 16), float32]) {
  let %step = fn (%x: Tensor[(2, 8), float32],
                  %s: (Tensor[(2, 16), float32], Tensor[(2, 16), float32])) {
    let %g = nn.dense(%x, %w) + nn.dense(%s.0, %u);
    let %gs = split(%g, indices_or_sections=4, axis=1);
    let %c = sigmoid(%gs.1) * %s.1 + sigmoid(%gs.0) * tanh(%gs.3);
    let %h = sigmoid(%gs.2) * tanh(%c);
    ((%h, sum(%c, axis=[1])), (%h, %c))
  };
  cf.foreach(%step, %xs, (%h0, %c0))
}
"""


@pytest.mark.parametrize("threads", ["serial", "parallel"])
def test_tuple_state_and_tuple_outputs(threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with every contraction and elementwise block on the thread pool
    (the threshold lowered: these sizes are too small to pay for it)."""
    if threads == "parallel":
        monkeypatch.setattr(cpu_schedule, "PARALLEL_MIN_WORK", 1)
    mod = module(LSTM)
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body, parallel=threads == "parallel")
    rng = np.random.default_rng(3)
    args = (
        uniform(rng, 10, 2, 8),
        uniform(rng, 2, 16),
        uniform(rng, 2, 16),
        uniform(rng, 64, 8, scale=0.4),
        uniform(rng, 64, 16, scale=0.3),
    )
    xs, h0, c0, w, u = args
    weights = {"w": w, "u": u}
    result = kernel(xs, (h0, c0), *(weights[v.name_hint] for v in kernel.captured))
    assert_close(result, effir.interpret(mod, *args))


SCAN = """
def @main(%xs: Tensor[(t, 4, 16), float32], %s0: Tensor[(), float32],
          %v: Tensor[(16), float32]) {
  let %step = fn (%x: Tensor[(4, 16), float32], %s: Tensor[(), float32]) {
    ((), %s * 0.5f + sum(%x * %v))
  };
  cf.foreach(%step, %xs, %s0)
}
"""


def test_scan_with_unit_outputs_and_a_scalar_state() -> None:
    mod = module(SCAN, passes="")
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body)
    rng = np.random.default_rng(4)
    xs, s0, v = uniform(rng, 13, 4, 16), np.float32(0.25), uniform(rng, 16)
    outputs, final = kernel(xs, s0, v)
    assert outputs == ()
    assert_close((outputs, final), effir.interpret(mod, xs, np.asarray(s0), v))


INVARIANT = """
def @main(%xs: Tensor[(t, 4, 16), float32], %h0: Tensor[(4, 16), float32],
          %acc0: Tensor[(64, 48), float32], %w: Tensor[(16, 16), float32]) {
  let %step = fn (%x: Tensor[(4, 16), float32],
                  %s: (Tensor[(4, 16), float32], Tensor[(64, 48), float32])) {
    let %h = tanh(nn.dense(%x + %s.0, %w));
    (%h, (%h, %s.1))
  };
  cf.foreach(%step, %xs, (%h0, %acc0))
}
"""


@pytest.mark.parametrize("t", [0, 1, 5])
def test_a_state_leaf_returned_unchanged_is_not_copied_per_step(t: int) -> None:
    """The reverse loop of a gradient carries accumulators its hoisted terms
    leave unchanged: such a leaf is read from the initial state and copied
    to the final one once, never double-buffered (a copy of it per step)."""
    mod = module(INVARIANT, passes="")
    _, body, _ = foreach_of(mod)
    tir = lower_loop(body, {}, list(free_vars(body)), {}, None, False).func.script()
    assert "(2, 4, 16)" in tir and "(2, 64, 48)" not in tir
    kernel = build_loop(body)
    rng = np.random.default_rng(5)
    args = (uniform(rng, t, 4, 16), uniform(rng, 4, 16), uniform(rng, 64, 48), uniform(rng, 16, 16))
    xs, h0, acc0, w = args
    assert_close(kernel(xs, (h0, acc0), w), effir.interpret(mod, *args))


MAP = """
def @main(%xs: Tensor[(t, 3, 32), float32], %w: Tensor[(32, 32), float32]) {
  let %step = fn (%x: Tensor[(3, 32), float32], %s: ()) {
    (tanh(nn.dense(%x, %w)), %s)
  };
  cf.foreach(%step, %xs, ())
}
"""


def test_map_with_unit_state() -> None:
    """Nothing depends on the state: the whole product is hoisted and
    batched over the steps; the step only applies tanh."""
    mod = module(MAP)
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body)
    rng = np.random.default_rng(5)
    xs, w = uniform(rng, 6, 3, 32), uniform(rng, 32, 32, scale=0.2)
    outputs, final = kernel(xs, (), w)
    assert final == ()
    assert_close((outputs, final), effir.interpret(mod, xs, w))


NOISY = """
def @main(%xs: Tensor[(t, 8), float32], %key: Key) {
  let %step = fn (%x: Tensor[(8), float32], %k: Key) {
    let %keys = random.split(%k);
    let %noise = random.normal(%keys.0, shape=[8]);
    let %mask = random.bernoulli(%keys.0, p=0.25, shape=[8]);
    ((%noise, %mask, where(%mask, %x + %noise, %x)), %keys.1)
  };
  cf.foreach(%step, %xs, %key)
}
"""


def test_a_key_carried_as_state_draws_the_same_bits() -> None:
    """Keys, normal draws and the Bernoulli mask bit for bit; the sum with
    the draws to float tolerance (LLVM may contract it into an FMA)."""
    mod = module(NOISY, passes="")
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body)
    xs = uniform(np.random.default_rng(6), 9, 8)
    key = PRNGKey([0, 42])
    (noise, mask, mixed), final = kernel(xs, key)
    (want_noise, want_mask, want_mixed), want_final = effir.interpret(mod, xs, key)
    assert final.dtype == np.uint32 and np.array_equal(final, want_final.data)
    np.testing.assert_array_equal(noise, want_noise)
    assert mask.dtype == np.bool_ and mask.any() and not mask.all()
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_array_equal(mixed[~mask], xs[~mask])
    assert_close(mixed, want_mixed)


CAPTURED_KERNEL = """
def @main(%xs: Tensor[(t, 4), float32], %h0: Tensor[(4), float32]) {
  let %mix = fn (%p0: Tensor[(4), float32], %p1: Tensor[(4), float32], Primitive=1)
      -> Tensor[(4), float32] {
    let %a = multiply(%p0, 0.5f);
    tanh(add(%a, %p1))
  };
  let %step = fn (%x: Tensor[(4), float32], %h: Tensor[(4), float32]) {
    let %y = %mix(%x, %h);
    (%y, %y)
  };
  cf.foreach(%step, %xs, %h0)
}
"""


def test_a_captured_primitive_function_is_evaluated_in_place() -> None:
    mod = module(CAPTURED_KERNEL, passes="")
    call, body, bound = foreach_of(mod)
    with pytest.raises(BackendError, match="pass it in `functions`"):
        build_loop(body)
    kernel = build_loop(body, functions=bound)
    assert kernel.captured == ()
    rng = np.random.default_rng(7)
    xs, h0 = uniform(rng, 5, 4), uniform(rng, 4)
    assert_close(kernel(xs, h0), effir.interpret(mod, xs, h0))
    assert_close(
        effir.interpret(mod, xs, h0, kernels={call: kernel.run_foreach}),
        effir.interpret(mod, xs, h0),
    )


# ------------------------------------------------------------------ errors
def test_control_flow_and_effects_in_the_body_are_refused() -> None:
    branchy = module(
        """
        def @main(%xs: Tensor[(t, 4), float32], %h0: Tensor[(4), float32]) {
          let %step = fn (%x: Tensor[(4), float32], %h: Tensor[(4), float32]) {
            let %c = sum(%x) > 0f;
            let %y = if (%c) { %x } else { %h };
            (%y, %y)
          };
          cf.foreach(%step, %xs, %h0)
        }
        """,
        passes="",
    )
    with pytest.raises(BackendError, match="cannot contain If"):
        build_loop(foreach_of(branchy)[1])
    printing = module(
        """
        def @main(%xs: Tensor[(t, 4), float32], %h0: Tensor[(4), float32]) {
          let %step = fn (%x: Tensor[(4), float32], %h: Tensor[(4), float32]) {
            let %p = debug.print(%x);
            (%x, %h)
          };
          cf.foreach(%step, %xs, %h0)
        }
        """,
        passes="",
    )
    with pytest.raises(BackendError, match="debug.print .*only pure operators") as err:
        build_loop(foreach_of(printing)[1])
    assert "loop.effir:" in str(err.value)


def test_only_the_cpu_is_a_target(gru) -> None:
    _, body, _ = foreach_of(gru[0])
    with pytest.raises(BackendError, match="CPU"):
        build_loop(body, target="cuda")


def test_wrong_arguments_are_backend_errors(gru) -> None:
    _, _, kernel = gru
    xs, h0, w, u, bias = gru_inputs(np.random.default_rng(8), 3, 2)
    with pytest.raises(BackendError, match="3 captured value"):
        kernel(xs, h0, w, u)
    with pytest.raises(BackendError, match="expected shape"):
        kernel(xs, h0, w[:, :4], u, bias)
    with pytest.raises(BackendError, match="dimension b is 2 elsewhere, 3 here"):
        kernel(xs, h0[:1].repeat(3, axis=0), w, u, bias)
    with pytest.raises(BackendError, match="expected float32, got float64"):
        kernel(xs.astype(np.float64), h0, w, u, bias)
