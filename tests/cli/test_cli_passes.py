"""`effir opt --list-passes`, options in `-p` pipeline text, and progress
lines of `effir compile` (on by default, off with -q)."""

from __future__ import annotations

from effir.cli import main
from effir.transform import registered_passes

from .files import write

H = '#[version = "0.0.5"]\n'
PROGRAM = H + "def @main(%x: Tensor[(n, 4), float32]) { tanh(add(%x, 1f)) }\n"


def test_list_passes_prints_every_pass_with_its_description_and_options(capsys):
    assert main(["opt", "--list-passes"]) == 0
    out = capsys.readouterr().out
    for name, p in registered_passes().items():
        assert f"{name}: {p.doc}\n" in out
    assert "lower-tvm: " in out  # the TVM lowering is known to `effir opt`
    assert "    option max-fused-ops=256 (int): most operator calls in one kernel" in out
    assert "  O2: explicate,state-passing,partial-eval,simplify,cse,dce" in out


def test_opt_needs_a_file_unless_listing(capsys):
    assert main(["opt", "-O2"]) == 1
    assert "give a FILE (or --list-passes)" in capsys.readouterr().err


def test_pipeline_options_on_the_command_line(tmp_path, capsys):
    path = write(tmp_path, "m.effir", PROGRAM)
    assert main(["opt", path, "-p", "to-anf,fuse"]) == 0
    assert "Primitive" in capsys.readouterr().out  # add and tanh: one kernel
    assert main(["opt", path, "-p", "to-anf,fuse{max-fused-ops=1}"]) == 0
    assert "Primitive" not in capsys.readouterr().out  # no group of one
    assert main(["opt", path, "-p", "to-anf,fuse{max-fused-ops=none}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("<pipeline>:1:27: pass error: option max-fused-ops of pass fuse: ")
    assert "expected an integer, got 'none'" in err and "^~~~" in err


def test_compile_prints_progress_unless_quiet(tmp_path, capsys):
    path = write(tmp_path, "m.effir", PROGRAM)
    assert main(["compile", path, "-o", str(tmp_path / "a"), "--dims", "n=2", "-O1"]) == 0
    captured = capsys.readouterr()
    assert "effir: optimising: explicate,state-passing,fuse,lower-tvm" in captured.err
    assert "effir: building @main (n=2)" in captured.err and "effir: built @main" in captured.err
    assert "TVM build (n=2)" in captured.out
    args = ["compile", path, "-o", str(tmp_path / "b"), "--dims", "n=2", "-q"]
    assert main([*args, "--target", "llvm -opt-level=2"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "TVM build (n=2)" in captured.out
