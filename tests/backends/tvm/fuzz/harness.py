"""Run generated programs compiled (``effir.compile``) and interpreted, and
classify each one.

A batch of programs runs in ONE worker process (``--worker``), so effir and
TVM are imported once per batch. The worker prints a marker line before each
program and a result line after it; when the process dies (a segfault, an
abort) or a program runs past its time, the harness knows which program it
was, records it as ``crash`` or ``timeout`` and starts a new worker on the
rest of the batch.

Outcomes, per program (``OUTCOMES``):

- ``ok``: the same results, final state cells and prints in every call
  (floats to 1e-5, keys, integers and booleans bit for bit), or both raised
  an ``effir.EvalError`` in the same call;
- ``mismatch``: different values, shapes or dtypes, or one raised an
  ``EvalError`` and the other did not, or compiled code raised an effir
  error of another kind where the interpreter raised an ``EvalError``;
- ``non-effir-error``: compiled code (or ``effir.compile``) raised an
  exception that is not an ``effir.Error`` (a TVM error, an IndexError...),
  or a ``BuildDefect`` (TVM's failure while building, which effir reports
  as a located ``CompileError``);
- ``crash``: the worker died of a signal while running the program;
- ``timeout``: the program ran past its time;
- ``refused``: ``effir.compile`` (phase ``compile``) or the first call's
  build (phase ``call``) raised a ``BackendError``/``CompileError``, a clean
  refusal (allowed only for constructs documented as not compiled);
- ``pass-failure`` (``run_one(..., passes=True)``): a registered pass run
  alone (after the passes it requires) raised, produced a program that
  does not type-check, or one the interpreter runs to other results,
  state, prints or errors (``check_passes``);
- ``invalid``: the program does not type-check or the interpreter raised
  something other than an ``EvalError``: a bug of the generator (or of the
  interpreter), never of the backend.

CLI (a nightly run): ``python -m tests.backends.tvm.fuzz.harness --count
2000 --seed 1`` prints a table of outcomes per feature and the first
programs of each failing outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .generator import FEATURES, Program, one_fragment_programs, programs

ROOT = Path(__file__).resolve().parents[4]
OUTCOMES = (
    "ok",
    "mismatch",
    "non-effir-error",
    "pass-failure",
    "crash",
    "timeout",
    "refused",
    "invalid",
)
FAILURES = ("mismatch", "non-effir-error", "pass-failure", "crash", "timeout", "invalid")
# Passes check_passes leaves out, and why: grad differentiates (another
# meaning, checked by tests/autodiff); lower-tvm is what effir.compile runs
# at every level, which run_one checks compiled.
UNCHECKED_PASSES = {"grad": "differentiates", "lower-tvm": "checked compiled"}
# Passes that change random values by design: only typing is checked.
RANDOMISING_PASSES = frozenset({"split-keys"})
START, RESULT = "@@fuzz-start", "@@fuzz-result"
# A program text that makes the worker kill itself with SIGSEGV: the
# harness's own test that a crash is attributed to its program.
SELF_TEST_CRASH = "@@fuzz-self-test-crash"


@dataclass
class Outcome:
    """What happened to one program."""

    kind: str
    detail: str = ""
    phase: str = ""  # compile / call, where it applies
    seconds: float = 0.0

    def __str__(self) -> str:
        phase = f" ({self.phase})" if self.phase else ""
        return f"{self.kind}{phase}: {self.detail}"


# ----------------------------------------------------------------- the worker


@dataclass
class _Run:
    """Results of ``steps`` calls from one State: per call, the result, the
    cells after it and the prints; or the error that stopped a call."""

    calls: list[tuple[Any, dict[str, Any], list[tuple[str, Any]]]]
    error: BaseException | None = None


def _snapshot(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _run(call: Callable[..., Any], module: Any, steps: int) -> _Run:
    import effir

    state = effir.State(module)
    run = _Run([])
    for _ in range(steps):
        printed: list[tuple[str, Any]] = []
        try:
            result = call(state, lambda label, value, into=printed: into.append((label, value)))
        except Exception as exc:  # every exception is an outcome
            run.error = exc
            return run
        cells = {name: _snapshot(state[name]) for name in module.cells}
        run.calls.append((_snapshot(result), cells, printed))
    return run


def _differ(got: Any, want: Any, where: str) -> str | None:
    """Why ``got`` is not ``want`` (None when equal): floats to 1e-5
    (relative, with 1e-5 absolute near zero), everything else exactly."""
    from effir.runtime.values import ADTValue, PRNGKey

    if isinstance(want, ADTValue):
        if not isinstance(got, ADTValue) or got.constructor != want.constructor:
            return f"{where}: {got!r}, expected {want!r}"
        return _differ(got.fields, want.fields, f"{where}.{want.constructor}")
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"{where}: expected a tuple of {len(want)}, got {type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            why = _differ(g, w, f"{where}.{i}")
            if why:
                return why
        return None
    if isinstance(want, PRNGKey):
        if not isinstance(got, PRNGKey) or not np.array_equal(got.data, want.data):
            return f"{where}: key {got!r}, expected {want!r}"
        return None
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{where}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "fc":
        same = np.isclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    else:
        same = got == want
    if not np.all(same):
        with np.printoptions(threshold=20, edgeitems=3):
            return f"{where}: got {got}, expected {want}"
    return None


def _compare(got: _Run, ref: _Run) -> str | None:
    for step, ((out, cells, prints), (r_out, r_cells, r_prints)) in enumerate(
        zip(got.calls, ref.calls, strict=False)
    ):
        why = _differ(out, r_out, f"call {step} result")
        for name in r_cells:
            why = why or _differ(cells.get(name), r_cells[name], f"call {step} cell @{name}")
        labels, r_labels = [p[0] for p in prints], [p[0] for p in r_prints]
        if labels != r_labels:
            why = why or f"call {step} prints {labels}, expected {r_labels}"
        for (label, value), (_, r_value) in zip(prints, r_prints, strict=False):
            why = why or _differ(value, r_value, f"call {step} print {label!r}")
        if why:
            return why
    return None


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:1500]}"


def run_one(
    text: str,
    args: Sequence[np.ndarray],
    steps: int,
    target: str | None = None,
    levels: Sequence[int] | None = None,
    passes: bool = False,
) -> Outcome:
    """Interpret, compile (for ``target``: by default ``EFFIR_FUZZ_TARGET``,
    else the CPU) and run one program; classify what happened. ``levels``:
    compile at each of these optimisation levels (by default once, at the
    default level), and then an ``EvalError`` must match the interpreter's
    message as well as its class; ``passes``: ``check_passes`` first."""
    import effir

    try:
        module = effir.check(effir.parse(text, source_name="fuzz.effir"))
    except effir.Error as exc:
        return Outcome("invalid", f"does not type-check: {exc}")
    ref = _run(lambda st, sink: effir.interpret(module, *args, state=st, sink=sink), module, steps)
    if ref.error is not None and not isinstance(ref.error, effir.EvalError):
        return Outcome("invalid", f"the interpreter raised {_error_text(ref.error)}")
    if passes:
        failure = check_passes(module, args, steps, ref)
        if failure is not None:
            return Outcome("pass-failure", failure, "passes")
    outcome = Outcome("ok")
    for level in levels if levels is not None else [None]:
        outcome = _run_compiled(module, args, steps, ref, target, level)
        if level is not None:
            outcome.phase = f"{outcome.phase} O{level}".strip()
        if outcome.kind != "ok":
            return outcome
    return outcome


def check_passes(module: Any, args: Sequence[np.ndarray], steps: int, ref: _Run) -> str | None:
    """Each registered pass alone (after the passes it requires; but
    ``UNCHECKED_PASSES``), verified (``PassContext(verify=True)``: the
    output is well formed, well typed and linear) and checked again by
    ``effir.check``, then interpreted (an A2 output by ``interpret_a2``)
    against ``ref``: results, final cells, prints and errors (class and
    message). Passes that change random values (``RANDOMISING_PASSES``) are
    checked for typing only. What went wrong first, or None."""
    import effir
    from effir.backends.interpreter import interpret_a2
    from effir.passes.infra.invariants import is_a2
    from effir.passes.infra.pipeline import pipeline
    from effir.passes.infra.transform import PassContext, registered_passes

    for name, p in registered_passes().items():
        if name in UNCHECKED_PASSES:
            continue
        first = "explicate,state-passing," if "a2" in p.requires else "to-anf," * bool(p.requires)
        try:
            out = effir.check(pipeline(first + name)(module, PassContext(verify=True)))
        except Exception as exc:  # every exception is a finding
            return f"{name}: {_error_text(exc)}"
        if name in RANDOMISING_PASSES:
            continue
        interpret = interpret_a2 if is_a2(out) else effir.interpret
        got = _run(
            lambda st, sink, m=out, run=interpret: run(m, *args, state=st, sink=sink), module, steps
        )
        why = _compare(got, ref) or _same_error(got, ref, same_message=False)
        if why is not None:
            return f"{name}: {why}"
    return None


def _same_error(got: _Run, ref: _Run, same_message: bool = True) -> str | None:
    """Why two runs did not fail alike (None when they did, or neither
    failed): the same call, the same class, and (``same_message``) the same
    message. A pass may move a pure call that fails (docs/semantics.md,
    "pure": effect sets do not record run-time failure), so a pass's output
    may report another of the program's failing calls first: passes are
    compared by call and class, compiled code by its message as well."""
    err, ref_err = got.error, ref.error
    if err is None and ref_err is None:
        return None
    if err is None or ref_err is None:
        return f"raised {_error_text(err) if err else 'nothing'}; expected " + (
            _error_text(ref_err) if ref_err else "nothing"
        )
    same = type(err) is type(ref_err) and (not same_message or str(err) == str(ref_err))
    if not same or len(got.calls) != len(ref.calls):
        return (
            f"raised {_error_text(err)} in call {len(got.calls)}; expected "
            f"{_error_text(ref_err)} in call {len(ref.calls)}"
        )
    return None


def _run_compiled(
    module: Any,
    args: Sequence[np.ndarray],
    steps: int,
    ref: _Run,
    target: str | None,
    level: int | None,
) -> Outcome:
    """Compile ``module`` at ``level`` (None: the default) and compare its
    runs with the interpreter's ``ref``; with a level, errors compare by
    message too."""
    target = target or os.environ.get("EFFIR_FUZZ_TARGET", "llvm")
    import effir
    from effir.backends.tvm.runtime.errors import BackendError, BuildDefect

    refusals: tuple[type, ...] = (BackendError,)
    compile_error = getattr(effir, "CompileError", None)
    if isinstance(compile_error, type):
        refusals += (compile_error,)
    try:
        compiled = effir.compile(module, target=target, opt_level=level)
    except BuildDefect as exc:  # TVM's failure, located: a defect all the same
        return Outcome("non-effir-error", _error_text(exc), "compile")
    except refusals as exc:
        return Outcome("refused", _error_text(exc), "compile")
    except Exception as exc:
        kind = "mismatch" if isinstance(exc, effir.Error) else "non-effir-error"
        return Outcome(kind, _error_text(exc), "compile")
    got = _run(lambda st, sink: compiled(*args, state=st, sink=sink), module, steps)
    why = _compare(got, ref)
    if why:
        return Outcome("mismatch", why, "call")
    err, ref_err = got.error, ref.error
    if err is None and ref_err is None:
        return Outcome("ok")
    if err is None:
        return Outcome(
            "mismatch",
            f"the interpreter raised {_error_text(ref_err)} in call {len(ref.calls)}; "
            "compiled code returned",
            "call",
        )
    if not isinstance(err, effir.Error) or isinstance(err, BuildDefect):
        return Outcome("non-effir-error", _error_text(err), "call")
    if isinstance(err, refusals) and not got.calls:
        return Outcome("refused", _error_text(err), "call")
    if ref_err is None:
        return Outcome("mismatch", f"compiled code raised {_error_text(err)}", "call")
    why = None if level is None else _same_error(got, ref)
    if type(err) is not type(ref_err) or len(got.calls) != len(ref.calls) or why:
        return Outcome(
            "mismatch",
            f"compiled code raised {_error_text(err)} in call {len(got.calls)}; the "
            f"interpreter raised {_error_text(ref_err)} in call {len(ref.calls)}",
            "call",
        )
    return Outcome("ok", f"both raised: {ref_err.message[:200]}")


def worker(path: str, start: int) -> None:
    """Run the pickled batch from program ``start``: a marker line before
    each program, a JSON result line after it."""
    with open(path, "rb") as f:
        batch = pickle.load(f)
    import effir  # noqa: F401  (imported before the first marker: not a program's time)

    for index in range(start, len(batch)):
        text, args, steps, levels, passes = batch[index]
        print(f"{START} {index}", flush=True)
        began = time.perf_counter()
        if text == SELF_TEST_CRASH:
            os.kill(os.getpid(), signal.SIGSEGV)
        try:
            outcome = run_one(text, args, steps, levels=levels, passes=passes)
        except Exception as exc:  # a harness bug: say where
            outcome = Outcome("invalid", "harness: " + "".join(traceback.format_exception(exc)))
        outcome.seconds = time.perf_counter() - began
        print(f"{RESULT} {index} {json.dumps(outcome.__dict__)}", flush=True)


# ---------------------------------------------------------------- the harness


def _worker_process(path: str, start: int, stderr: Any) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.backends.tvm.fuzz.harness", "--worker", path, str(start)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        bufsize=0,  # _run_worker splits lines itself: see _lines
        env=env,
        cwd=ROOT,
    )


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def run_batch(
    batch: Sequence[Program],
    timeout: float = 120.0,
    levels: Sequence[int] | None = None,
    passes: bool = False,
) -> list[Outcome]:
    """Each program of ``batch`` compiled and interpreted; one worker process
    for the batch, a new one after each crash or time-out (``timeout``
    seconds per program, the import excepted). ``levels`` and ``passes``:
    as ``run_one``'s (every level, every pass: the widened runs)."""
    results: list[Outcome | None] = [None] * len(batch)
    with tempfile.TemporaryDirectory(prefix="effir-fuzz-") as tmp:
        path = os.path.join(tmp, "batch.pkl")
        with open(path, "wb") as f:
            levels = list(levels) if levels is not None else None
            pickle.dump([(p.text, p.args, p.steps, levels, passes) for p in batch], f)
        start = 0
        while start < len(batch):
            start = _run_worker(path, start, len(batch), results, timeout, Path(tmp))
    return [r if r is not None else Outcome("invalid", "no result") for r in results]


