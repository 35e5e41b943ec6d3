"""A GRU over a sequence: the whole cf.foreach compiled into one TVM function
(effir/backends/tvm/loop/) against a numpy loop, one step per iteration.

Cases (float32): input and hidden 256, T=100, batch 1 and 32 (the sizes of
the first measurements, where JAX's jit(lax.scan) took 1.81 ms and 14.5 ms on the same
kind of 2-core machine), and hidden 32, T=1000, batch 1, where per-step
overhead dominates. The GRU is written in effir text, type-checked and fused
(``to-anf,fuse``); its loop body goes to ``build_loop``. Times are the median
of 20 calls after warm-up (``--repeats``), wall clock; the compiled loop is
also timed with its thread pool off (``parallel=False``). The result of each
is checked against the numpy loop (1e-5 relative).

Run with `.venv/bin/python benchmarks/gru_loop.py` (about a minute). The
machines are shared: the load average is printed with the table, and the
minimum is shown next to the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import effir
from effir.backends.tvm.loop import LoopKernel, build_loop
from effir.ir.expr import Call, Function, Let, Op
from effir.ir.visitor import pre_order
from effir.passes.infra.pipeline import run_pipeline
from tests.support.gru_programs import NEW_STATE, gates

CASES = [  # (input, hidden, T, batch, JAX ms measured then, or None)
    (256, 256, 100, 1, 1.81),
    (256, 256, 100, 32, 14.5),
    (32, 32, 1000, 1, None),
]


H = '#[version = "0.0.5"]\n'


def gru_text(inputs: int, hidden: int, final_only: bool = False) -> str:
    """The GRU over a sequence; ``final_only``: the loop keeps no per-step
    outputs and the program returns the final state."""
    g = 3 * hidden
    out = "()" if final_only else "%h_new"
    result = "%scan.1" if final_only else "%scan"
    return (
        H
        + f"""
def @main(%xs: Tensor[(t, b, {inputs}), float32], %h0: Tensor[(b, {hidden}), float32],
          %w: Tensor[({g}, {inputs}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[(b, {inputs}), float32], %h: Tensor[(b, {hidden}), float32]) {{
{gates(4)}
    let %h_new = {NEW_STATE};
    ({out}, %h_new)
  }};
  let %scan = cf.foreach(%step, %xs, %h0);
  {result}
}}
"""
    )


def loop_body(inputs: int, hidden: int) -> Function:
    mod = effir.check(effir.parse(gru_text(inputs, hidden)))
    mod = effir.check(run_pipeline(mod, "to-anf,fuse"))
    bodies = {n.var: n.value for n in pre_order(mod["main"]) if isinstance(n, Let)}
    for node in pre_order(mod["main"]):
        if (
            isinstance(node, Call)
            and isinstance(node.callee, Op)
            and node.callee.name == "cf.foreach"
        ):
            return bodies[node.args[0]]
    raise AssertionError("no cf.foreach in the GRU")


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def numpy_gru(xs, h, w, u, bias):
    """The eager loop: one numpy step per element of the sequence."""
    outs = []
    wt, ut = w.T, u.T
    for x in xs:
        gx = x @ wt + bias
        gh = h @ ut
        gx0, gx1, gx2 = np.split(gx, 3, axis=1)
        gh0, gh1, gh2 = np.split(gh, 3, axis=1)
        z = sigmoid(gx0 + gh0)
        r = sigmoid(gx1 + gh1)
        n = np.tanh(gx2 + r * gh2)
        h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs), h


def timed(action: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median and minimum seconds of ``repeats`` calls, after three warm-up calls."""
    for _ in range(3):
        action()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def run_case(inputs: int, hidden: int, length: int, batch: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    g = 3 * hidden
    xs = rng.standard_normal((length, batch, inputs), dtype=np.float32)
    h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
    w = (rng.standard_normal((g, inputs)) / np.sqrt(inputs)).astype(np.float32)
    u = (rng.standard_normal((g, hidden)) / np.sqrt(hidden)).astype(np.float32)
    bias = (rng.standard_normal(g) * 0.1).astype(np.float32)
    body = loop_body(inputs, hidden)
    row: dict = {}
    kernels: dict[str, LoopKernel] = {}
    for name, parallel in (("parallel", True), ("serial", False)):
        start = time.perf_counter()
        kernel = build_loop(body, parallel=parallel, dims={"b": batch})
        row[f"build_{name}"] = time.perf_counter() - start
        kernels[name] = kernel
    args = {"w": w, "u": u, "bias": bias}
    want_outs, want_last = numpy_gru(xs, h0, w, u, bias)
    # numpy first, then a pause: OpenBLAS's and TVM's thread pools both spin
    # a while after their work, and either starves the other's threads.
    row["numpy"] = timed(lambda: numpy_gru(xs, h0, w, u, bias), repeats)
    time.sleep(0.5)
    for name, kernel in kernels.items():
        captured = [args[v.name_hint] for v in kernel.captured]
        outs, last = kernel(xs, h0, *captured)
        np.testing.assert_allclose(outs, want_outs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(last, want_last, rtol=1e-5, atol=1e-5)
        row[name] = timed(lambda k=kernel, c=captured: k(xs, h0, *c), repeats)
        time.sleep(0.5)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; ms: median (min)")
    header = (
        f"{'case':<24} {'build s':>8} {'effir ms':>16} {'serial ms':>16} "
        f"{'numpy ms':>16} {'vs numpy':>8} {'us/step':>8} {'JAX ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for inputs, hidden, length, batch, jax_ms in CASES:
        row = run_case(inputs, hidden, length, batch, options.repeats)
        best = min(row["parallel"][0], row["serial"][0])
        cells = [
            f"{inputs}/{hidden} T={length} b={batch}",
            f"{row['build_parallel']:.2f}",
            "{:.3f} ({:.3f})".format(*(1e3 * t for t in row["parallel"])),
            "{:.3f} ({:.3f})".format(*(1e3 * t for t in row["serial"])),
            "{:.3f} ({:.3f})".format(*(1e3 * t for t in row["numpy"])),
            f"{row['numpy'][0] / best:.1f}x",
            f"{1e6 * best / length:.2f}",
            f"{jax_ms:.2f}" if jax_ms else "-",
        ]
        print(
            f"{cells[0]:<24} {cells[1]:>8} {cells[2]:>16} {cells[3]:>16} "
            f"{cells[4]:>16} {cells[5]:>8} {cells[6]:>8} {cells[7]:>7}"
        )


if __name__ == "__main__":
    main()
