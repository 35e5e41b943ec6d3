"""`effir check` (types, all errors, --effects) and `effir run`."""

import numpy as np
import pytest

from effir.cli import main

from .files import write

H = '#[version = "0.0.5"]\n'

TWO_ERRORS = H + (
    "def @f(%x: int32) -> float32 {\n"
    "  %x\n"
    "}\n"
    "def @main(%c: int32) {\n"
    "  if (%c) { 1 } else { 2 }\n"
    "}\n"
)

EFFECTFUL = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @count: Ref[int32] = ref(0);\n"
    "def @tick() { ref_write(@count, ref_read(@count) + 1) }\n"
    "def @main(%x: Tensor[(4), float32]) {\n"
    "  @tick();\n"
    '  debug.print(nn.dropout(%x, @rng, rate=0.5), label="dropped")\n'
    "}\n"
)

PROGRAM = H + (
    "def @main(%x: Tensor[(n, 2), float32], %y: Tensor[(2), float32]) {\n  (%x + %y, sum(%x))\n}\n"
)


def test_check_prints_every_type_error_with_its_location(tmp_path, capsys):
    path = write(tmp_path, "bad.effir", TWO_ERRORS)
    assert main(["check", path]) == 1
    err = capsys.readouterr().err
    # The body `%x` is a variable: the error points at the definition.
    assert f"{path}:2:1: type error: type mismatch in the function's result" in err
    assert f"{path}:6:3: type error: type mismatch in the condition of if" in err
    assert "2 errors found" in err
    assert "Traceback" not in err


def test_check_accepts_well_typed_programs(tmp_path, capsys):
    path = write(tmp_path, "ok.effir", PROGRAM)
    assert main(["check", path]) == 0
    assert "ok (1 function(s)" in capsys.readouterr().out


def test_check_effects(tmp_path, capsys):
    path = write(tmp_path, "fx.effir", EFFECTFUL)
    assert main(["check", "-q", "--effects", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "@tick: read @count, write @count",
        "@main: io, read @count, read @rng, write @count, write @rng",
    ]


def test_run_prints_results_and_writes_npz(tmp_path, capsys):
    path = write(tmp_path, "p.effir", PROGRAM)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([10, 20], dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    out_path = tmp_path / "out.npz"
    code = main(
        [
            "run",
            path,
            "--arg",
            f"x={tmp_path / 'x.npy'}",
            "--arg",
            f"y={tmp_path / 'y.npy'}",
            "--output",
            str(out_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "result.0: Tensor[(3, 2), float32]" in out
    assert "result.1: float32 15.0" in out
    saved = np.load(out_path)
    np.testing.assert_array_equal(saved["result.0"], x + y)
    assert float(saved["result.1"]) == 15.0


def test_run_effectful_program_with_seed(tmp_path, capsys):
    path = write(tmp_path, "fx.effir", EFFECTFUL)
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    out_path = tmp_path / "o.npz"
    args = ["run", path, "--arg", f"x={tmp_path / 'x.npy'}", "--output", str(out_path)]
    assert main(args + ["--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dropped: Tensor[(4), float32]")
    saved = np.load(out_path)
    assert int(saved["state.count"]) == 1
    assert saved["state.rng"].dtype == np.uint32
    first = saved["result"]
    assert main(args + ["--seed", "3"]) == 0
    np.testing.assert_array_equal(np.load(out_path)["result"], first)


@pytest.mark.parametrize(
    "extra, message",
    [
        ([], "@main needs --arg x=FILE.npy"),
        (["--arg", "z=a.npy"], "@main has no parameter %z"),
        (["--arg", "x"], "expected NAME=FILE.npy"),
        (["--arg", "x=missing.npy", "--arg", "y=missing.npy"], "missing.npy: no such file"),
        (["--entry", "nope"], "no function @nope"),
    ],
)
def test_run_user_errors(tmp_path, capsys, extra, message):
    path = write(tmp_path, "p.effir", PROGRAM)
    assert main(["run", path, *extra]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_run_reports_runtime_errors_with_location(tmp_path, capsys):
    path = write(tmp_path, "p.effir", PROGRAM)
    np.save(tmp_path / "x.npy", np.zeros((3, 2), np.float64))
    np.save(tmp_path / "y.npy", np.zeros(2, np.float32))
    code = main(
        ["run", path, "--arg", f"x={tmp_path / 'x.npy'}", "--arg", f"y={tmp_path / 'y.npy'}"]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "runtime error: parameter %x of @main expects Tensor[(n, 2), float32]" in err


def test_run_rejects_ill_typed_programs(tmp_path, capsys):
    path = write(tmp_path, "bad.effir", TWO_ERRORS)
    assert main(["run", path, "--arg", "c=x.npy"]) == 1
    assert "type error" in capsys.readouterr().err


def test_run_reads_standard_input(tmp_path, monkeypatch, capsys):
    import io
    import sys

    text = H + "def @main() { 1 + 2 }\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["run", "-"]) == 0
    assert capsys.readouterr().out == "result: int32 3\n"
