"""``import effir`` loads no TVM: importing TVM (and, through tvm_ffi, PyTorch
when it is installed) costs seconds, which a user who parses, checks,
differentiates or interprets a program should not pay. The first
``effir.compile`` or ``effir.load`` imports it; onnx and torch, alike, the
first model read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.isolated import ROOT

HEAVY = ("tvm", "tvm_ffi", "torch")
LAZY = (*HEAVY, "onnx", "onnxruntime", "google.protobuf")  # the model formats too
HEADER = '#[version = "0.0.5"]\\n'


def loaded_after(
    code: str, heavy: tuple[str, ...] = HEAVY, env: dict[str, str] | None = None
) -> set[str]:
    """Which of ``heavy`` a fresh interpreter has imported after ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(eval(done.stdout.strip().splitlines()[-1]))


def test_import_effir_imports_no_tvm() -> None:
    assert loaded_after("import effir; effir.optim.Adam; effir.BackendError", LAZY) == set()


def test_the_command_line_starts_without_tvm_or_a_model_format() -> None:
    """``effir --help``, ``check``, ``run``: the command's module imports the
    importers and the backend's TVM importer at its top, which load neither."""
    assert loaded_after("from effir import cli; cli.build_parser().format_help()", LAZY) == set()


def test_differentiating_and_interpreting_import_no_tvm() -> None:
    code = f"""
import numpy as np, effir
m = effir.parse('{HEADER}def @main(%x: Tensor[(3), float32]) {{ sum(tanh(%x)) }}')
g = effir.value_and_grad(m)
print(effir.interpret(g, np.ones(3, np.float32), entry="main_grad"))
effir.pipeline("O2")(m)
"""
    assert loaded_after(code) == set()


def test_compiling_imports_tvm() -> None:
    """The probe is able to see TVM: a compile does import it."""
    code = f"""
import effir
effir.compile(effir.parse('{HEADER}def @main(%x: Tensor[(3), float32]) {{ tanh(%x) }}'))
"""
    assert {"tvm", "tvm_ffi"} <= loaded_after(code, env={"EFFIR_CACHE_DIR": "off"})


def test_compiling_does_not_import_pytorch_for_tvm() -> None:
    """tvm_ffi imports PyTorch when it is installed; effir hides it while
    TVM is imported (effir/backends/tvm/runtime/importing.py), unless the
    program imported it already; the user's own import still works, and so
    does a PyTorch argument."""
    pytest.importorskip("torch")
    code = f"""
import numpy as np, effir
compiled = effir.compile(effir.parse('{HEADER}def @main(%x: Tensor[(3), float32]) {{ tanh(%x) }}'))
"""
    off = {"EFFIR_CACHE_DIR": "off"}  # a build: TVM imported (a cached one imports tvm_ffi alone)
    assert loaded_after(code, env=off) == {"tvm", "tvm_ffi"}
    assert loaded_after("import torch\n" + code, env=off) == set(HEAVY)
    use = """
import torch
x = torch.ones(3)
assert np.allclose(compiled(x), np.tanh(1.0))  # a PyTorch argument, through the input contract
"""
    assert loaded_after(code + use, env=off) == set(HEAVY)


def test_a_build_does_not_import_ml_dtypes() -> None:
    """effir makes its Relax constants without ``relax.const``, which imports
    ml_dtypes (relax/constants.py [RULE LOWER-CONST]): a build (here of a
    program with a tensor constant) does not import it; it did."""
    pytest.importorskip("ml_dtypes")
    program = (
        f"{HEADER}def @main(%x: Tensor[(2, 2), float32]) {{ tanh(%x) * meta[relay.Constant][0] }}"
        '\\n#[metadata]\\n{"relay.Constant": [{"dtype": "float32", "shape": [2, 2],'
        ' "data": "AACAPwAAAEAAAEBAAACAQA=="}]}\\n'
    )
    build = f"""
import effir
compiled = effir.compile(effir.parse('{program}'))
assert not compiled.report.builds[0].cached
"""
    probe = ("tvm", "ml_dtypes")
    assert loaded_after(build, probe, {"EFFIR_CACHE_DIR": "off"}) == {"tvm"}


def test_a_compile_from_the_build_cache_imports_tvm_ffi_alone(tmp_path) -> None:
    """A process that loads its program from the build cache runs it on
    TVM's runtime library through tvm_ffi (runtime/tvm_runtime.py): no
    ``tvm`` package. tvm_ffi imports ml_dtypes (bfloat16 and float8 numpy
    types, which effir has none of) and cuda-python's bindings (a stream
    type effir never passes) when installed; effir hides them while it is
    imported. A build imports TVM; this one ml_dtypes too, at its first call
    (TVM's ``Executable.jit`` links a program whose Relax module holds no
    TIR of its own: runtime/importing.py), not for its constants
    (``test_a_build_does_not_import_ml_dtypes``)."""
    pytest.importorskip("ml_dtypes")
    code = f"""
import numpy as np, effir
compiled = effir.compile(effir.parse('{HEADER}def @main(%x: Tensor[(3), float32]) {{ tanh(%x) }}'))
assert np.allclose(compiled(np.ones(3, np.float32)), np.tanh(1.0))
assert compiled.report.builds[0].cached == {{cached}}
"""
    env = {"EFFIR_CACHE_DIR": str(tmp_path)}
    probe = ("tvm", "tvm_ffi", "ml_dtypes", "cuda.bindings")
    assert loaded_after(code.replace("{cached}", "False"), probe, env) == {
        "tvm",
        "tvm_ffi",
        "ml_dtypes",
    }
    assert loaded_after(code.replace("{cached}", "True"), probe, env) == {"tvm_ffi"}
    assert loaded_after("import ml_dtypes\n" + code.replace("{cached}", "True"), probe, env) == {
        "tvm_ffi",
        "ml_dtypes",
    }
