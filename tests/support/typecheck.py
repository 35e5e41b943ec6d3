"""mypy on the effir package, against a checked-in baseline that may only shrink.

``python -m tests.support.typecheck`` runs mypy (configured in pyproject.toml,
with its cache), counts the errors per file and fails when a file has more
than tests/support/typecheck_baseline.json allows, printing that file's
errors; ``--update`` (``make typecheck-baseline``) writes the baseline from
this run. A file that has fewer errors than its baseline is reported, so the
baseline is lowered in the same change that fixes them. Types were never
checked before this baseline: it records where the package stands, not what
is accepted. The directories of ``ZERO`` are typed through: any error in
them fails, whatever the baseline says.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "tests" / "support" / "typecheck_baseline.json"
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: ")
ZERO = (
    "effir/ir",
    "effir/passes",
    "effir/backends/tvm/relax",
    "effir/backends/tvm/kernel",
)
"""Directories with no type error allowed (a baseline entry there is void)."""


@dataclass
class Report:
    """mypy's errors grouped by file."""

    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def parse(cls, output: str) -> Report:
        report = cls()
        for line in output.splitlines():
            match = _ERROR.match(line)
            if match:
                report.errors[match["path"]].append(line)
        return report

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter({p: len(e) for p, e in self.errors.items()}).items()))


def zero_directory(path: str, zero: tuple[str, ...] = ZERO) -> str | None:
    """The directory of ``zero`` that holds ``path``, if any."""
    return next((d for d in zero if path.startswith(d.rstrip("/") + "/")), None)


def compare(
    report: Report, baseline: dict[str, int], zero: tuple[str, ...] = ZERO
) -> tuple[list[str], list[str]]:
    """What fails (files with more errors than their baseline, or with any
    in a ``zero`` directory, with those errors) and what improved (files
    below their baseline, outside the ``zero`` directories)."""
    counts = report.counts()
    worse = []
    for path, count in counts.items():
        directory = zero_directory(path, zero)
        if directory is not None:
            worse.append(f"{path}: {count} type errors, none is allowed under {directory}/:")
            worse.extend(f"  {line}" for line in report.errors[path])
            continue
        allowed = baseline.get(path, 0)
        if count > allowed:
            worse.append(f"{path}: {count} type errors, the baseline allows {allowed}:")
            worse.extend(f"  {line}" for line in report.errors[path])
    better = [
        f"{path}: {counts.get(path, 0)} type errors, the baseline says {allowed}"
        for path, allowed in sorted(baseline.items())
        if counts.get(path, 0) < allowed and zero_directory(path, zero) is None
    ]
    return worse, better


def _mypy_command() -> list[str]:
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    found = shutil.which("mypy")
    if found is None:
        raise SystemExit("typecheck: mypy is not installed (pip install -e '.[test]')")
    return [found]


def run_mypy() -> str:
    """mypy's output on the package (its files and options: pyproject.toml),
    resolving imports in this interpreter's environment."""
    done = subprocess.run(
        [*_mypy_command(), "--python-executable", sys.executable, "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):  # 2: mypy itself failed (a bad option, a crash)
        raise SystemExit(f"typecheck: mypy failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    args = parser.parse_args(argv)
    report = Report.parse(run_mypy())
    total = sum(report.counts().values())
    if args.update:  # a zero directory's errors never enter it: they still fail
        baseline = {p: n for p, n in report.counts().items() if zero_directory(p) is None}
        BASELINE.write_text(json.dumps(baseline, indent=1) + "\n")
        print(f"typecheck: baseline written, {total} errors in {len(report.errors)} files")
    else:
        baseline = json.loads(BASELINE.read_text())
    worse, better = compare(report, baseline)
    for line in better:
        print(f"typecheck: fewer errors than the baseline, lower it: {line}")
    if worse:
        print("typecheck: more type errors than allowed", *worse, sep="\n")
        return 1
    print(f"typecheck: {total} errors, none above the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
