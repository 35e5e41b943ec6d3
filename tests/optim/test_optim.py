"""effir's optimisers (effir/optim/) against numpy references written from
the update rules PyTorch and optax document, for several steps: the eager
update (numpy through effir's operators) and the module interpreted."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.optim import SGD, Adam

F32 = np.float32


def params_and_grads(steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = (rng.standard_normal((3, 4)).astype(F32), rng.standard_normal(5).astype(F32))
    grads = [tuple(rng.standard_normal(p.shape).astype(F32) for p in params) for _ in range(steps)]
    return params, grads


def sgd_reference(params, grads_per_step, lr, momentum):
    """torch.optim.SGD(momentum=...): v = mu v + g; p = p - lr v."""
    p = [a.astype(np.float64) for a in params]
    v = [np.zeros_like(a) for a in p]
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            v[i] = momentum * v[i] + g
            p[i] = p[i] - lr * v[i]
    return p, v


def adam_reference(params, grads_per_step, lr, b1, b2, eps):
    """optax.adam: bias-corrected moments."""
    p = [a.astype(np.float64) for a in params]
    m = [np.zeros_like(a) for a in p]
    v = [np.zeros_like(a) for a in p]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat = m[i] / (1 - b1**t)
            v_hat = v[i] / (1 - b2**t)
            p[i] = p[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def run(opt, params, grads_per_step, how):
    state = opt.init(params)
    module = opt.module(params) if how == "module" else None
    for grads in grads_per_step:
        if module is None:
            params, state = opt.update(params, grads, state)
        else:
            params, state = effir.interpret(module, *params, *grads, *state, entry=opt.name)
    return params, state


@pytest.mark.parametrize("how", ["eager", "module"])
def test_sgd_momentum_matches_numpy(how):
    params, grads = params_and_grads(steps=5)
    opt = SGD(lr=0.05, momentum=0.9)
    new_params, velocity = run(opt, params, grads, how)
    p_ref, v_ref = sgd_reference(params, grads, 0.05, 0.9)
    for got, want in zip([*new_params, *velocity], [*p_ref, *v_ref], strict=True):
        assert got.dtype == F32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["eager", "module"])
def test_adam_matches_numpy(how):
    params, grads = params_and_grads(steps=5, seed=1)
    opt = Adam(lr=0.01, b1=0.9, b2=0.99, eps=1e-8)
    new_params, state = run(opt, params, grads, how)
    p_ref, m_ref, v_ref = adam_reference(params, grads, 0.01, 0.9, 0.99, 1e-8)
    assert int(state[0]) == 5 and np.asarray(state[0]).dtype == np.int32
    for got, want in zip([*new_params, *state[1:]], [*p_ref, *m_ref, *v_ref], strict=True):
        assert got.dtype == F32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_optimiser_module_is_typed_and_round_trips():
    params, _ = params_and_grads(steps=0)
    for opt in (SGD(), Adam()):
        module = opt.module(params)
        effir.check(module)
        assert effir.astext(effir.parse(effir.astext(module))) == effir.astext(module)


def test_adam_rejects_a_state_of_the_wrong_length():
    params, grads = params_and_grads(steps=1)
    with pytest.raises(ValueError, match="2 parameters need 2 gradients and 5 state values"):
        Adam().update(params, grads[0], SGD().init(params))
