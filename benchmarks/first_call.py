"""First-call latency: what a new shape's first call costs, where the time
goes, and what the build cache (effir/backends/tvm/driver/build_cache.py) saves.

The program is the GRU language model (examples/gru_lm.effir) called at
t=100, b=32. Each measurement is a fresh process (``--child``) that parses
and compiles the program (the pipeline, not counted) and times what its first
call at that shape adds to the call itself (the build serving the shape
and the calling thread's VM), in three settings, interleaved round by round so that
the machine's load falls on all three alike:

- ``no cache``: ``EFFIR_CACHE_DIR=off``, as before the cache: lowering,
  TVM's build, and LLVM's code generation in memory at the first call;
- ``cold``: an empty cache: the same, the library then linked and written
  to the cache by a thread of its own (driver/build_cache.py
  [RULE CACHE-BACKGROUND]);
- ``warm``: the cache filled by an earlier process: the library loaded.

The ``no cache`` processes also time each stage (wrapping the functions
that run it): effir's own work (specialising and type-checking the
program, lowering it: ``te`` rules, schedules, the Relax program), TVM's
build of effir's kernels (``tvm.compile`` and LLVM's machine code, on
their own threads: relax/apart.py), of the Relax module (``relax.build``,
at the same time), and the first VM.

    .venv/bin/python benchmarks/first_call.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIMS = {"t": 100, "b": 32}


def child(breakdown: bool) -> None:
    """One process's first call at ``DIMS``; prints seconds as JSON."""
    import effir
    from effir.backends.tvm.driver import compile as compile_module
    from effir.backends.tvm.relax import apart

    stages: dict[str, float] = {}

    def timed(owner: object, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                stages[stage] = stages.get(stage, 0.0) + time.perf_counter() - start

        setattr(owner, name, wrapper)

    if breakdown:
        timed(compile_module, "specialise", "specialise")
        timed(compile_module, "lower_to_relax", "effir lowering")
        timed(apart.KernelLibrary, "_build", "kernels")  # on their threads, beside relax.build
        timed(compile_module.relax, "build", "relax.build")
    module = effir.parse((ROOT / "examples" / "gru_lm.effir").read_text())
    compiled = effir.compile(module)
    start = time.perf_counter()
    spec = compiled.specialisation("main", dict(DIMS))
    built = time.perf_counter()
    spec.function()  # the thread's VM: LLVM's code generation when built in memory
    end = time.perf_counter()
    stages["first VM"] = end - built
    print(json.dumps({"total": end - start, "stages": stages}))


def measure(cache: str, breakdown: bool = False) -> dict:
    env = {**os.environ, "EFFIR_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, __file__, "--child"] + (["--breakdown"] if breakdown else [])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--breakdown", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.breakdown)
        return
    times: dict[str, list[float]] = {"no cache": [], "cold": [], "warm": []}
    stages: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="effir-first-call-") as tmp:
        for n in range(options.rounds):
            off = measure("off", breakdown=True)
            times["no cache"].append(off["total"])
            for stage, seconds in off["stages"].items():
                stages.setdefault(stage, []).append(seconds)
            cache = str(Path(tmp) / f"round-{n}")
            times["cold"].append(measure(cache)["total"])
            times["warm"].append(measure(cache)["total"])
    load = os.getloadavg()
    print(
        f"First call of examples/gru_lm.effir at t={DIMS['t']}, b={DIMS['b']}: median of "
        f"{options.rounds} fresh processes each (load average {load[0]:.1f} on "
        f"{os.cpu_count()} CPUs at the end)\n"
    )
    print("| first call | median s | min s |\n|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} |")
    print("\nWhere the time of a first call without the cache goes (median s):\n")
    print("| stage | s |\n|---|---|")
    order = ["specialise", "effir lowering", "kernels", "relax.build", "first VM"]
    for stage in order:
        if stage in stages:
            print(f"| {stage} | {statistics.median(stages[stage]):.3f} |")


if __name__ == "__main__":
    main()
