"""effir.compile (effir/backends/tvm/driver/compile.py, relax/lower.py,
driver/specialise.py): whole programs through the pipeline, lowered to Relax and
run by its virtual machine, against the interpreter: the examples (two
steps from one State: random values and keys bit for bit, floats to 1e-5),
data-dependent ``if``, recursion, closures, tuple matches, prints in order,
one build per binding of the dimensions, and the errors a user can meet."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.tvm.driver.compile import compile as compile_module
from effir.backends.tvm.runtime.errors import BackendError
from tests.support.compiled_runs import (
    EXAMPLES,
    assert_close,
    assert_same_run,
    gru_lm,
    parse,
)


def test_the_gru_language_model_runs_as_the_interpreter() -> None:
    module, args = gru_lm(5, 3)
    compiled = assert_same_run(module, *args, steps=2)
    assert compiled.report.builds[0][3] == 1  # the recurrence is one compiled loop


def test_the_rnn_example_with_dropout_in_the_loop() -> None:
    module = effir.check(effir.parse((EXAMPLES / "rnn_dropout_bn.effir").read_text()))
    rng = np.random.default_rng(1)
    shapes = [(7, 2, 8), (2, 16), (16, 8), (16, 16), (16,), (16,), (16,)]
    # Weights of a trained network's scale: with N(0, 1) weights the
    # recurrence is chaotic and amplifies rounding beyond 1e-5.
    args = [(0.25 * rng.standard_normal(s)).astype(np.float32) for s in shapes]
    assert_same_run(module, *args, steps=2)


def test_an_if_on_data_and_a_print_in_each_branch() -> None:
    module = parse(
        """
def @main(%x: Tensor[(4), float32]) {
  let %s = sum(%x);
  if (greater(%s, 0f)) {
    debug.print(%s, label="positive");
    multiply(%x, 2f)
  } else {
    debug.print(%x, label="not positive");
    negative(%x)
  }
}
"""
    )
    compiled = assert_same_run(module, np.array([1, 2, 3, -1], np.float32))
    state = effir.State(module)
    printed: list[str] = []
    compiled(
        np.array([-1, -2, 3, -1], np.float32), state=state, sink=lambda l, v: printed.append(l)
    )
    assert printed == ["not positive"]


def test_recursion_on_a_value_known_only_at_run_time() -> None:
    module = parse(
        """
def @power(%x: Tensor[(3), float32], %n: int32) -> Tensor[(3), float32] {
  if (less_equal(%n, 0)) { %x } else { @power(multiply(%x, 1.5f), subtract(%n, 1)) }
}
def @main(%x: Tensor[(3), float32], %n: int32) {
  @power(%x, %n)
}
"""
    )
    assert_same_run(module, np.array([1, 2, 3], np.float32), np.array(4, np.int32))


def test_a_closure_called_twice_and_a_match_on_a_tuple() -> None:
    module = parse(
        """
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(3), float32]) {
  let %scale = fn (%y: Tensor[(2, 3), float32]) { multiply(%y, %w) };
  let %pair = (%scale(%x), %scale(exp(%x)));
  match (%pair) {
    (%a, %b) => add(%a, %b)
  }
}
"""
    )
    rng = np.random.default_rng(2)
    assert_same_run(module, rng.standard_normal((2, 3)).astype(np.float32), np.ones(3, np.float32))


def test_one_build_per_binding_of_the_dimensions() -> None:
    module = parse(
        """
def @main(%x: Tensor[(n, 4), float32]) {
  tanh(reshape(%x, newshape=[-1]))
}
"""
    )
    compiled = compile_module(module)
    assert compiled.report.builds == []  # nothing to build before the shapes are known
    for n in (2, 3, 2, 3, 2):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4) / 10
        assert_close(compiled(x), effir.interpret(module, x))
    assert sorted(dims["n"] for dims, *_ in compiled.report.builds) == [2, 3]


def test_a_static_program_is_built_by_compile() -> None:
    module = parse("def @main(%x: Tensor[(4), float32]) { exp(%x) }")
    compiled = compile_module(module)
    assert len(compiled.report.builds) == 1
    assert "TVM build (static)" in compiled.report.table()


def test_arguments_of_the_wrong_shape_or_dtype_are_argument_errors() -> None:
    """The interpreter's errors (the one input contract, effir/runtime/arguments.py)."""
    module = parse("def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n), float32]) { %y }")
    compiled = compile_module(module)
    with pytest.raises(
        effir.ArgumentError,
        match=r"shape check failed: parameter %x of @main expects Tensor\[\(n, 4\), float32\]",
    ):
        compiled(np.zeros((2, 5), np.float32), np.zeros(2, np.float32))
    with pytest.raises(effir.ArgumentError, match=r"got shape \(3,\) \(with n = 2\)"):
        compiled(np.zeros((2, 4), np.float32), np.zeros(3, np.float32))
    with pytest.raises(effir.ArgumentError, match="takes 2 argument"):
        compiled(np.zeros((2, 4), np.float32))


