"""effir against its peers on a GRU, side by side in one run.

Cases (float32, weights scaled as a trained network's):

1. A GRU over a sequence, input and hidden 256, T=100, batch 1 and 32,
   against each peer at its best (each formulation is written
   beside its function below): effir (``effir.compile`` of the whole
   program: the pipeline, TVM for this CPU, the Relax VM; the recurrence is
   one TIR loop, the input projections hoisted into one matrix product);
   JAX ``jit(lax.scan)`` with the weights transposed once and closed over
   ("JAX best"), the same with the input projection hoisted before the
   scan, and the formulation this benchmark first had (weights carried
   through the scan, transposed in the step); PyTorch's fused ``nn.GRU``,
   ``torch.compile`` of the step and the eager loop; numpy with the input
   projection hoisted and the weights pre-transposed. Every row is timed
   side by side (``interleaved``). The FLOP bound is the
   GRU's multiply-adds (2 x T x batch x 3H x (I + H)) at the rate of a
   large single-precision matrix product on this machine (numpy's BLAS),
   the fastest this CPU has been seen to multiply.
2. The same GRU with hidden 32, T=1000, batch 1, where per-step overhead
   dominates: microseconds per step. Then the call order: one compiled
   module (hidden 256) called at batch 1 first, then 32, then 1, in a
   process of its own (``call_order_child``).
3. A batch of 64 sequences of lengths 1-200 (input 32, hidden 64): effir
   with the lengths inside the compiled loop (a sequence's state stops
   changing after its last step: its update gate is forced to 1), the same
   over four buckets of sequences sorted by length (one build serves them
   all: the length is symbolic), and padding every sequence to the longest
   and picking each one's state at its last step from the stacked outputs;
   all equal a per-sequence reference.
4. Compile time of the whole pipeline plus the TVM build of the GRU model
   (examples/gru_lm.effir).
5. Peak memory of inference (the final state only) over T=100 and
   T=10,000, each in a process of its own.

Every effir result is checked against the numpy loop (1e-4 relative; the
sums run in different orders). Times are medians of ``--repeats`` calls
after warm-up, wall clock, all measured in this one process and run.
Peers that are not installed are left out (``make bench-peers`` installs
torch==2.13.0 and JAX into .venv-bench only).

    .venv-bench/bin/python benchmarks/gru_peers.py [--repeats N] [--quick] [--gru-only]
        [--no-torch-compile] [--case I,H,T,B] [--row-blocks]

(``--case 256,256,100,32 --row-blocks``: that row only, with effir's loop
also built with its rows in one block, before/after loop/rows.py.)

or, with the peers installed outside the project (``pip install --target``):

    PYTHONPATH=$PWD:/tmp/jaxsite:/tmp/torchsite .venv/bin/python benchmarks/gru_peers.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gru_loop import H, gru_text, numpy_gru
from timing import median_after_warmup

import effir
from effir.backends.tvm.kernel.primitive import aligned_empty

torch: Any = None
jax: Any = None
jnp: Any = None


def import_peers() -> None:
    """PyTorch and JAX, when installed (not in the memory runs' processes)."""
    global torch, jax, jnp
    try:
        import torch as torch_module

        torch = torch_module
    except ImportError:  # a peer left out
        pass
    try:
        import jax as jax_module
        import jax.numpy as jnp_module

        jax, jnp = jax_module, jnp_module
    except ImportError:
        pass


def masked_gru_text(inputs: int, hidden: int) -> str:
    """The GRU over a padded batch whose rows stop at their own lengths:
    ``done`` is 1 from a row's last step on, and the update gate becomes 1
    there (``maximum(z, done)``), so a finished row's state is carried
    unchanged, exactly (``0 * n + 1 * h``). The mask is a float, not a
    boolean: TVM 0.27 does not vectorise a select on a vector of booleans
    (loop/), and the gate costs one maximum a step."""
    g = 3 * hidden
    return (
        H
        + f"""
def @main(%xs: Tensor[(t, b, {inputs}), float32], %done: Tensor[(t, b, 1), float32],
          %h0: Tensor[(b, {hidden}), float32],
          %w: Tensor[({g}, {inputs}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: (Tensor[(b, {inputs}), float32], Tensor[(b, 1), float32]),
                  %h: Tensor[(b, {hidden}), float32]) {{
    let %gx = nn.dense(%x.0, %w) + %bias;
    let %gh = nn.dense(%h, %u);
    let %gxs = split(%gx, indices_or_sections=3, axis=1);
    let %ghs = split(%gh, indices_or_sections=3, axis=1);
    let %z = maximum(sigmoid(%gxs.0 + %ghs.0), %x.1);
    let %r = sigmoid(%gxs.1 + %ghs.1);
    let %n = tanh(%gxs.2 + %r * %ghs.2);
    ((), (1f - %z) * %n + %z * %h)
  }};
  cf.foreach(%step, (%xs, %done), %h0).1
}}
"""
    )


# ------------------------------------------------------------------ peers
# Each peer at its best, and the formulations compared.
# All compute the same GRU (gates z, r, n in that order along 3H; the bias
# on the input side only) and are checked against numpy_gru.


def numpy_best(w, u, bias):
    """numpy: the weights transposed once into contiguous (K, 3H) arrays, the
    input projection of all steps one matrix product before the loop (BLAS
    at its best), the loop one matrix-vector product and the gate math a
    step, written in place into the stacked outputs."""
    wt, ut = np.ascontiguousarray(w.T), np.ascontiguousarray(u.T)
    hidden = ut.shape[0]

    def run(xs, h):
        length, batch, _ = xs.shape
        gxs = (xs.reshape(length * batch, -1) @ wt + bias).reshape(length, batch, -1)
        outs = np.empty((length, batch, hidden), np.float32)
        for t in range(length):
            gx, gh = gxs[t], h @ ut
            z = 1 / (1 + np.exp(-(gx[:, :hidden] + gh[:, :hidden])))
            r = 1 / (1 + np.exp(-(gx[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])))
            n = np.tanh(gx[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
            h = outs[t] = (1 - z) * n + z * h
        return outs, h

    return run


def torch_gru(xs, h, w, u, bias):
    """PyTorch, the eager loop: one step of tensor operators per element."""
    outs = []
    wt, ut = w.t(), u.t()
    for x in xs:
        gx = x @ wt + bias
        gh = h @ ut
        gx0, gx1, gx2 = gx.chunk(3, dim=1)
        gh0, gh1, gh2 = gh.chunk(3, dim=1)
        z = torch.sigmoid(gx0 + gh0)
        r = torch.sigmoid(gx1 + gh1)
        n = torch.tanh(gx2 + r * gh2)
        h = (1 - z) * n + z * h
        outs.append(h)
    return torch.stack(outs), h


def torch_module(w, u, bias):
    """PyTorch's ``nn.GRU``: the fused CPU kernel (``at::gru``, the whole
    sequence in one operator call, input projections batched). Its gates
    are ordered (r, z, n) and its n gate is ``tanh(W_n x + b_in + r * (U_n h
    + b_hn))``: this GRU's, with the gates reordered and ``b_hh = 0``."""
    hidden = u.shape[1]
    order = np.r_[hidden : 2 * hidden, 0:hidden, 2 * hidden : 3 * hidden]
    gru = torch.nn.GRU(w.shape[1], hidden)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.from_numpy(w[order]))
        gru.weight_hh_l0.copy_(torch.from_numpy(u[order]))
        gru.bias_ih_l0.copy_(torch.from_numpy(bias[order]))
        gru.bias_hh_l0.zero_()
    gru.eval()

    def run(xs, h):
        with torch.no_grad():
            outs, last = gru(xs, h[None])
        return outs, last[0]

    return run


def torch_compiled(w, u, bias):
    """``torch.compile`` (inductor, C++ for the CPU) of one step, called in a
    Python loop: compiling the whole loop would unroll it (T copies of the
    step). The weights are pre-transposed constants of the step."""
    wt, ut = (
        torch.from_numpy(np.ascontiguousarray(w.T)),
        torch.from_numpy(np.ascontiguousarray(u.T)),
    )
    b = torch.from_numpy(bias)
    hidden = u.shape[1]

    @torch.compile(fullgraph=True, dynamic=False)
    def step(x, h):
        gx = x @ wt + b
        gh = h @ ut
        z = torch.sigmoid(gx[:, :hidden] + gh[:, :hidden])
        r = torch.sigmoid(gx[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
        n = torch.tanh(gx[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
        return (1 - z) * n + z * h

    def run(xs, h):
        with torch.no_grad():
            outs = []
            for x in xs:
                h = step(x, h)
                outs.append(h)
            return torch.stack(outs), h

    return run


def jax_carried():
    """JAX as benchmarks/gru_peers.py first wrote it: ``jit(lax.scan)`` with
    the weights carried through the scan and transposed inside the step."""

    def step(carry, x):
        h, w, u, bias = carry
        gx = x @ w.T + bias
        gh = h @ u.T
        gx0, gx1, gx2 = jnp.split(gx, 3, axis=1)
        gh0, gh1, gh2 = jnp.split(gh, 3, axis=1)
        z = jax.nn.sigmoid(gx0 + gh0)
        r = jax.nn.sigmoid(gx1 + gh1)
        n = jnp.tanh(gx2 + r * gh2)
        h = (1 - z) * n + z * h
        return (h, w, u, bias), h

    @jax.jit
    def run(xs, h, w, u, bias):
        (h, *_), outs = jax.lax.scan(step, (h, w, u, bias), xs)
        return outs, h

    return run


def jax_best(w, u, bias, hoisted: bool):
    """JAX at its best: ``jit(lax.scan)`` with the weights transposed once
    into the (K, 3H) layout XLA's dot takes without a copy and closed over
    (constants of the compiled program, not loop state); ``hoisted``: the
    input projection of all steps one matrix product before the scan (as
    effir's compiled loop does), else one per step inside it."""
    wt, ut = jnp.asarray(np.ascontiguousarray(w.T)), jnp.asarray(np.ascontiguousarray(u.T))
    b = jnp.asarray(bias)
    hidden = u.shape[1]

    def cell(gx, h):
        gh = h @ ut
        z = jax.nn.sigmoid(gx[:, :hidden] + gh[:, :hidden])
        r = jax.nn.sigmoid(gx[:, hidden : 2 * hidden] + gh[:, hidden : 2 * hidden])
        n = jnp.tanh(gx[:, 2 * hidden :] + r * gh[:, 2 * hidden :])
        h = (1 - z) * n + z * h
        return h, h

    if hoisted:

        @jax.jit
        def run(xs, h):
            h, outs = jax.lax.scan(lambda h, gx: cell(gx, h), h, xs @ wt + b)
            return outs, h

    else:

        @jax.jit
        def run(xs, h):
            h, outs = jax.lax.scan(lambda h, x: cell(x @ wt + b, h), h, xs)
            return outs, h

    return run


# ------------------------------------------------------------------ timing
SETTLE_SECONDS = 0.3
"""The pause after an action's calls. A thread pool's workers spin after
their work before they sleep (TVM's 300,000 yields, 0.1-0.2 s on an idle
core; Eigen's and OpenBLAS's similarly): an action timed at once after
another shares the cores with the other's spinning workers (measured: numpy
at hidden 256, batch 1, 6 ms after a pause, 24 ms right after effir's
split step; with 0.02 s here before)."""


def timed(action: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls after three warm-up calls, then a
    pause: thread pools spin a while after their work."""
    seconds = median_after_warmup(action, repeats)
    time.sleep(SETTLE_SECONDS)
    return seconds


def interleaved(actions: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each action, measured in rounds: each round calls
    every action three times (timing each call) in turn, pausing after each
    action's calls, so that a change in the machine's load during the run
    reaches every action alike, and no action is timed while the thread
    pool of the one before it still spins (SETTLE_SECONDS)."""
    for action in actions.values():
        for _ in range(3):
            action()
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(max(1, repeats // 3)):
        for name, action in actions.items():
            for _ in range(3):
                start = time.perf_counter()
                action()
                times[name].append(time.perf_counter() - start)
            time.sleep(SETTLE_SECONDS)
    return {name: statistics.median(t) for name, t in times.items()}


class _no_build_cache:
    """The build cache off within (EFFIR_CACHE_DIR is read at each build)."""

    def __enter__(self) -> None:
        self.saved = os.environ.get("EFFIR_CACHE_DIR")
        os.environ["EFFIR_CACHE_DIR"] = "off"

    def __exit__(self, *_: object) -> None:
        if self.saved is None:
            del os.environ["EFFIR_CACHE_DIR"]
        else:
            os.environ["EFFIR_CACHE_DIR"] = self.saved


def gemm_rate() -> float:
    """FLOP/s of a large float32 matrix product (numpy's BLAS)."""
    a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    seconds = timed(lambda: a @ a, 10)
    return 2 * 1024**3 / seconds


def weights(inputs: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    g = 3 * hidden
    w = (rng.standard_normal((g, inputs)) / np.sqrt(inputs)).astype(np.float32)
    u = (rng.standard_normal((g, hidden)) / np.sqrt(hidden)).astype(np.float32)
    bias = (rng.standard_normal(g) * 0.1).astype(np.float32)
    return w, u, bias


PEERS = {
    "effir": "effir",
    "effir_one_block": "effir, rows in one block (before loop/rows.py)",
    "jax": "JAX best",
    "jax_hoisted": "JAX best, input projection hoisted",
    "jax_carried": "JAX carried (as first written)",
    "torch_gru": "torch nn.GRU",
    "torch_compile": "torch.compile step",
    "torch": "torch eager loop",
    "numpy": "numpy",
}
"""The columns of the GRU table, in order (those not run are left out)."""


def serial_rows_build(compiled: Any, *args: Any) -> Any:
    """``compiled``'s first call (its build) with the whole loop's rows in
    one block, as before loop/rows.py split them across the pool: the
    before of a before/after in one run (``--row-blocks``)."""
    from effir.backends.tvm.loop.cpu import rows

    split = rows.row_blocks
    rows.row_blocks = lambda *_: 1
    try:
        return compiled(*args)
    finally:
        rows.row_blocks = split


def gru_case(
    inputs: int,
    hidden: int,
    length: int,
    batch: int,
    repeats: int,
    compile_torch: bool,
    row_blocks: bool = False,
) -> dict[str, Any]:
    """Every peer on one GRU, checked against the numpy reference, timed
    side by side (``interleaved``); with ``row_blocks``, effir also with
    its loop's rows in one block (``serial_rows_build``)."""
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((length, batch, inputs), dtype=np.float32)
    h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
    w, u, bias = weights(inputs, hidden)
    want_outs, want_h = numpy_gru(xs, h0, w, u, bias)
    compiled = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))))
    actions: dict[str, Callable[[], Any]] = {
        "effir": lambda: compiled(xs, h0, w, u, bias),
        "numpy": functools.partial(numpy_best(w, u, bias), xs, h0),
    }
    if row_blocks:  # a build of its own (the disk cache keys by program, not by this choice)
        with _no_build_cache():
            one_block = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))))
            serial_rows_build(one_block, xs, h0, w, u, bias)
        actions["effir_one_block"] = lambda: one_block(xs, h0, w, u, bias)
    if jax is not None:
        best, hoisted, carried = (
            jax_best(w, u, bias, False),
            jax_best(w, u, bias, True),
            jax_carried(),
        )
        jx, jh = jnp.asarray(xs), jnp.asarray(h0)
        j_args = [jnp.asarray(a) for a in (w, u, bias)]
        actions["jax"] = lambda: jax.block_until_ready(best(jx, jh))
        actions["jax_hoisted"] = lambda: jax.block_until_ready(hoisted(jx, jh))
        actions["jax_carried"] = lambda: jax.block_until_ready(carried(jx, jh, *j_args))
    if torch is not None:
        tx, th = torch.from_numpy(xs), torch.from_numpy(h0)
        t_args = [torch.from_numpy(a) for a in (w, u, bias)]
        actions["torch_gru"] = functools.partial(torch_module(w, u, bias), tx, th)

        def eager() -> Any:
            with torch.no_grad():
                return torch_gru(tx, th, *t_args)

        actions["torch"] = eager
        if compile_torch:
            actions["torch_compile"] = functools.partial(torch_compiled(w, u, bias), tx, th)
    row: dict[str, Any] = {}
    for name, action in actions.items():
        start = time.perf_counter()
        outs, h = action()
        row.setdefault("first_call", {})[name] = time.perf_counter() - start
        np.testing.assert_allclose(np.asarray(outs), want_outs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(h), want_h, rtol=1e-4, atol=1e-4)
    row.update(interleaved(actions, repeats))
    row["flops"] = 2 * length * batch * 3 * hidden * (inputs + hidden)
    return row


# ------------------------------------------------------------ call order
def call_order_child(repeats: int) -> None:
    """In a process of its own (what a process allocated before decides what
    fresh allocations cost: relax/pipeline.py [RULE PIPELINE-ANYALIGN]): one
    compiled GRU (hidden 256, T=100) called at batch 1 first, then at batch
    32, then at batch 1 again; prints the medians as JSON."""
    inputs = hidden = 256
    rng = np.random.default_rng(1)
    w, u, bias = weights(inputs, hidden)
    args = {
        b: (
            rng.standard_normal((100, b, inputs), dtype=np.float32),
            np.zeros((b, hidden), np.float32),
        )
        for b in (1, 32)
    }
    compiled = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))))
    result = {}
    for label, b in [("b1_first", 1), ("b32", 32), ("b1_after_b32", 1)]:
        xs, h0 = args[b]
        call = functools.partial(compiled, xs, h0, w, u, bias)
        result[label] = median_after_warmup(call, repeats)
    print(json.dumps(result))


