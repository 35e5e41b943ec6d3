"""The persistent GPU loop's algorithm (effir/backends/tvm/loop/cuda/) on the
CPU: the same kernel, each piece between barriers run by every thread of
every block before the next ([THREADS]), against numpy and the
interpreter. What is split how and where the grid waits (stages, owners)
is checked on its own; the runs are isolated (tests/support/isolated.py): they
run compiled code."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
import tvm_ffi

import effir
from effir.backends.tvm.loop.cuda import function as cuda_function
from effir.backends.tvm.loop.cuda.function import lower_cuda_loop
from effir.backends.tvm.loop.cuda.owners import analyse, contiguous
from effir.backends.tvm.loop.cuda.stages import step_stages
from effir.backends.tvm.loop.function import step_leaves
from effir.backends.tvm.loop.graph import Graph, hoist
from effir.backends.tvm.target import building, make_target
from effir.ir.visitor import free_vars
from tests.support.isolated import run_isolated
from tests.support.loop_programs import foreach_of, module
from tests.support.tiers import suite_and_nightly

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gru_loop import gru_text, loop_body, numpy_gru  # noqa: E402
from gru_peers import weights  # noqa: E402


# ------------------------------------------------------------ the analysis
def stages_of(body: Any, dims: dict[str, int]) -> Any:
    """[STAGES] of ``body`` as lower_cuda_loop finds them."""
    captured = list(free_vars(body))
    _, x, s, cap, outs, new = step_leaves(body, dims, captured, {}, None)
    graph = Graph(x, s, cap, outs + new)
    graph.classify()
    length = tvm.tirx.Var("T", "int32")
    xs = [tvm.te.placeholder([length, *t.shape], t.dtype) for t in x]
    stages = hoist(graph, xs, length, pad=False)
    return step_stages(stages.step_outputs, stages.step_inputs)


def test_the_gru_step_is_its_gate_product_and_its_new_state() -> None:
    """Two stages: ``nn.dense(h, u)`` and the new state, which writes both
    the step's output and the next state (hoist's copy is no stage); the
    gates' splits, sigmoids and tanh are computed inside the new state's
    elements; the input projection is the prologue's."""
    steps = stages_of(loop_body(16, 8), {"b": 2})
    assert [s.name for s in steps.stages] == ["dense", "add"]
    gates, new = steps.stages
    assert steps.writer == [new, new] and new.destinations == [0, 1]
    assert gates.is_reduction and gates.reduce_extent == 8
    inlined = {op.name for op in steps.inlined}
    assert {"split", "sigmoid", "tanh", "multiply"} <= inlined


def test_each_gate_row_is_owned_by_the_block_of_the_unit_it_feeds() -> None:
    """[OWNERS] The new state split by hidden unit in runs; the gate
    product's column ``c`` read at ``j``, ``j + H`` and ``j + 2H`` by unit
    ``j``, so owned by the owner of ``c mod H``: one phase, one grid
    barrier per step."""
    hidden, blocks = 12, 4
    steps = stages_of(loop_body(16, hidden), {"b": 3})
    gates, new = steps.stages
    plan = analyse(steps, blocks, {})
    assert plan.phases == [0]
    assert plan.owners[new].axis == 1
    assert np.array_equal(plan.owners[new].owner, contiguous(hidden, blocks))
    assert plan.owners[gates].axis == 1
    by_unit = contiguous(hidden, blocks)
    assert np.array_equal(plan.owners[gates].owner, np.tile(by_unit, 3))


MIXING = """
def @main(%xs: Tensor[(t, {b}, 8), float32], %h0: Tensor[({b}, {h}), float32],
          %u: Tensor[({h}, {h}), float32], %v: Tensor[({h}, {h}), float32]) {{
  let %step = fn (%x: Tensor[({b}, 8), float32], %h: Tensor[({b}, {h}), float32]) {{
    let %a = tanh(nn.dense(%h, %u) + sum(%x, axis=[1], keepdims=True));
    let %n = tanh(nn.dense(%a, %v) + %h);
    (%n, %n)
  }};
  cf.foreach(%step, %xs, %h0)
}}
"""


def mixing_body(batch: int, hidden: int) -> Any:
    _, body, _ = foreach_of(module(MIXING.format(b=batch, h=hidden)))
    return body


