"""Compile latency: how long from a model written in Python to its first
gradient or training step's result, effir against JAX, side by side in one
run.

Two programs, each written in effir and in JAX:

- **MLP**: the ``value_and_grad`` of a 16-unit MLP applied at each step of
  a scan over 16 steps (batch 32, 8 features, 4 classes): dense, batch
  norm in training mode (running statistics carried), ReLU, dropout,
  dense, log-softmax cross-entropy summed over the steps. effir:
  ``@effir.script`` (a Python ``for`` over the steps: benchmarks/mlp_scan.py),
  ``effir.value_and_grad``, ``effir.compile``; JAX: ``jax.jit(jax.value_and_grad(...))`` of
  ``lax.scan``, the key and statistics in the carry.
- **GRU LM step**: one training step (forward, backward, Adam) of the
  character-level GRU language model of examples/gru_lm_training.py at the
  example's sizes (vocabulary 60, embedding 32, hidden 128, 32 steps,
  batch 16, dropout 0.1). effir: ``effir.train_step`` of its ``@loss``;
  JAX: ``jit`` of ``value_and_grad`` and the Adam update, written as XLA
  likes it (benchmarks/jax_gru_lm.py, which train_step.py times too).

Each measurement is a fresh process that imports the library, builds the
program and calls it once; "compile" is from the model's Python function
to the first result (effir: the conversion, the gradient or training-step
transformation, the pipeline, TVM's build; JAX: tracing, XLA's compilation),
so neither pays its import there, which is its own column. Two settings:

- **cold**: an empty build cache (effir's ``EFFIR_CACHE_DIR``; JAX's
  persistent compilation cache off);
- **warm**: the cache filled by the cold process just before (effir's
  build cache; JAX's persistent compilation cache, every entry kept).

The settings and libraries are interleaved round by round, so load from
other work falls on all alike; CPU seconds (user and system, every thread
of the process) are reported beside wall seconds, because on a shared
machine the wall clock measures the queue too. Run::

    make bench-peers      # or: python benchmarks/compile_latency.py --jax-python .venv-bench/bin/python

JAX runs in the Python given by ``--jax-python`` (default: .venv-bench's,
else this one when it has JAX); without JAX its rows are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jax_gru_lm import B1, B2, EPS, LR, jax_train_step

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mlp", "gru")
T, B, D, H, C = 16, 32, 8, 16, 4  # the MLP's steps, batch, features, units, classes (mlp_scan.py)
GRU = {"vocab": 60, "embed": 32, "hidden": 128, "seq_len": 32, "batch": 16, "rate": 0.1}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------ effir
def effir_mlp() -> Any:
    """The first result of the MLP's compiled value_and_grad (its effir
    source: benchmarks/mlp_scan.py)."""
    import mlp_scan

    import effir

    program = effir.compile(
        effir.value_and_grad(mlp_scan.loss.module, entry="loss", wrt=mlp_scan.WRT),
        entry="loss_grad",
    )
    args = [a for _, a in mlp_arrays()]
    return program(*args, state=program.new_state())


def effir_gru() -> Any:
    """The first result of the GRU LM's compiled training step."""
    sys.path.insert(0, str(ROOT / "examples"))
    import gru_lm_training as model

    import effir
    from effir.optim import Adam  # an effir before effir.optim was imported by effir

    cfg = model.Config(**GRU)
    optimizer = Adam(lr=LR, b1=B1, b2=B2, eps=EPS)
    params = model.init_params(cfg)
    if not hasattr(effir, "train_step"):  # an effir before the library's step (--effir-root)
        program = effir.compile(model.build(cfg, optimizer))
        state = effir.State(program.source)
        args = (*gru_batch(), *params, *optimizer.init(params))
        return program(*args, entry="train_step", state=state)
    step = effir.train_step(
        model.loss_module(cfg), optimizer, entry="loss", wrt=list(model.PARAM_NAMES)
    )
    run = step.init(dict(zip(model.PARAM_NAMES, params, strict=True)))
    return step(run, *gru_batch())


