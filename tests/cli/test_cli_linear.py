"""`effir check --linear`: the linearity verifier from the command line."""

import io
import sys

from effir.cli import main

from .files import write

H = '#[version = "0.0.5"]\n'

LINEAR = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    'def @main(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {\n'
    "  let %ks = random.split(%rng);\n"
    "  (random.dropout(%x, %ks.1, rate=0.5f), %ks.0)\n"
    "}\n"
)

REUSED = H + (
    "def @main(%x: Tensor[(4), float32], %k: Key, %w: Tensor[(), int64],\n"
    '          state_in=["io"], state_out=["io"]) {\n'
    "  let %a = random.dropout(%x, %k);\n"
    '  let %p = io.print(%w, %a, label="a");\n'
    "  (random.dropout(%a, %k), %w)\n"
    "}\n"
)


def test_linear_program_passes_and_prints_nothing_extra(tmp_path, capsys):
    path = write(tmp_path, "ok.effir", LINEAR)
    assert main(["check", "--linear", path]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: ok (1 function(s), 0 type(s), 1 state cell(s))\n"
    assert err == ""
    assert main(["check", "-q", "--linear", path]) == 0
    assert capsys.readouterr() == ("", "")


def test_every_violation_is_printed_located_with_a_caret(tmp_path, capsys):
    path = write(tmp_path, "bad.effir", REUSED)
    assert main(["check", "--linear", path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        f"{path}:5:12: linearity error: the new world token (output 0 of io.print) produced "
        f"at {path}:5:12 is dropped on the path ending at 6:3\n"
        '    let %p = io.print(%w, %a, label="a");\n'
        "             ^~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
    ) in err
    assert (
        f"{path}:6:23: linearity error: key %k (bound at {path}:2:37) is used twice: "
        "at 4:31 and at 6:23\n"
        "    (random.dropout(%a, %k), %w)\n"
        "                        ^~\n"
    ) in err
    assert "world token %w" in err and "used twice: at 5:21 and at 6:28" in err
    assert err.endswith("3 errors found\n")
    assert "Traceback" not in err


def test_without_the_flag_linearity_is_not_checked(tmp_path, capsys):
    path = write(tmp_path, "bad.effir", REUSED)
    assert main(["check", "-q", path]) == 0
    assert capsys.readouterr().err == ""


def test_standard_input(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(REUSED.encode())))
    assert main(["check", "--linear", "-"]) == 1
    assert "<stdin>:6:23: linearity error: key %k" in capsys.readouterr().err


def test_bad_input_is_one_message_without_a_traceback(tmp_path, capsys):
    path = write(tmp_path, "broken.effir", H + "def @main(%k: Key) {\n  (%k,\n}\n")
    assert main(["check", "--linear", path]) == 1
    err = capsys.readouterr().err
    assert f"{path}:4:1: parse error" in err
    assert "Traceback" not in err and "internal error" not in err
    ill_typed = write(tmp_path, "ill.effir", H + "def @main(%k: Key) { random.dropout(%k, %k) }\n")
    assert main(["check", "--linear", ill_typed]) == 1
    err = capsys.readouterr().err
    assert "type error" in err and "Traceback" not in err
    assert main(["check", "--linear", str(tmp_path / "missing.effir")]) == 1
    assert "no such file" in capsys.readouterr().err
