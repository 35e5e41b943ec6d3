"""The ONNX backend node tests of the constructs effir imports, run by
effir (interpreted and compiled), onnxruntime and TVM Relax's ONNX
frontend, side by side.

Prints one table: per construct group (tests/importers/node_tests.py),
how many of the node tests each runs correctly: deterministic ones equal
to the expected outputs (onnx's tolerance), random ones by their
properties (shapes, dtypes, values the operator can give). effir refuses
some by design (element types it has no dtype for, optional types, Scan
of opset 8): they count as failures for it like any other. Each runner
goes through the cases in a process of its own, restarted after a case
that crashes it; a case that takes longer than its time-out fails.

    .venv/bin/python benchmarks/onnx_node_tests.py [--failures]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNNERS = ("effir interpreted", "effir compiled", "onnxruntime", "TVM Relax")

WORKER = r"""
import json, sys, signal
sys.path.insert(0, {root!r})
from benchmarks.onnx_node_tests import run_one
runner, names, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def give_up(*_):
    raise TimeoutError("time-out")
signal.signal(signal.SIGALRM, give_up)
with open(out, "a") as handle:
    for name in names:
        signal.alarm({timeout})
        try:
            status, why = run_one(runner, name)
        except BaseException as err:
            status, why = "fail", f"{{type(err).__name__}}: {{err}}"
        signal.alarm(0)
        handle.write(json.dumps([name, status, why[:300]]) + "\n")
        handle.flush()
"""

TIMEOUT = 120  # seconds a case may take


def run_one(runner: str, name: str) -> tuple[str, str]:
    import warnings

    warnings.simplefilter("ignore")
    from tests.importers import node_tests as nt

    case = nt.case(name)
    if runner == "effir interpreted":
        return nt.outcome(nt.run_interpreted, case)
    if runner == "effir compiled":
        return nt.outcome(nt.run_compiled, case)
    if runner == "onnxruntime":
        return nt.outcome(_onnxruntime, case)
    return nt.outcome(_tvm_relax, case)


def _check(case, inputs, got, expected) -> None:
    from tests.importers import node_tests as nt

    if case.random:
        nt.check_random(case, inputs, got, expected)
    else:
        nt.check_equal(got, expected)


def _onnxruntime(case) -> None:
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(
        case.model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    for inputs, expected in case.data_sets:
        feeds = [v if isinstance(v, list) else np.asarray(v) for v in inputs]  # not numpy scalars
        got = session.run(None, dict(zip(names, feeds, strict=True)))
        _check(case, inputs, [list(g) if isinstance(g, list) else g for g in got], expected)


def _tvm_relax(case) -> None:
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    module = from_onnx(case.model)
    vm = relax.VirtualMachine(tvm.compile(module, target="llvm"), tvm.cpu())
    for inputs, expected in case.data_sets:
        args = [tvm.runtime.tensor(np.asarray(i)) for i in inputs]
        out = vm["main"](*args)
        got = _numpy(out)
        got = got if len(expected) > 1 and isinstance(got, list) else [got]
        _check(case, inputs, got, expected)


def _numpy(value):
    """A VM result as numpy: a tensor, or a list of them (a tuple, a sequence)."""
    import numpy as np

    if hasattr(value, "numpy"):
        return value.numpy()
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return [_numpy(value[k]) for k in range(len(value))]
    return np.asarray(value)


def run_runner(runner: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """Every case through ``runner`` in a worker process, restarted after a
    case that kills it (which then counts as a crash)."""
    results: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.jsonl")
        pending = list(names)
        while pending:
            code = WORKER.format(root=str(ROOT), timeout=TIMEOUT)
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            done = subprocess.run(
                [sys.executable, "-c", code, runner, json.dumps(pending), out],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if os.path.exists(out):
                for line in open(out):
                    name, status, why = json.loads(line)
                    results[name] = (status, why)
            rest = [n for n in pending if n not in results]
            if rest and done.returncode != 0:  # the next case crashed the worker
                results[rest[0]] = ("fail", f"crashed (exit {done.returncode})")
                rest = rest[1:]
            pending = rest
    return results


def main() -> None:
    from tests.importers import node_tests as nt

    cases = nt.cases()
    names = [c.name for c in cases]
    table: dict[str, dict[str, tuple[str, str]]] = {}
    seconds = {}
    for runner in RUNNERS:
        start = time.perf_counter()
        table[runner] = run_runner(runner, names)
        seconds[runner] = time.perf_counter() - start
    groups = [g for g, _ in nt.GROUPS]
    header = f"{'group':20} {'cases':>5}" + "".join(f" {r:>18}" for r in RUNNERS)
    print(header)
    print("-" * len(header))
    totals = {r: 0 for r in RUNNERS}
    for group in groups:
        members = [c.name for c in cases if c.group == group]
        row = f"{group:20} {len(members):>5}"
        for runner in RUNNERS:
            passed = sum(table[runner][n][0] == "pass" for n in members)
            totals[runner] += passed
            row += f" {passed:>18}"
        print(row)
    print("-" * len(header))
    print(f"{'all':20} {len(cases):>5}" + "".join(f" {totals[r]:>18}" for r in RUNNERS))
    print(f"{'seconds':20} {'':>5}" + "".join(f" {seconds[r]:>18.0f}" for r in RUNNERS))
    if "--failures" in sys.argv:
        for runner in RUNNERS:
            print(f"\n{runner}: failures")
            for name in names:
                status, why = table[runner][name]
                if status != "pass":
                    print(f"  {name}: {why}")


if __name__ == "__main__":
    main()
