"""Peak memory and time of a GRU's backward at T=1000 with checkpointing
``none``, ``loop`` and ``sqrt`` (``effir.value_and_grad``).

The recurrence is benchmarks/gru_loop.py's GRU (input 32, hidden 128, batch
32, float32, static shapes), and the loss reads the final state only
(``sum(h_T * h_T)``), so the loop stacks no per-step outputs: what the
backward stores per step is what the checkpointing mode chooses (``none``:
every residual the step's backward reads, about 9 (B, H) tensors; ``loop``:
the (B, H) carry; ``sqrt``: every ceil(sqrt(T))-th carry), not the outputs
and their cotangents, which every mode holds alike. The gradients are taken
with respect to h0, w, u and bias (not xs).

How memory is measured: each configuration runs in processes of its own
(``--one``), which build the gradient program (``effir.compile``, or
nothing for the interpreter) and its arguments first. Compiled: the peak
resident set (Linux ``VmHWM``, reset to the current RSS by writing 5 to
``/proc/self/clear_refs``) during one call, minus the RSS before it, in a
process whose Relax VM uses TVM's ``naive`` allocator (every tensor
freed when dead; the default pooled allocator keeps freed blocks for reuse
by size) and whose glibc returns every block of 64 KiB or more to the
system when it is freed (``MALLOC_MMAP_THRESHOLD_=65536``; glibc's
default threshold grows to 32 MiB as blocks are freed, and freed heap
memory stays resident): so the figure is the peak of the live tensors,
what the program needs, whatever the allocators keep. The time is
measured in another process with the defaults (pooled allocator), the
median of ``--repeats`` calls after one warm-up, wall clock, and the
process's CPU time per call (all its threads: steadier than the wall clock
on a loaded machine); the machine is shared, so compare ratios within one
run. Interpreted
(``--interpreted``): the peak of Python's ``tracemalloc`` (numpy reports
its arrays to it) during the call, and its time.

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/checkpoint_memory.py``
(about two minutes; ``--interpreted`` adds the interpreter's rows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from timing import median_seconds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.gru_programs import NEW_STATE, gates

MODES = ("none", "loop", "sqrt")
WRT = ["h0", "w", "u", "bias"]


def gru_text(length: int, batch: int, inputs: int, hidden: int, symbolic: bool = False) -> str:
    """The GRU of benchmarks/gru_loop.py with static shapes (the length
    symbolic, ``t``, with ``symbolic``) and a loss on its final state."""
    g = 3 * hidden
    steps = "t" if symbolic else length
    return f"""#[version = "0.0.5"]
