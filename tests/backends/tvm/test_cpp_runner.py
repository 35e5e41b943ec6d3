"""The C++ runner (examples/cpp/run_model.cc), built with g++ against the
TVM runtime the apache-tvm wheel ships, runs an exported program without
Python: two steps threading the state give the interpreter's results, key
and statistics; a broken artifact is an error message, not a crash.

The runner runs an artifact on the device its manifest names
(``target_kind``): a CUDA artifact runs on the GPU where one is (and TVM's
CUDA runtime), and is an error message where none is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm

import effir
from tests.support.compiled_runs import gru_lm

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

GPU = bool(tvm.cuda(0).exist)
NVCC = shutil.which("nvcc") is not None
ON_CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not GPU, reason="needs a GPU (a lent GPU machine runs it)")
)


@pytest.mark.parametrize("target", ["llvm", ON_CUDA])
def test_the_runner_runs_the_gru_model_as_the_interpreter(
    runner: Path, tmp_path: Path, target: str
) -> None:
    module, args = gru_lm(4, 2)
    compiled = effir.compile(module, target=target)
    compiled(*args, sink=lambda label, value: None)
    compiled.export(tmp_path / "model")
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a)
        inputs.append(str(tmp_path / f"in{i}.npy"))
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [runner, tmp_path / "model", *inputs, "--steps", "2", "--out", out],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("print mean activation") == 2
    state = effir.State(module)
    for _ in range(2):
        ref = effir.interpret(module, *args, state=state, sink=lambda label, value: None)
    np.testing.assert_allclose(np.load(out / "result_0.npy"), ref, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.load(out / "state_rng_0.npy"), state["rng"].data)
    np.testing.assert_allclose(
        np.load(out / "state_bn_0.npy"), state["bn"][0], rtol=1e-5, atol=1e-6
    )

    # A corrupt library: a message and exit status 1.
    library = next((tmp_path / "model" / "lib").iterdir())
    data = bytearray(library.read_bytes())
    data[100] ^= 0xFF
    library.write_bytes(bytes(data))
    done = subprocess.run([runner, tmp_path / "model", *inputs], capture_output=True, text=True)
    assert done.returncode == 1
    assert "is corrupt or truncated" in done.stderr
    done = subprocess.run([runner, tmp_path / "model", inputs[0]], capture_output=True, text=True)
    assert done.returncode == 1 and "@main takes 9 inputs, got 1" in done.stderr


@pytest.fixture(scope="module")
def small_artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A small exported program (signed with a key) and its input files."""
    root = tmp_path_factory.mktemp("small")
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\ndef @main(%x: Tensor[(n, 4), float32]) { tanh(%x) }',
            source_name="small.effir",
        )
    )
    compiled = effir.compile(module)
    x = np.ones((2, 4), np.float32)
    compiled(x)
    compiled.export(root / "model", key=b"runner key")
    np.save(root / "x.npy", x)
    (root / "key").write_bytes(b"runner key")
    return root, [str(root / "x.npy")]


