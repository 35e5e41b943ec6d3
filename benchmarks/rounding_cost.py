"""What [RULE KERNEL-ROUND] (effir/backends/tvm/kernel/rounding.py) costs: the same
program built with and without the fences on products between operators,
in one process, calls of the two builds interleaved, CPU time per call.

Programs: the training step of benchmarks/train_step.py (``train``),
the GRU backward of benchmarks/checkpoint_memory.py at T=1000 under each
checkpointing mode (``none``, ``loop``, ``sqrt``), and an inference GRU
(``gru32``: benchmarks/gru_peers.py's, hidden 32, T=1000, batch 1), which
is not a gradient program and so is built without the fences by default. The build cache is off
(both builds have the same program text). One process and interleaved
calls: on a shared machine the load moves between runs of separate
processes more than the difference measured.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/rounding_cost.py train none loop sqrt gru32``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ["EFFIR_CACHE_DIR"] = "off"

import checkpoint_memory
import gru_peers
import numpy as np
import train_step

import effir
from effir.backends.tvm.kernel import rounding


def build(what: str, fenced: bool) -> Callable[[], object]:
    """One call of ``what``, built (by a first call) with the fences or
    without: ``rounding.gradient_program``, which decides it for a
    module, answers ``fenced`` meanwhile."""
    decide = rounding.gradient_program
    rounding.gradient_program = lambda module: fenced
    try:
        if what == "train":
            cfg = train_step.Config(
                vocab=60, embed=256, hidden=256, seq_len=100, batch=32, rate=0.1
            )
            call, _, _ = train_step.effir_step(cfg, "effir")
        elif what == "gru32":  # inference, not a gradient program: unfenced by default
            rng = np.random.default_rng(1)
            xs = rng.standard_normal((1000, 1, 32), dtype=np.float32)
            h0 = rng.standard_normal((1, 32), dtype=np.float32)
            weights = gru_peers.weights(32, 32)
            gru = effir.compile(effir.check(effir.parse(gru_peers.gru_text(32, 32))))

            def call() -> object:
                return gru(xs, h0, *weights)
        else:
            sizes = {"length": 1000, "batch": 32, "inputs": 32, "hidden": 128}
            module = effir.parse(checkpoint_memory.gru_text(**sizes))
            g = effir.value_and_grad(module, wrt=checkpoint_memory.WRT, checkpoint=what)
            program = effir.compile(g, entry="main_grad")
            args = checkpoint_memory.arguments(**sizes)

            def call() -> object:
                return program(*args, entry="main_grad")

        call()
        return call
    finally:
        rounding.gradient_program = decide


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("programs", nargs="+", choices=["train", "none", "loop", "sqrt", "gru32"])
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args(argv)
    print(
        "| program | CPU ms / call without | with fences | with / without | min without | min with |"
    )
    print("|---|---|---|---|---|---|", flush=True)
    for what in args.programs:
        calls = {fenced: build(what, fenced) for fenced in (False, True)}
        for call in calls.values():  # warm-up
            call()
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for fenced in (False, True) if r % 2 == 0 else (True, False):
                start = time.process_time()
                calls[fenced]()
                cpu[fenced].append(time.process_time() - start)
        without, with_ = (statistics.median(cpu[f]) for f in (False, True))
        print(
            f"| {what} | {without * 1e3:.1f} | {with_ * 1e3:.1f} | {with_ / without:.3f} "
            f"| {min(cpu[False]) * 1e3:.1f} | {min(cpu[True]) * 1e3:.1f} |",
            flush=True,
        )
    print(f"\nload {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