def _run_worker(path: str, start: int, count: int, results: list, timeout: float, tmp: Path) -> int:
    """One worker from ``start``; returns where the next must start."""
    stderr_path = tmp / f"stderr-{start}.txt"
    with open(stderr_path, "w") as stderr:
        proc = _worker_process(path, start, stderr)
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    current, began = None, time.monotonic()
    import_deadline = began + 300  # the imports, before the first marker
    pending = bytearray()  # read from the pipe, not yet split into lines
    try:
        while True:
            deadline = import_deadline if current is None else began + timeout
            # A line already read is handled before waiting: the pipe being
            # quiet says nothing of lines read with the one before (a
            # buffered readline hid a START there, and the wait timed out).
            if b"\n" not in pending and not selector.select(max(0.0, deadline - time.monotonic())):
                proc.kill()
                proc.wait()
                if current is None:
                    raise RuntimeError("the fuzz worker did not start: " + stderr_path.read_text())
                results[current] = Outcome("timeout", f"over {timeout:.0f} s", "", timeout)
                return current + 1
            if b"\n" not in pending:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                pending += chunk
                continue
            raw, _, rest = bytes(pending).partition(b"\n")
            pending = bytearray(rest)
            line = raw.decode(errors="replace")
            if line.startswith(START):
                current, began = int(line.split()[1]), time.monotonic()
            elif line.startswith(RESULT):
                _, index, payload = line.split(" ", 2)
                results[int(index)] = Outcome(**json.loads(payload))
                current = None
                import_deadline = time.monotonic() + timeout
    finally:
        selector.close()
        proc.stdout.close()
    returncode = proc.wait()
    if current is None:
        if returncode != 0 and not any(r is not None for r in results[start:]):
            raise RuntimeError("the fuzz worker failed: " + stderr_path.read_text()[-4000:])
        return count
    tail = stderr_path.read_text()[-3000:]
    results[current] = Outcome(
        "crash", f"the process died ({_signal_name(returncode)})\n{tail}", "", 0.0
    )
    return current + 1


