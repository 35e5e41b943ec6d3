"""The character-level GRU language model that examples/train_gru_lm.py
trains, as effir programs built with the Python builder (docs/frontend.md):

- ``@loss``: the model as a user writes it (effectful, A1): embedding,
  dropout from the PRNG cell ``@rng``, a GRU over the sequence
  (``cf.foreach``), batch norm in training mode (running statistics in the
  cell ``@bn``), dropout, projection, softmax cross-entropy. This is the
  program ``effir.value_and_grad`` differentiates.
- ``@train_step``: one whole training step (forward, backward, optimiser
  update, new key and running statistics) as one program, so one compiled
  call. By default (``grad="effir"``) the library makes it from ``@loss``
  (``effir.train.train_step_module``: ``effir.value_and_grad`` and the
  optimiser's update); ``grad="manual"`` writes it here around the
  backward pass written by hand in effir below (``@loss_grad_manual``:
  written before the grad transformation existed, kept as a cross-check
  and a benchmark baseline): the same key splits and masks, so both equal
  JAX's gradients (tests/examples/test_train_gru_lm.py).
- ``@evaluate``: the summed cross-entropy with batch norm in inference mode
  and no dropout (held-out perplexity).
- ``@next_char``: one step of the model for sampling, ``(token, h) ->
  (log-probabilities, h')``.

The parameters are, in order, ``PARAM_NAMES``; ``init_params`` gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import effir
from effir.optim import Adam, Optimizer

F32, I32 = "float32", "int32"
PARAM_NAMES = ("embed", "w", "u", "bias", "gamma", "beta", "proj")
op, nn = effir.op, effir.nn


@dataclass(frozen=True)
class Config:
    """The model's sizes: vocabulary, embedding, hidden, sequence length and
    batch of one training step, dropout rate."""

    vocab: int
    embed: int = 32
    hidden: int = 128
    seq_len: int = 32
    batch: int = 16
    rate: float = 0.1

    def shapes(self) -> dict[str, tuple[int, ...]]:
        v, e, h = self.vocab, self.embed, self.hidden
        return {
            "embed": (v, e),
            "w": (3 * h, e),
            "u": (3 * h, h),
            "bias": (3 * h,),
            "gamma": (h,),
            "beta": (h,),
            "proj": (v, h),
        }


def init_params(cfg: Config, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Glorot-style scaled normal weights, batch norm's gamma 1 and beta 0."""
    rs = np.random.default_rng(seed)
    out = []
    for name, shape in cfg.shapes().items():
        if name == "gamma":
            out.append(np.ones(shape, F32))
        elif name in ("bias", "beta"):
            out.append(np.zeros(shape, F32))
        else:
            out.append((rs.standard_normal(shape) / np.sqrt(shape[-1])).astype(F32))
    return tuple(out)


def param_vars(cfg: Config) -> list:
    return [effir.var(n, effir.Tensor[s, F32]) for n, s in cfg.shapes().items()]


def initial_cells(cfg: Config, seed: int = 0) -> tuple:
    """The PRNG key and the batch-norm running statistics a run starts from."""
    h = cfg.hidden
    return effir.random.key(seed), (np.zeros(h, F32), np.ones(h, F32))


# ------------------------------------------------------------------ forward
def gru_cell(x, h, w, u, bias):
    """One GRU step, gates in the order z, r, n as in examples/gru_lm.effir.
    Returns ``h'`` and what the hand-written backward reuses."""
    gx0, gx1, gx2 = op.split(nn.dense(x, w) + bias, indices_or_sections=3, axis=1)
    gh0, gh1, gh2 = op.split(nn.dense(h, u), indices_or_sections=3, axis=1)
    z = op.sigmoid(gx0 + gh0)
    r = op.sigmoid(gx1 + gh1)
    n = op.tanh(gx2 + r * gh2)
    return (1.0 - z) * n + z * h, (z, r, n, gh2)


def one_hot(labels, cfg: Config, count: int):
    """``(count, vocab)`` float32 one-hot rows of the int32 ``labels``."""
    flat = op.reshape(labels, newshape=[count, 1])
    return op.cast(op.equal(flat, np.arange(cfg.vocab, dtype=np.int32)), dtype=F32)