# ------------------------------------------------------------------ JAX
def jax_mlp() -> Any:
    import jax
    import jax.numpy as jnp

    def loss(params, xs, ys, key, mean, var):
        w1, b1, gamma, beta, w2, b2 = params

        def step(carry, xy):
            key, mean, var, total = carry
            x, y = xy
            z = x @ w1.T + b1
            m, v = z.mean(0), z.var(0)
            h = gamma * (z - m) / jnp.sqrt(v + 1e-5) + beta
            mean, var = 0.9 * mean + 0.1 * m, 0.9 * var + 0.1 * v * (B / (B - 1))
            key, sub = jax.random.split(key)
            h = jax.nn.relu(h)
            h = jnp.where(jax.random.bernoulli(sub, 0.9, h.shape), h / 0.9, 0.0)
            logp = jax.nn.log_softmax(h @ w2.T + b2)
            return (key, mean, var, total - jnp.sum(y * logp)), None

        init = (key, mean, var, jnp.zeros((), jnp.float32))
        (key, mean, var, total), _ = jax.lax.scan(step, init, (xs, ys))
        return total / (T * B), (key, mean, var)

    arrays = dict(mlp_arrays())
    params = [arrays[n] for n in ("w1", "b1", "gamma", "beta", "w2", "b2")]
    f = jax.jit(jax.value_and_grad(loss, has_aux=True))
    out = f(params, arrays["xs"], arrays["ys"], jax.random.PRNGKey(0), jnp.zeros(H), jnp.ones(H))
    return jax.block_until_ready(out)


def jax_gru() -> Any:
    import jax
    import jax.numpy as jnp
    import numpy as np

    v, e, h, t, b, rate = (GRU[k] for k in ("vocab", "embed", "hidden", "seq_len", "batch", "rate"))
    rs = np.random.default_rng(0)
    params = (
        rs.standard_normal((v, e), np.float32) / np.sqrt(e),
        rs.standard_normal((e, 3 * h), np.float32) / np.sqrt(e),
        rs.standard_normal((h, 3 * h), np.float32) / np.sqrt(h),
        np.zeros(3 * h, np.float32),
        np.ones(h, np.float32),
        np.zeros(h, np.float32),
        rs.standard_normal((h, v), np.float32) / np.sqrt(h),
    )

    train_step = jax_train_step(h, b, t, rate)
    zeros = tuple(jnp.zeros_like(p) for p in params)
    tokens, targets = gru_batch()
    out = train_step(
        params,
        (jnp.float32(0), zeros, zeros),
        tokens,
        targets,
        jax.random.PRNGKey(0),
        jnp.zeros(h),
        jnp.ones(h),
    )
    return jax.block_until_ready(out)


def use_jax_cache(directory: str) -> None:
    """JAX's persistent compilation cache in ``directory``, every entry kept."""
    import jax

    jax.config.update("jax_compilation_cache_dir", directory)
    for option, value in (
        ("jax_persistent_cache_min_compile_time_secs", 0.0),
        ("jax_persistent_cache_min_entry_size_bytes", 0),
    ):
        try:
            jax.config.update(option, value)
        except AttributeError:  # an older JAX without the option
            pass


# ------------------------------------------------------------------ inputs
def mlp_arrays() -> list[tuple[str, Any]]:
    import numpy as np

    rs = np.random.default_rng(0)
    shapes = {
        "xs": (T, B, D),
        "ys": (T, B, C),
        "w1": (H, D),
        "b1": (H,),
        "gamma": (H,),
        "beta": (H,),
        "w2": (C, H),
        "b2": (C,),
    }
    return [(n, rs.standard_normal(s).astype(np.float32)) for n, s in shapes.items()]


def gru_batch() -> tuple[Any, Any]:
    import numpy as np

    rs = np.random.default_rng(1)
    shape = (GRU["seq_len"], GRU["batch"])
    return (
        rs.integers(0, GRU["vocab"], shape).astype(np.int32),
        rs.integers(0, GRU["vocab"], shape).astype(np.int32),
    )


