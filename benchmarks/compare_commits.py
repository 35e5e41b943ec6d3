"""Two commits' benchmarks in the same run: "no slower" holds only when both
trees are measured on the same machine under the same load.

Each commit gets a throw-away ``git worktree add --detach`` under a
temporary directory (removed at the end, also after an error or Ctrl-C; the
user's checkout is never touched). Each named shell command runs in both
checkouts, alternating base and head, the order flipped every round (base
first in even rounds), so that a drift of the machine's load falls on both
alike. A command runs in its checkout with ``PYTHONPATH`` set to it (``import
effir`` is that commit's) and this interpreter's directory first on ``PATH``
(``python`` is this interpreter); ``{checkout}`` and ``{commit}`` in it are
replaced by the checkout's path and commit id.

- ``--cold NAME=COMMAND``: every run with a fresh, empty ``EFFIR_CACHE_DIR``.
- ``--warm NAME=COMMAND``: one untimed run per checkout fills a build cache
  of its own, which the timed runs then reuse.

What a run measures, in this order of preference:

1. the line ``RESULT {json}`` it prints: named measurements in seconds;
2. the JSON object ``benchmarks/pipeline.py --one`` prints as its last line:
   its ``wall`` and ``cpu`` keys, the pipeline's own wall and CPU seconds;
3. otherwise the process's wall time and its CPU time (the children's
   rusage), as ``process wall`` and ``process cpu``.

The table gives, per command and measurement, each commit's minimum and
median and head/base ratios of both; ``--json PATH`` writes every sample.

    .venv/bin/python benchmarks/compare_commits.py --base 2530f05 --head HEAD --rounds 5 \\
        --cold 'straight=python benchmarks/pipeline.py --one straight 100000 1'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_BASE = "2530f05"
RESULT_PREFIX = "RESULT "
PIPELINE_KEYS = ("wall", "cpu")
"""The keys of ``benchmarks/pipeline.py --one``'s JSON line that are compared."""
LABELS = ("base", "head")
STDERR_TAIL = 20
EXIT_BAD_INPUT = 2
EXIT_COMMAND_FAILED = 3
EXIT_INTERRUPTED = 130


class CompareError(Exception):
    """Bad input or a failing command: a message for the user and an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Benchmark:
    """A named shell command; ``warm``: its timed runs reuse a filled cache."""

    name: str
    command: str
    warm: bool


@dataclass(frozen=True)
class Checkout:
    """One commit's throw-away worktree."""

    label: str
    commit: str
    path: Path


@dataclass
class Sample:
    """One timed run of one benchmark in one checkout."""

    benchmark: str
    label: str
    commit: str
    round: int
    values: dict[str, float]
    source: str
    """Where ``values`` came from: ``RESULT``, ``pipeline`` or ``process``."""


@dataclass
class Comparison:
    """Everything a run found: the table and the ``--json`` file are made of it."""

    commits: dict[str, str]
    command: list[str]
    rounds: int
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    samples: list[Sample] = field(default_factory=list)
    interrupted: bool = False