def run_programs(
    progs: Sequence[Program],
    batch_size: int = 50,
    timeout: float = 120.0,
    progress: Callable[[int, list[Outcome]], None] | None = None,
    levels: Sequence[int] | None = None,
    passes: bool = False,
) -> list[Outcome]:
    """``progs`` in batches of ``batch_size`` programs per worker process;
    ``progress(first, outcomes)`` is told each batch's outcomes as it ends, so a
    long (nightly) run reports as it goes rather than only at the end."""
    outcomes: list[Outcome] = []
    for lo in range(0, len(progs), batch_size):
        done = run_batch(progs[lo : lo + batch_size], timeout, levels, passes)
        outcomes += done
        if progress is not None:
            progress(lo, done)
    return outcomes


def _progress_printer(
    progs: Sequence[Program], began: float
) -> Callable[[int, list[Outcome]], None]:
    """A ``progress`` callback printing running totals and each failure's label."""
    total: Counter = Counter()

    def report(first: int, done: list[Outcome]) -> None:
        total.update(o.kind for o in done)
        for offset, outcome in enumerate(done):
            if outcome.kind in FAILURES:
                print(f"  {outcome.kind}: {progs[first + offset].label}", flush=True)
        counts = ", ".join(f"{k} {total[k]}" for k in OUTCOMES if total[k])
        elapsed = time.monotonic() - began
        print(f"[{first + len(done)}/{len(progs)} in {elapsed:.0f} s] {counts}", flush=True)

    return report