def test_what_every_block_reads_whole_is_replicated_when_small() -> None:
    """``a`` is read across all its units inside the next product: with a
    row of 16 it is small, so every block computes all of it (no barrier
    more); the product that feeds it is then replicated too."""
    steps = stages_of(mixing_body(1, 16), {})
    plan = analyse(steps, 4, {})
    assert plan.phases == [0]
    replicated = [s.name for s, o in plan.owners.items() if o.axis is None]
    assert len(replicated) == 2 and "dense" in replicated


def test_what_is_too_large_to_replicate_waits_for_a_grid_barrier() -> None:
    """At batch 64 ``a`` is 4,096 elements: it is computed a phase earlier,
    split across the blocks, and the grid waits once more per step."""
    steps = stages_of(mixing_body(64, 64), {})
    plan = analyse(steps, 4, {})
    assert plan.phases == [-1, 0]
    assert all(o.axis is not None for o in plan.owners.values())


# -------------------------------------------------------------- the runs
def run_loop(body: Any, dims: dict[str, int], blocks: int, args: dict[str, np.ndarray],
             xs: np.ndarray, init: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:  # fmt: skip
    """``body``'s loop built as the GPU's and run serially: its stacked
    outputs and final state (the loop of one sequence, tensors only)."""
    captured = list(free_vars(body))
    loop = lower_cuda_loop(
        body, dims, captured, {}, None, make_target("cuda"), on_gpu=False, blocks=blocks
    )
    target = make_target("llvm")
    with building(target):
        kernel = tvm.compile(tvm.IRModule({"main": loop.func}), target=target)["main"]
        prologue = None
        if loop.prologue is not None:
            prologue = tvm.compile(tvm.IRModule({"main": loop.prologue}), target=target)["main"]
    length = xs.shape[0]
    caps = [args[v.name_hint] for v in captured] + list(loop.constants)
    hoisted = [
        np.empty(((length,) if s else ()) + leaf.shape, leaf.dtype) for leaf, s in loop.hoisted
    ]
    if prologue is not None and length:
        inputs = [xs if kind == "x" else caps[k] for kind, k in loop.prologue_inputs]
        prologue(*[_tensor(a) for a in [*inputs, *hoisted]])
    outs = [np.empty((length, *leaf.shape), leaf.dtype) for leaf in loop.outputs]
    final = [np.empty(leaf.shape, leaf.dtype) for leaf in loop.state]
    scratch = [np.empty(leaf.shape, leaf.dtype) for leaf in loop.scratch]
    arrays = [xs, *init, *caps, *hoisted, *outs, *final, *scratch]
    kernel(*[_tensor(a) for a in arrays])
    return outs, final


def _tensor(a: np.ndarray) -> Any:
    """``a`` for a TVM function: its memory (DLPack), or a new empty tensor
    when it has no elements (numpy's strides of an empty array are not
    the compact ones TVM checks)."""
    if a.size == 0:
        return tvm.runtime.empty(a.shape, str(a.dtype))
    return tvm_ffi.from_dlpack(np.require(a, requirements=["C", "W"]))


def check_gru(inputs: int, hidden: int, batch: int, blocks: int, lengths: list[int],
              single_block_work: int | None = None) -> None:  # fmt: skip
    """The GRU's loop, emulated, equals numpy at each length."""
    if single_block_work is not None:
        cuda_function.SINGLE_BLOCK_WORK = single_block_work
    rng = np.random.default_rng(hidden + batch)
    w, u, bias = weights(inputs, hidden)
    for length in lengths:
        xs = rng.standard_normal((length, batch, inputs), dtype=np.float32)
        h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
        (outs,), (h,) = run_loop(
            loop_body(inputs, hidden),
            {"b": batch},
            blocks,
            {"w": w, "u": u, "bias": bias},
            xs,
            [h0],
        )
        want_outs, want_h = numpy_gru(xs, h0, w, u, bias) if length else (outs, h0)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outs, want_outs, rtol=1e-5, atol=1e-5)
    print("ok")


