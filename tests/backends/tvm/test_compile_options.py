"""effir.compile's options (effir/backends/tvm/driver/compile.py): target strings
as TVM users write them, opt_level and pipeline, dims built at once,
progress lines only when asked for, and the report's named fields.
Four TVM builds in all."""

from __future__ import annotations

import inspect
import io
import sys

import numpy as np
import pytest

import effir
from effir.backends.tvm.driver.compile import COMPILE_PIPELINES, Build, CompileReport
from effir.backends.tvm.runtime.errors import CompileError
from effir.backends.tvm.target import host_cpu, make_target
from effir.transform import PassContext, PassError

H = '#[version = "0.0.5"]\n'
SYMBOLIC = H + "def @main(%x: Tensor[(n, 4), float32]) { tanh(add(%x, 1f)) }\n"
STATIC = H + "def @main(%x: Tensor[(3), float32]) { multiply(%x, 2f) }\n"


def test_the_signature_is_explicit_and_documented():
    params = inspect.signature(effir.compile).parameters
    assert list(params) == [
        "module", "target", "pipeline", "opt_level", "dims", "entry", "verbose", "precision"
    ]  # fmt: skip
    doc = inspect.getdoc(effir.compile)
    for word in ("target", "pipeline", "opt_level", "dims", "verbose", "-mcpu", "tf32"):
        assert word in doc
    assert "builds" in inspect.getdoc(CompileReport) and Build._fields[:4] == (
        "dims", "seconds", "kernels", "loops"
    )  # fmt: skip


def test_target_strings_as_tvm_users_write_them():
    llvm = make_target("llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma -num-cores=4")
    assert llvm.kind.name == "llvm" and str(llvm.attrs["mcpu"]) == "skylake-avx512"
    assert [str(a) for a in llvm.attrs["mattr"]] == ["+avx2", "+fma"]
    assert int(llvm.attrs["num-cores"]) == 4
    cuda = make_target("cuda -arch=sm_80")
    assert cuda.kind.name == "cuda" and str(cuda.attrs["arch"]) == "sm_80"
    # The host is any x86-64 CPU: an exported CUDA artifact runs on other machines.
    assert cuda.host.kind.name == "llvm" and "mcpu" not in cuda.host.attrs
    assert str(make_target("llvm").attrs["mcpu"]) == host_cpu()
    assert str(make_target({"kind": "cuda"}).attrs["arch"]) == "sm_90"
    for text, message in [
        ("rocm", "its kind must be llvm or cuda"),
        ("llvm -bogus=1", "unknown option -bogus"),
        ("llvm -num-cores=many", "-num-cores takes int, not 'many'"),
        ("llvm mcpu", "expected -key=value"),
        ("", "unknown target"),
    ]:
        with pytest.raises(CompileError, match=message):
            make_target(text)


def test_options_are_checked_before_anything_is_built():
    module = effir.parse(STATIC)
    with pytest.raises(PassError, match="a pipeline or an opt_level, not both"):
        effir.compile(module, pipeline="O2,fuse,lower-tvm", opt_level=1)
    with pytest.raises(PassError, match="opt_level must be 0, 1 or 2, not 7"):
        effir.compile(module, opt_level=7)
    with pytest.raises(PassError, match="option max-fused-ops of pass fuse: expected an integer"):
        effir.compile(module, pipeline="O2,fuse{max-fused-ops=lots},lower-tvm")
    with pytest.raises(CompileError, match="unknown option -arch"):
        effir.compile(module, target="llvm -arch=sm_90")
    symbolic = effir.parse(SYMBOLIC)  # the pipeline runs, nothing is built
    with pytest.raises(CompileError, match="@main has no dimension m \\(its dimensions: n\\)"):
        effir.compile(symbolic, dims={"m": 2})
    with pytest.raises(CompileError, match="n must be a size"):
        effir.compile(symbolic, dims=[{"n": "two"}])


def test_verbose_progress_dims_opt_level_and_the_report(capsys):
    stream = io.StringIO()
    compiled = effir.compile(
        effir.parse(SYMBOLIC),
        f"llvm -mcpu={host_cpu()}",
        opt_level=1,
        dims={"n": 2},
        verbose=stream,
    )
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"effir: optimising: {COMPILE_PIPELINES[1]}"
    assert any(line.startswith("effir: building @main (") for line in lines)
    assert any(line.startswith("effir: built @main (") and line.endswith(" s") for line in lines)
    assert any("kernels" in line for line in lines)
    assert capsys.readouterr().err == ""  # a stream was given: nothing on stderr
    report = compiled.report
    assert report.pipeline == COMPILE_PIPELINES[1] and host_cpu() in report.target
    (build,) = report.builds  # built at compile time, for the dims given
    assert isinstance(build, Build) and build.entry == "main" and build.kernels >= 1
    assert build.seconds > 0 and report.build_seconds == build.seconds
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(compiled(x), np.tanh(x + 1), rtol=1e-6)
    assert len(report.builds) == 1  # n=2 was built already


def test_progress_is_on_by_default_only_in_a_notebook(monkeypatch):
    from effir.backends.tvm.driver import compile as compile_py

    assert not compile_py.in_notebook()  # pytest is no Jupyter kernel

    class ZMQInteractiveShell:  # what a Jupyter kernel's get_ipython() returns
        pass

    class FakeIPython:
        @staticmethod
        def get_ipython():
            return ZMQInteractiveShell()

    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert compile_py.in_notebook()


def test_quiet_by_default_and_verbose_on_stderr(capfd):
    module = effir.parse(STATIC)
    with PassContext(opt_level=0):
        compiled = effir.compile(module)  # the context's opt_level
    assert compiled.report.pipeline == COMPILE_PIPELINES[0]
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    compiled.verbose = True  # builds from now on are reported (on stderr)
    compiled.specialisation("main", {"m": 1})  # an unused binding: served by the static build
    assert capfd.readouterr().err == ""  # nothing was built
    assert len(compiled.report.builds) == 1


def test_the_old_spelling_still_works_and_says_it_is_deprecated():
    compiled = effir.compile(effir.parse(STATIC))
    with pytest.warns(DeprecationWarning, match="use specialisations"):
        old = compiled.specializations
    assert old is compiled.specialisations and len(old) == 1
    with pytest.warns(DeprecationWarning, match="use specialisation$"):
        spec = compiled.specialization("main", {})
    assert spec is next(iter(compiled.specialisations.values()))