def failures_report(progs: Sequence[Program], outcomes: Sequence[Outcome]) -> str:
    """What a test asserts empty: the programs that differ from the
    interpreter, summarised by fragment, the first five in full."""
    bad = [(p, o) for p, o in zip(progs, outcomes, strict=True) if o.kind != "ok"]
    if not bad:
        return ""
    text = f"{len(bad)} of {len(progs)} programs differ from the interpreter\n"
    text += summary(progs, outcomes, show=0, by="fragment")
    for program, outcome in bad[:5]:
        text += f"\n\n=== {program.label}: {outcome}\n{program.describe()}"
    return text


def summary(
    progs: Sequence[Program], outcomes: Sequence[Outcome], show: int = 2, by: str = "feature"
) -> str:
    """A table of outcomes (all programs, then per feature, or per fragment
    with ``by="fragment"``) and the first ``show`` programs of each outcome
    other than ok."""
    total = Counter(o.kind for o in outcomes)
    kinds = [k for k in OUTCOMES if total[k]] or ["ok"]
    rows = [("all", total)]
    pairs = list(zip(progs, outcomes, strict=True))
    if by == "feature":
        groups = {f: [o for p, o in pairs if f in p.features] for f in FEATURES}
    else:
        groups = {}
        for p, o in pairs:
            for name in dict.fromkeys(p.fragments):
                groups.setdefault(name, []).append(o)
    for name, group in groups.items():
        if group:
            rows.append((name, Counter(o.kind for o in group)))
    width = max(len(name) for name, _ in rows)
    lines = [" " * width + "".join(f"{k:>17}" for k in kinds)]
    for name, counts in rows:
        lines.append(f"{name:<{width}}" + "".join(f"{counts[k]:>17}" for k in kinds))
    for kind in OUTCOMES[1:]:
        shown = [(p, o) for p, o in zip(progs, outcomes, strict=True) if o.kind == kind][:show]
        for program, outcome in shown:
            lines.append(f"\n=== {kind}: {program.label}\n{outcome}\n{program.describe()}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--features", default=",".join(FEATURES), help="comma-separated: " + ", ".join(FEATURES)
    )
    parser.add_argument("--deep-share", type=int, default=20, help="one deep program in N")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per program")
    parser.add_argument("--show", type=int, default=2, help="programs shown per outcome")
    parser.add_argument("--only", type=int, nargs="*", help="only these program numbers")
    parser.add_argument("--max-fragments", type=int, default=7)
    parser.add_argument(
        "--one-fragment",
        type=int,
        default=0,
        metavar="N",
        help="N programs of one fragment per fragment kind (and one deep program per kind), "
        "tabulated per fragment, instead of --count random programs",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="compile for this target (default llvm; benchmarks/cuda_device.py runs cuda)",
    )
    parser.add_argument(
        "--levels",
        default=None,
        help="compile at each of these optimisation levels, errors compared by message "
        "(e.g. 0,1,2; default: once, at the default level)",
    )
    parser.add_argument(
        "--passes", action="store_true", help="check every registered pass alone too"
    )
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.target is not None:
        os.environ["EFFIR_FUZZ_TARGET"] = ns.target  # the workers' (run_one)
    if ns.worker:
        worker(ns.worker[0], int(ns.worker[1]))
        return 0
    features = [f for f in ns.features.split(",") if f]
    if ns.one_fragment:
        progs = one_fragment_programs(ns.seed, ns.one_fragment, features)
    else:
        progs = programs(ns.seed, ns.count, features, ns.deep_share, ns.max_fragments)
    if ns.only:
        progs = [progs[i] for i in ns.only]
    began = time.monotonic()
    levels = [int(v) for v in ns.levels.split(",")] if ns.levels else None
    outcomes = run_programs(
        progs, ns.batch, ns.timeout, _progress_printer(progs, began), levels, ns.passes
    )
    print(summary(progs, outcomes, ns.show, "fragment" if ns.one_fragment else "feature"))
    print(f"\n{len(progs)} programs in {time.monotonic() - began:.0f} s")
    return 1 if any(o.kind in FAILURES for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
