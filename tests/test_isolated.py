"""tests/support/isolated.py: a script run in a process of its own reports its
output, its exit status, an exception, a crash and a time-out, whether the
process is forked from the fork server or a new interpreter."""

from __future__ import annotations

import pytest

from tests.support.isolated import ROOT, run_isolated

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)

# An env for the script starts a new interpreter instead of a fork.
HOW = {"forked": None, "new interpreter": {"EFFIR_ISOLATED_TEST": "1"}}


@pytest.fixture(params=list(HOW), ids=list(HOW))
def env(request: pytest.FixtureRequest) -> dict[str, str] | None:
    return HOW[request.param]


def test_output_status_and_main(env: dict[str, str] | None) -> None:
    run = run_isolated(
        """
        import os, sys
        print("out", __name__, sys.argv)
        print("err", file=sys.stderr)
        print(os.getcwd())
        """,
        env=env,
    ).check()
    assert run.stdout.split("\n")[:2] == ["out __main__ ['-c']", str(ROOT)]
    assert run.stderr == "err\n"


def test_exit_status_and_exception(env: dict[str, str] | None) -> None:
    assert run_isolated("raise SystemExit(3)", env=env).returncode == 3
    run = run_isolated("1 / 0", env=env)
    assert run.returncode == 1 and "ZeroDivisionError" in run.stderr
    with pytest.raises(AssertionError, match="exited with status 1"):
        run.check()


def test_a_crash_is_reported_with_its_signal(env: dict[str, str] | None) -> None:
    run = run_isolated("import ctypes; ctypes.string_at(0)", env=env)
    assert run.crashed
    with pytest.raises(AssertionError, match="crashed with SIGSEGV"):
        run.check()


def test_a_time_out_is_reported(env: dict[str, str] | None) -> None:
    run = run_isolated("import time; time.sleep(60)", timeout=0.5, env=env)
    assert run.timed_out
    with pytest.raises(AssertionError, match="timed out"):
        run.check()


def test_threads_are_joined_and_runs_do_not_share_state() -> None:
    run = run_isolated(
        """
        import threading, time
        def late():
            time.sleep(0.2)
            print("joined")
        threading.Thread(target=late).start()
        import tests.support.isolated as m
        m.MARK = 1
        """
    ).check()
    assert run.stdout == "joined\n"
    run_isolated("import tests.support.isolated as m; assert not hasattr(m, 'MARK')").check()


def test_the_script_sees_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    run_isolated("pass").check()  # the fork server is started
    monkeypatch.setenv("EFFIR_ISOLATED_TEST", "set by the test")
    code = "import os; print(os.environ.get('EFFIR_ISOLATED_TEST'))"
    assert run_isolated(code).check().stdout == "set by the test\n"
    monkeypatch.delenv("EFFIR_ISOLATED_TEST")
    assert run_isolated(code).check().stdout == "None\n"
