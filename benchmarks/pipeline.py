"""The standard pipeline (`effir opt -O2`) on generated programs of 1k, 10k
and 100k bindings: straight-line arithmetic, with ifs, with loops, with
effects.

Prints two tables. The first, per program and size: the input's size in
A-normal form (let bindings, expression nodes), the output's size (nodes,
lets) and its ratio to the input's, the pipeline's wall time (verification
off: the passes alone), its CPU time (on a shared machine, whether the wall
time waited for a core), the part of it Python's cyclic garbage collector
took, and each pass's time (the ``Timing`` instrument). The second: the
growth of each program's time from 10k to 100k bindings (10 for a linear
pipeline).

Each measurement runs in a process of its own, so that one program's heap
does not slow the collector down for the next, under a time limit and a
memory limit: a pass that blows up is reported as such instead of stopping
the run (or the machine). Times are medians of three runs at 1k and 10k
bindings and one run at 100k; ``--quick`` runs 1k and 10k once each.

    .venv/bin/python benchmarks/pipeline.py [--quick] [--limit SECONDS] [--memory GB]
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import effir
from effir.ir.expr import Expr, Let
from effir.ir.module import IRModule
from effir.ir.visitor import pre_order
from effir.passes.infra.instruments import Timing
from effir.passes.infra.pipeline import STANDARD_PIPELINES, pipeline
from effir.passes.infra.transform import PassContext
from effir.passes.transforms.anf import to_anf

H = '#[version = "0.0.5"]\n'
CELLS = (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @acc: Ref[Tensor[(8), float32]] = ref(zeros(shape=[8]));\n"
)


def straight(n: int) -> str:
    """Two operators a line: n bindings in A-normal form."""
    lets = "".join(f"  let %v{i} = multiply(add(%v{i - 1}, 1f), 0.5f);\n" for i in range(1, n // 2))
    return H + f"def @main(%v0: Tensor[(8), float32]) {{\n{lets}  %v{n // 2 - 1}\n}}\n"


def with_ifs(n: int) -> str:
    """An if a line, one operator in each branch."""
    lets = "".join(
        f"  let %v{i} = if (%c) {{ add(%v{i - 1}, 1f) }} else {{ multiply(%v{i - 1}, 2f) }};\n"
        for i in range(1, n)
    )
    return H + f"def @main(%c: bool, %v0: Tensor[(8), float32]) {{\n{lets}  %v{n - 1}\n}}\n"


def with_loops(n: int) -> str:
    """A three-step cf.foreach every two lines (short enough to unroll)."""
    body = (
        "fn (%x: Tensor[(8), float32], %h: Tensor[(8), float32]) { let %y = add(%x, %h); (%y, %y) }"
    )
    lets = "".join(
        f"  let %s{i} = cf.foreach({body}, %xs, %v{i - 1});\n  let %v{i} = %s{i}.1;\n"
        for i in range(1, n // 4)
    )
    return H + (
        f"def @main(%xs: Tensor[(3, 8), float32], %v0: Tensor[(8), float32]) {{\n"
        f"{lets}  %v{n // 4 - 1}\n}}\n"
    )


def with_effects(n: int) -> str:
    """A dropout and an update of a state cell every two lines."""
    lets = "".join(
        f"  let %v{i} = nn.dropout(%v{i - 1}, @rng, rate=0.1f);\n"
        f"  ref_write(@acc, add(ref_read(@acc), %v{i}));\n"
        for i in range(1, n // 4)
    )
    return H + CELLS + f"def @main(%v0: Tensor[(8), float32]) {{\n{lets}  %v{n // 4 - 1}\n}}\n"


PROGRAMS: dict[str, Callable[[int], str]] = {
    "straight": straight,
    "with ifs": with_ifs,
    "with loops": with_loops,
    "with effects": with_effects,
}
PASSES = [p.name for p in pipeline("O2")]


# --------------------------------------------------------- one measurement
def size(module: IRModule) -> tuple[int, int]:
    """(let bindings, expression nodes) of the functions, each node once."""
    lets = nodes = 0
    for fn in module.functions.values():
        for node in pre_order(fn):
            if isinstance(node, Expr):
                nodes += 1
                lets += isinstance(node, Let)
    return lets, nodes


class _CollectorTime:
    """CPU seconds spent in the cyclic garbage collector (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start


def run_once(module: IRModule) -> dict[str, Any]:
    """The pipeline's wall, CPU and collector seconds, each pass's seconds,
    and its output."""
    timing, collector = Timing(), _CollectorTime()
    gc.callbacks.append(collector)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        result = pipeline("O2")(module, PassContext(verify=False, instruments=[timing]))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        gc.callbacks.remove(collector)
    per_pass = dict.fromkeys(PASSES, 0.0)
    for name, seconds in timing.records:
        per_pass[name] += seconds
    return {"wall": wall, "cpu": cpu, "gc": collector.seconds, "passes": per_pass, "out": result}


def measure(program: str, n: int, repeats: int) -> dict[str, Any]:
    """Sizes in and out, and the median run (by wall time) of ``repeats``."""
    module = effir.parse(PROGRAMS[program](n))
    bindings, nodes_in = size(to_anf(module))
    runs = [run_once(module) for _ in range(repeats)]
    median = statistics.median_low([run["wall"] for run in runs])
    best = next(run for run in runs if run["wall"] == median)
    lets_out, nodes_out = size(best.pop("out"))
    return {
        **best,
        "bindings": bindings,
        "nodes_in": nodes_in,
        "nodes_out": nodes_out,
        "lets_out": lets_out,
    }


def measure_apart(program: str, n: int, repeats: int, limit: float, memory_gb: float):
    """``measure`` in a process of its own; a dict, or why there is none."""
    gigabyte = 1 << 30

    def limit_memory() -> None:
        cap = int(memory_gb * gigabyte)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    command = [sys.executable, __file__, "--one", program, str(n), str(repeats)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=limit, preexec_fn=limit_memory
        )
    except subprocess.TimeoutExpired:
        return f"over {limit:.0f} s"
    if done.returncode != 0:
        if "MemoryError" in done.stderr:
            return f"over {memory_gb:g} GB"
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {last}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ tables
def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--one"]:  # a child: one measurement, printed as JSON
        print(json.dumps(measure(args[1], int(args[2]), int(args[3]))))
        return
    quick = "--quick" in args
    limit = float(args[args.index("--limit") + 1]) if "--limit" in args else 120.0
    memory_gb = float(args[args.index("--memory") + 1]) if "--memory" in args else 12.0
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    print(f"pipeline O2: {STANDARD_PIPELINES['O2']}; verification off; seconds\n")
    header = (
        "| program      | bindings | nodes in | nodes out | lets out | out/in | pipeline s "
        "| cpu s | gc s | " + " | ".join(PASSES) + " |"
    )
    print(header)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|", flush=True)
    growth = []
    for program in PROGRAMS:
        times: dict[int, dict[str, Any] | str] = {}
        for n in sizes:
            repeats = 1 if quick or n >= 100_000 else 3
            m = measure_apart(program, n, repeats, limit, memory_gb)
            times[n] = m
            if isinstance(m, str):
                print(f"| {program:<12} | {n:>8,} | {m}", flush=True)
                continue
            passes = " | ".join(f"{m['passes'][p]:{len(p)}.2f}" for p in PASSES)
            print(
                f"| {program:<12} | {m['bindings']:>8,} | {m['nodes_in']:>8,} | "
                f"{m['nodes_out']:>9,} | {m['lets_out']:>8,} | "
                f"{m['nodes_out'] / m['nodes_in']:6.2f} | {m['wall']:10.2f} | "
                f"{m['cpu']:5.1f} | {m['gc']:4.1f} | {passes} |",
                flush=True,
            )
        if 100_000 in times:
            growth.append((program, times[10_000], times[100_000]))
    if growth:
        # The collector's share grows with the heap (each full collection
        # walks every live object): the growth without it is the passes'.
        print("\n| program      | 10k s | 100k s | growth (linear: x10) | without the collector |")
        print("|--------------|-------|--------|----------------------|-----------------------|")
        for program, small, large in growth:
            if isinstance(small, str) or isinstance(large, str):
                print(f"| {program:<12} | {_wall(small):>5} | {_wall(large):>6} | - | - |")
                continue
            ratio = large["wall"] / small["wall"]
            own = (large["wall"] - large["gc"]) / (small["wall"] - small["gc"])
            print(
                f"| {program:<12} | {small['wall']:5.2f} | {large['wall']:6.2f} | "
                f"x{ratio:<19.1f} | x{own:<20.1f} |"
            )


def _wall(m: dict[str, Any] | str) -> str:
    return m if isinstance(m, str) else f"{m['wall']:.2f}"


if __name__ == "__main__":
    main()
