"""Programs with data-dependent shapes export (relax_symbolic.py [RULE
SHAPEPOLY]): the kernels after a ``boolean_mask`` are compiled once with
symbolic sizes, so one build runs every mask, from Python, from an
``effir.load``ed artifact and from the C++ runner, as the interpreter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import effir
from tests.isolated import run_isolated

from .test_compile import assert_close, assert_same_run, parse
from .test_cpp_runner import runner  # noqa: F401  (the fixture)

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
    assert len(compiled.specializations) == 1
    assert all(spec.exportable for spec in compiled.specializations.values())


def test_an_entry_of_unknown_size_builds_once() -> None:
    # A ``?`` of the entry's own types is named by a cast of the argument.
    module = parse("def @main(%x: Tensor[(?, 3), float32]) { sum(tanh(%x), axis=[1]) }")
    compiled = assert_same_run(module, X)
    for rows in (0, 2):
        x = X[:rows]
        assert_close(compiled(x), effir.interpret(module, x))
    (spec,) = compiled.specializations.values()
    assert spec.exportable


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_masked_program_exports_loads_and_runs_from_cpp(
    runner: Path,  # noqa: F811
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
        from tests.backends.tvm.test_compile import parse
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
    # reduction's initial value before its loop (kernel.py).
    compiled = effir.compile(parse(MASKED), target="cuda")
    (spec,) = compiled.specializations.values()
    assert spec.exportable
    assert ".entry" in spec.ptx()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_an_adt_program_with_closures_runs_from_cpp(
    runner: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Lists, match, VM closures (test_adts.py) need nothing of Python.
    from .test_adts import BUILD_AND_FOLD, X, Y

    args = {"n": np.int32(6), "x": X, "y": Y}
    for name, value in args.items():
        np.save(tmp_path / f"{name}.npy", value)
    run_isolated(
        f"""
        import effir
        from tests.backends.tvm.test_compile import parse
        from tests.backends.tvm.test_adts import BUILD_AND_FOLD
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
