"""Write tests/examples/gru_lm_reference.npz: the loss, gradients, next key
and running statistics of the GRU language model of
examples/gru_lm_training.py (``@loss``: dropout, batch norm in training
mode, cross-entropy), computed by ``jax.value_and_grad`` of the same model
written in JAX with the same PRNG key.

Not a test and not run by the suite (effir does not depend on JAX). How it
was run (JAX 0.10.2 installed in a throwaway directory, the venv's numpy):

    /work/main/.venv/bin/pip install --target /tmp/jaxsite "jax[cpu]"
    rm -rf /tmp/jaxsite/numpy*
    PYTHONPATH=/tmp/jaxsite:$PWD /work/main/.venv/bin/python tests/examples/make_gru_lm_reference.py

effir's PRNG is JAX's threefry2x32 (effir/runtime/prng.py), and effir's
``explicate`` turns ``nn.dropout(x, @rng)`` into ``keys = split(key)``,
``key' = keys[0]``, ``dropout(x, keys[1])``: so the masks below are the
masks effir draws. Batch norm follows PyTorch's convention (momentum 0.1 on
the batch statistic, unbiased variance in the running variance).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import gru_lm_training as model  # noqa: E402  (only its Config and init_params)

OUT = Path(__file__).with_name("gru_lm_reference.npz")
CFG = model.Config(vocab=60, embed=16, hidden=32, seq_len=16, batch=4, rate=0.25)
SEED = 7


def dropout(key, x, rate):
    """flax.linen.Dropout."""
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def gru_cell(h, x, w, u, bias):
    gx0, gx1, gx2 = jnp.split(x @ w.T + bias, 3, axis=1)
    gh0, gh1, gh2 = jnp.split(h @ u.T, 3, axis=1)
    z = jax.nn.sigmoid(gx0 + gh0)
    r = jax.nn.sigmoid(gx1 + gh1)
    n = jnp.tanh(gx2 + r * gh2)
    new = (1.0 - z) * n + z * h
    return new, new


def loss_fn(params, tokens, targets, key, running_mean, running_var):
    embed, w, u, bias, gamma, beta, proj = params
    t, b = tokens.shape
    key, sub = jax.random.split(key)
    xs = dropout(sub, embed[tokens], CFG.rate)
    h0 = jnp.zeros((b, CFG.hidden), jnp.float32)
    _, hs = jax.lax.scan(lambda h, x: gru_cell(h, x, w, u, bias), h0, xs)
    flat = hs.reshape(t * b, CFG.hidden)
    mean = flat.mean(0)
    var = ((flat - mean) ** 2).mean(0)
    normed = (flat - mean) / jnp.sqrt(var + 1e-5) * gamma + beta
    n = t * b
    new_mean = 0.9 * running_mean + 0.1 * mean
    new_var = 0.9 * running_var + 0.1 * var * (n / (n - 1))
    key, sub = jax.random.split(key)
    logp = jax.nn.log_softmax(dropout(sub, normed, CFG.rate) @ proj.T)
    loss = -jnp.take_along_axis(logp, targets.reshape(n, 1), axis=1).sum() / n
    return loss, (key, new_mean, new_var)


def main() -> None:
    params = model.init_params(CFG, seed=SEED)
    rs = np.random.default_rng(SEED)
    shape = (CFG.seq_len, CFG.batch)
    tokens = rs.integers(0, CFG.vocab, shape).astype(np.int32)
    targets = rs.integers(0, CFG.vocab, shape).astype(np.int32)
    key = jax.random.PRNGKey(SEED)
    mean0 = (rs.standard_normal(CFG.hidden) * 0.1).astype(np.float32)
    var0 = (1 + rs.random(CFG.hidden)).astype(np.float32)
    (loss, (new_key, new_mean, new_var)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        tuple(jnp.asarray(p) for p in params), tokens, targets, key, mean0, var0
    )
    arrays = {f"param.{n}": p for n, p in zip(model.PARAM_NAMES, params, strict=True)}
    arrays |= {f"grad.{n}": np.asarray(g) for n, g in zip(model.PARAM_NAMES, grads, strict=True)}
    arrays |= {
        "tokens": tokens,
        "targets": targets,
        "key": np.asarray(key, np.uint32),
        "running_mean": mean0,
        "running_var": var0,
        "loss": np.asarray(loss),
        "new_key": np.asarray(new_key, np.uint32),
        "new_mean": np.asarray(new_mean),
        "new_var": np.asarray(new_var),
        "config": np.asarray([CFG.vocab, CFG.embed, CFG.hidden, CFG.seq_len, CFG.batch], np.int64),
        "rate": np.asarray(CFG.rate, np.float64),
        "jax_version": np.asarray(jax.__version__),
    }
    np.savez(OUT, **arrays)
    print(f"wrote {OUT}: loss {float(loss):.6f}, jax {jax.__version__}")


if __name__ == "__main__":
    main()
