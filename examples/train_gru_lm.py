"""Train a character-level GRU language model with effir, on the Book of
Genesis (examples/data/genesis.txt, public domain).

One training step (forward, backward, Adam update, the next PRNG key and the
batch-norm running statistics) is one call of one compiled effir program
(``@train_step`` of examples/gru_lm_training.py, made by ``effir.train``
from the model's loss and run by ``effir.train.TrainStep``). The run prints
a progress bar (steps, loss, tokens/s), the loss falling, the perplexity on
held-out text, saves an effir checkpoint (weights, optimiser state, PRNG
key, running statistics: one ``.npz``) that ``--resume`` continues bit for
bit, and
samples text with the compiled inference program (``@next_char``)::

    python examples/train_gru_lm.py                       # about a minute on 2 cores
    python examples/train_gru_lm.py --steps 200 --hidden 256 --checkpoint run.npz
    python examples/train_gru_lm.py --resume run.npz --steps 200   # 200 more

Batches depend only on the seed and the step number, so N steps then a
resume for N more give exactly the weights of 2N steps straight.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from gru_lm_training import (
    GRADS,
    PARAM_NAMES,
    Config,
    build_step,
    init_params,
    initial_cells,
)

import effir
from effir.optim import Adam

DATA = Path(__file__).parent / "data" / "genesis.txt"
HELD_OUT = 0.1  # the last tenth of the text is never trained on


# ------------------------------------------------------------------ data
@dataclass(frozen=True)
class Corpus:
    """A text as int32 character codes, split into training and held-out."""

    chars: str
    train: np.ndarray
    held_out: np.ndarray

    @classmethod
    def load(cls, path: Path = DATA) -> Corpus:
        text = path.read_text(encoding="ascii")
        chars = "".join(sorted(set(text)))
        codes = np.frombuffer(text.encode("ascii"), np.uint8)
        table = np.zeros(256, np.int32)
        table[np.frombuffer(chars.encode("ascii"), np.uint8)] = np.arange(len(chars))
        data = table[codes]
        cut = int(len(data) * (1 - HELD_OUT))
        return cls(chars, data[:cut], data[cut:])

    def decode(self, codes: np.ndarray) -> str:
        return "".join(self.chars[int(c)] for c in codes)


def batch(data: np.ndarray, cfg: Config, seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, targets)`` of shape ``(seq_len, batch)`` for training step
    ``step``: random windows chosen by ``(seed, step)`` alone, so a resumed
    run sees the batches the straight run would."""
    rs = np.random.default_rng([seed, step])
    starts = rs.integers(0, len(data) - cfg.seq_len - 1, cfg.batch)
    idx = starts[None, :] + np.arange(cfg.seq_len)[:, None]
    return data[idx].astype(np.int32), data[idx + 1].astype(np.int32)


# ------------------------------------------------------------------ training
@functools.cache
def build_once(
    cfg: Config, optimizer: Adam, grad: str
) -> tuple[effir.IRModule, effir.train.StepSignature]:
    """``build_step``, once per configuration (a module is immutable)."""
    return build_step(cfg, optimizer, grad)


