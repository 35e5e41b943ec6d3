"""Variable-length batches: padding to the longest against ``effir.packed_scan``.

64 sequences of lengths 1-200 (input 32, hidden 64, float32; the case of
benchmarks/gru_peers.py), each way checked against a per-sequence
reference (numpy, 1e-4 relative):

- ``padded``: every sequence padded to the longest, the GRU with per-step
  outputs over the whole batch, each sequence's state picked at its last
  step (what a user writes without lengths);
- ``masked``: the lengths inside the compiled loop over the whole padded
  batch (a finished row's update gate forced to 1: its state is frozen);
- ``segments``: ``effir.packed_scan`` with the masked program: sorted by
  length, a prefix of the batch that shrinks as sequences finish (rounded
  up to the 8-row tile), one call per batch size, where the rows dropped
  pay for the call (the default ``call_cost``);
- ``packed loop``: ``effir.compile_packed`` on the GRU without a mask: one
  compiled loop whose step runs only the row tiles still active (the
  batch size at each step is data), one call; its row tiles split across
  TVM's pool for the whole call when the call's work is worth a barrier
  (it is here: 2**27.07 multiply-adds);
- ``packed loop, serial``: the same with ``parallel=False``.

The ways are timed round by round, interleaved, so that the machine's load
falls on all alike: the median over rounds of each round's median of
``--repeats`` calls (wall clock), and this process's CPU time likewise
(less sensitive to other processes on a shared machine). Row-steps: the
rows computed at each step, summed.

    .venv/bin/python benchmarks/varlen.py [--repeats N] [--rounds N]

The packed loop's row-steps are the active rows at each step rounded up to
its tile (4 rows without AVX-512, 8 with).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from gru_loop import gru_text
from gru_peers import masked_gru_text, variable_length_batch

import effir
from effir.backends.tvm.loop.cpu.packed import packed_tile
from effir.frontend.packed import CALL_COST, segments


def median_times(action: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeats`` calls, after three."""
    for _ in range(3):
        action()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()

    xs, lengths, h0, (w, u, bias), want = variable_length_batch()
    (longest, batch, inputs), hidden = xs.shape, h0.shape[1]
    padded = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))))
    masked = effir.compile(effir.check(effir.parse(masked_gru_text(inputs, hidden))))
    done = (np.arange(longest)[:, None] >= lengths[None, :])[:, :, None].astype(np.float32)
    rows = lengths - 1, np.arange(batch)

    def run_padded():
        return padded(xs, h0, w, u, bias)[0][rows]

    ways: dict[str, Callable[[], object]] = {
        "padded": run_padded,
        "masked": lambda: masked(xs, done, h0, w, u, bias),
    }
    ordered = np.sort(lengths)[::-1]
    row_steps = {"padded": longest * batch, "masked": longest * batch}
    calls = {"padded": 1, "masked": 1}
    ways["segments"] = lambda: effir.packed_scan(masked, xs, lengths, h0, w, u, bias)
    parts = segments(ordered, call_cost=CALL_COST)
    row_steps["segments"] = sum(r * (stop - start) for r, start, stop in parts)
    calls["segments"] = len(parts)
    scan = effir.check(effir.parse(gru_text(inputs, hidden, final_only=True)))
    loop = effir.compile_packed(scan)
    serial = effir.compile_packed(scan, parallel=False)
    ways["packed loop"] = lambda: loop(xs, lengths, h0, w, u, bias)
    ways["packed loop, serial"] = lambda: serial(xs, lengths, h0, w, u, bias)
    tile = packed_tile()
    active = (ordered[None, :] > np.arange(longest)[:, None]).sum(1)
    for name in ("packed loop", "packed loop, serial"):
        row_steps[name] = int((-(-active // tile) * tile).sum())
        calls[name] = 1
    for name, action in ways.items():  # builds (or the build cache) first
        np.testing.assert_allclose(action(), want, rtol=1e-4, atol=1e-5, err_msg=name)

    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(options.rounds):
        for name, action in ways.items():
            w_s, c_s = median_times(action, options.repeats)
            wall[name].append(w_s)
            cpu[name].append(c_s)
            time.sleep(0.2)  # thread pools spin a while after their work
    base_wall = statistics.median(wall["padded"])
    base_cpu = statistics.median(cpu["padded"])
    load = os.getloadavg()
    print(
        f"64 sequences of lengths 1-200 ({int(lengths.sum())} steps in all, longest "
        f"{longest}), input 32, hidden 64, packed loop tile {tile}: median of {options.rounds} rounds of "
        f"{options.repeats} calls (load average {load[0]:.1f} / {load[1]:.1f} on "
        f"{os.cpu_count()} CPUs; TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', '(all)')})\n"
    )
    print(
        "| way | row-steps | calls | wall ms | padded / this (wall) | CPU ms | "
        "padded / this (CPU) |\n|---|---|---|---|---|---|---|"
    )
    for name in ways:
        w_ms, c_ms = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"| {name} | {row_steps[name]} | {calls[name]} | {1e3 * w_ms:.2f} | "
            f"{base_wall / w_ms:.2f}x | {1e3 * c_ms:.2f} | {base_cpu / c_ms:.2f}x |"
        )


if __name__ == "__main__":
    main()
