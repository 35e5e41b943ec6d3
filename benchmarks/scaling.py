"""Data-parallel training of the GRU language model on many GPUs, on paper:
the gradient all-reduce of one step against the step's own time.

Data parallelism replicates the model on p GPUs; each computes the
gradient of its own batch (the per-GPU batch stays 32: weak scaling), the
gradients are summed across GPUs (an all-reduce), and every replica applies
the same update. The all-reduce is the cost that scaling adds. This script
models it (docs/scaling.md) with the alpha-beta model of the ring
all-reduce, whose 2(p-1) steps each send n/p bytes:

    t_ring(n, p) = 2 (p - 1) alpha + 2 (p - 1) / p * n / beta

and of the hierarchical all-reduce NCCL uses across nodes of g GPUs
(reduce-scatter over NVLink, a ring across the N nodes on each GPU's
n/g bytes through its own network card, all-gather over NVLink):

    t_hier = 2 (g - 1) alpha_nv + 2 (g - 1) / g * n / beta_nv
           + 2 (N - 1) alpha_ib + 2 (N - 1) / N * (n / g) / beta_ib

n is the gradient's size in bytes: the model's parameters, counted from
examples/gru_lm_training.py's shapes (vocabulary: Genesis' characters, as
examples/train_gru_lm.py trains it). The interconnect figures are the
vendors' per-GPU link bandwidths and latencies of the order NCCL shows on
small messages; they are stated below and can be changed (``--beta-nvlink``
...). No GPU was measured for this table: a step time is an input
(``--step-ms``, e.g. ``benchmarks/cuda_device.py --part train``'s), and
the rows without one use the step's floating-point work at the GPU's peak
rate, a lower bound on the step time (so an upper bound on the share the
all-reduce takes).

    python benchmarks/scaling.py [--step-ms 3.1] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

GPUS_PER_NODE = 8  # an HGX H100 / H200 board


@dataclass(frozen=True)
class Link:
    """One GPU's link: bandwidth per direction (bytes/s), latency per step (s)."""

    name: str
    beta: float
    alpha: float


def ring(n: float, p: int, link: Link) -> float:
    """Seconds of a ring all-reduce of ``n`` bytes over ``p`` GPUs."""
    if p == 1:
        return 0.0
    return 2 * (p - 1) * link.alpha + 2 * (p - 1) / p * n / link.beta


def hierarchical(n: float, nodes: int, g: int, nvlink: Link, network: Link) -> float:
    """Seconds of NCCL's two-level all-reduce: inside each node over
    NVLink, across ``nodes`` nodes over each GPU's own network card."""
    inside = ring(n, g, nvlink)  # reduce-scatter + all-gather inside the node
    across = ring(n / g, nodes, network) if nodes > 1 else 0.0
    return inside + across


def model_shapes(hidden: int, embed: int) -> dict[str, tuple[int, ...]]:
    """The GRU language model's parameters, from the model's own code."""
    from gru_lm_training import Config
    from train_gru_lm import Corpus

    vocab = len(Corpus.load().chars)
    return Config(vocab, embed=embed, hidden=hidden).shapes()


def step_flops(shapes: dict[str, tuple[int, ...]], seq_len: int, batch: int) -> float:
    """Floating-point operations of one training step's matrix products:
    the input projection, the recurrence and the output projection of the
    forward, and twice each in the backward (the input's and the weight's
    gradient). Elementwise work is left out: a lower bound."""
    tokens = seq_len * batch
    three_h, e = shapes["w"]
    _, h = shapes["u"]
    vocab = shapes["proj"][0]
    forward = 2 * tokens * (three_h * e + three_h * h + vocab * h)
    return 3.0 * forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--embed", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32, help="per GPU")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="of the gradients sent")  # fmt: skip
    parser.add_argument("--step-ms", type=float, action="append", default=[],
                        help="a measured step time (ms) to compare with; repeatable")  # fmt: skip
    parser.add_argument("--peak-tflops", type=float, default=67.0,
                        help="the GPU's float32 peak without tensor cores (H100/H200 SXM: 67)")  # fmt: skip
    parser.add_argument("--beta-nvlink", type=float, default=450.0, help="GB/s per direction")
    parser.add_argument("--alpha-nvlink", type=float, default=2.0, help="us per ring step")
    parser.add_argument("--beta-ib", type=float, default=50.0, help="GB/s per direction")
    parser.add_argument("--alpha-ib", type=float, default=5.0, help="us per ring step")
    args = parser.parse_args()

    nvlink = Link("NVLink 4", args.beta_nvlink * 1e9, args.alpha_nvlink * 1e-6)
    network = Link("InfiniBand NDR", args.beta_ib * 1e9, args.alpha_ib * 1e-6)
    shapes = model_shapes(args.hidden, args.embed)
    params = {name: int(np.prod(shape)) for name, shape in shapes.items()}
    count = sum(params.values())
    n = count * (4 if args.dtype == "float32" else 2)
    flops = step_flops(shapes, args.seq_len, args.batch)
    bound_ms = flops / (args.peak_tflops * 1e12) * 1e3

    print(
        f"GRU language model, hidden {args.hidden}, embedding {args.embed}, "
        f"T={args.seq_len}, batch {args.batch} per GPU"
    )
    print("parameters: " + ", ".join(f"{k} {v:,}" for k, v in params.items()))
    print(f"{count:,} parameters: an all-reduce of {n / 1e6:.2f} MB of {args.dtype} gradients")
    print(
        f"a step's matrix products: {flops / 1e9:.2f} GFLOP = {bound_ms:.3f} ms at "
        f"{args.peak_tflops:g} TFLOP/s (a lower bound on the step)"
    )
    print(
        f"links: {nvlink.name} {args.beta_nvlink:g} GB/s, {args.alpha_nvlink:g} us; "
        f"{network.name} {args.beta_ib:g} GB/s, {args.alpha_ib:g} us "
        f"(per GPU and direction; {GPUS_PER_NODE} GPUs a node)"
    )
    steps = [(f"{s:g} ms (given)", s) for s in args.step_ms]
    steps.append((f"{bound_ms:.3f} ms (bound)", bound_ms))
    header = ["GPUs", "all-reduce", "us", "algbw", "step for <= 10%"]
    header += [f"share of a {name} step" for name, _ in steps]
    rows = []
    for p in (2, 8, 16, 64, 256, 1024):
        nodes = max(1, p // GPUS_PER_NODE)
        per_node = min(p, GPUS_PER_NODE)
        plans = [("ring, NVLink", ring(n, p, nvlink))] if p <= GPUS_PER_NODE else []
        if p > GPUS_PER_NODE:
            plans.append(("ring, InfiniBand", ring(n, p, network)))
            plans.append(("hierarchical", hierarchical(n, nodes, per_node, nvlink, network)))
        for name, seconds in plans:
            row = [str(p), name, f"{seconds * 1e6:,.1f}", f"{n / seconds / 1e9:,.1f} GB/s"]
            row.append(f"{9 * seconds * 1e3:.2f} ms")
            for _, ms in steps:
                share = seconds * 1e3 / (ms + seconds * 1e3)
                row.append(f"{100 * share:.1f}%")
            rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    print()
    print(
        "share: the all-reduce's part of a step that does not overlap it "
        "(step + all-reduce); algbw: the gradient's size over the all-reduce's time (NCCL's "
        "name); step for <= 10%: the shortest step the all-reduce costs at most a tenth of."
    )


if __name__ == "__main__":
    main()