def add_loss(mb: effir.ModuleBuilder, cfg: Config, rng, bn) -> None:
    """``@loss(tokens, targets, params...)``: the mean cross-entropy of one
    batch in training mode, effects through the cells."""
    t, b, h = cfg.seq_len, cfg.batch, cfg.hidden
    tokens = effir.var("tokens", effir.Tensor[(t, b), I32])
    targets = effir.var("targets", effir.Tensor[(t, b), I32])
    params = param_vars(cfg)
    embed, w, u, bias, gamma, beta, proj = params
    with mb.function("loss", [tokens, targets, *params]):
        xs = nn.dropout(op.take(embed, tokens, axis=0), rng, rate=cfg.rate)

        def step(x, state):
            new, _ = gru_cell(x, state, w, u, bias)
            return new, new

        hs, _ = effir.foreach(step, xs, op.zeros(shape=[b, h], dtype=F32))
        flat = op.reshape(hs, newshape=[t * b, h])
        normed = nn.batch_norm(flat, gamma, beta, bn, training=True)
        logp = nn.log_softmax(nn.dense(nn.dropout(normed, rng, rate=cfg.rate), proj))
        mb.ret(-op.sum(one_hot(targets, cfg, t * b) * logp) / float(t * b))


def loss_module(cfg: Config) -> effir.IRModule:
    """A module of ``@loss`` and its cells alone (A1)."""
    key, stats = initial_cells(cfg)
    mb = effir.ModuleBuilder()
    add_loss(mb, cfg, mb.add_cell("rng", key), mb.add_cell("bn", stats))
    return mb.get()


