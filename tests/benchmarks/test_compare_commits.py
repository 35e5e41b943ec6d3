"""benchmarks/compare_commits.py on a tiny git repository made here: the
order of the runs, what a command sees (its tree's code, ``python``, the
placeholders, its build cache), what is measured, and that the throw-away
worktrees go away whatever happens."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "compare_commits.py"


def _load_script() -> ModuleType:
    """The script as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("compare_commits", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


cc = _load_script()


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits of ``mod.py``: VALUE "one" then "two", SECONDS 1.0 then 2.0."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    for value, seconds in (("one", 1.0), ("two", 2.0)):
        (path / "mod.py").write_text(f"VALUE = {value!r}\nSECONDS = {seconds}\n")
        _git(path, "add", "mod.py")
        _git(path, "commit", "-q", "-m", value)
    return path


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the script makes its worktrees in (empty
    again after every run)."""
    path = tmp_path / "scratch"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def _commits(repo: Path) -> tuple[str, str]:
    return _git(repo, "rev-parse", "HEAD~1"), _git(repo, "rev-parse", "HEAD")


def _run(repo: Path, *args: str, rounds: int = 2) -> object:
    return cc.run(["--repo", str(repo), "--base", "HEAD~1", "--rounds", str(rounds), *args])


def _log_lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1]


def _assert_cleaned_up(repo: Path, scratch: Path) -> None:
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert list(scratch.iterdir()) == []


# ------------------------------------------------------------------- order
def test_base_and_head_alternate_with_the_order_flipped_every_round(
    repo: Path, scratch: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    _run(repo, "--cold", f"a=echo {{commit}} >> {log}", rounds=4)
    base, head = _commits(repo)
    assert _log_lines(log) == [base, head, head, base, base, head, head, base]


def test_the_order_of_a_round() -> None:
    base = cc.Checkout("base", "b" * 40, Path("/b"))
    head = cc.Checkout("head", "h" * 40, Path("/h"))
    assert [cc.order(r, [base, head]) for r in range(3)] == [
        [base, head],
        [head, base],
        [base, head],
    ]


# --------------------------------------------------------- what a run sees
def test_a_command_runs_its_own_tree_with_this_python_and_the_placeholders(
    repo: Path, scratch: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    probe = "import mod, os, sys; print(mod.VALUE, sys.executable, os.getcwd())"
    _run(repo, "--cold", f"a=echo {{commit}} {{checkout}} >> {log}; python -c '{probe}' >> {log}")
    base, head = _commits(repo)
    lines = [line.split() for line in _log_lines(log)]
    assert [line[0] for line in lines[0::2]] == [base, head, head, base]
    for (commit, checkout), (value, python, cwd) in zip(lines[0::2], lines[1::2], strict=True):
        assert value == ("one" if commit == base else "two")
        assert Path(python) == Path(sys.executable)
        assert cwd == checkout
        assert Path(checkout).is_relative_to(scratch)


def test_substitute_replaces_the_placeholders_and_leaves_other_braces() -> None:
    checkout = cc.Checkout("head", "c0ffee", Path("/trees/head"))
    command = "python {checkout}/x.py --commit {commit} --json '{\"a\": 1}'"
    assert cc.substitute(command, checkout) == (
        "python /trees/head/x.py --commit c0ffee --json '{\"a\": 1}'"
    )


def test_cold_runs_get_a_fresh_empty_cache_and_warm_runs_their_trees_filled_one(
    repo: Path, scratch: Path, tmp_path: Path
) -> None:
    def probe(log: Path) -> str:
        return (
            f"echo {{commit}} $EFFIR_CACHE_DIR $(ls -A $EFFIR_CACHE_DIR | wc -l) >> {log}; "
            "touch $EFFIR_CACHE_DIR/built"
        )

    cold, warm = tmp_path / "cold", tmp_path / "warm"
    _run(repo, "--cold", f"c={probe(cold)}", "--warm", f"w={probe(warm)}", rounds=3)
    base, head = _commits(repo)

    cold_runs = [line.split() for line in _log_lines(cold)]
    assert len(cold_runs) == 6
    assert [entries for _, _, entries in cold_runs] == ["0"] * 6
    assert len({cache for _, cache, _ in cold_runs}) == 6

    warm_runs = [line.split() for line in _log_lines(warm)]
    assert len(warm_runs) == 2 + 6  # one untimed warm-up per tree
    assert [(commit, entries) for commit, _, entries in warm_runs[:2]] == [(base, "0"), (head, "0")]
    assert all(entries == "1" for _, _, entries in warm_runs[2:])
    caches = {
        commit: {cache for c, cache, _ in warm_runs if c == commit} for commit in (base, head)
    }
    assert all(len(found) == 1 for found in caches.values())
    assert caches[base] != caches[head]


# ----------------------------------------------------------- measurements
def test_a_result_line_gives_named_measurements() -> None:
    stdout = 'effir from /x\nRESULT {"compile": 2.5, "call": 0.001}\ndone\n'
    assert cc.parse_measurements(stdout, 9.0, 8.0) == (
        {"compile": 2.5, "call": 0.001},
        "RESULT",
    )


def test_the_pipeline_json_line_gives_its_wall_and_cpu() -> None:
    line = json.dumps({"wall": 3.0, "cpu": 2.0, "gc": 0.5, "passes": {"dce": 1.0}, "bindings": 9})
    assert cc.parse_measurements("warming\n" + line + "\n", 9.0, 8.0) == (
        {"wall": 3.0, "cpu": 2.0},
        "pipeline",
    )


def test_without_either_the_process_wall_and_cpu_time_are_taken() -> None:
    for stdout in ("", "hello\n", '{"wall": 1.0}\n', "[1, 2]\n"):
        assert cc.parse_measurements(stdout, 9.0, 8.0) == (
            {"process wall": 9.0, "process cpu": 8.0},
            "process",
        )


@pytest.mark.parametrize(
    "stdout,message",
    [
        ("RESULT {nope}\n", "not JSON"),
        ("RESULT [1]\n", "JSON object"),
        ('RESULT {"a": "fast"}\n', "must be numbers"),
        ('RESULT {"a": true}\n', "must be numbers"),
        ('RESULT {"a": 1}\nRESULT {"a": 2}\n', "more than one"),
    ],
)
def test_a_malformed_result_line_is_an_error(stdout: str, message: str) -> None:
    with pytest.raises(cc.CompareError, match=message):
        cc.parse_measurements(stdout, 1.0, 1.0)


def test_the_process_times_are_the_commands_own(repo: Path, scratch: Path) -> None:
    spin = (
        "import time; t = time.process_time()\n"
        "while time.process_time() - t < 0.2: pass\ntime.sleep(0.2)"
    )
    comparison = _run(repo, "--cold", f'a=python -c "{spin}"', rounds=1)
    for sample in comparison.samples:
        assert sample.source == "process"
        assert sample.values["process cpu"] >= 0.2
        assert sample.values["process wall"] >= 0.4


def test_the_table_and_json_compare_the_two_commits(
    repo: Path, scratch: Path, tmp_path: Path
) -> None:
    raw = tmp_path / "samples.json"
    result = """import json, mod; print("RESULT", json.dumps({"t": mod.SECONDS}))"""
    comparison = _run(repo, "--cold", f"a=python -c '{result}'", "--json", str(raw), rounds=3)
    rows = [line for line in cc.table(comparison).splitlines() if line.startswith("| a ")]
    assert rows == ["| a | t | 3/3 | 1 | 1 | 2 | 2 | 2.000 | 2.000 |"]
    written = json.loads(raw.read_text())
    base, head = _commits(repo)
    assert written["commits"] == {"base": base, "head": head}
    assert [(s["label"], s["round"], s["values"]) for s in written["samples"]] == [
        ("base", 0, {"t": 1.0}),
        ("head", 0, {"t": 2.0}),
        ("head", 1, {"t": 2.0}),
        ("base", 1, {"t": 1.0}),
        ("base", 2, {"t": 1.0}),
        ("head", 2, {"t": 2.0}),
    ]


# ------------------------------------------------------ errors and clean-up
def test_the_worktrees_are_removed_after_a_run(repo: Path, scratch: Path) -> None:
    _run(repo, "--cold", "a=true", "--warm", "b=true")
    _assert_cleaned_up(repo, scratch)


def test_a_failing_command_is_an_error_with_its_stderr_and_leaves_nothing(
    repo: Path, scratch: Path
) -> None:
    failing = 'a=python -c \'import mod; assert mod.VALUE == "one", "head differs"\''
    with pytest.raises(cc.CompareError) as raised:
        _run(repo, "--cold", failing)
    assert raised.value.exit_code == cc.EXIT_COMMAND_FAILED
    message = str(raised.value)
    assert "'a' failed in head" in message
    assert "AssertionError: head differs" in message
    _assert_cleaned_up(repo, scratch)


def test_an_unknown_commit_is_an_error_before_any_worktree(repo: Path, scratch: Path) -> None:
    with pytest.raises(cc.CompareError, match="unknown commit 'no-such-branch'") as raised:
        cc.run(["--repo", str(repo), "--base", "no-such-branch", "--cold", "a=true"])
    assert raised.value.exit_code == cc.EXIT_BAD_INPUT
    _assert_cleaned_up(repo, scratch)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--cold", "no equals sign"], "expected NAME=COMMAND"),
        (["--warm", "=true"], "expected NAME=COMMAND"),
        (["--cold", "a=true", "--warm", "a=true"], "used twice: a"),
        ([], "nothing to run"),
        (["--cold", "a=true", "--rounds", "0"], "at least 1"),
    ],
)
def test_bad_arguments_are_errors(repo: Path, args: list[str], message: str) -> None:
    with pytest.raises(cc.CompareError, match=message):
        cc.run(["--repo", str(repo), *args])


def _cli(repo: Path, scratch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script in a process of its own, its temporary files in ``scratch``."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(scratch)},
    )


def test_the_command_line_reports_errors_without_a_traceback(repo: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "cli-scratch"
    scratch.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli(repo, scratch, *args)

    unknown = cli("--base", "nope", "--cold", "a=true")
    assert (unknown.returncode, unknown.stdout) == (cc.EXIT_BAD_INPUT, "")
    assert "unknown commit 'nope'" in unknown.stderr
    failing = cli("--base", "HEAD~1", "--cold", "a=echo broken pipe >&2; exit 7")
    assert failing.returncode == cc.EXIT_COMMAND_FAILED
    assert "exit status 7" in failing.stderr and "broken pipe" in failing.stderr
    assert "Traceback" not in unknown.stderr + failing.stderr
    _assert_cleaned_up(repo, scratch)


def test_an_interrupted_run_reports_its_samples_so_far_and_leaves_nothing(
    repo: Path, tmp_path: Path
) -> None:
    scratch, marker, raw = tmp_path / "cli-scratch", tmp_path / "marker", tmp_path / "raw.json"
    scratch.mkdir()
    # The second run (head's, round 0) sends the script SIGTERM, as a
    # user's kill would.
    command = f"a=[ -e {marker} ] && kill -TERM $PPID; touch {marker}; echo 'RESULT {{\"t\": 1}}'"
    done = _cli(repo, scratch, "--base", "HEAD~1", "--cold", command, "--json", str(raw))
    assert done.returncode == cc.EXIT_INTERRUPTED, done.stderr
    assert "interrupted" in done.stderr and "Traceback" not in done.stderr
    assert "INTERRUPTED in round 0" in done.stdout
    assert "| a | t | 1/0 | 1 | 1 | - | - | - | - |" in done.stdout
    written = json.loads(raw.read_text())
    assert written["interrupted"] is True
    assert [s["label"] for s in written["samples"]] == ["base"]
    _assert_cleaned_up(repo, scratch)