def test_what_is_not_compiled_is_refused_with_its_location() -> None:
    # ADTs and match? compile (test_adts.py); a function value as the
    # entry's result does not.
    module = parse(
        """
def @main(%x: Tensor[(2), float32]) {
  fn (%y: Tensor[(2), float32]) { add(%x, %y) }
}
"""
    )
    with pytest.raises(BackendError, match=r"compile\.effir:\d+:\d+.*not fn \("):
        compile_module(module)


# ------------------------------------------------------- loops and shapes
WHILE = """
def @main(%x: Tensor[(3), float32], %limit: float32) {
  cf.while_loop(fn (%s: (int32, Tensor[(3), float32])) { less(sum(%s.1), %limit) },
                fn (%s: (int32, Tensor[(3), float32])) {
                  let %y = multiply(%s.1, 2f);
                  ((%y, %s.0), (add(%s.0, 1), %y))
                }, (0, %x))
}
"""


@pytest.mark.parametrize("limit", [0.0, 5.0, 100.0, 1e7])
def test_a_while_loop_runs_as_many_steps_as_its_data_asks(limit: float) -> None:
    # 0 steps, a few, and more than the output buffers' first capacity (16):
    # the buffers double and are cut to the steps run.
    module = parse(WHILE)
    out = assert_same_run(module, np.ones(3, np.float32), np.array(limit, np.float32))
    assert out.report.builds[0][3] >= 1


def test_a_while_loop_stops_at_max_iterations() -> None:
    module = parse(WHILE.replace("(0, %x))", "(0, %x), max_iterations=5)"))
    assert_same_run(module, np.ones(3, np.float32), np.array(1e7, np.float32))


def test_a_foreach_with_an_if_in_its_body_runs_in_the_vm() -> None:
    module = parse(
        """
def @main(%xs: Tensor[(5, 2), float32]) {
  cf.foreach(fn (%x: Tensor[(2), float32], %h: Tensor[(2), float32]) {
    let %n = if (greater(sum(%x), 0f)) { add(%h, %x) } else { subtract(%h, %x) };
    (sum(%n), %n)
  }, %xs, zeros(shape=[2]))
}
"""
    )
    xs = np.random.default_rng(3).standard_normal((5, 2)).astype(np.float32)
    assert_same_run(module, xs)