@dataclass
class Trainer:
    """The model's training step (``effir.train.TrainStep``: one compiled
    call per step) and the run it moves on (``effir.train.TrainState``:
    weights, Adam's state, the cells' PRNG key and running statistics, the
    step count)."""

    cfg: Config
    lr: float = 2e-3
    seed: int = 0
    compiled: bool = True  # False: effir's interpreter (tests of tiny models)
    grad: str = "effir"  # or "manual": the hand-written backward
    training: effir.train.TrainStep = field(init=False, repr=False)
    run: effir.train.TrainState = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.optimizer = Adam(lr=self.lr)
        module, signature = build_once(self.cfg, self.optimizer, self.grad)
        self.training = effir.train.TrainStep(
            module, signature, self.optimizer, target="llvm" if self.compiled else None
        )
        state = effir.State(module)
        state["rng"], state["bn"] = initial_cells(self.cfg, self.seed)
        params = dict(zip(PARAM_NAMES, init_params(self.cfg, self.seed), strict=True))
        self.run = self.training.init(params, state=state)

    # what a run holds, as the notebook and tests read it
    @property
    def module(self) -> effir.IRModule:
        return self.training.module

    @property
    def params(self) -> tuple[np.ndarray, ...]:
        return tuple(self.run.params.values())

    @property
    def opt_state(self) -> tuple[np.ndarray, ...]:
        return self.run.opt_state

    @property
    def state(self) -> effir.State:
        return self.run.state

    @property
    def step(self) -> int:
        return self.run.step

    def call(self, entry: str, *args: Any, state: Any = None) -> Any:
        return self.training.call(entry, *args, state=state)

    def warm_up(self) -> None:
        """Build every entry now (a compiled program builds at its first
        call), on throwaway state: the run itself is then all steady state."""
        if self.training.program is None:
            return
        tokens = np.zeros((self.cfg.seq_len, self.cfg.batch), np.int32)
        scratch = self.training.init(self.run.params, state=effir.State(self.module))
        self.training(scratch, tokens, tokens)
        self.call("evaluate", tokens, tokens, *self.params, *self.running_stats())
        h = np.zeros((1, self.cfg.hidden), np.float32)
        self.call("next_char", tokens[0, :1], h, *self.params, *self.running_stats())

    def train_step(self, tokens: np.ndarray, targets: np.ndarray) -> float:
        """One compiled call: the loss before the update; weights, optimiser
        state, key and statistics move on."""
        return float(self.training(self.run, tokens, targets))

    def train(
        self, data: np.ndarray, steps: int, on_step: Callable[[int, float], None] | None = None
    ) -> list[float]:
        losses = []
        for _ in range(steps):
            loss = self.train_step(*batch(data, self.cfg, self.seed, self.step))
            losses.append(loss)
            if on_step is not None:
                on_step(self.step, loss)
        return losses

    def running_stats(self) -> tuple[np.ndarray, np.ndarray]:
        mean, var = self.state["bn"]
        return np.asarray(mean), np.asarray(var)

    def perplexity(self, data: np.ndarray, max_batches: int = 8) -> float:
        """exp(mean cross-entropy) over consecutive windows of ``data``, batch
        norm with the running statistics and no dropout."""
        t, b = self.cfg.seq_len, self.cfg.batch
        span = t * b
        total, count = 0.0, 0
        for i in range(min(max_batches, (len(data) - 1) // span)):
            window = data[i * span : (i + 1) * span + 1]
            tokens = window[:-1].reshape(b, t).T.astype(np.int32)
            targets = window[1:].reshape(b, t).T.astype(np.int32)
            total += float(
                self.call("evaluate", tokens, targets, *self.params, *self.running_stats())
            )
            count += span
        return math.exp(total / count)

    def sample(self, corpus: Corpus, length: int, prompt: str = "And ", temperature=0.8) -> str:
        """Text from the model: one compiled ``@next_char`` call per
        character, the next character drawn from its softmax."""
        rs = np.random.default_rng(self.seed)
        h = np.zeros((1, self.cfg.hidden), np.float32)
        stats = self.running_stats()
        out = list(prompt)
        logp = None
        for ch in prompt:
            token = np.array([corpus.chars.index(ch)], np.int32)
            logp, h = self.call("next_char", token, h, *self.params, *stats)
        for _ in range(length):
            p = np.exp(np.asarray(logp, np.float64)[0] / temperature)
            code = int(rs.choice(len(p), p=p / p.sum()))
            out.append(corpus.chars[code])
            logp, h = self.call("next_char", np.array([code], np.int32), h, *self.params, *stats)
        return "".join(out)

    # -------------------------------------------------------------- checkpoints
    def save(self, path: str | Path) -> None:
        """The run as one effir checkpoint (effir/train/checkpoint.py: the
        weights, Adam's state, the PRNG key, the running statistics and the
        step count, plain arrays), with what ``resume`` needs to rebuild the
        model: its sizes, dropout rate, learning rate and seed."""
        cfg = self.cfg
        self.run.save(
            path,
            metadata={
                "config": [cfg.vocab, cfg.embed, cfg.hidden, cfg.seq_len, cfg.batch],
                "rate": cfg.rate,
                "lr": self.lr,
                "seed": self.seed,
            },
        )

    @classmethod
    def resume(cls, path: str | Path, compiled: bool = True, grad: str = "effir") -> Trainer:
        """The trainer saved in ``path``, ready to continue where it stopped."""
        meta = effir.train.metadata_of(path)
        vocab, embed, hidden, seq_len, batch_size = (int(v) for v in meta["config"])
        cfg = Config(vocab, embed, hidden, seq_len, batch_size, float(meta["rate"]))
        trainer = cls(
            cfg, lr=float(meta["lr"]), seed=int(meta["seed"]), compiled=compiled, grad=grad
        )
        trainer.run = trainer.training.restore(path)
        return trainer


# ------------------------------------------------------------------ command line
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--hidden", type=int, default=128, help="GRU hidden size (default 128)")
    p.add_argument("--embed", type=int, default=32, help="embedding size (default 32)")
    p.add_argument("--seq-len", type=int, default=32, help="characters per sequence (32)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (16)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout rate (0.1)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate (3e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="gru_lm_checkpoint.npz", help="where to save")
    p.add_argument("--resume", metavar="NPZ", help="continue the run saved in NPZ")
    p.add_argument("--sample", type=int, default=300, help="characters to sample (300)")
    p.add_argument(
        "--grad",
        choices=GRADS,
        default="effir",
        help="gradients from effir.value_and_grad (default) or the hand-written backward",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    args = parse_args(argv)
    corpus = Corpus.load()
    start = time.perf_counter()
    if args.resume:
        trainer = Trainer.resume(args.resume, grad=args.grad)
        print(f"resumed {args.resume} at step {trainer.step}")
    else:
        cfg = Config(
            len(corpus.chars), args.embed, args.hidden, args.seq_len, args.batch, args.dropout
        )
        trainer = Trainer(cfg, lr=args.lr, seed=args.seed, grad=args.grad)
    cfg = trainer.cfg
    print(
        f"{len(corpus.train):,} training and {len(corpus.held_out):,} held-out characters, "
        f"vocabulary {cfg.vocab}; hidden {cfg.hidden}, batch {cfg.batch} x {cfg.seq_len}"
    )
    trainer.warm_up()
    print(f"compiled and built in {time.perf_counter() - start:.1f} s")
    print(f"held-out perplexity before: {trainer.perplexity(corpus.held_out):.2f}")

    bar = tqdm(total=args.steps, unit="step", dynamic_ncols=True)
    tokens_per_step = cfg.seq_len * cfg.batch
    t0, window = time.perf_counter(), []

    def on_step(step: int, loss: float) -> None:
        window.append(loss)
        rate = bar.n * tokens_per_step / max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}")
        bar.update(1)
        if step % max(1, args.steps // 6) == 0:
            bar.write(f"step {step:5d}  loss {np.mean(window):.3f}")
            window.clear()

    losses = trainer.train(corpus.train, args.steps, on_step)
    bar.close()
    seconds = time.perf_counter() - t0
    k = max(1, len(losses) // 10)
    print(
        f"loss {np.mean(losses[:k]):.3f} (first {k} steps) -> {np.mean(losses[-k:]):.3f} "
        f"(last {k}); {args.steps * tokens_per_step / seconds:,.0f} tokens/s"
    )
    print(
        f"held-out perplexity after {trainer.step} steps: {trainer.perplexity(corpus.held_out):.2f}"
    )
    trainer.save(args.checkpoint)
    print(f"checkpoint: {args.checkpoint} (resume with --resume {args.checkpoint})")
    if args.sample:
        print("sample:\n" + trainer.sample(corpus, args.sample))
    return 0


if __name__ == "__main__":
    sys.exit(main())