def run(runner: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([runner, *map(str, args)], capture_output=True, text=True, timeout=60)


def npy_with_header(shape_text: str, data: bytes = b"\0" * 64) -> bytes:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text + ", }"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + data


@pytest.mark.parametrize(
    "shape", ["(-8, 4)", "(2, -4)", "(4611686018427387904, 4)", "(2, x)", "(2, 4"]
)
def test_a_malformed_npy_header_is_refused_not_a_crash(
    runner: Path, small_artifact: tuple[Path, list[str]], tmp_path: Path, shape: str
) -> None:
    root, _ = small_artifact
    bad = tmp_path / "bad.npy"
    bad.write_bytes(npy_with_header(shape))
    done = run(runner, root / "model", bad)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "bad.npy" in done.stderr


def test_a_library_symlinked_out_of_the_artifact_is_refused(
    runner: Path, small_artifact: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, inputs = small_artifact
    model = Path(shutil.copytree(root / "model", tmp_path / "model"))
    library = next((model / "lib").iterdir())
    outside = tmp_path / "outside.so"
    shutil.move(library, outside)
    library.symlink_to(outside)
    done = run(runner, model, *inputs)
    assert done.returncode == 1 and "outside the artifact" in done.stderr, done.stderr


def test_the_runner_checks_a_signed_manifest_with_its_key(
    runner: Path, small_artifact: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, inputs = small_artifact
    done = run(runner, root / "model", *inputs, "--key-file", root / "key")
    assert done.returncode == 0, done.stderr
    (tmp_path / "other").write_bytes(b"another key")
    done = run(runner, root / "model", *inputs, "--key-file", tmp_path / "other")
    assert done.returncode == 1 and "signature does not match" in done.stderr


def test_the_runner_runs_a_recursion_ten_thousand_deep(
    runner: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The VM nests a native call per call of a recursive function: the
    # runner runs on a large stack, and past the limit (20,000 here, to
    # keep the test short) the program stops with the compiled check's
    # message (runtime/stack.py).
    from effir.backends.tvm.relax import lower as relax_lower

    monkeypatch.setattr(relax_lower, "MAX_DEPTH", 20_000)
    module = effir.check(
        effir.parse(
            """#[version = "0.0.5"]
def @count(%n: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else { add(@count(subtract(%n, 1)), 0.5f) }
}
def @main(%n: int32) { @count(%n) }
"""
        )
    )
    compiled = effir.compile(module)
    compiled(np.array(1, np.int32))
    compiled.export(tmp_path / "model")
    for n, status in [(10_000, 0), (20_010, 1)]:
        np.save(tmp_path / "n.npy", np.array(n, np.int32))
        out = tmp_path / f"out{n}"
        out.mkdir()
        done = subprocess.run(
            [runner, tmp_path / "model", tmp_path / "n.npy", "--out", out],
            capture_output=True,
            text=True,
        )
        assert done.returncode == status, done.stderr
        if status == 0:
            assert np.load(out / "result_0.npy") == np.float32(5000.0)
        else:
            assert "@count: recursion deeper than" in done.stderr, done.stderr


def test_the_runner_fails_as_the_interpreter(runner: Path, tmp_path: Path) -> None:
    """A failed run-time check (integer division by zero; a bad dyn.reshape)
    prints the interpreter's located message and exits non-zero."""
    header = '#[version = "0.0.5"]\n'
    cases = [
        (
            "def @main(%x: Tensor[(3), int32], %y: Tensor[(3), int32]) {\n  divide(%x, %y)\n}\n",
            [np.array([1, 2, 3], "int32"), np.array([1, 0, 1], "int32")],
        ),
        (
            "def @main(%x: Tensor[(6), float32], %s: Tensor[(2), int64]) {\n"
            "  dyn.reshape(%x, %s)\n}\n",
            [np.ones(6, "float32"), np.array([4, 2], "int64")],
        ),
    ]
    for k, (text, args) in enumerate(cases):
        module = effir.check(effir.parse(header + text, source_name="fails.effir"))
        with pytest.raises(effir.EvalError) as expected:
            effir.interpret(module, *args)
        effir.compile(module).export(tmp_path / f"model{k}")
        inputs = []
        for i, a in enumerate(args):
            np.save(tmp_path / f"in{k}_{i}.npy", a)
            inputs.append(str(tmp_path / f"in{k}_{i}.npy"))
        done = subprocess.run(
            [runner, tmp_path / f"model{k}", *inputs], capture_output=True, text=True
        )
        assert done.returncode != 0
        assert str(expected.value) in done.stderr, done.stderr


@pytest.mark.skipif(GPU or not NVCC, reason="needs nvcc to build for CUDA, and no GPU")
def test_a_cuda_artifact_without_a_gpu_is_an_error_message(runner: Path, tmp_path: Path) -> None:
    module = effir.check(
        effir.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 4), float32]) { tanh(%x) }')
    )
    effir.compile(module, target="cuda").export(tmp_path / "model")
    # Its host code is for any x86-64 CPU, not this one's extensions.
    assert "mcpu" not in (tmp_path / "model" / "effir-artifact.json").read_text()
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    done = run(runner, tmp_path / "model", tmp_path / "x.npy")
    assert done.returncode == 1, done.stderr
    # Either TVM's CUDA runtime does not load (no driver), or it finds no GPU.
    assert f"run_model: {tmp_path / 'model'}: built for cuda, and " in done.stderr, done.stderr


def test_an_artifact_for_an_unknown_device_is_refused(
    runner: Path, small_artifact: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, inputs = small_artifact
    model = Path(shutil.copytree(root / "model", tmp_path / "model"))
    manifest = model / "effir-artifact.json"
    manifest.write_text(
        manifest.read_text().replace('"target_kind": "llvm"', '"target_kind": "rocm"')
    )
    done = run(runner, model, *inputs)
    assert done.returncode == 1
    assert f"{model}: unknown target kind 'rocm' (known: llvm, cuda)" in done.stderr, done.stderr


def test_the_runner_prints_tuples_keys_and_adt_values(runner: Path, tmp_path: Path) -> None:
    """A print of a value that is not a tensor carries its layout as a third
    argument of effir.print (runtime/printing.py [RULE RUNTIME-PRINT]); the runner
    summarises the value's tensors."""
    src = (
        '#[version = "0.0.5"]\n'
        "type List[A] { Cons(A, List[A]), Nil }\n"
        "def @main(%x: Tensor[(2), float32]) {\n"
        '  let %a = debug.print((%x, random.key(3)), label="pair");\n'
        '  let %b = debug.print(Cons(%x, Nil), label="list");\n'
        '  let %c = debug.print((), label="unit");\n'
        "  %x\n}\n"
    )
    module = effir.check(effir.parse(src))
    effir.compile(module).export(tmp_path / "model")
    np.save(tmp_path / "x.npy", np.array([1, 2], np.float32))
    done = subprocess.run(
        [runner, tmp_path / "model", tmp_path / "x.npy"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("print ")]
    assert lines == [
        "print pair: (float32[2] sum 3 first [1, 2], uint32[2] sum 3 first [0, 3])",
        "print list: (int64[] sum 0 first [0], float32[2] sum 3 first [1, 2], (int64[] sum 1 "
        "first [1]))",
        "print unit: ()",
    ], done.stdout


def test_a_call_that_matches_no_library_lists_the_shapes_served(
    runner: Path, tmp_path: Path
) -> None:
    """Inputs of shapes no exported library serves, of a wrong dtype or
    count: the message lists each signature the artifact serves."""
    module = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(3, 4), float32]) {\n"
        "  nn.dense(%x, %w)\n}\n"
    )
    compiled = effir.compile(module)
    compiled.specialisation("main", {"n": 2})
    compiled.specialisation("main", {"n": 3})
    compiled.export(tmp_path / "model")
    served = (
        "note: the artifact serves:\n"
        "  @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32])\n"
        "  @main(%x: Tensor[(3, 4), float32], %w: Tensor[(3, 4), float32])\n"
    )
    arrays = {
        "x5": np.ones((5, 4), np.float32),
        "x2": np.ones((2, 4), np.float32),
        "w": np.ones((3, 4), np.float32),
        "w_bad": np.ones((3, 5), np.float32),
        "w_int": np.ones((3, 4), np.int32),
    }
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
    cases = {
        ("x5", "w"): "the artifact was not exported for these input shapes (n=5)",
        ("x2", "w_bad"): "w_bad.npy: wrong size of dimension 1 of %w: 5, not 4",
        ("x2", "w_int"): "w_int.npy: %w must have 2 dimensions of float32, got int32",
        ("x2",): "@main takes 2 inputs, got 1",
    }
    for names, message in cases.items():
        done = run(runner, tmp_path / "model", *(tmp_path / f"{n}.npy" for n in names))
        assert done.returncode == 1, done.stderr
        assert message in done.stderr and served in done.stderr + "\n", done.stderr
    done = run(runner, tmp_path / "model", tmp_path / "x2.npy", tmp_path / "w.npy")
    assert done.returncode == 0, done.stderr


def test_the_runner_runs_an_artifact_whose_entry_is_not_main(runner: Path, tmp_path: Path) -> None:
    """A scripted function's artifact has its own name as its entry: the
    runner runs the only entry, or the one --entry names."""
    module = effir.parse(
        '#[version = "0.0.5"]\ndef @predict(%x: Tensor[(2), float32]) { tanh(%x) }\n'
    )
    compiled = effir.compile(module, entry="predict")
    x = np.array([0.5, -1.0], np.float32)
    expected = compiled(x)
    compiled.export(tmp_path / "model")
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    out.mkdir()
    for extra in ([], ["--entry", "predict"], ["--entry", "@predict"]):
        done = run(runner, tmp_path / "model", tmp_path / "x.npy", *extra, "--out", out)
        assert done.returncode == 0, done.stderr
        np.testing.assert_allclose(np.load(out / "result_0.npy"), expected, rtol=1e-6)
    done = run(runner, tmp_path / "model", tmp_path / "x.npy", "--entry", "main")
    assert done.returncode == 1 and "no entry @main (entries: @predict)" in done.stderr
