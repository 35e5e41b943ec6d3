"""Run test code in a fresh Python process, so that a crash of compiled code
(a segfault, an abort, a stack overflow in a native library) is a reported
test failure with the program that caused it, not the end of the test run.

Usage: ``result = run_isolated(code)``; ``code`` is a Python script that
prints what the test checks. ``result.check()`` raises ``AssertionError``
with the script, its output and the signal when the process did not exit
with status 0.

Starting Python and importing numpy, TVM and effir costs about 3 s of CPU,
more than most checks themselves: a fork server (one per test process,
started on first use) imports them once, and each script runs in a fresh
process forked from it, with its own output files, status and time-out, as
``python -c`` would run it, in the caller's environment. ``env``, an
environment changed since the server started (its imports may have read
it) or ``EFFIR_ISOLATED_FORK=0`` start a new interpreter instead.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tiers import check_tvm_allowed

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class IsolatedRun:
    code: str
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def crashed(self) -> bool:
        """Killed by a signal (segfault, abort): the process did not exit."""
        return self.returncode < 0

    def describe(self) -> str:
        if self.timed_out:
            how = "timed out"
        elif self.crashed:
            how = f"crashed with {signal.Signals(-self.returncode).name}"
        else:
            how = f"exited with status {self.returncode}"
        return (
            f"isolated run {how}\n--- script ---\n{self.code}\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )

    def check(self) -> IsolatedRun:
        if self.timed_out or self.returncode != 0:
            raise AssertionError(self.describe())
        return self


def run_isolated(
    code: str, timeout: float = 300.0, env: dict[str, str] | None = None
) -> IsolatedRun:
    """Run ``code`` with this interpreter in a new process (the repository on
    its path); a crash or a time-out is reported, never raised by a signal."""
    check_tvm_allowed("runs isolated code (its fork server imports TVM)")
    code = textwrap.dedent(code)
    if not env and os.environ.get("EFFIR_ISOLATED_FORK", "1") != "0":
        forked = _FORK_SERVER.run(code, timeout)
        if forked is not None:
            return forked
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [full_env.get("PYTHONPATH")])]
    )
    full_env.setdefault("PYTHONFAULTHANDLER", "1")
    full_env.update(env or {})
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return IsolatedRun(code, -1, _text(exc.stdout), _text(exc.stderr), timed_out=True)
    return IsolatedRun(code, done.returncode, done.stdout, done.stderr)


def run_isolated_call(module: str, function: str, *args: object, timeout: float = 300.0) -> Any:
    """``function(*args)`` of ``module`` (a module of the repository, the
    arguments Python literals) run in a new process by ``run_isolated``, its
    result (printed as JSON) read back; a crash or a time-out fails."""
    code = (
        f"import json\nfrom {module} import {function}\nprint(json.dumps({function}(*{args!r})))\n"
    )
    run = run_isolated(code, timeout=timeout).check()
    return json.loads(run.stdout.strip().splitlines()[-1])


def _env() -> dict[str, str]:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [full_env.get("PYTHONPATH")])]
    )
    full_env.setdefault("PYTHONFAULTHANDLER", "1")
    return full_env


# The fork server: reads one JSON request a line ({code, out, err, timeout}),
# forks, and answers {returncode, timed_out} once the child has exited or
# been killed at its time-out. The child points stdin at /dev/null and
# stdout/stderr at the request's files, runs the script as ``python -c``
# does (a SystemExit's status, a traceback and status 1 for an exception)
# and leaves through the interpreter's normal exit (threads joined, atexit).
_SERVER = r"""
import json, os, signal, sys, time
import numpy, tvm, effir, effir.backends.tvm.driver.compile  # the costly imports, once
import pytest, hypothesis  # what test modules import


def _child(req):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["out"]), (2, req["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    requests.close()
    answers.close()
    import faulthandler
    faulthandler.enable()
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["-c"]
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(req["code"], "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


requests = os.fdopen(int(sys.argv[1]), "r")
answers = os.fdopen(int(sys.argv[2]), "w")
for line in requests:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(req)
    deadline = time.monotonic() + req["timeout"]
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            timed_out, status = True, -1
            break
        time.sleep(0.005)
    if timed_out:
        code = -1
    elif os.WIFSIGNALED(status):
        code = -os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    cpu = usage.ru_utime + usage.ru_stime
    answers.write(json.dumps({"returncode": code, "timed_out": timed_out, "cpu": cpu}) + "\n")
    answers.flush()
"""


class _ForkServer:
    """One fork server per test process, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._env: dict[str, str] = {}
        self.cpu_seconds = 0.0  # the children's CPU time, for measuring the suite

    def _start(self) -> None:
        self._env = _env()
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(req_r), str(ans_w)],
            env=self._env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            pass_fds=(req_r, ans_w),
        )
        os.close(req_r)
        os.close(ans_w)
        self._requests = os.fdopen(req_w, "w")
        self._answers = os.fdopen(ans_r, "r")
        atexit.register(self.close)

    def close(self) -> None:
        if self._proc is not None:
            self._requests.close()
            self._proc.wait()
            self._answers.close()
            self._proc = None

    def run(self, code: str, timeout: float) -> IsolatedRun | None:
        """The script's run in a forked process; None when the environment
        changed since the server started (its imports may have read it)."""
        env = _env()
        if self._proc is not None and _differ(env, self._env):
            return None
        with self._lock, tempfile.TemporaryDirectory(prefix="effir-isolated-") as tmp:
            out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
            request = {"code": code, "out": out, "err": err, "timeout": timeout, "env": env}
            answer = ""
            for _attempt in range(2):  # a server that died is started again
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                try:
                    self._requests.write(json.dumps(request) + "\n")
                    self._requests.flush()
                    answer = self._answers.readline()
                except BrokenPipeError:
                    answer = ""
                if answer:
                    break
                self._proc = None
            if not answer:
                raise RuntimeError("the isolated-run fork server did not answer")
            reply = json.loads(answer)
            self.cpu_seconds += reply["cpu"]
            texts = [
                Path(p).read_text(errors="replace") if os.path.exists(p) else "" for p in (out, err)
            ]
            return IsolatedRun(code, reply["returncode"], *texts, timed_out=reply["timed_out"])


def _differ(a: dict[str, str], b: dict[str, str]) -> bool:
    ignore = "PYTEST_CURRENT_TEST"  # pytest sets it for each test
    return {k: v for k, v in a.items() if k != ignore} != {
        k: v for k, v in b.items() if k != ignore
    }


_FORK_SERVER = _ForkServer()


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