# ------------------------------------------------------------------ backward
def manual_value_and_grad(cfg: Config, tokens, targets, params, rng, bn):
    """The loss of ``@loss`` and its gradients with respect to the
    parameters, emitted into the function being built: forward and a
    backward written by hand. Keys are split exactly as ``explicate`` splits
    ``nn.dropout``'s (``split(key)``: ``.0`` the next key, ``.1`` the
    dropout's), so the masks are the masks of ``@loss``; each mask is drawn
    once (a scaled ``random.dropout`` of ones) and used by the forward and
    the backward. The running statistics are updated by
    ``nn.batch_norm_train``, as ``nn.batch_norm`` does."""
    t, b, h, e = cfg.seq_len, cfg.batch, cfg.hidden, cfg.embed
    n_rows = t * b
    embed, w, u, bias, gamma, beta, proj = params

    def mask(shape):
        keys = op.random.split(effir.read(rng))
        effir.write(rng, keys[0])
        return op.random.dropout(op.ones(shape=list(shape), dtype=F32), keys[1], rate=cfg.rate)

    # forward, keeping the residuals
    mask_x = mask((t, b, e))
    xs = op.take(embed, tokens, axis=0) * mask_x
    h0 = op.zeros(shape=[b, h], dtype=F32)

    def step(x, state):
        new, (z, r, n, gh2) = gru_cell(x, state, w, u, bias)
        return (new, z, r, n, gh2), new

    (hs, zs, rs, ns, gh2s), _ = effir.foreach(step, xs, h0)
    flat = op.reshape(hs, newshape=[n_rows, h])
    mean_var = effir.read(bn)
    normed, new_mean, new_var = nn.batch_norm_train(
        flat, gamma, beta, mean_var[0], mean_var[1], axis=1
    )
    effir.write(bn, (new_mean, new_var))
    mu = op.mean(flat, axis=[0])
    centred = flat - mu
    inv_std = 1.0 / op.sqrt(op.mean(centred * centred, axis=[0]) + 1e-5)
    xhat = centred * inv_std
    mask_y = mask((n_rows, h))
    dropped = normed * mask_y
    logp = nn.log_softmax(nn.dense(dropped, proj))
    labels = one_hot(targets, cfg, n_rows)
    loss = -op.sum(labels * logp) / float(n_rows)

    # backward: cross-entropy, projection, dropout, batch norm
    dlogits = (op.exp(logp) - labels) / float(n_rows)
    g_proj = nn.dense(op.transpose(dlogits), op.transpose(dropped))
    dnormed = nn.dense(dlogits, op.transpose(proj)) * mask_y
    g_gamma = op.sum(dnormed * xhat, axis=[0])
    g_beta = op.sum(dnormed, axis=[0])
    dxhat = dnormed * gamma
    dflat = (
        inv_std
        * (dxhat * float(n_rows) - op.sum(dxhat, axis=[0]) - xhat * op.sum(dxhat * xhat, axis=[0]))
        / float(n_rows)
    )
    # backward through the GRU: a reverse loop over the stacked residuals
    reverse = np.arange(t - 1, -1, -1, dtype=np.int32)
    h_prev = op.concatenate((op.expand_dims(h0, axis=0), hs), axis=0)
    h_prev = op.strided_slice(h_prev, begin=[0], end=[t], axes=[0])

    def rev(x):
        return op.take(x, reverse, axis=0)

    douts = op.reshape(dflat, newshape=[t, b, h])

    def back(step_in, dh_next):
        dout, z, r, n, gh2, hp = step_in
        dh = dout + dh_next
        dn = dh * (1.0 - z)
        dz = dh * (hp - n)
        dan = dn * (1.0 - n * n)
        daz = dz * z * (1.0 - z)
        dar = dan * gh2 * r * (1.0 - r)
        dgx = op.concatenate((daz, dar, dan), axis=1)
        dgh = op.concatenate((daz, dar, dan * r), axis=1)
        dh_prev = dh * z + nn.dense(dgh, op.transpose(u))
        return (dgx, dgh), dh_prev

    (dgx_rev, dgh_rev), _ = effir.foreach(
        back, (rev(douts), rev(zs), rev(rs), rev(ns), rev(gh2s), rev(h_prev)), h0
    )
    dgx = op.reshape(rev(dgx_rev), newshape=[n_rows, 3 * h])
    dgh = op.reshape(rev(dgh_rev), newshape=[n_rows, 3 * h])
    xs_flat = op.reshape(xs, newshape=[n_rows, e])
    g_w = nn.dense(op.transpose(dgx), op.transpose(xs_flat))
    g_u = nn.dense(op.transpose(dgh), op.transpose(op.reshape(h_prev, newshape=[n_rows, h])))
    g_bias = op.sum(dgx, axis=[0])
    dxs = op.reshape(nn.dense(dgx, op.transpose(w)), newshape=[n_rows, e]) * op.reshape(
        mask_x, newshape=[n_rows, e]
    )
    g_embed = nn.dense(op.transpose(one_hot(tokens, cfg, n_rows)), op.transpose(dxs))
    return loss, (g_embed, g_w, g_u, g_bias, g_gamma, g_beta, g_proj)


# ------------------------------------------------------------------ programs
GRADS = ("effir", "manual")


def call_value_and_grad(module: effir.IRModule, entry: str, args, state):
    """``(loss, grads)`` of the A2 gradient function, interpreted, the
    cells of ``state`` passed in and updated as the A1 ``@loss`` would."""
    from effir.backends.interpreter import interpret_a2

    return interpret_a2(module, *args, entry=entry, state=state)


def build(
    cfg: Config,
    optimizer: Optimizer | None = None,
    grad: str = "effir",
    checkpoint: str = "none",
) -> effir.IRModule:
    """The A2 module of ``@loss``, ``@loss_grad_manual``, ``@evaluate``,
    ``@next_char`` and ``@train_step`` for ``cfg``, with the cells ``@rng``
    and ``@bn`` (``build_step`` gives the step's signature too)."""
    return build_step(cfg, optimizer, grad, checkpoint)[0]