# ------------------------------------------------------------------ one process
def child(library: str, model: str, cache: str, root: str) -> None:
    """Import, build, call once; print the seconds as JSON."""
    global ROOT
    ROOT = Path(root)
    start, cpu0 = time.perf_counter(), cpu_seconds()
    if library == "effir":
        os.environ["EFFIR_CACHE_DIR"] = cache
        import effir  # noqa: F401

        run = effir_mlp if model == "mlp" else effir_gru
    else:
        import jax  # noqa: F401

        if cache != "off":
            use_jax_cache(cache)
        run = jax_mlp if model == "mlp" else jax_gru
    imported, cpu1 = time.perf_counter(), cpu_seconds()
    run()
    done, cpu2 = time.perf_counter(), cpu_seconds()
    print(
        json.dumps(
            {
                "import": imported - start,
                "compile": done - imported,
                "compile_cpu": cpu2 - cpu1,
                "total": done - start,
                "total_cpu": cpu2 - cpu0,
            }
        )
    )


def measure(
    python: str, library: str, model: str, cache: str, root: Path = ROOT
) -> dict[str, float]:
    """One fresh process's seconds; ``root``: the effir checkout it runs
    (its examples too)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT / "benchmarks")])}
    script = str(Path(__file__).resolve())
    argv = [python, script, "--child", library, model, cache, str(root)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise SystemExit(f"{library} {model} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def jax_python(given: str | None) -> str | None:
    candidates = (
        [given] if given else [str(ROOT / ".venv-bench" / "bin" / "python"), sys.executable]
    )
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run([python, "-c", "import jax"], capture_output=True)
            if probe.returncode == 0:
                return python
    return None


def commit(root: Path) -> str:
    """The checkout's commit, or its directory's name."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or root.name


def versions(jax: str | None) -> str:
    import tvm

    import effir

    text = f"effir {effir.__version__} at {commit(ROOT)} (TVM {tvm.__version__})"
    if jax:
        probe = [jax, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"]
        out = subprocess.run(probe, capture_output=True, text=True).stdout.split()
        text += f", JAX {out[0]} (jaxlib {out[1]})"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--jax-python", help="a Python with JAX installed")
    parser.add_argument(
        "--effir-root",
        help="also time the effir of this checkout (another commit, for a before and after)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(*options.child)
        return
    jax = jax_python(options.jax_python)
    models = [m for m in options.models.split(",") if m]
    libraries = [("effir", sys.executable, ROOT)]
    if options.effir_root:
        root = Path(options.effir_root).resolve()
        libraries.append((f"effir {commit(root)}", sys.executable, root))
    libraries += [("JAX", jax, ROOT)] if jax else []
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="effir-compile-latency-") as tmp:
        for n in range(options.rounds):
            for model in models:
                for k, (name, python, root) in enumerate(libraries):
                    cache = str(Path(tmp) / f"{k}-{model}-{n}")
                    kind = "jax" if name == "JAX" else "effir"
                    for setting in ("cold", "warm"):  # warm: the cold process's cache
                        got = measure(python, kind, model, cache, root)
                        results.setdefault((model, name, setting), []).append(got)
            print(f"round {n + 1} of {options.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()[0]
    print(
        f"Compile latency, {versions(jax)}: median (min) of {options.rounds} fresh processes "
        f"each, interleaved; {os.cpu_count()} CPUs, load average {load_before:.1f} before, "
        f"{load_after:.1f} after\n"
    )
    print(
        "| program | library | cache | import s | compile s | compile CPU s | "
        "import + compile s |\n|---|---|---|---|---|---|---|"
    )
    for (model, name, setting), runs in results.items():

        def cell(key: str, runs: list[dict[str, float]] = runs) -> str:
            values = [r[key] for r in runs]
            return f"{statistics.median(values):.2f} ({min(values):.2f})"

        label = "MLP value_and_grad" if model == "mlp" else "GRU LM training step"
        print(
            f"| {label} | {name} | {setting} | {cell('import')} | {cell('compile')} | "
            f"{cell('compile_cpu')} | {cell('total')} |"
        )


if __name__ == "__main__":
    main()
