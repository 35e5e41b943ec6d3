"""The GRU language model's training step in JAX: the peer that
train_step.py times step by step and compile_latency.py times to its first
result, written once so both measure the same program.

The model of examples/gru_lm_training.py (embedding, dropout, a GRU over the
sequence, batch norm in training mode, dropout, projection, softmax
cross-entropy) and an Adam update, in one ``jax.jit`` of ``value_and_grad``,
written as XLA likes it: weights stored transposed (``x @ w``, no transposes
in the loop), the input projections of all steps in one matrix product
before ``lax.scan``. It imports JAX only when called, and never effir (the
compile-latency child that runs it times JAX alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
"""Adam's settings, the same for every library measured."""


def jax_train_step(hidden: int, batch: int, seq_len: int, rate: float) -> Callable[..., Any]:
    """``train_step(params, (t, m, v), tokens, targets, key, mean, var)``,
    jitted: it gives the loss, the new params, Adam's new ``(t, m, v)``, the
    next key and the new running ``(mean, var)``. ``params`` are
    ``(embed, w.T, u.T, bias, gamma, beta, proj.T)`` of the example's
    weights; tokens and targets are ``(seq_len, batch)``."""
    import jax
    import jax.numpy as jnp

    h, n = hidden, seq_len * batch

    def dropout(key, x):
        return jnp.where(jax.random.bernoulli(key, 1.0 - rate, x.shape), x / (1.0 - rate), 0.0)

    def loss_fn(params, tokens, targets, key, mean0, var0):
        embed, w_t, u_t, bias, gamma, beta, proj_t = params
        key, sub = jax.random.split(key)
        gx = dropout(sub, embed[tokens]) @ w_t + bias  # every step's input projection at once

        def cell(hp, g):
            gh = hp @ u_t
            z = jax.nn.sigmoid(g[:, :h] + gh[:, :h])
            r = jax.nn.sigmoid(g[:, h : 2 * h] + gh[:, h : 2 * h])
            c = jnp.tanh(g[:, 2 * h :] + r * gh[:, 2 * h :])
            new = (1.0 - z) * c + z * hp
            return new, new

        _, hs = jax.lax.scan(cell, jnp.zeros((batch, h), jnp.float32), gx)
        flat = hs.reshape(n, h)
        mean = flat.mean(0)
        var = ((flat - mean) ** 2).mean(0)
        normed = (flat - mean) / jnp.sqrt(var + 1e-5) * gamma + beta
        key, sub = jax.random.split(key)
        logp = jax.nn.log_softmax(dropout(sub, normed) @ proj_t)
        loss = -jnp.take_along_axis(logp, targets.reshape(n, 1), axis=1).sum() / n
        stats = (0.9 * mean0 + 0.1 * mean, 0.9 * var0 + 0.1 * var * (n / (n - 1)))
        return loss, (key, stats)

    @jax.jit
    def train_step(params, opt, tokens, targets, key, mean0, var0):
        (loss, (key, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, tokens, targets, key, mean0, var0
        )
        t, m, v = opt
        t = t + 1
        m = tuple(B1 * a + (1 - B1) * g for a, g in zip(m, grads, strict=True))
        v = tuple(B2 * a + (1 - B2) * g * g for a, g in zip(v, grads, strict=True))
        c1, c2 = 1 - B1**t, 1 - B2**t
        params = tuple(
            p - LR * (a / c1) / (jnp.sqrt(b / c2) + EPS)
            for p, a, b in zip(params, m, v, strict=True)
        )
        return loss, params, (t, m, v), key, stats

    return train_step