def build_step(
    cfg: Config,
    optimizer: Optimizer | None = None,
    grad: str = "effir",
    checkpoint: str = "none",
) -> tuple[effir.IRModule, effir.train.StepSignature]:
    """``build``'s module and the signature of its ``@train_step(tokens,
    targets, params..., opt_state...) -> (loss, (params'...),
    (opt_state'...))``, which ``effir.train.TrainStep`` runs. Its gradients
    come from ``effir.value_and_grad`` of ``@loss`` (``grad="effir"``:
    ``@loss_grad`` is the gradient function; ``checkpoint`` is its loop
    checkpointing) or from the hand-written backward (``grad="manual"``)."""
    if grad not in GRADS:
        raise ValueError(f"grad must be one of {GRADS}, not {grad!r}")
    optimizer = optimizer or Adam(lr=2e-3)
    key, stats = initial_cells(cfg)
    mb = effir.ModuleBuilder()
    rng = mb.add_cell("rng", key)
    bn = mb.add_cell("bn", stats)
    add_loss(mb, cfg, rng, bn)
    t, b, h = cfg.seq_len, cfg.batch, cfg.hidden

    def step_params():
        tokens = effir.var("tokens", effir.Tensor[(t, b), I32])
        targets = effir.var("targets", effir.Tensor[(t, b), I32])
        opt_vars = [
            effir.var(f"opt{i}", effir.Tensor[s.shape, str(s.dtype)])
            for i, s in enumerate(optimizer.init(init_params(cfg)))
        ]
        return tokens, targets, param_vars(cfg), opt_vars

    tokens, targets, params, _ = step_params()
    with mb.function("loss_grad_manual", [tokens, targets, *params]):
        loss, grads = manual_value_and_grad(cfg, tokens, targets, params, rng, bn)
        mb.ret((loss, tuple(grads)))
    if grad == "manual":
        tokens, targets, params, opt_vars = step_params()
        with mb.function("train_step", [tokens, targets, *params, *opt_vars]):
            loss, grads = manual_value_and_grad(cfg, tokens, targets, params, rng, bn)
            new_params, new_opt = optimizer.update(params, grads, opt_vars)
            mb.ret((loss, tuple(new_params), tuple(new_opt)))

    # evaluation: batch norm with the running statistics, no dropout
    ev_tokens = effir.var("tokens", effir.Tensor[(t, b), I32])
    ev_targets = effir.var("targets", effir.Tensor[(t, b), I32])
    ev_params = param_vars(cfg)
    r_mean = effir.var("running_mean", effir.Tensor[(h,), F32])
    r_var = effir.var("running_var", effir.Tensor[(h,), F32])
    embed, w, u, bias, gamma, beta, proj = ev_params
    with mb.function("evaluate", [ev_tokens, ev_targets, *ev_params, r_mean, r_var]):

        def step(x, state):
            new, _ = gru_cell(x, state, w, u, bias)
            return new, new

        xs = op.take(embed, ev_tokens, axis=0)
        hs, _ = effir.foreach(step, xs, op.zeros(shape=[b, h], dtype=F32))
        flat = op.reshape(hs, newshape=[t * b, h])
        normed = nn.batch_norm_infer(flat, gamma, beta, r_mean, r_var, axis=1)
        logp = nn.log_softmax(nn.dense(normed, proj))
        mb.ret(-op.sum(one_hot(ev_targets, cfg, t * b) * logp))

    token = effir.var("token", effir.Tensor[(1,), I32])
    hidden = effir.var("h", effir.Tensor[(1, h), F32])
    s_params = param_vars(cfg)
    s_mean = effir.var("running_mean", effir.Tensor[(h,), F32])
    s_var = effir.var("running_var", effir.Tensor[(h,), F32])
    embed, w, u, bias, gamma, beta, proj = s_params
    with mb.function("next_char", [token, hidden, *s_params, s_mean, s_var]):
        new, _ = gru_cell(op.take(embed, token, axis=0), hidden, w, u, bias)
        normed = nn.batch_norm_infer(new, gamma, beta, s_mean, s_var, axis=1)
        mb.ret((nn.log_softmax(nn.dense(normed, proj)), new))
    module = mb.get()
    if grad == "manual":
        module = to_a2(module)
        return module, effir.train.step_signature(module, "train_step", PARAM_NAMES, optimizer)
    return effir.train.train_step_module(
        module, optimizer, entry="loss", wrt=PARAM_NAMES, checkpoint=checkpoint
    )


def to_a2(module: effir.IRModule) -> effir.IRModule:
    """The state-passing form (docs/passes.md): every function takes the
    cells it uses and returns their new values, so one convention holds for
    the hand-written and the generated functions alike."""
    return effir.pipeline("to-anf,explicate,state-passing")(module)
