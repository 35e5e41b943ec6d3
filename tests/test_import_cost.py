"""``import effir`` loads no TVM: importing TVM (and, through tvm_ffi, PyTorch
when it is installed) costs seconds, which a user who parses, checks,
differentiates or interprets a program should not pay. The first
``effir.compile`` or ``effir.load`` imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.isolated import ROOT

HEAVY = ("tvm", "tvm_ffi", "torch")
HEADER = '#[version = "0.0.5"]\\n'


def loaded_after(code: str) -> set[str]:
    """Which of HEAVY a fresh interpreter has imported after ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(eval(done.stdout.strip().splitlines()[-1]))


def test_import_effir_imports_no_tvm() -> None:
    assert loaded_after("import effir; effir.optim.Adam; effir.BackendError") == set()


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
    assert {"tvm", "tvm_ffi"} <= loaded_after(code)


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
    assert loaded_after(code) == {"tvm", "tvm_ffi"}
    assert loaded_after("import torch\n" + code) == set(HEAVY)
    use = """
import torch
x = torch.ones(3)
assert np.allclose(compiled(x), np.tanh(1.0))  # a PyTorch argument, through the input contract
"""
    assert loaded_after(code + use) == set(HEAVY)