@pytest.mark.parametrize("mask", [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
def test_boolean_mask_argwhere_and_shape_of(mask: list[int]) -> None:
    module = parse(
        """
def @main(%x: Tensor[(4, 3), float32], %m: Tensor[(4), bool]) {
  let %y = boolean_mask(%x, %m);
  (%y, argwhere(greater(%x, 0f)), argwhere(%m), shape_of(%y))
}
"""
    )
    x = np.array([[1, -2, 3], [4, 5, -6], [0, 1, 0], [-1, -1, 2]], np.float32)
    assert_same_run(module, x, np.array(mask, bool))


def test_shapes_from_tensors() -> None:
    module = parse(
        """
def @main(%s: Tensor[(2), int32], %x: Tensor[(6), float32]) {
  (dyn.full(2.5f, %s, dtype="float32"), dyn.zeros(%s, dtype="int32"), dyn.reshape(%x, %s))
}
"""
    )
    assert_same_run(module, np.array([2, 3], np.int32), np.arange(6, dtype=np.float32))


# ------------------------------------------------------------------- CUDA
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_gru_model_builds_for_cuda_and_its_kernels_compile_to_ptx() -> None:
    # The VM runs on the host, every kernel (fused groups, random numbers,
    # the executor's loop buffers) on the GPU; this machine has no GPU, so
    # the test stops at PTX for sm_90 (an H100).
    module = effir.parse((EXAMPLES / "gru_lm.effir").read_text())
    compiled = effir.compile(module, target="cuda")
    spec = compiled.specialisation("main", {"t": 6, "b": 4})
    source = spec.source("cuda")
    assert source.count("__global__") >= 10
    ptx = spec.ptx()
    assert ".target sm_90" in ptx and ".entry" in ptx
    if not tvm_has_gpu():
        with pytest.raises(BackendError, match="this machine has no such device"):
            spec.function()


def tvm_has_gpu() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


def test_a_long_sequence_runs_in_chunks_with_the_state_passed_on(monkeypatch) -> None:
    from effir.backends.tvm.relax import loops as relax_loops

    monkeypatch.setattr(relax_loops, "LOOP_CHUNK", 4)  # 10 steps: chunks of 4, 4 and 2
    module = parse(
        """
def @main(%xs: Tensor[(10, 2, 3), float32], %h0: Tensor[(2, 3), float32]) {
  cf.foreach(fn (%x: Tensor[(2, 3), float32], %h: Tensor[(2, 3), float32]) {
    let %n = tanh(add(multiply(%x, 0.5f), %h));
    (sum(%n, axis=[1]), %n)
  }, %xs, %h0)
}
"""
    )
    rng = np.random.default_rng(4)
    compiled = assert_same_run(
        module,
        rng.standard_normal((10, 2, 3)).astype(np.float32),
        rng.standard_normal((2, 3)).astype(np.float32),
    )
    spec = next(iter(compiled.specialisations.values()))
    # one loop kernel (named by its content: relax/apart.py), called once per chunk
    calls = re.findall(
        r'R.call_dps_packed\("(effir_[0-9a-f]{16}_loop_0)"', spec.program.module.script()
    )
    assert len(calls) == 3 and len(set(calls)) == 1


def test_a_new_sequence_length_reuses_the_build_of_a_whole_loop(tmp_path: Path) -> None:
    # Only the loop depends on t: t stays symbolic (the loop kernel takes any
    # length), b is bound (the step's kernels need it static).
    module = parse(
        """
def @main(%xs: Tensor[(t, b, 3), float32], %h0: Tensor[(b, 3), float32]) {
  cf.foreach(fn (%x: Tensor[(b, 3), float32], %h: Tensor[(b, 3), float32]) {
    let %n = tanh(add(multiply(%x, 0.5f), %h));
    (%n, %n)
  }, %xs, %h0)
}
"""
    )
    compiled = compile_module(module)
    rng = np.random.default_rng(5)
    h0 = rng.standard_normal((2, 3)).astype(np.float32)
    runs = []
    for t in (4, 9, 0, 4):
        xs = rng.standard_normal((t, 2, 3)).astype(np.float32)
        if t == 0:  # (the interpreter cannot type an empty output of symbolic shape)
            assert_close(compiled(xs, h0), (np.zeros((0, 2, 3), np.float32), h0))
            continue
        assert_close(compiled(xs, h0), effir.interpret(module, xs, h0))
        runs.append(xs)
    assert [dims for dims, *_ in compiled.report.builds] == [{"b": 2}]
    compiled(rng.standard_normal((5, 3, 3)).astype(np.float32), h0[:1].repeat(3, axis=0))
    assert [dims for dims, *_ in compiled.report.builds] == [{"b": 2}, {"b": 3}]
    compiled.export(tmp_path / "model")
    loaded = effir.load(tmp_path / "model")
    for xs in runs:
        assert_close(loaded(xs, h0), effir.interpret(module, xs, h0))


def test_prints_inside_a_loop_come_out_in_order() -> None:
    # io.print has no kernel: the loop runs in the VM, step by step, and the
    # world token orders the prints.
    module = parse(
        """
def @main(%xs: Tensor[(4, 2), float32]) {
  cf.foreach(fn (%x: Tensor[(2), float32], %h: Tensor[(2), float32]) {
    let %n = add(%x, %h);
    debug.print(sum(%n), label="step");
    (%n, %n)
  }, %xs, zeros(shape=[2]))
}
"""
    )
    compiled = assert_same_run(module, np.arange(8, dtype=np.float32).reshape(4, 2))
    printed: list[float] = []
    compiled(np.ones((4, 2), np.float32), sink=lambda label, value: printed.append(float(value)))
    assert printed == [2.0, 4.0, 6.0, 8.0]


def test_a_kernel_that_only_reshapes_is_a_view() -> None:
    """relax/views.py [RULE LOWER-VIEW]: a primitive function that only reshapes
    its one tensor (the backward's stacks cut into chunks) is called as a
    view of the argument's memory, no kernel copying it; the values are
    the interpreter's. Before: one copy kernel per reshape."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) {
  (reshape(%x, newshape=[2, 12]), expand_dims(%x, axis=1), squeeze(%x, axis=[]), exp(%x))
}
"""
    module = effir.check(effir.parse(text))
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 24
    compiled = effir.compile(module)
    got = compiled(x)
    want = effir.interpret(module, x)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)
    (build,) = compiled.report.builds
    assert build.kernels == 1, compiled.report.table()  # exp alone