# ------------------------------------------------------------------- input
def parse_benchmark(text: str, warm: bool) -> Benchmark:
    """``NAME=COMMAND`` as a benchmark."""
    name, equals, command = text.partition("=")
    if not equals or not name.strip() or not command.strip():
        flag = "--warm" if warm else "--cold"
        raise CompareError(f"{flag} {text!r}: expected NAME=COMMAND")
    return Benchmark(name.strip(), command.strip(), warm)


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def repository_root(directory: Path) -> Path:
    done = git(directory, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise CompareError(f"{directory} is not in a git repository: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def resolve_commit(repo: Path, revision: str) -> str:
    """The full id of ``revision``, which must name a commit."""
    done = git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if done.returncode != 0:
        raise CompareError(f"unknown commit {revision!r} in {repo}")
    return done.stdout.strip()


# ---------------------------------------------------------------- checkouts
@contextlib.contextmanager
def checkouts(repo: Path, commits: dict[str, str], parent: Path) -> Iterator[list[Checkout]]:
    """A detached worktree of each commit under ``parent``, removed (and
    unregistered from ``repo``) with all of ``parent`` on the way out,
    whatever the way out."""
    made: list[Checkout] = []
    try:
        for label, commit in commits.items():
            path = parent / label
            done = git(repo, "worktree", "add", "--detach", str(path), commit)
            if done.returncode != 0:
                raise CompareError(f"git worktree add of {commit} failed: {done.stderr.strip()}")
            made.append(Checkout(label, commit, path))
        yield made
    finally:
        for checkout in made:
            git(repo, "worktree", "remove", "--force", str(checkout.path))
        shutil.rmtree(parent, ignore_errors=True)
        git(repo, "worktree", "prune")


def order(round_number: int, pair: Sequence[Checkout]) -> list[Checkout]:
    """The checkouts in the order of a round: base first in even rounds."""
    return list(pair) if round_number % 2 == 0 else list(reversed(pair))


def substitute(command: str, checkout: Checkout) -> str:
    """``{checkout}`` and ``{commit}`` replaced (nothing else: a command may
    hold other braces)."""
    return command.replace("{checkout}", str(checkout.path)).replace("{commit}", checkout.commit)


def environment(checkout: Checkout, cache_dir: Path) -> dict[str, str]:
    """The command's environment: that commit's effir, this interpreter as
    ``python``, the given build cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout.path)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["EFFIR_CACHE_DIR"] = str(cache_dir)
    return env


# ------------------------------------------------------------- measurements
def _numbers(found: Any, where: str) -> dict[str, float]:
    if not isinstance(found, dict) or not found:
        raise CompareError(f"{where}: expected a JSON object of named seconds, got {found!r}")
    bad = {k: v for k, v in found.items() if isinstance(v, bool) or not isinstance(v, int | float)}
    if bad:
        raise CompareError(f"{where}: measurements must be numbers: {bad!r}")
    return {str(k): float(v) for k, v in found.items()}


def _json_object(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def parse_measurements(stdout: str, wall: float, cpu: float) -> tuple[dict[str, float], str]:
    """A run's measurements and where they came from (see the module's
    docstring): its ``RESULT`` line, ``pipeline.py --one``'s JSON line, or the
    process's own wall and CPU seconds."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    results = [line for line in lines if line.startswith(RESULT_PREFIX)]
    if len(results) > 1:
        raise CompareError(f"more than one RESULT line: {results!r}")
    if results:
        found = _json_object(results[0][len(RESULT_PREFIX) :])
        if found is None:
            raise CompareError(f"RESULT line is not JSON: {results[0]!r}")
        return _numbers(found, "RESULT line"), "RESULT"
    last = _json_object(lines[-1]) if lines else None
    if isinstance(last, dict) and all(key in last for key in PIPELINE_KEYS):
        return _numbers({key: last[key] for key in PIPELINE_KEYS}, "pipeline line"), "pipeline"
    return {"process wall": wall, "process cpu": cpu}, "process"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(
    benchmark: Benchmark, checkout: Checkout, cache_dir: Path
) -> tuple[dict[str, float], str]:
    """One run of ``benchmark`` in ``checkout``: its measurements and their
    source; a failing command is a ``CompareError`` with its stderr's tail."""
    command = substitute(benchmark.command, checkout)
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        command,
        shell=True,
        cwd=checkout.path,
        env=environment(checkout, cache_dir),
        capture_output=True,
        text=True,
        check=False,
    )
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-STDERR_TAIL:]) or "(no output on stderr)"
        raise CompareError(
            f"{benchmark.name!r} failed in {checkout.label} ({checkout.commit[:12]}) "
            f"with exit status {done.returncode}\n  command: {command}\n"
            f"--- the last lines of its stderr ---\n{tail}",
            EXIT_COMMAND_FAILED,
        )
    try:
        return parse_measurements(done.stdout, wall, cpu)
    except CompareError as error:
        raise CompareError(f"{benchmark.name!r} in {checkout.label}: {error}") from None


def compare(
    pair: list[Checkout],
    benchmarks: list[Benchmark],
    rounds: int,
    workdir: Path,
    comparison: Comparison,
    progress: Any = None,
) -> None:
    """The warm-ups, then ``rounds`` rounds of every benchmark in both
    checkouts (alternating), their samples added to ``comparison``."""
    warm_caches = {}
    for benchmark in (b for b in benchmarks if b.warm):
        for checkout in pair:
            cache = workdir / "caches" / f"warm-{len(warm_caches)}"
            cache.mkdir(parents=True)
            warm_caches[benchmark.name, checkout.label] = cache
            _say(progress, f"warm-up {benchmark.name} in {checkout.label}")
            run_command(benchmark, checkout, cache)
    cold_runs = 0
    for round_number in range(rounds):
        for benchmark in benchmarks:
            for checkout in order(round_number, pair):
                if benchmark.warm:
                    cache = warm_caches[benchmark.name, checkout.label]
                else:
                    cold_runs += 1
                    cache = workdir / "caches" / f"cold-{cold_runs}"
                    cache.mkdir(parents=True)
                values, source = run_command(benchmark, checkout, cache)
                if not benchmark.warm:
                    shutil.rmtree(cache, ignore_errors=True)
                comparison.samples.append(
                    Sample(
                        benchmark.name,
                        checkout.label,
                        checkout.commit,
                        round_number,
                        values,
                        source,
                    )
                )
                shown = ", ".join(f"{k} {v:.3f}" for k, v in values.items())
                _say(progress, f"round {round_number} {benchmark.name} {checkout.label}: {shown}")


def _say(progress: Any, line: str) -> None:
    if progress is not None:
        print(line, file=progress, flush=True)


# ------------------------------------------------------------------- report
def summary(comparison: Comparison) -> list[tuple[str, str, list[float], list[float]]]:
    """(benchmark, measurement, base samples, head samples), in the order
    first seen."""
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    for sample in comparison.samples:
        for name, value in sample.values.items():
            rows.setdefault((sample.benchmark, name), {label: [] for label in LABELS})
            rows[sample.benchmark, name][sample.label].append(value)
    return [(b, m, found["base"], found["head"]) for (b, m), found in rows.items()]