def call_order(repeats: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--call-order-child", str(repeats)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# -------------------------------------------------------- variable lengths
def variable_length_batch():
    """64 sequences of lengths 1-200 (input 32, hidden 64), padded to the
    longest, with the weights and each sequence's final state computed on
    its own (the reference): benchmarks/varlen.py measures the same batch."""
    inputs, hidden, batch = 32, 64, 64
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 201, batch)
    longest = int(lengths.max())
    xs = rng.standard_normal((longest, batch, inputs), dtype=np.float32)
    h0 = np.zeros((batch, hidden), np.float32)
    w, u, bias = weights(inputs, hidden)
    want = np.stack(
        [
            numpy_gru(xs[: lengths[b], b : b + 1], h0[b : b + 1], w, u, bias)[1][0]
            for b in range(batch)
        ]
    )
    return xs, lengths, h0, (w, u, bias), want


def variable_lengths(repeats: int) -> dict[str, Any]:
    xs, lengths, h0, (w, u, bias), want = variable_length_batch()
    (longest, batch, inputs), hidden = xs.shape, h0.shape[1]
    done = (np.arange(longest)[:, None] >= lengths[None, :])[:, :, None].astype(np.float32)
    masked = effir.compile(effir.check(effir.parse(masked_gru_text(inputs, hidden))))
    padded = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))))
    rows = lengths - 1, np.arange(batch)

    def run_padded():
        outs, _ = padded(xs, h0, w, u, bias)
        return outs[rows]

    # Bucketed: the sequences sorted by length, four buckets of 16, each
    # run by the masked program over its own longest length. The length is
    # a symbolic dimension of the compiled loop: the four buckets share one
    # build (batch 16), whatever their lengths.
    order = np.argsort(lengths, kind="stable")
    buckets = []
    for part in np.split(order, 4):
        span = int(lengths[part].max())
        bucket_done = np.ascontiguousarray(done[:span, part])
        buckets.append((part, np.ascontiguousarray(xs[:span, part]), bucket_done))

    def run_bucketed():
        out = np.empty_like(h0)
        for part, bucket_xs, bucket_done in buckets:
            out[part] = masked(bucket_xs, bucket_done, h0[part], w, u, bias)
        return out

    np.testing.assert_allclose(masked(xs, done, h0, w, u, bias), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_padded(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_bucketed(), want, rtol=1e-4, atol=1e-5)
    return {
        "masked": timed(lambda: masked(xs, done, h0, w, u, bias), repeats),
        "padded": timed(run_padded, repeats),
        "bucketed": timed(run_bucketed, repeats),
        "bucket_steps": sum(int(lengths[p].max()) * len(p) for p, _, _ in buckets),
        "builds": len(masked.report.builds),
        "steps": int(lengths.sum()),
        "longest": longest,
    }


# ---------------------------------------------------------- compile time
def compile_time() -> dict[str, float]:
    module = effir.parse((Path(__file__).parents[1] / "examples" / "gru_lm.effir").read_text())
    start = time.perf_counter()
    compiled = effir.compile(module)
    middle = time.perf_counter()
    compiled.specialisation("main", {"t": 100, "b": 32})
    end = time.perf_counter()
    return {"pipeline": middle - start, "build": end - middle}


# ---------------------------------------------------------------- memory
def export_for_memory(path: Path, lengths: list[int]) -> None:
    """The final-state GRU (hidden 256, batch 1) compiled and exported for
    each sequence length."""
    inputs, hidden = 256, 256
    compiled = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden, final_only=True))))
    for length in lengths:
        compiled.specialisation("main", {"t": length, "b": 1})
    compiled.export(path)


