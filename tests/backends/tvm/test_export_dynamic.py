"""Programs with data-dependent shapes export (relax/symbolic.py
[RULE LOWER-SHAPEPOLY]): the kernels after a ``boolean_mask`` are compiled once with
symbolic sizes, so one build runs every mask, from Python, from an
``effir.load``ed artifact and from the C++ runner, as the interpreter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import effir
from tests.support.compiled_runs import assert_close, assert_same_run, parse
from tests.support.isolated import run_isolated

MASKED = """
def @main(%x: Tensor[(5, 3), float32], %m: Tensor[(5), bool], %w: Tensor[(4, 3), float32]) {
  let %y = boolean_mask(%x, %m);
  let %h = tanh(nn.dense(%y, %w));
  (sum(multiply(%y, 2f), axis=[0]), %h, mean(%h, axis=[1]), nn.softmax(%y), max(%h))
}
"""

X = np.linspace(-2, 2, 15, dtype=np.float32).reshape(5, 3)
W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
MASKS = [
    np.array([1, 0, 1, 1, 0], bool),  # three rows
    np.array([0, 1, 0, 0, 0], bool),  # one row
]


def test_kernels_after_a_mask_build_once_for_every_count() -> None:
    module = parse(MASKED)
    compiled = assert_same_run(module, X, MASKS[0], W)
    for mask in MASKS[1:]:
        assert_close(compiled(X, mask, W), effir.interpret(module, X, mask, W))
    # An empty mask: sums are 0, means NaN, as the interpreter's; the max of
    # no element is an error there, so it is left out here.
    empty = parse(MASKED.replace(", max(%h))", ")"))
    assert_same_run(empty, X, np.zeros(5, bool), W)
    assert len(compiled.specialisations) == 1


def test_an_entry_of_unknown_size_builds_once() -> None:
    # A ``?`` of the entry's own types is named by a cast of the argument.
    module = parse("def @main(%x: Tensor[(?, 3), float32]) { sum(tanh(%x), axis=[1]) }")
    compiled = assert_same_run(module, X)
    for rows in (0, 2):
        x = X[:rows]
        assert_close(compiled(x), effir.interpret(module, x))
    assert len(compiled.specialisations) == 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_masked_program_exports_loads_and_runs_from_cpp(
    runner: Path,
    tmp_path: Path,
) -> None:
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "w.npy", W)
    for k, mask in enumerate(MASKS):
        np.save(tmp_path / f"m{k}.npy", mask)
    # Compiled, exported and loaded in a process of its own (compiled code
    # that crashed would end the test run).
    run_isolated(
        f"""
        import numpy as np, effir
        from pathlib import Path
        from tests.support.compiled_runs import parse
        from tests.backends.tvm.test_export_dynamic import MASKED
        d = Path({str(tmp_path)!r})
        x, w = np.load(d / "x.npy"), np.load(d / "w.npy")
        compiled = effir.compile(parse(MASKED))
        compiled(x, np.load(d / "m0.npy"), w)
        compiled.export(d / "model")
        loaded = effir.load(d / "model")
        for k in range(2):
            out = loaded(x, np.load(d / f"m{{k}}.npy"), w)
            for i, value in enumerate(out):
                np.save(d / f"loaded{{k}}_{{i}}.npy", value)
        print("ok")
        """
    ).check()
    module = parse(MASKED)
    for k, mask in enumerate(MASKS):
        ref = effir.interpret(module, X, mask, W)
        loaded = tuple(np.load(tmp_path / f"loaded{k}_{i}.npy") for i in range(len(ref)))
        assert_close(loaded, ref)
        out = tmp_path / f"out{k}"
        out.mkdir()
        done = subprocess.run(
            [runner, tmp_path / "model", tmp_path / "x.npy", tmp_path / f"m{k}.npy"]
            + [tmp_path / "w.npy", "--out", out],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        from_cpp = tuple(np.load(out / f"result_{i}.npy") for i in range(len(ref)))
        assert_close(from_cpp, ref)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_masked_program_builds_for_cuda_and_compiles_to_ptx() -> None:
    # Symbolic kernels on a GPU: their spatial loops bound to threads, each
    # reduction's initial value before its loop (kernel/primitive.py).
    compiled = effir.compile(parse(MASKED), target="cuda")
    (spec,) = compiled.specialisations.values()
    assert ".entry" in spec.ptx()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_an_adt_program_with_closures_runs_from_cpp(
    runner: Path,
    tmp_path: Path,
) -> None:
    # Lists, match, VM closures (test_adts.py) need nothing of Python.
    from tests.support.compiled_adt_programs import BUILD_AND_FOLD, X, Y

    args = {"n": np.int32(6), "x": X, "y": Y}
    for name, value in args.items():
        np.save(tmp_path / f"{name}.npy", value)
    run_isolated(
        f"""
        import effir
        from tests.support.compiled_runs import parse
        from tests.support.compiled_adt_programs import BUILD_AND_FOLD
        effir.compile(parse(BUILD_AND_FOLD)).export({str(tmp_path / "model")!r})
        """
    ).check()
    done = subprocess.run(
        [runner, tmp_path / "model", *(tmp_path / f"{name}.npy" for name in args)]
        + ["--out", tmp_path],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    ref = effir.interpret(parse(BUILD_AND_FOLD), *args.values())
    assert_close((np.load(tmp_path / "result_0.npy"), np.load(tmp_path / "result_1.npy")), ref)


# Each kind of kernel that was built per shape in Python before (and could
# not be exported): (a) two masks' counts meeting in one operator,
# broadcast as numpy does and checked at run time; (b) result sizes that
# are arithmetic on the counts; (c) random numbers over a masked tensor,
# bit for bit the interpreter's whatever the count (0, 1, odd, even) and
# the float dtype.
EVERY_KIND = """
def @main(%x: Tensor[(5, 3), float32], %m: Tensor[(5), bool], %n: Tensor[(5), bool],
          %v: Tensor[(5), float32], %s: Tensor[(), int32]) {
  let %y = boolean_mask(%x, %m);
  let %z = boolean_mask(%x, %n);
  let %keys = random.split(random.key(%s), num=4);
  (add(%y, %z),
   concatenate((%y, %z)),
   reshape(tanh(%z), newshape=[-1]),
   strided_slice(%y, begin=[1], end=[-1]),
   random.dropout(%y, %keys.0, rate=0.3),
   random.dropout(boolean_mask(%v, %m), %keys.1, rate=0.5),
   random.dropout(cast(%z, dtype="float16"), %keys.2, rate=0.25),
   random.dropout(cast(%z, dtype="float64"), %keys.3, rate=0.75))
}
"""
V = np.linspace(0.5, 3, 5, dtype=np.float32)
SEED = np.array(7, np.int32)
# Masks of m and n, with counts that broadcast: equal, or one of them 1.
PAIRS = [
    ([1, 0, 1, 0, 0], [0, 1, 0, 0, 1]),  # 2 and 2
    ([0, 0, 1, 0, 0], [1, 1, 0, 1, 0]),  # 1 and 3: (1, 3) stretches
    ([1, 1, 1, 1, 1], [0, 0, 0, 1, 0]),  # 5 and 1
    ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),  # 0 and 0
    ([0, 0, 0, 0, 0], [0, 1, 0, 0, 0]),  # 0 and 1: (0, 3)
]
CLASH = ([1, 1, 0, 0, 0], [1, 1, 1, 0, 0])  # 2 and 3 do not broadcast
CLASH_MESSAGE = "add: shapes (2, 3) and (3, 3) do not broadcast"


def every_kind_args(pair: tuple[list[int], list[int]]) -> tuple[np.ndarray, ...]:
    return (X, np.array(pair[0], bool), np.array(pair[1], bool), V, SEED)


def assert_same_values(got: tuple, want: tuple) -> None:
    """Floats to 1e-5 (tanh), random numbers bit for bit."""
    assert_close(got[:4], want[:4])
    for g, w in zip(got[4:], want[4:], strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        bits = f"uint{8 * w.itemsize}"
        assert np.array_equal(g.view(bits), w.view(bits))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_every_kind_of_kernel_after_masks_builds_once_exports_and_runs_from_cpp(
    runner: Path,
    tmp_path: Path,
) -> None:
    module = parse(EVERY_KIND)
    for k, pair in enumerate([*PAIRS, CLASH]):
        for name, value in zip("xmnvs", every_kind_args(pair), strict=True):
            np.save(tmp_path / f"{name}{k}.npy", value)
    # Compiled, checked against the interpreter, exported, loaded and run
    # in a process of its own (compiled code that crashed would end the run).
    run_isolated(
        f"""
        import numpy as np, effir
        from pathlib import Path
        from tests.support.compiled_runs import parse
        from tests.backends.tvm.test_export_dynamic import (
            CLASH, CLASH_MESSAGE, EVERY_KIND, PAIRS, assert_same_values, every_kind_args)
        module = parse(EVERY_KIND)
        compiled = effir.compile(module)
        d = Path({str(tmp_path)!r})
        for pair in PAIRS:
            args = every_kind_args(pair)
            assert_same_values(compiled(*args), effir.interpret(module, *args))
        assert len(compiled.specialisations) == 1, compiled.report
        compiled.export(d / "model")
        loaded = effir.load(d / "model")
        for k, pair in enumerate(PAIRS):
            out = loaded(*every_kind_args(pair))
            for i, value in enumerate(out):
                np.save(d / f"loaded{{k}}_{{i}}.npy", value)
        for run in (compiled, loaded):
            try:
                run(*every_kind_args(CLASH))
            except effir.EvalError as err:
                assert CLASH_MESSAGE in str(err), err
            else:
                raise AssertionError("counts that do not broadcast ran")
        print("ok")
        """
    ).check()
    for k, pair in enumerate(PAIRS):
        want = effir.interpret(module, *every_kind_args(pair))
        loaded = tuple(np.load(tmp_path / f"loaded{k}_{i}.npy") for i in range(len(want)))
        assert_same_values(loaded, want)
        out = tmp_path / f"out{k}"
        out.mkdir()
        inputs = [tmp_path / f"{name}{k}.npy" for name in "xmnvs"]
        done = subprocess.run(
            [runner, tmp_path / "model", *inputs, "--out", out], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert_same_values(tuple(np.load(out / f"result_{i}.npy") for i in range(len(want))), want)
    clash = [tmp_path / f"{name}{len(PAIRS)}.npy" for name in "xmnvs"]
    done = subprocess.run([runner, tmp_path / "model", *clash], capture_output=True, text=True)
    assert done.returncode == 1 and CLASH_MESSAGE in done.stderr, done.stderr


def test_counts_that_must_be_equal_are_checked_at_run_time(tmp_path: Path) -> None:
    # Two masks' counts that an operator needs equal (a contraction, the
    # other axes of a concatenation) are one size when they are, and an
    # EvalError of that operator when they are not, as in the interpreter;
    # exported too.
    module = parse(
        """
