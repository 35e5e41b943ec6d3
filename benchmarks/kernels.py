"""TVM kernels built by effir against numpy and against TVM's unscheduled
loops: what the schedules (effir/backends/tvm/schedule/cpu/kernel.py) are worth.

Kernels: the GRU gate's dense + bias + tanh (x of 1 or 32 rows by 256, the
weight 768 by 256, as a fused primitive function computes it) and the GRU's
elementwise update ``z * h + (1 - z) * tanh(c)`` with ``z = sigmoid(a)``
(32 by 768). Prints a table: the median of 50 calls after 10 warm-up calls (the
three timed in turn) of the effir kernel (``Kernel.__call__``: argument checks, zero-copy
DLPack, a fresh output), of numpy computing the same, and of the same TE
built without a schedule; and the build time of the scheduled kernel. The
machines are shared: compare the ratios within one run. Run with
`.venv/bin/python benchmarks/kernels.py`.
"""

from __future__ import annotations

import os

# The kernels run on one thread: numpy's BLAS gets one too. (With two
# threads on the shared 2-core machines OpenBLAS's threads, woken between
# the other calls of the interleaved timing, take milliseconds per call.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time
from functools import partial

import numpy as np
from timing import median_seconds

import effir
from effir.backends.tvm.kernel.primitive import build_kernel
from effir.passes.infra.pipeline import run_pipeline

H = '#[version = "0.0.5"]\n'
WARMUP, RUNS = 10, 50


def gate(rows: int) -> tuple[str, str, tuple, object]:
    text = H + (
        f"def @main(%x: Tensor[({rows}, 256), float32], %w: Tensor[(768, 256), float32],\n"
        "          %b: Tensor[(768), float32]) {\n"
        "  tanh(add(nn.dense(%x, %w), %b))\n"
        "}\n"
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 256)).astype("float32")
    w = (rng.standard_normal((768, 256)) * 0.05).astype("float32")
    b = rng.standard_normal(768).astype("float32")
    name = f"dense+bias+tanh {rows}x256 @ 768x256"
    return name, text, (x, w, b), lambda: np.tanh(x @ w.T + b)


def update() -> tuple[str, str, tuple, object]:
    text = H + (
        "def @main(%a: Tensor[(32, 768), float32], %h: Tensor[(32, 768), float32],\n"
        "          %c: Tensor[(32, 768), float32]) {\n"
        "  let %z = sigmoid(%a);\n"
        "  add(multiply(%z, %h), multiply(subtract(1f, %z), tanh(%c)))\n"
        "}\n"
    )
    rng = np.random.default_rng(1)
    a, h, c = (rng.standard_normal((32, 768)).astype("float32") for _ in range(3))

    def numpy() -> np.ndarray:
        z = 1 / (1 + np.exp(-a))
        return z * h + (1 - z) * np.tanh(c)

    return "elementwise z*h + (1-z)*tanh(c) 32x768", text, (a, h, c), numpy


def primitive(text: str) -> effir.ir.expr.Function:
    """The one primitive function ``fuse`` makes of the program."""
    module = effir.check(run_pipeline(effir.check(effir.parse(text)), "to-anf,fuse"))
    body = module["main"].body
    while not (
        isinstance(body, effir.ir.expr.Let) and isinstance(body.value, effir.ir.expr.Function)
    ):
        body = body.body
    return body.value


def interleaved_micros(*actions: object) -> list[float]:
    """Median microseconds of each action, the actions timed in turn in
    each of RUNS rounds, so that a burst of load on the shared machine
    slows all of them alike."""
    for action in actions:
        for _ in range(WARMUP):
            action()  # type: ignore[operator]
    times: list[list[float]] = [[] for _ in actions]
    for _ in range(RUNS):
        for k, action in enumerate(actions):
            times[k].append(median_seconds(action, repeats=1))  # type: ignore[arg-type]
    return [float(np.median(t)) * 1e6 for t in times]


def main() -> None:
    rows = []
    for name, text, args, numpy in (gate(1), gate(32), update()):
        fn = primitive(text)
        start = time.perf_counter()
        kernel = build_kernel(fn, "llvm")
        build = time.perf_counter() - start
        plain = build_kernel(fn, "llvm", schedule=False)
        assert np.allclose(kernel(*args), numpy(), rtol=1e-5, atol=1e-5)  # type: ignore[operator]
        ours, ref, unscheduled = interleaved_micros(
            partial(kernel, *args), numpy, partial(plain, *args)
        )
        rows.append((name, ours, ref, unscheduled, build))
    header = f"{'kernel':40} {'effir us':>9} {'numpy us':>9} {'unsched us':>11} {'vs numpy':>9} {'vs unsched':>11} {'build s':>8}"
    print(header)
    print("-" * len(header))
    for name, ours, ref, plain, build in rows:
        print(
            f"{name:40} {ours:9.1f} {ref:9.1f} {plain:11.1f} {ref / ours:8.2f}x {plain / ours:10.1f}x {build:8.2f}"
        )


if __name__ == "__main__":
    main()
