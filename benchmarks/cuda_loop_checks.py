"""Whole loops as persistent GPU kernels (effir/backends/tvm/loop/cuda/),
run on a GPU: are they right, and how fast are they.

    python benchmarks/cuda_loop_checks.py [--repeats N] [--part checks|speed|all]
        [--dry | --emulate]

or ``cuda_loop_checks.rows(target, dry)`` from benchmarks/cuda_device.py
(its part ``loops``): a list of ``(name, "ok" | "FAIL" | "built",
detail)``. Each row printed is ``name | status | detail``; a failing item
prints its traceback and the run goes on. Three ways to run:

- on a GPU (target ``cuda``): the checks run, then the timings;
- ``--dry`` (``rows("cuda", dry=True)``), any machine with nvcc: every
  program of the checks built for CUDA and its loops checked to be
  persistent kernels (no VM loop left), nothing run: rows ``built``;
- ``--emulate`` (``rows("llvm", dry=False)``): the checks on a CPU, the
  loops built as the GPU's and run serially
  (``effir.backends.tvm.loop.cuda.emulated``) at sizes small enough for
  it: the checks themselves checked where there is no GPU
  (tests/backends/tvm/test_cuda_loop_emulated.py).

Checks, each against the interpreter or numpy, each also checking that
the loop was built as a persistent kernel (no VM loop left):

- the GRU of benchmarks/gru_loop.py at the three sizes timed below (a
  grid of many blocks with a grid barrier per step at hidden 256, one
  block at hidden 32), and at 0, 1 and 3 steps;
- the RNN with dropout inside the step (examples/rnn_dropout_bn.effir):
  the keys are split in the kernel, bit for bit the interpreter's;
- ``effir.value_and_grad`` of the GRU language model
  (examples/gru_lm_training.py) in the three checkpoint modes: the loss
  and gradients equal the interpreter's, and the modes agree bit for bit
  (docs/backend.md [RULE KERNEL-ROUND]).

Speed: the GRU (weights ``(3H, I)``) compiled for CUDA, called from numpy
(the host-device copies included, as benchmarks/cuda_device.py times
effir from numpy), median of ``--repeats`` calls after warm-up. The targets are the
H200's JAX and cuDNN times of benchmarks/cuda_device.py (docs/backend.md,
"CUDA").
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

from gru_loop import gru_text, numpy_gru  # noqa: E402
from gru_peers import weights  # noqa: E402
from timing import median_after_warmup  # noqa: E402

import effir  # noqa: E402

SPEED_CASES = (
    # inputs, hidden, length, batch, target ms (H200): the brief's bound
    (256, 256, 100, 1, "<= 0.45 (0.5x JAX's 0.90)"),
    (256, 256, 100, 32, "<= 0.70 (0.5x JAX's 1.40; cuDNN 1.49)"),
    (32, 32, 1000, 1, "<= 0.50 (cuDNN's 0.50)"),
)


EMULATED_SIZES = ((16, 32, 20, 1, ""), (16, 64, 7, 3, ""))
"""GRU sizes small enough for the serial run of ``--emulate``: one block,
and a grid of several."""


SPEED_REPEATS = 20
"""Timed calls per case when ``rows`` runs the timings (after warm-up)."""


class Built(Exception):
    """Raised by a check in dry mode once its programs are built and their
    loops are persistent kernels: nothing more can be checked without a GPU."""


@dataclass
class Row:
    name: str
    status: str  # ok, FAIL, built
    detail: str

    @property
    def ok(self) -> bool:
        return self.status != "FAIL"

    def __str__(self) -> str:
        return f"{self.name} | {self.status} | {self.detail}"


def loop_kernels(compiled: Any) -> tuple[int, int]:
    """(persistent loop kernels, VM loops) of every build of ``compiled``."""
    whole, vm = 0, 0
    for spec in compiled.specialisations.values():
        text = spec.program.module.script()
        whole += len(set(re.findall(r"effir_[0-9a-f]{16}_loop_\d+(?![_\d])", text)))
        vm += len(re.findall(r"def (?:foreach|while)_\d+_level0", text))
    return whole, vm


def item(made: list[Row], name: str, check: Callable[[], str]) -> None:
    """Run ``check``; a row with its detail, or FAIL and the traceback."""
    try:
        row = Row(name, "ok", check())
    except Built as built:
        row = Row(name, "built", str(built))
    except Exception as err:  # the row says what, the traceback above it where
        first = (str(err).strip().splitlines() or [""])[0]
        row = Row(name, "FAIL", f"{type(err).__name__}: {first}"[:300])
        print(traceback.format_exc(), flush=True)
    made.append(row)
    print(row, flush=True)


def _persistent(compiled: Any, at_least: int = 1, dry: bool = False) -> str:
    """What ``compiled`` was built into, asserted: ``at_least`` persistent
    loops and no VM loop. In dry mode, the end of the check (``Built``)."""
    whole, vm = loop_kernels(compiled)
    assert whole >= at_least and vm == 0, f"{whole} persistent loops, {vm} VM loops"
    if dry:
        raise Built(f"{whole} persistent loop(s), no VM loop; not run")
    return f"{whole} persistent loop(s)"


# ------------------------------------------------------------------ checks
def gru_check(
    inputs: int, hidden: int, length: int, batch: int, target: str, dry: bool = False
) -> str:
    module = effir.check(effir.parse(gru_text(inputs, hidden)))
    compiled = effir.compile(module, target=target, dims={"t": length, "b": batch})
    _persistent(compiled, dry=dry)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((length, batch, inputs), dtype=np.float32)
    h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
    w, u, bias = weights(inputs, hidden)
    outs, h = compiled(xs, h0, w, u, bias)
    want_outs, want_h = numpy_gru(xs, h0, w, u, bias)
    np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
    for steps in (0, 1, 3):  # a grid of no blocks is never launched
        o, hs = compiled(xs[:steps], h0, w, u, bias)
        wo, wh = numpy_gru(xs[:steps], h0, w, u, bias) if steps else (o, h0)
        np.testing.assert_allclose(hs, wh, rtol=1e-4, atol=1e-5)
        assert o.shape == (steps, batch, hidden)
    err = float(np.max(np.abs(h - want_h)))
    return f"{_persistent(compiled)}, max |h - numpy| {err:.2e}"


def dropout_check(target: str, dry: bool = False) -> str:
    module = effir.check(effir.parse((ROOT / "examples" / "rnn_dropout_bn.effir").read_text()))
    compiled = effir.compile(module, target=target, dims={"t": 30, "b": 4})
    _persistent(compiled, dry=dry)
    rng = np.random.default_rng(1)
    shapes = [(30, 4, 8), (4, 16), (16, 8), (16, 16), (16,), (16,), (16,)]
    args = [(rng.standard_normal(s) * 0.25).astype(np.float32) for s in shapes]
    interpreted, state = effir.State(module), effir.State(module)
    want = effir.interpret(module, *args, state=interpreted)
    got = compiled(*args, state=state)
    for a, b in zip(got, want, strict=True):  # 30 steps, then batch norm: rounding grows
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
    assert state["rng"] == interpreted["rng"], (state["rng"], interpreted["rng"])
    return f"{_persistent(compiled)}, keys bit-identical"


def gradient_check(target: str, dry: bool = False) -> str:
    from gru_lm_training import Config, build, init_params

    from effir.backends.interpreter import interpret_a2

    # hidden 16, batch 64: a grid of several blocks on the GPU; at hidden 32
    # and more the CPU's sqrt mode is not bit-identical to none (not a loop
    # kernel's doing: the CPU's whole loops alone show it too)
    cfg = Config(vocab=40, embed=16, hidden=16, seq_len=24, batch=64)
    rs = np.random.default_rng(2)
    tokens = rs.integers(0, cfg.vocab, (cfg.seq_len, cfg.batch)).astype(np.int32)
    targets = rs.integers(0, cfg.vocab, (cfg.seq_len, cfg.batch)).astype(np.int32)
    params = init_params(cfg)
    # the forward and the reverse loop persistent kernels in every mode; a
    # checkpointed mode's loop over segments stays the VM's (its body holds
    # the segment's loops), each segment's loops persistent kernels
    results, loops = {}, {}
    for mode in ("none", "loop", "sqrt"):
        module = build(cfg, grad="effir", checkpoint=mode)
        compiled = effir.compile(module, target=target, dims={}, entry="loss_grad")
        loops[mode] = whole, vm = loop_kernels(compiled)
        assert whole >= 2 and (vm == 0 or mode != "none"), f"{mode}: {whole} persistent, {vm} VM"
        if dry:
            continue
        loss, grads = compiled(
            tokens, targets, *params, entry="loss_grad", state=effir.State(module)
        )
        results[mode] = [np.asarray(loss), *(np.asarray(g) for g in grads)]
    if dry:
        raise Built(f"(persistent, VM) loops per mode {loops}; not run")
    want_loss, want = interpret_a2(
        module, tokens, targets, *params, entry="loss_grad", state=effir.State(module)
    )
    for got, ref in zip(results["none"], [want_loss, *want], strict=True):
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-4, atol=1e-5)
    for mode in ("loop", "sqrt"):
        for i, (a, b) in enumerate(zip(results["none"], results[mode], strict=True)):
            assert np.array_equal(a, b), f"{mode}: result {i} differs from none's"
    return f"(persistent, VM) loops per mode {loops}, modes bit-identical"


def checks(target: str = "cuda", sizes: tuple = SPEED_CASES, dry: bool = False) -> list[Row]:
    """The checks, built for ``target`` (``"llvm"`` inside ``emulated()``:
    the GPU's loops run on the CPU); in dry mode built and not run."""
    made: list[Row] = []
    for inputs, hidden, length, batch, _ in sizes:
        name = f"gru H={hidden} T={length} B={batch} on {target} equals numpy"

        def gru(i: int = inputs, h: int = hidden, t: int = length, b: int = batch) -> str:
            return gru_check(i, h, t, b, target, dry)

        item(made, name, gru)
    item(
        made,
        "rnn with dropout in the step: keys split in the kernel",
        lambda: dropout_check(target, dry),
    )
    item(
        made,
        "value_and_grad of the GRU LM, none/loop/sqrt",
        lambda: gradient_check(target, dry),
    )
    return made


# ------------------------------------------------------------------- speed
def speed(repeats: int, target: str = "cuda") -> list[Row]:
    made: list[Row] = []
    for inputs, hidden, length, batch, goal in SPEED_CASES:

        def timed(
            i: int = inputs, h: int = hidden, t: int = length, b: int = batch, goal: str = goal
        ) -> str:
            rng = np.random.default_rng(1)
            xs = rng.standard_normal((t, b, i), dtype=np.float32)
            h0 = rng.standard_normal((b, h), dtype=np.float32)
            w, u, bias = weights(i, h)
            module = effir.check(effir.parse(gru_text(i, h)))
            compiled = effir.compile(module, target=target, dims={"t": t, "b": b})
            compiled(xs, h0, w, u, bias)
            _persistent(compiled)
            ms = 1e3 * median_after_warmup(lambda: compiled(xs, h0, w, u, bias), repeats)
            return f"{ms:.3f} ms (target {goal} ms)"

        item(made, f"gru H={hidden} T={length} B={batch}: effir cuda (numpy in/out)", timed)
    return made


def run(repeats: int = SPEED_REPEATS, part: str = "all", target: str = "cuda") -> list[Row]:
    """Every check and timing on the GPU, each row printed as it is made."""
    import tvm

    device = tvm.cuda(0)
    name = str(device.device_name) if device.exist else "no GPU"
    print(f"cuda_loop_checks on {name}", flush=True)
    made: list[Row] = []
    if part in ("all", "checks"):
        made += checks(target)
    if part in ("all", "speed"):
        made += speed(repeats, target)
    return made


def emulate() -> list[Row]:
    """The checks on this CPU, the loops built as the GPU's and run serially."""
    from effir.backends.tvm.loop.cuda import emulated

    with emulated():
        return checks("llvm", EMULATED_SIZES)


def rows(target: Any = "cuda", dry: bool = False) -> list[tuple[str, str, str]]:
    """benchmarks/cuda_device.py's entry point: ``(name, "ok" | "FAIL" |
    "built", detail)`` rows. For a CUDA target, the checks and timings on
    the GPU, or in dry mode the checks' programs built and not run; for a
    CPU target (``llvm``), the checks emulated on the CPU."""
    kind = str(target).split()[0]
    if kind != "cuda":
        if dry:
            raise ValueError("dry mode builds for cuda; a CPU target runs the emulated checks")
        found = emulate()
    elif dry:
        found = checks(str(target), dry=True)
    else:
        found = run(target=str(target))
    return [(r.name, r.status, r.detail) for r in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--part", choices=("all", "checks", "speed"), default="all")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--emulate", action="store_true", help="the checks on this CPU")
    modes.add_argument("--dry", action="store_true", help="build the checks for CUDA, run nothing")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.emulate:
        found = emulate()
    elif args.dry:
        found = checks("cuda", dry=True)
    else:
        found = run(args.repeats, args.part)
    failed = [r.name for r in found if not r.ok]
    print(f"{len(found)} rows in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"{len(failed)} failed: {failed}" if failed else "all ok", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