@pytest.mark.parametrize(
    ("inputs", "hidden", "batch", "blocks", "work"),
    [
        (16, 8, 2, 1, None),  # one block: state, U and the rows in shared memory
        (32, 32, 1, 1, None),  # the hidden-32 case: lanes of 4 per gate element
        (16, 48, 3, 7, 0),  # 7 blocks for 48 units: the units' tables, uneven runs
        (32, 64, 4, 8, None),  # a grid of 8, lanes of 4, U staged by rows
    ],
)
def test_the_gru_loop_equals_numpy(
    inputs: int, hidden: int, batch: int, blocks: int, work: int | None
) -> None:
    """Lengths 0, 1, an odd one, and (one block) more than a chunk of rows
    with a remainder (37 = 32 + 5)."""
    lengths = [0, 1, 4, 37] if blocks == 1 else [0, 1, 5]
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_gru\n"
        f"check_gru({inputs}, {hidden}, {batch}, {blocks}, {lengths}, {work})"
    ).check()


def check_mixing(batch: int, hidden: int, blocks: int) -> None:
    """A step whose stages read each other across units (replicated, or a
    phase of its own) equals the interpreter."""
    cuda_function.SINGLE_BLOCK_WORK = 0
    mod = module(MIXING.format(b=batch, h=hidden))
    _, body, _ = foreach_of(mod)
    rng = np.random.default_rng(batch)
    xs = rng.standard_normal((5, batch, 8), dtype=np.float32)
    h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
    u, v = (rng.standard_normal((hidden, hidden), dtype=np.float32) / hidden**0.5 for _ in "uv")
    (outs,), (h,) = run_loop(body, {}, blocks, {"u": u, "v": v}, xs, [h0])
    want_outs, want_h = effir.interpret(mod, xs, h0, u, v)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs, want_outs, rtol=1e-5, atol=1e-5)
    print("ok")


@pytest.mark.parametrize(("batch", "hidden"), [(1, 16), (64, 64)])
def test_stages_read_across_units_equal_the_interpreter(batch: int, hidden: int) -> None:
    """Replicated stages (batch 1) and a second phase (batch 64), 4 blocks."""
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_mixing\n"
        f"check_mixing({batch}, {hidden}, 4)"
    ).check()


NOISY = """
def @main(%xs: Tensor[(t, 4, 8), float32], %h0: Tensor[(4, 8), float32], %key: Key,
          %u: Tensor[(8, 8), float32]) {
  let %step = fn (%x: Tensor[(4, 8), float32], %s: (Tensor[(4, 8), float32], Key)) {
    let %keys = random.split(%s.1);
    let %noise = random.normal(%keys.0, shape=[4, 8]);
    let %mask = random.bernoulli(%keys.0, p=0.25, shape=[4, 8]);
    let %h = tanh(nn.dense(%s.0, %u) + where(%mask, %x + %noise, %x));
    ((%noise, %mask, %h), (%h, %keys.1))
  };
  cf.foreach(%step, %xs, (%h0, %key))
}
"""