def memory_child(path: str, length: int) -> None:
    """In a process of its own, as a deployed program runs: load the
    artifact (no compiler), then run inference over ``length`` steps twice;
    prints the peak resident memory before and after the runs as JSON."""
    loaded = effir.load(path)
    inputs, hidden, batch = 256, 256, 1
    w, u, bias = weights(inputs, hidden)
    h0 = np.zeros((batch, hidden), np.float32)
    xs = aligned_empty((length, batch, inputs), np.float32)  # passed without a copy
    xs[...] = np.random.default_rng(0).standard_normal(xs.shape, dtype=np.float32)
    # Reset the high-water mark (Linux: clear_refs 5), so that the peak is
    # the runs' own, not the imports'.
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kb("VmRSS")
    loaded(xs, h0, w, u, bias)
    loaded(xs, h0, w, u, bias)
    peak = _status_kb("VmHWM")
    print(json.dumps({"before_kb": before, "peak_kb": peak, "input_kb": xs.nbytes // 1024}))


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory(path: Path, length: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(path), str(length)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no memory runs")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--call-order-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-torch-compile", action="store_true", help="leave torch.compile out (slow to build)"
    )
    parser.add_argument("--gru-only", action="store_true", help="the GRU table and call order only")
    parser.add_argument(
        "--case",
        help="only the GRU case INPUT,HIDDEN,T,BATCH (e.g. 256,256,100,32), then stop",
    )
    parser.add_argument(
        "--row-blocks",
        action="store_true",
        help="also time effir with its loop's rows in one block (before/after loop/rows.py)",
    )
    options = parser.parse_args()
    if options.memory_child is not None:
        memory_child(options.memory_child[0], int(options.memory_child[1]))
        return
    if options.call_order_child is not None:
        call_order_child(options.call_order_child)
        return
    import_peers()
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    repeats = 6 if options.quick else options.repeats
    versions = f"numpy {np.__version__}"
    versions += f", torch {torch.__version__}" if torch else ", torch not installed"
    versions += f", jax {jax.__version__}" if jax else ", jax not installed"
    rate = gemm_rate()
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {versions}")
    print(
        f"float32 GEMM rate (the FLOP bound): {rate / 1e9:.1f} GFLOP/s; ms, median of {repeats}"
        " calls, all columns of a row measured side by side\n"
    )

    cases = [(256, 256, 100, 1), (256, 256, 100, 32), (32, 32, 1000, 1)]
    if options.case:
        cases = [tuple(int(n) for n in options.case.split(","))]
    rows = []
    for inputs, hidden, length, batch in cases:
        row = gru_case(
            inputs,
            hidden,
            length,
            batch,
            repeats,
            not options.no_torch_compile,
            options.row_blocks,
        )
        rows.append(((inputs, hidden, length, batch), row))
    peers = [p for p in PEERS if any(p in row for _, row in rows)]
    print(
        "| GRU (input/hidden, T, batch) | "
        + " | ".join(PEERS[p] for p in peers)
        + " | effir / best JAX | effir / best peer | FLOP-bound ms |"
    )
    print("|---|" + "---|" * len(peers) + "---|---|---|")
    for (inputs, hidden, length, batch), row in rows:
        others = [p for p in peers if not p.startswith("effir") and p in row]
        jaxes = [p for p in others if p.startswith("jax")]
        vs_jax = f"{row['effir'] / min(row[p] for p in jaxes):.2f}" if jaxes else "-"
        vs_best = f"{row['effir'] / min(row[p] for p in others):.2f}" if others else "-"
        cells = [f"{1e3 * row[p]:.2f}" if p in row else "-" for p in peers]
        print(
            f"| {inputs}/{hidden}, T={length}, b={batch} | "
            + " | ".join(cells)
            + f" | {vs_jax} | {vs_best} | {1e3 * row['flops'] / rate:.3f} |",
            flush=True,
        )
    for _, row in rows:
        if "effir_one_block" in row:
            print(
                f"\neffir with row blocks / rows in one block: "
                f"{row['effir'] / row['effir_one_block']:.2f} (load {os.getloadavg()[0]:.1f})"
            )
    if options.case:
        return
    (_, _, length, _), row = rows[-1]
    print(
        f"\nper step, hidden 32, T={length}, batch 1 (us): "
        + ", ".join(f"{p} {1e6 * row[p] / length:.2f}" for p in peers if p in row)
    )
    if "torch_compile" in rows[0][1]["first_call"]:
        print(
            "torch.compile's first call (its build), s: "
            + ", ".join(f"{r['first_call']['torch_compile']:.1f}" for _, r in rows)
        )
    order = call_order(repeats)
    print(
        "\ncall order (hidden 256, T=100; one compiled module, a fresh process): batch 1 "
        f"first {1e3 * order['b1_first']:.2f} ms, then batch 32 {1e3 * order['b32']:.2f} ms, "
        f"then batch 1 {1e3 * order['b1_after_b32']:.2f} ms "
        f"(first / after: {order['b1_first'] / order['b1_after_b32']:.2f})"
    )
    if options.gru_only:
        return

    v = variable_lengths(repeats)
    print(
        f"\n64 sequences of lengths 1-200 ({v['steps']} steps in all, longest {v['longest']}): "
        f"padded to the longest and picked {1e3 * v['padded']:.2f} ms; lengths inside the "
        f"compiled loop {1e3 * v['masked']:.2f} ms; the same in 4 buckets by length "
        f"({v['bucket_steps']} row-steps instead of {64 * v['longest']}) "
        f"{1e3 * v['bucketed']:.2f} ms, {v['builds']} builds in all; every one equals the "
        "per-sequence reference"
    )
    c = compile_time()
    print(
        f"\ncompile time of examples/gru_lm.effir (t=100, b=32): pipeline {c['pipeline']:.2f} s, "
        f"TVM build {c['build']:.2f} s"
    )
    if not options.quick:
        print(
            "\npeak memory of inference from an exported artifact, hidden 256, batch 1, "
            "final state only (MiB; a process of its own per length):"
        )
        with tempfile.TemporaryDirectory() as tmp:
            lengths = [100, 10_000]
            export_for_memory(Path(tmp) / "gru", lengths)
            for length in lengths:
                m = memory(Path(tmp) / "gru", length)
                grown = (m["peak_kb"] - m["before_kb"]) / 1024
                print(
                    f"  T={length}: resident before the runs {m['before_kb'] / 1024:.1f}, peak "
                    f"during them {m['peak_kb'] / 1024:.1f} (+{grown:.1f}); the input is "
                    f"{m['input_kb'] / 1024:.1f}"
                )


if __name__ == "__main__":
    main()