def @main(%x: Tensor[(5, 3), float32], %m: Tensor[(5), bool], %n: Tensor[(5), bool]) {
  let %y = transpose(boolean_mask(%x, %m));
  let %z = boolean_mask(%x, %n);
  (nn.matmul(%y, %z), concatenate((%y, transpose(%z)), axis=0))
}
"""
    )
    two, other_two = np.array([1, 0, 1, 0, 0], bool), np.array([0, 1, 0, 0, 1], bool)
    compiled = assert_same_run(module, X, two, other_two)
    for m, n in [([0, 0, 0, 0, 0], [0] * 5), ([1, 1, 1, 1, 1], [1] * 5)]:
        args = (X, np.array(m, bool), np.array(n, bool))
        assert_close(compiled(*args), effir.interpret(module, *args))
    args = (X, np.array([1, 1, 0, 0, 0], bool), np.array([1, 1, 1, 0, 0], bool))
    with pytest.raises(effir.EvalError) as interpreted:
        effir.interpret(module, *args)
    with pytest.raises(effir.EvalError, match="^compile.effir:6:4: .*nn.matmul: ") as ran:
        compiled(*args)
    assert str(interpreted.value).splitlines()[1:] == str(ran.value).splitlines()[1:]
    assert len(compiled.specialisations) == 1
    compiled.export(tmp_path / "model")
    loaded = effir.load(tmp_path / "model")
    assert_close(loaded(X, two, other_two), effir.interpret(module, X, two, other_two))
    with pytest.raises(effir.EvalError, match="nn.matmul: "):
        loaded(*args)


def test_what_sizes_cannot_relate_is_refused_when_compiled() -> None:
    # The batch dimensions of a matmul broadcast; two masks' counts there
    # are not compiled (kernel/symbolic_shapes.py has no rule for them): a
    # CompileError at the operator, when the program is compiled.
    module = parse(
        """
def @main(%x: Tensor[(5, 2, 3), float32], %m: Tensor[(5), bool], %n: Tensor[(5), bool]) {
  let %z = transpose(boolean_mask(%x, %n), axes=[0, 2, 1]);
  nn.matmul(boolean_mask(%x, %m), %z)
}
"""
    )
    with pytest.raises(effir.CompileError, match="nn.matmul: .*known only at run time") as err:
        effir.compile(module)
    assert err.value.span is not None and "nn.matmul(" in str(err.value)