def check_keys(blocks: int) -> None:
    """Keys split in the kernel, draws and masks: bit for bit the
    interpreter's; the state to float tolerance."""
    from effir.runtime.values import PRNGKey

    cuda_function.SINGLE_BLOCK_WORK = 0
    mod = module(NOISY)
    _, body, _ = foreach_of(mod)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((6, 4, 8), dtype=np.float32)
    h0 = rng.standard_normal((4, 8), dtype=np.float32)
    u = rng.standard_normal((8, 8), dtype=np.float32) / 3
    key = PRNGKey([0, 42])
    (noise, mask, hs), (h, k) = run_loop(body, {"t": 6}, blocks, {"u": u}, xs, [h0, key.data])
    (want_noise, want_mask, want_hs), (want_h, want_k) = effir.interpret(mod, xs, h0, key, u)
    assert np.array_equal(k, want_k.data), (k, want_k)
    assert np.array_equal(noise, want_noise) and np.array_equal(mask, want_mask)
    assert mask.any() and not mask.all()
    np.testing.assert_allclose(hs, want_hs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    print("ok")


@pytest.mark.parametrize("blocks", [1, 3])
def test_keys_split_in_the_kernel_draw_the_interpreters_bits(blocks: int) -> None:
    run_isolated(
        f"from tests.backends.tvm.test_cuda_loop_emulated import check_keys; check_keys({blocks})"
    ).check()


def check_compiled(blocks: int) -> None:
    """Through effir.compile (relax/whole_loops.py): a symbolic length at
    0, 1, 3 and 40 steps from one build, and the RNN with dropout in its
    step (examples/rnn_dropout_bn.effir) with its state."""
    from effir.backends.tvm.loop.cuda import emulated

    gru = effir.check(effir.parse(gru_text(8, 16)))
    rng = np.random.default_rng(4)
    w, u, bias = weights(8, 16)
    h0 = rng.standard_normal((3, 16), dtype=np.float32)
    with emulated(blocks):
        compiled = effir.compile(gru)
        for length in (0, 1, 3, 40):
            xs = rng.standard_normal((length, 3, 8), dtype=np.float32)
            outs, h = compiled(xs, h0, w, u, bias)
            want_outs, want_h = numpy_gru(xs, h0, w, u, bias) if length else (outs, h0)
            np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
            assert outs.shape == (length, 3, 16)
        assert len(compiled.specialisations) == 1
        rnn = effir.check(effir.parse((ROOT / "examples" / "rnn_dropout_bn.effir").read_text()))
        shapes = [(12, 4, 8), (4, 16), (16, 8), (16, 16), (16,), (16,), (16,)]
        args = [(rng.standard_normal(s) * 0.25).astype(np.float32) for s in shapes]
        interpreted, state = effir.State(rnn), effir.State(rnn)
        want = effir.interpret(rnn, *args, state=interpreted)
        got = effir.compile(rnn)(*args, state=state)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    assert state["rng"] == interpreted["rng"]
    print("ok")


def test_compiled_programs_with_the_gpu_loops_equal_the_interpreter() -> None:
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_compiled; check_compiled(3)",
        timeout=600,
    ).check()


def check_gradient_modes(hidden: int, batch: int, blocks: int) -> None:
    """value_and_grad of the GRU language model (examples/gru_lm_training.py)
    with its loops as the GPU's: equal to the interpreter, the three
    checkpoint modes bit-identical."""
    sys.path.insert(0, str(ROOT / "examples"))
    from gru_lm_training import Config, build, init_params

    from effir.backends.interpreter import interpret_a2
    from effir.backends.tvm.loop.cuda import emulated

    cfg = Config(vocab=20, embed=8, hidden=hidden, seq_len=12, batch=batch)
    rs = np.random.default_rng(0)
    tokens = rs.integers(0, 20, (12, batch)).astype(np.int32)
    targets = rs.integers(0, 20, (12, batch)).astype(np.int32)
    params = init_params(cfg)
    out = {}
    for mode in ("none", "loop", "sqrt"):
        m = build(cfg, grad="effir", checkpoint=mode)
        with emulated(blocks):
            compiled = effir.compile(m, entry="loss_grad")
            loss, grads = compiled(
                tokens, targets, *params, entry="loss_grad", state=effir.State(m)
            )
        out[mode] = [np.asarray(loss), *(np.asarray(g) for g in grads)]
    want_loss, want = interpret_a2(m, tokens, targets, *params, entry="loss_grad",
                                   state=effir.State(m))  # fmt: skip
    for got, ref in zip(out["none"], [want_loss, *want], strict=True):
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-4, atol=1e-6)
    for mode in ("loop", "sqrt"):
        for i, (a, b) in enumerate(zip(out["none"], out[mode], strict=True)):
            assert np.array_equal(a, b), (mode, i, np.abs(a - b).max())
    print("ok")


def test_the_gradients_checkpoint_modes_stay_bit_identical() -> None:
    """One block (hidden 16, batch 3): forward, recomputed and reverse
    loops all persistent kernels."""
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_gradient_modes\n"
        "check_gradient_modes(16, 3, 4)",
        timeout=900,
    ).check()


@pytest.mark.nightly  # six builds
def test_the_gradients_checkpoint_modes_stay_bit_identical_on_a_grid() -> None:
    """Batch 64: a grid of several blocks for every loop."""
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_gradient_modes\n"
        "check_gradient_modes(16, 64, 4)",
        timeout=1800,
    ).check()


