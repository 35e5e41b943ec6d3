"""`effir run --args INPUTS.npz`: the parameters' values from one archive,
by parameter name or by position, and the errors for names that do not fit."""

import numpy as np
import pytest

from effir.cli import main

from .files import write

H = '#[version = "0.0.5"]\n'
PROGRAM = H + (
    "def @main(%x: Tensor[(n, 2), float32], %y: Tensor[(2), float32]) {\n  (%x + %y, sum(%x))\n}\n"
)
X = np.arange(6, dtype=np.float32).reshape(3, 2)
Y = np.array([10, -20], dtype=np.float32)


def run(tmp_path, capsys, *extra: str) -> tuple[int, str, str]:
    path = write(tmp_path, "p.effir", PROGRAM)
    out = tmp_path / "out.npz"
    code = main(["run", path, *extra, "--output", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "arrays",
    [{"x": X, "y": Y}, {"arg0": X, "arg1": Y}, {"y": Y, "arg0": X}],
    ids=["by-name", "by-position", "mixed"],
)
def test_args_by_name_or_position(tmp_path, capsys, arrays):
    np.savez(tmp_path / "in.npz", **arrays)
    code, out, err = run(tmp_path, capsys, "--args", str(tmp_path / "in.npz"))
    assert (code, err) == (0, "")
    assert "result.1: float32 15.0" in out
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(saved["result.0"], X + Y)


def test_args_and_arg_together(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=X)
    np.save(tmp_path / "y.npy", Y)
    args = ["--args", str(tmp_path / "in.npz"), "--arg", f"y={tmp_path / 'y.npy'}"]
    code, out, _ = run(tmp_path, capsys, *args)
    assert code == 0 and "result.1: float32 15.0" in out


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": X}, "@main needs --arg y=FILE.npy (or y in --args FILE.npz)"),
        ({}, "(missing: %x, %y)"),
        (
            {"x": X, "y": Y, "z": Y},
            "@main has no parameter named 'z' (parameters: %x, %y; or arg0..arg1 by position)",
        ),
        ({"x": X, "y": Y, "arg2": Y}, "has no parameter named 'arg2'"),
        ({"x": X, "arg0": X, "y": Y}, "the parameter %x is given twice"),
    ],
)
def test_args_errors_name_what_does_not_fit(tmp_path, capsys, arrays, message):
    np.savez(tmp_path / "in.npz", **arrays)
    code, out, err = run(tmp_path, capsys, "--args", str(tmp_path / "in.npz"))
    assert code == 1 and out == ""
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.npz").exists()


def test_args_given_twice_by_both_options(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=X, y=Y)
    np.save(tmp_path / "y.npy", Y)
    args = ["--args", str(tmp_path / "in.npz"), "--arg", f"y={tmp_path / 'y.npy'}"]
    code, _, err = run(tmp_path, capsys, *args)
    assert code == 1 and "the parameter %y is given by --arg and by --args" in err


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "in.npz: no such file"),
        (b"not a zip", "in.npz: not a .npz archive of arrays"),
    ],
)
def test_args_unreadable_archives(tmp_path, capsys, content, message):
    if content is not None:
        (tmp_path / "in.npz").write_bytes(content)
    code, _, err = run(tmp_path, capsys, "--args", str(tmp_path / "in.npz"))
    assert code == 1 and message in err and "Traceback" not in err


def test_args_refuses_an_array_over_the_size_limit_unread(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EFFIR_MAX_TENSOR_BYTES", "16")
    np.savez(tmp_path / "in.npz", x=X, y=Y)
    code, _, err = run(tmp_path, capsys, "--args", str(tmp_path / "in.npz"))
    assert code == 1 and "in.npz: x: " in err and "Traceback" not in err
