"""Run test code in a fresh Python process, so that a crash of compiled code
(a segfault, an abort, a stack overflow in a native library) is a reported
test failure with the program that caused it, not the end of the test run.

Usage: ``result = run_isolated(code)``; ``code`` is a Python script that
prints what the test checks. ``result.check()`` raises ``AssertionError``
with the script, its output and the signal when the process did not exit
with status 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    code = textwrap.dedent(code)
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


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