@pytest.mark.nightly  # about 2 min
def test_the_gpu_check_script_passes_emulated() -> None:
    """benchmarks/cuda_loop_checks.py --emulate: the checks a GPU runs, on
    the CPU (so that they are right before a GPU runs them)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cuda_loop_checks.py"), "--emulate"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr


# ------------------------------------------------------- random step bodies
def step_program(draw: Any) -> tuple[str, int, int]:
    """A random step of a recurrence as effir text, from operations that
    split along units, read across units (a product, a sum over the units)
    and across the batch (a mean), gates of a (B, 3H) product; its batch
    and hidden size."""
    from hypothesis import strategies as st

    batch = draw(st.sampled_from([1, 3]))
    hidden = draw(st.sampled_from([4, 16]))
    values = ["%h", "%xh"]
    lines = ["let %xh = nn.dense(%x, %w);"]
    for i in range(draw(st.integers(1, 5))):
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        kind = draw(st.sampled_from(["unary", "binary", "dense", "units", "batch", "gates"]))
        if kind == "unary":
            value = f"{draw(st.sampled_from(['tanh', 'sigmoid', 'negative']))}({a})"
        elif kind == "binary":
            value = f"{draw(st.sampled_from(['add', 'multiply', 'subtract']))}({a}, {b})"
        elif kind == "dense":
            value = f"tanh(nn.dense({a}, %u))"
        elif kind == "units":
            value = f"{a} * tanh(sum({b}, axis=[1], keepdims=True))"
        elif kind == "batch":
            value = f"{a} + mean({b}, axis=[0], keepdims=True)"
        else:
            lines.append(f"let %g{i} = split(nn.dense({a}, %u3), indices_or_sections=3, axis=1);")
            value = f"sigmoid(%g{i}.0) * %g{i}.1 + %g{i}.2"
        lines.append(f"let %v{i} = {value};")
        values.append(f"%v{i}")
    mix = draw(st.sampled_from(values))
    lines.append(f"let %n = tanh({values[-1]} + {mix});")
    body = "\n    ".join(lines)
    text = f"""
def @main(%xs: Tensor[(t, {batch}, 6), float32], %h0: Tensor[({batch}, {hidden}), float32],
          %w: Tensor[({hidden}, 6), float32], %u: Tensor[({hidden}, {hidden}), float32],
          %u3: Tensor[({3 * hidden}, {hidden}), float32]) {{
  let %step = fn (%x: Tensor[({batch}, 6), float32], %h: Tensor[({batch}, {hidden}), float32]) {{
    {body}
    ({values[-1]}, %n)
  }};
  cf.foreach(%step, %xs, %h0)
}}
"""
    return text, batch, hidden


def check_random_steps(examples: int) -> None:
    """[OWNERS] [STAGES] [KERNEL] on random steps, in 1 to 5 blocks, every
    step made multi-block: the loop equals the interpreter's."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    cuda_function.SINGLE_BLOCK_WORK = 0

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None)
    @given(st.data(), st.integers(1, 5), st.integers(0, 4))
    def run(data: Any, blocks: int, length: int) -> None:
        text, batch, hidden = data.draw(st.composite(step_program)())
        mod = module(text)
        _, body, _ = foreach_of(mod)
        rng = np.random.default_rng(length)
        xs = rng.standard_normal((length, batch, 6), dtype=np.float32)
        h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
        w = rng.standard_normal((hidden, 6), dtype=np.float32) / 3
        u = rng.standard_normal((hidden, hidden), dtype=np.float32) / hidden**0.5
        u3 = rng.standard_normal((3 * hidden, hidden), dtype=np.float32) / hidden**0.5
        (outs,), (h,) = run_loop(body, {}, blocks, {"w": w, "u": u, "u3": u3}, xs, [h0])
        want_outs, want_h = effir.interpret(mod, xs, h0, w, u, u3)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5, err_msg=text)
        np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5, err_msg=text)

    run()
    print("ok")


@pytest.mark.parametrize("examples", suite_and_nightly(10, 60))
def test_random_steps_equal_the_interpreter(examples: int) -> None:
    run_isolated(
        "from tests.backends.tvm.test_cuda_loop_emulated import check_random_steps\n"
        f"check_random_steps({examples})",
        timeout=1800,
    ).check()
