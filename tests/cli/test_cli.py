"""The `effir` command line: fmt and check, their exit codes and errors."""

import os
import stat
import subprocess
import sys

import pytest

from effir.cli import main
from tests.support.cli_texts import CANONICAL, MESSY, H

BROKEN = H + "def @main(%x) {\n  add(%x, %nope)\n}\n"


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "effir", *args], input=stdin, capture_output=True, check=False
    )


@pytest.fixture
def messy(tmp_path):
    path = tmp_path / "prog.effir"
    path.write_text(MESSY)
    return path


def test_fmt_prints_canonical_text(messy, capsys):
    assert main(["fmt", str(messy)]) == 0
    assert capsys.readouterr().out == CANONICAL


def test_fmt_reads_standard_input():
    result = run_cli("fmt", "-", stdin=MESSY.encode())
    assert result.returncode == 0
    assert result.stdout.decode() == CANONICAL


def test_fmt_check_exit_codes(messy, tmp_path, capsys):
    assert main(["fmt", "--check", str(messy)]) == 1
    assert f"would reformat {messy}" in capsys.readouterr().err
    clean = tmp_path / "clean.effir"
    clean.write_text(CANONICAL)
    assert main(["fmt", "--check", str(clean)]) == 0
    assert messy.read_text() == MESSY  # --check never writes


def test_fmt_in_place_rewrites_atomically_and_keeps_permissions(messy):
    os.chmod(messy, 0o640)
    assert main(["fmt", "-i", str(messy)]) == 0
    assert messy.read_text() == CANONICAL
    assert stat.S_IMODE(os.stat(messy).st_mode) == 0o640
    assert [p.name for p in messy.parent.iterdir()] == ["prog.effir"]  # no temp files left


def test_fmt_in_place_leaves_a_broken_file_untouched(tmp_path, capsys):
    path = tmp_path / "broken.effir"
    path.write_text(BROKEN)
    before = os.stat(path).st_mtime_ns
    assert main(["fmt", "-i", str(path)]) == 1
    assert path.read_text() == BROKEN
    assert os.stat(path).st_mtime_ns == before
    err = capsys.readouterr().err
    assert f"{path}:3:11: parse error: undefined variable %nope" in err


def test_fmt_in_place_on_several_files_stops_at_the_first_error(tmp_path, messy):
    broken = tmp_path / "b.effir"
    broken.write_text(BROKEN)
    assert main(["fmt", "-i", str(broken), str(messy)]) == 1
    assert broken.read_text() == BROKEN


def test_check_reports_ok_and_errors(messy, tmp_path, capsys):
    assert main(["check", str(messy)]) == 0
    assert "ok (1 function(s)" in capsys.readouterr().out
    broken = tmp_path / "b.effir"
    broken.write_text(BROKEN)
    assert main(["check", str(broken)]) == 1
    assert "undefined variable %nope" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,stdin,fragment",
    [
        (["check", "/nonexistent/x.effir"], None, "no such file"),
        (["check", "."], None, "is a directory"),
        (["check", "-"], b"\xff\xfe\x00garbage", "not UTF-8"),
        (["check", "-"], b"", "empty program"),
        (["fmt", "-i", "-"], b"", "cannot rewrite standard input"),
        (["fmt", "-i", "--check", "x"], None, "choose one of -i and --check"),
        (["check", "-"], BROKEN.encode(), "<stdin>:3:11: parse error"),
    ],
)
def test_user_errors_exit_1_without_traceback(args, stdin, fragment):
    result = run_cli(*args, stdin=stdin)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert fragment in err
    assert "Traceback" not in err


def test_usage_errors_exit_2_without_traceback():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr
    assert b"usage:" in result.stderr


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "effir")
    result = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.startswith("effir ")