def _ratio(head: float, base: float) -> str:
    return f"{head / base:.3f}" if base > 0 else "-"


def _seconds(values: list[float], how: str) -> str:
    if not values:
        return "-"
    return f"{min(values) if how == 'min' else statistics.median(values):.4g}"


def table(comparison: Comparison) -> str:
    """The report: commits, command, load, and one row per measurement."""
    load = " ".join(f"{x:.2f}" for x in comparison.load_start)
    load_end = " ".join(f"{x:.2f}" for x in comparison.load_end)
    lines = [
        f"base {comparison.commits['base']}",
        f"head {comparison.commits['head']}",
        f"command: {shlex.join(comparison.command)}",
        f"load average (1, 5, 15 min): {load} at start, {load_end} at end; "
        f"{comparison.rounds} rounds, base first in even rounds; seconds",
    ]
    if comparison.interrupted:
        last = max(sample.round for sample in comparison.samples)
        lines.append(f"INTERRUPTED in round {last}: the runs done so far (runs: base/head)")
    lines += [
        "",
        "| benchmark | measurement | runs | base min | base median | head min | head median "
        "| head/base min | head/base median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for benchmark, measurement, base, head in summary(comparison):
        ratios = ["-", "-"]
        if base and head:
            ratios = [
                _ratio(min(head), min(base)),
                _ratio(statistics.median(head), statistics.median(base)),
            ]
        cells = [
            benchmark,
            measurement,
            f"{len(base)}/{len(head)}",
            _seconds(base, "min"),
            _seconds(base, "median"),
            _seconds(head, "min"),
            _seconds(head, "median"),
            *ratios,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def raw_samples(comparison: Comparison) -> dict[str, Any]:
    """What ``--json`` writes."""
    return {
        "commits": comparison.commits,
        "command": comparison.command,
        "rounds": comparison.rounds,
        "interrupted": comparison.interrupted,
        "load_start": list(comparison.load_start),
        "load_end": list(comparison.load_end),
        "samples": [vars(sample) for sample in comparison.samples],
    }


# --------------------------------------------------------------------- main
def arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"default {DEFAULT_BASE}")
    parser.add_argument("--head", default="HEAD", help="default HEAD")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold", action="append", default=[], metavar="NAME=COMMAND")
    parser.add_argument("--warm", action="append", default=[], metavar="NAME=COMMAND")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every sample there")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="default: the cwd's")
    return parser.parse_args(argv)


def benchmarks_of(options: argparse.Namespace) -> list[Benchmark]:
    found = [parse_benchmark(text, warm=False) for text in options.cold]
    found += [parse_benchmark(text, warm=True) for text in options.warm]
    if not found:
        raise CompareError("nothing to run: give --cold NAME=COMMAND or --warm NAME=COMMAND")
    names = [b.name for b in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CompareError(f"benchmark names used twice: {', '.join(repeated)}")
    return found


@dataclass
class Plan:
    """What ``argv`` asks for, checked before anything runs."""

    repo: Path
    benchmarks: list[Benchmark]
    json: Path | None
    comparison: Comparison


def plan(argv: Sequence[str]) -> Plan:
    options = arguments(argv)
    if options.rounds < 1:
        raise CompareError(f"--rounds must be at least 1, not {options.rounds}")
    benchmarks = benchmarks_of(options)
    repo = repository_root(options.repo)
    commits = {
        "base": resolve_commit(repo, options.base),
        "head": resolve_commit(repo, options.head),
    }
    comparison = Comparison(
        commits, [Path(sys.argv[0]).name, *argv], options.rounds, os.getloadavg()
    )
    return Plan(repo, benchmarks, options.json, comparison)


def execute(the_plan: Plan) -> Comparison:
    """The runs, their samples gathered in the plan's comparison. After an
    error or an interrupt, the samples so far stay there (and in the
    ``--json`` file): a long run stopped early still reports its rounds."""
    comparison = the_plan.comparison
    workdir = Path(tempfile.mkdtemp(prefix="effir-compare-"))
    try:
        with checkouts(the_plan.repo, comparison.commits, workdir) as pair:
            compare(pair, the_plan.benchmarks, comparison.rounds, workdir, comparison, sys.stderr)
    except KeyboardInterrupt:
        comparison.interrupted = True
        raise
    finally:
        comparison.load_end = os.getloadavg()
        if the_plan.json and comparison.samples:
            the_plan.json.write_text(json.dumps(raw_samples(comparison), indent=1) + "\n")
    return comparison


def run(argv: Sequence[str]) -> Comparison:
    """The whole comparison that ``argv`` asks for (without the report)."""
    return execute(plan(argv))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # so that the worktrees are removed on SIGTERM too


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    the_plan = None
    try:
        the_plan = plan(sys.argv[1:] if argv is None else argv)
        comparison = execute(the_plan)
    except CompareError as error:
        print(f"compare_commits: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("compare_commits: interrupted; the worktrees are removed", file=sys.stderr)
        if the_plan is not None and the_plan.comparison.samples:
            print(table(the_plan.comparison))
        return EXIT_INTERRUPTED
    print(table(comparison))
    return 0


if __name__ == "__main__":
    sys.exit(main())
