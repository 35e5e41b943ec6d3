"""Commands that touch user files never destroy one by surprise
(effir/io_safety.py): `fmt -i` on links, FIFOs, read-only and changing files;
`compile -o` onto directories and files that are not artifacts."""

import os
import stat
import subprocess
import sys

import pytest

import effir.cli
import effir.io_safety
from effir.cli import main
from tests.support.cli_texts import CANONICAL, MESSY
from tests.support.isolated import ROOT

H = '#[version = "0.0.5"]\n'


@pytest.fixture
def messy(tmp_path):
    path = tmp_path / "prog.effir"
    path.write_text(MESSY)
    return path


def test_fmt_in_place_formats_a_symlinks_target(tmp_path, messy):
    link = tmp_path / "link.effir"
    link.symlink_to(messy.name)
    assert main(["fmt", "-i", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == messy.name
    assert messy.read_text() == CANONICAL


def test_fmt_in_place_refuses_a_fifo_without_reading_it(tmp_path):
    """It turned the FIFO into a regular file (after blocking on the read)."""
    fifo = tmp_path / "pipe.effir"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "effir", "fmt", "-i", str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"{fifo}: a FIFO: only regular files are rewritten" in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_fmt_in_place_keeps_hard_links(tmp_path, messy):
    other = tmp_path / "other.effir"
    os.link(messy, other)
    inode = os.stat(messy).st_ino
    assert main(["fmt", "-i", str(messy)]) == 0
    assert os.stat(messy).st_ino == inode == os.stat(other).st_ino
    assert other.read_text() == CANONICAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.effir", "prog.effir"]


def test_fmt_in_place_refuses_a_read_only_file(messy, capsys):
    os.chmod(messy, 0o444)
    assert main(["fmt", "-i", str(messy)]) == 1
    assert f"{messy}: read-only (mode 0444); not rewritten" in capsys.readouterr().err
    assert messy.read_text() == MESSY
    assert stat.S_IMODE(os.stat(messy).st_mode) == 0o444


def test_fmt_in_place_in_a_read_only_directory(tmp_path, messy, capsys, monkeypatch):
    os.chmod(tmp_path, 0o555)
    if os.geteuid() == 0:  # root writes anyway: the directory refuses as it would a user

        def refused(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(effir.io_safety.tempfile, "mkstemp", refused)
    try:
        assert main(["fmt", "-i", str(messy)]) == 1
    finally:
        os.chmod(tmp_path, 0o755)
    err = capsys.readouterr().err
    assert f"{messy}: cannot write a new file in {tmp_path}: Permission denied" in err
    assert messy.read_text() == MESSY


@pytest.mark.parametrize(
    ("meanwhile", "message"),
    [
        (lambda path: path.write_text(MESSY + "// edited meanwhile\n"), "changed while it was"),
        (lambda path: path.unlink(), "deleted while it was being formatted; not written"),
    ],
)
def test_fmt_in_place_refuses_a_file_that_changed_while_it_ran(
    messy, capsys, monkeypatch, meanwhile, message
):
    """It silently overwrote an edit made meanwhile; a deletion exited 3."""
    parse = effir.cli.parse

    def parse_then_change(*args, **kwargs):
        module = parse(*args, **kwargs)
        meanwhile(messy)
        return module

    monkeypatch.setattr(effir.cli, "parse", parse_then_change)
    assert main(["fmt", "-i", str(messy)]) == 1
    assert f"{messy}: {message}" in capsys.readouterr().err
    if messy.exists():
        assert messy.read_text().endswith("// edited meanwhile\n")
    assert [p.name for p in messy.parent.iterdir()] in (["prog.effir"], [])


# ---------------------------------------------------------------- compile -o
PROGRAM = H + "def @main(%x: Tensor[(2), float32]) { tanh(%x) }\n"


@pytest.mark.tvm
def test_compile_refuses_to_replace_what_is_not_an_artifact(tmp_path, capsys, monkeypatch):
    """It deleted a directory holding a README and a src/, left `.FILE.old`
    behind a file, and exited 3 on `-o .`. All refused before compiling."""
    path = tmp_path / "m.effir"
    path.write_text(PROGRAM)
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README").write_text("mine")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    monkeypatch.chdir(tmp_path)
    cases = [
        (project, "a directory that is not an effir artifact (it has no effir-artifact.json)"),
        (a_file, "exists and is a file; an artifact is a directory"),
        (".", "-o .: an artifact is a directory of its own"),
        ("..", "-o ..: an artifact is a directory of its own"),
        (str(tmp_path), "an artifact is a directory of its own"),
    ]
    for output, message in cases:
        assert main(["compile", str(path), "-o", str(output)]) == 1
        assert message in capsys.readouterr().err
    assert (project / "README").read_text() == "mine" and (project / "src").is_dir()
    assert a_file.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.effir", "notes.txt", "project"]


@pytest.mark.tvm
def test_compile_replaces_an_artifact_and_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    path = tmp_path / "m.effir"
    path.write_text(PROGRAM)
    out = tmp_path / "model"
    out.mkdir()  # an empty directory may be filled
    assert main(["compile", str(path), "-o", str(out)]) == 0
    first = (out / "effir-artifact.json").stat().st_ino
    assert main(["compile", str(path), "-o", str(out)]) == 0  # replaces its own artifact
    assert (out / "effir-artifact.json").stat().st_ino != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.effir", "model"]
    capsys.readouterr()
    # A directory it cannot write in: one message, exit 1, nothing left.
    os.chmod(tmp_path, 0o555)

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    if os.geteuid() == 0:
        monkeypatch.setattr(effir.io_safety.tempfile, "mkdtemp", refused)
    try:
        assert main(["compile", str(path), "-o", str(tmp_path / "new")]) == 1
    finally:
        os.chmod(tmp_path, 0o755)
    assert f"cannot create the artifact in {tmp_path}: Permission denied" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.effir", "model"]


def test_export_checks_the_directory_again_when_it_installs(tmp_path):
    """`CompiledModule.export` (io_safety's staging and install, without the
    command's early check): a directory that became something else while
    the artifact was built is not replaced, and the new one is removed."""
    manifest = "effir-artifact.json"
    target = tmp_path / "model"
    staging = effir.io_safety.staging_directory(target, manifest)
    (staging / manifest).write_text("{}")
    target.mkdir()
    (target / "README").write_text("mine")  # written meanwhile
    with pytest.raises(effir.io_safety.OutputError, match="not an effir artifact"):
        effir.io_safety.install_directory(staging, target, manifest)
    assert (target / "README").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    # An artifact there is replaced as a whole, nothing left beside it.
    (target / "README").unlink()
    (target / manifest).write_text("old")
    staging = effir.io_safety.staging_directory(target, manifest)
    (staging / manifest).write_text("new")
    assert effir.io_safety.install_directory(staging, target, manifest) == target
    assert (target / manifest).read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