def @main(%xs: Tensor[({steps}, {batch}, {inputs}), float32],
          %h0: Tensor[({batch}, {hidden}), float32],
          %w: Tensor[({g}, {inputs}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[({batch}, {inputs}), float32],
                  %h: Tensor[({batch}, {hidden}), float32]) {{
{gates(4)}
    let %h_new = {NEW_STATE};
    ((), %h_new)
  }};
  let %scan = cf.foreach(%step, %xs, %h0);
  sum(%scan.1 * %scan.1)
}}
"""


def arguments(
    length: int, batch: int, inputs: int, hidden: int, symbolic: bool = False
) -> list[np.ndarray]:
    rs = np.random.default_rng(0)
    g = 3 * hidden
    shapes = [(length, batch, inputs), (batch, hidden), (g, inputs), (g, hidden), (g,)]
    scales = [1.0, 0.5, 1 / np.sqrt(inputs), 1 / np.sqrt(hidden), 0.1]
    return [(rs.normal(size=s) * c).astype(np.float32) for s, c in zip(shapes, scales, strict=True)]


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def measure(mode: str, backend: str, sizes: dict, repeats: int, what: str) -> dict:
    """One configuration, in this process: the peak bytes of one backward
    call (``what="memory"``) or the median seconds of a call."""
    import effir

    if backend == "compiled" and what == "memory":
        from tvm import relax

        init = relax.VirtualMachine.__init__

        def naive(self, mod, device, memory_cfg=None, **kwargs):
            init(self, mod, device, memory_cfg="naive", **kwargs)

        relax.VirtualMachine.__init__ = naive

    m = effir.parse(gru_text(**sizes))
    g = effir.value_and_grad(m, wrt=WRT, checkpoint=mode)
    args = arguments(**sizes)
    if backend == "compiled":
        program = effir.compile(g, entry="main_grad")

        def call():
            return program(*args, entry="main_grad")

        result = call()
        if what == "memory":
            before = _status("VmRSS")
            _reset_peak()
            call()
            out = {"peak": _status("VmHWM") - before}
        else:
            cpu = time.process_time()
            out = {"seconds": median_seconds(call, repeats)}
            out["cpu"] = (time.process_time() - cpu) / repeats
    else:

        def call():
            return effir.interpret(g, *args, entry="main_grad")

        tracemalloc.start()
        result = call()
        out = {"peak": tracemalloc.get_traced_memory()[1]}
        tracemalloc.stop()
        out["seconds"] = median_seconds(call, repeats)
    value, grads = result
    out["digest"] = [float(np.asarray(value))] + [float(np.abs(np.asarray(x)).sum()) for x in grads]
    return out


def run_one(mode: str, backend: str, sizes: dict, repeats: int) -> dict:
    """``measure`` in fresh processes (fresh allocators and peaks): the
    memory, then (compiled) the time with the default allocators."""
    result: dict = {}
    for what in ["memory", "time"] if backend == "compiled" else ["both"]:
        cmd = [sys.executable, __file__, "--one", mode, backend, what, "--repeats", str(repeats)]
        for k, v in sizes.items():
            if isinstance(v, bool):
                cmd += [f"--{k}"] if v else []
            else:
                cmd += [f"--{k}", str(v)]
        env = dict(os.environ)
        if what == "memory":
            env["MALLOC_MMAP_THRESHOLD_"] = "65536"
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{mode} {backend} failed:\n{out.stderr[-3000:]}")
        result.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--inputs", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--interpreted", action="store_true", help="also the interpreter's rows")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument(
        "--symbolic", action="store_true", help="the length symbolic in the program (``t``)"
    )
    p.add_argument("--one", nargs=3, metavar=("MODE", "BACKEND", "WHAT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = {k: getattr(args, k) for k in ("length", "batch", "inputs", "hidden", "symbolic")}
    if args.one:
        mode, backend, what = args.one
        print(json.dumps(measure(mode, backend, sizes, args.repeats, what)))
        return 0
    modes = args.modes.split(",")
    carry = args.length * args.batch * args.hidden * 4
    print(
        f"GRU backward (value_and_grad wrt h0, w, u, bias; loss on the final state): "
        f"T={args.length}, batch {args.batch}, input {args.inputs}, hidden {args.hidden}, "
        f"float32{', length symbolic' if args.symbolic else ''}; T carries = {carry / 2**20:.1f} MiB; load {os.getloadavg()[0]:.2f}"
    )
    import effir

    print(f"effir from {Path(effir.__file__).parent}")
    print()
    print(
        "| backend | checkpoint | peak MiB | vs none | ms / call | vs none | CPU ms / call | vs none |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    backends = ["compiled"] + (["interpreted"] if args.interpreted else [])
    for backend in backends:
        results = {}
        for mode in modes:
            results[mode] = r = run_one(mode, backend, sizes, args.repeats)
            base = results.get("none", r)
            print(
                f"| {backend} | {mode} | {r['peak'] / 2**20:.1f} "
                f"| {base['peak'] / max(r['peak'], 1):.2f}x less "
                f"| {r['seconds'] * 1e3:.1f} | {r['seconds'] / base['seconds']:.2f}x "
                f"| {r.get('cpu', r['seconds']) * 1e3:.1f} "
                f"| {r.get('cpu', r['seconds']) / base.get('cpu', base['seconds']):.2f}x |",
                flush=True,
            )
        digests = {m: r["digest"] for m, r in results.items()}
        if len({json.dumps(d) for d in digests.values()}) != 1:
            print(f"WARNING: {backend} results differ between modes: {digests}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
