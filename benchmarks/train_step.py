"""One training step of the GRU language model, effir against its peers,
side by side in one run.

The model of examples/gru_lm_training.py: embedding, dropout, a GRU over
the sequence, batch norm in training mode, dropout, projection, softmax
cross-entropy; then an Adam update. Hidden and embedding 256, T=100, batch
32, vocabulary 60 (Genesis' characters), dropout 0.1, float32. A step is
forward, backward and update:

- **effir**: ``@train_step`` compiled by ``effir.compile`` (gradients from
  ``effir.value_and_grad``; ``--grad manual`` times the hand-written
  backward instead): one call, the weights, Adam's state, key and running
  statistics in and out.
- **JAX** ``jit`` of ``value_and_grad`` and the Adam update, written as XLA
  likes it: weights stored transposed (``x @ w``, no transposes in the
  loop), the input projections of all steps in one matrix product before
  ``lax.scan``, the same keys (JAX's threefry, as effir's) so the same
  masks.
- **PyTorch eager autograd** with ``torch.optim.Adam``: ``nn.GRU`` (its
  fused CPU kernel; PyTorch's gate layout, an extra hidden bias) and a
  hand-written loop of the same cell.

Times are medians of ``--repeats`` steps after warm-up (wall clock, one
process). The first step's loss of effir and JAX is printed: the same
weights, batch and keys give the same loss. Peers not installed are left
out. Run (JAX and PyTorch in throwaway directories, never the project's
dependencies)::

    PYTHONPATH=$PWD:/tmp/jaxsite:/tmp/torchsite .venv/bin/python benchmarks/train_step.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from jax_gru_lm import B1, B2, EPS, LR, jax_train_step
from timing import median_after_warmup

import effir

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from gru_lm_training import Config, build, init_params

from effir.optim import Adam


def batch(cfg: Config, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.default_rng(seed)
    shape = (cfg.seq_len, cfg.batch)
    return (
        rs.integers(0, cfg.vocab, shape).astype(np.int32),
        rs.integers(0, cfg.vocab, shape).astype(np.int32),
    )


def timed(step: Any, repeats: int, warmup: int = 2) -> tuple[float, float]:
    """(median wall seconds, this process's CPU seconds per step): on a
    shared machine the CPU time shows the work when the wall time shows the
    queue."""
    for _ in range(warmup):
        step()
    cpu = time.process_time()
    wall = median_after_warmup(step, repeats, warmup=0)
    return wall, (time.process_time() - cpu) / repeats


# ------------------------------------------------------------------ effir
def effir_step(cfg: Config, grad: str, target: str = "llvm") -> tuple[Any, float, float]:
    """(step function, first loss, build seconds); ``target``: where it
    runs (benchmarks/cuda_device.py times it on a GPU)."""
    start = time.perf_counter()
    optimizer = Adam(lr=LR, b1=B1, b2=B2, eps=EPS)
    module = build(cfg, optimizer, grad=grad)
    program = effir.compile(module, target=target)
    state = effir.State(module)
    params = init_params(cfg)
    opt = optimizer.init(params)
    tokens, targets = batch(cfg)
    loss, *_ = program(tokens, targets, *params, *opt, entry="train_step", state=state)
    built = time.perf_counter() - start
    carry = [params, opt]

    def step() -> None:
        _, p, o = program(tokens, targets, *carry[0], *carry[1], entry="train_step", state=state)
        carry[0], carry[1] = p, o

    return step, float(loss), built


# ------------------------------------------------------------------ JAX
def jax_step(cfg: Config) -> tuple[Any, float, float] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    embed, w, u, bias, gamma, beta, proj = init_params(cfg)
    # XLA's layout: (in, out) matrices, so every product is x @ w
    params = tuple(jnp.asarray(a) for a in (embed, w.T, u.T, bias, gamma, beta, proj.T))
    train_step = jax_train_step(cfg.hidden, cfg.batch, cfg.seq_len, cfg.rate)
    zeros = tuple(jnp.zeros_like(p) for p in params)
    opt = (jnp.float32(0), zeros, zeros)
    tokens, targets = (jnp.asarray(a) for a in batch(cfg))
    carry = [params, opt, jax.random.PRNGKey(0), jnp.zeros(cfg.hidden), jnp.ones(cfg.hidden)]
    start = time.perf_counter()
    loss = train_step(carry[0], carry[1], tokens, targets, *carry[2:])[0]
    loss.block_until_ready()
    built = time.perf_counter() - start

    def step() -> None:
        loss, p, o, k, (m, v) = train_step(carry[0], carry[1], tokens, targets, *carry[2:])
        loss.block_until_ready()
        carry[:] = [p, o, k, m, v]

    return step, float(loss), built


# ------------------------------------------------------------------ PyTorch
def torch_steps(cfg: Config, threads: int) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    h, e, n = cfg.hidden, cfg.embed, cfg.seq_len * cfg.batch
    tokens, targets = (torch.from_numpy(a.astype(np.int64)) for a in batch(cfg))

    def head(hs, bn, drop, proj):
        normed = bn(hs.reshape(n, h))
        logits = proj(drop(normed))
        return torch.nn.functional.cross_entropy(logits, targets.reshape(n))

    def make(kind: str):
        embed = torch.nn.Embedding(cfg.vocab, e)
        drop = torch.nn.Dropout(cfg.rate)
        bn = torch.nn.BatchNorm1d(h)
        proj = torch.nn.Linear(h, cfg.vocab, bias=False)
        if kind == "nn.GRU":
            gru = torch.nn.GRU(e, h)
            modules = [embed, gru, bn, proj]

            def forward():
                hs, _ = gru(drop(embed(tokens)))
                return head(hs, bn, drop, proj)
        else:
            w = torch.nn.Linear(e, 3 * h)
            u = torch.nn.Linear(h, 3 * h, bias=False)
            modules = [embed, w, u, bn, proj]

            def forward():
                gx = w(drop(embed(tokens)))  # every step's input projection at once
                hp = torch.zeros(cfg.batch, h)
                outs = []
                for t in range(cfg.seq_len):
                    gh = u(hp)
                    z = torch.sigmoid(gx[t, :, :h] + gh[:, :h])
                    r = torch.sigmoid(gx[t, :, h : 2 * h] + gh[:, h : 2 * h])
                    c = torch.tanh(gx[t, :, 2 * h :] + r * gh[:, 2 * h :])
                    hp = (1 - z) * c + z * hp
                    outs.append(hp)
                return head(torch.stack(outs), bn, drop, proj)

        params = [p for m in modules for p in m.parameters()]
        opt = torch.optim.Adam(params, lr=LR, betas=(B1, B2), eps=EPS)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = forward()
            loss.backward()
            opt.step()

        return step

    return {
        f"PyTorch {torch.__version__} eager, nn.GRU ({threads} thread(s))": make("nn.GRU"),
        f"PyTorch {torch.__version__} eager, hand loop ({threads} thread(s))": make("loop"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--grad", default="effir", choices=["effir", "manual", "both"])
    p.add_argument("--peers-only", action="store_true", help="JAX and PyTorch only")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="PyTorch's intra-op threads (1: on a shared, loaded machine its OpenMP "
        "workers spin-wait for each other; a tiny matmul+backward took 140 ms at 2 "
        "threads and 0.12 ms at 1)",
    )
    args = p.parse_args(argv)
    cfg = Config(
        vocab=60,
        embed=args.hidden,
        hidden=args.hidden,
        seq_len=args.seq_len,
        batch=args.batch,
        rate=0.1,
    )
    tokens = cfg.seq_len * cfg.batch
    print(
        f"GRU LM training step: hidden {cfg.hidden}, embedding {cfg.embed}, T={cfg.seq_len}, "
        f"batch {cfg.batch}, vocabulary {cfg.vocab}, dropout {cfg.rate}, Adam; "
        f"median of {args.repeats} steps"
    )
    print()
    print("| implementation | ms / step | CPU ms / step | tokens / s | first loss | first call s |")
    print("|---|---|---|---|---|---|", flush=True)

    def row(
        label: str, times: tuple[float, float], loss: float | None, built: float | None
    ) -> None:
        """One line of the table, printed as soon as it is measured."""
        seconds, cpu = times
        loss_text = "" if loss is None else f"{loss:.5f}"
        built_text = "" if built is None else f"{built:.1f}"
        print(
            f"| {label} | {seconds * 1e3:.1f} | {cpu * 1e3:.1f} | {tokens / seconds:,.0f} "
            f"| {loss_text} | {built_text} |",
            flush=True,
        )

    grads = ["effir", "manual"] if args.grad == "both" else [args.grad]
    for grad in [] if args.peers_only else grads:
        step, loss, built = effir_step(cfg, grad)
        label = "effir compiled, " + (
            "value_and_grad" if grad == "effir" else "hand-written backward"
        )
        row(label, timed(step, args.repeats), loss, built)
    jax_result = jax_step(cfg)
    if jax_result is not None:
        import jax

        step, loss, built = jax_result
        label = f"JAX {jax.__version__} jit(value_and_grad)"
        row(label, timed(step, args.repeats), loss, built)
    for label, step in torch_steps(cfg, args.torch_threads).items():
        start = time.perf_counter()
        step()
        built = time.perf_counter() - start
        row(label, timed(step, args.repeats), None, built)
    return 0


if __name__ == "__main__":
    sys.exit(main())
