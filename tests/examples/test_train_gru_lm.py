"""The GRU language model of examples/train_gru_lm.py: its loss and
gradients equal JAX's for the same weights, batch and PRNG key (recorded
once by tests/examples/make_gru_lm_reference.py in gru_lm_reference.npz,
so the suite does not need JAX); training makes the loss fall; a checkpoint
resumed for N steps equals 2N steps straight, bit for bit.

Tiny models through effir's interpreter keep these fast; the compiled
program (a build of about half a minute on the shared machine) is checked
nightly."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.interpreter import interpret_a2
from effir.runtime.values import PRNGKey
from tests.support.isolated import run_isolated

EXAMPLES = Path(__file__).parents[2] / "examples"
REFERENCE = Path(__file__).with_name("gru_lm_reference.npz")


def load(name: str):
    """An example as a module (the training example imports its model by name)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


model = load("gru_lm_training")
training = load("train_gru_lm")


@pytest.fixture(scope="module")
def ref():
    with np.load(REFERENCE, allow_pickle=False) as f:
        return dict(f)


def reference_setup(ref, grad="manual"):
    """The module (A1 with the hand-written backward; A2 with effir's),
    a State holding the reference's key and statistics, the arguments."""
    vocab, embed, hidden, seq_len, batch = (int(v) for v in ref["config"])
    cfg = model.Config(vocab, embed, hidden, seq_len, batch, rate=float(ref["rate"]))
    module = model.build(cfg, grad=grad)
    state = effir.State(module)
    state["rng"] = PRNGKey(ref["key"])
    state["bn"] = (ref["running_mean"], ref["running_var"])
    params = [ref[f"param.{n}"] for n in model.PARAM_NAMES]
    return module, state, (ref["tokens"], ref["targets"], *params)


def assert_state_is_jax(state, ref):
    np.testing.assert_array_equal(state["rng"].data, ref["new_key"])
    np.testing.assert_allclose(state["bn"][0], ref["new_mean"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state["bn"][1], ref["new_var"], rtol=1e-5, atol=1e-7)


def assert_grads_are_jax(grads, ref):
    assert len(grads) == len(model.PARAM_NAMES)
    for name, grad in zip(model.PARAM_NAMES, grads, strict=True):
        want = ref[f"grad.{name}"]
        assert grad.dtype == np.float32 and grad.shape == want.shape, name
        # 1e-5 relative to the gradient's scale (an entry near zero has no
        # meaningful relative error in float32)
        np.testing.assert_allclose(
            grad, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=name
        )


def test_loss_key_and_running_statistics_equal_jax(ref):
    """@loss as written (nn.dropout from @rng, nn.batch_norm on @bn): the
    same masks as JAX's (the PRNG is JAX's), the same loss and statistics."""
    module, state, args = reference_setup(ref)
    loss = interpret_a2(module, *args, entry="loss", state=state)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-6)
    assert_state_is_jax(state, ref)


def test_hand_written_backward_equals_jax_grad(ref):
    module, state, args = reference_setup(ref)
    loss, grads = interpret_a2(module, *args, entry="loss_grad_manual", state=state)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-6)
    assert_grads_are_jax(grads, ref)
    assert_state_is_jax(state, ref)


def test_value_and_grad_of_loss_equals_jax_grad(ref):
    module, state, args = reference_setup(ref, grad="effir")
    # the GRU stays a loop (16 steps: not unrolled), so its backward is a
    # reverse loop, and the hoisted weight-gradient terms are summed by a
    # third loop over chunks of 4 steps (docs/autodiff.md, "per chunk")
    assert effir.astext(module.functions["loss_grad"]).count("cf.foreach") == 3
    loss, grads = model.call_value_and_grad(module, "loss_grad", args, state)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-6)
    assert_grads_are_jax(grads, ref)
    assert_state_is_jax(state, ref)


# ---------------------------------------------------------------- training
TINY = dict(embed=8, hidden=16, seq_len=16, batch=4, rate=0.1)  # 16 steps: a loop, not unrolled


@pytest.fixture(scope="module")
def corpus():
    return training.Corpus.load()


def tiny_trainer(corpus, lr=1e-2):
    cfg = model.Config(len(corpus.chars), **TINY)
    return training.Trainer(cfg, lr=lr, seed=3, compiled=False)


def snapshot(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return dict(f)


def test_resume_equals_training_straight_through(corpus, tmp_path):
    straight = tiny_trainer(corpus)
    straight.train(corpus.train, 4)
    straight.save(tmp_path / "straight.npz")

    first = tiny_trainer(corpus)
    first.train(corpus.train, 2)
    first.save(tmp_path / "half.npz")
    resumed = training.Trainer.resume(tmp_path / "half.npz", compiled=False)
    assert resumed.step == 2
    resumed.train(corpus.train, 2)
    resumed.save(tmp_path / "resumed.npz")

    a, b = snapshot(tmp_path / "straight.npz"), snapshot(tmp_path / "resumed.npz")
    assert sorted(a) == sorted(b)
    assert {"state.rng", "state.bn.0", "state.bn.1", "opt.0", "param.embed"} <= set(a)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # and the run did move: weights, key and statistics all changed
    start = tiny_trainer(corpus)
    assert not np.array_equal(a["param.u"], start.params[2])
    assert not np.array_equal(a["state.rng"], start.state["rng"].data)
    assert not np.array_equal(a["state.bn.0"], start.running_stats()[0])


def test_loss_falls(corpus):
    trainer = tiny_trainer(corpus, lr=2e-2)
    losses = trainer.train(corpus.train, 12)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses
    assert trainer.perplexity(corpus.held_out, max_batches=2) < len(corpus.chars)


@pytest.mark.nightly  # TVM builds, ~1 min
def test_compiled_training_equals_interpreter_and_resumes_bit_exactly():
    run_isolated(
        f"""
        import sys, tempfile
        import numpy as np
        sys.path.insert(0, {str(EXAMPLES)!r})
        import gru_lm_training as model, train_gru_lm as training
        corpus = training.Corpus.load()
        cfg = model.Config(len(corpus.chars), **{TINY!r})
        def trainer(compiled):
            return training.Trainer(cfg, lr=1e-2, seed=3, compiled=compiled)
        interpreted, compiled = trainer(False), trainer(True)
        li = interpreted.train(corpus.train, 3)
        lc = compiled.train(corpus.train, 3)
        np.testing.assert_allclose(lc, li, rtol=1e-4)
        for a, b in zip(compiled.params, interpreted.params):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
        assert np.array_equal(compiled.state["rng"].data, interpreted.state["rng"].data)
        with tempfile.TemporaryDirectory() as d:
            compiled.train(corpus.train, 3)
            compiled.save(d + "/straight.npz")
            half = trainer(True)
            half.train(corpus.train, 3)
            half.save(d + "/half.npz")
            resumed = training.Trainer.resume(d + "/half.npz")
            resumed.train(corpus.train, 3)
            resumed.save(d + "/resumed.npz")
            a, b = np.load(d + "/straight.npz"), np.load(d + "/resumed.npz")
            for name in a.files:
                assert np.array_equal(a[name], b[name]), name
        print("ok")
        """,
        timeout=600,
    ).check()


def test_checkpointing_gives_the_same_gradients_bit_for_bit(ref):
    """The GRU LM's gradients with checkpoint="loop" and "sqrt" (recompute
    each step / each segment in the backward) equal "none"'s exactly."""
    args = (ref["tokens"], ref["targets"], *(ref[f"param.{n}"] for n in model.PARAM_NAMES))
    vocab, embed, hidden, seq_len, batch = (int(v) for v in ref["config"])
    cfg = model.Config(vocab, embed, hidden, seq_len, batch, rate=float(ref["rate"]))
    results, texts = [], set()
    for checkpoint in ("none", "loop", "sqrt"):
        module = effir.value_and_grad(
            model.loss_module(cfg), entry="loss", wrt=list(model.PARAM_NAMES), checkpoint=checkpoint
        )
        texts.add(effir.astext(module.functions["loss_grad"]))
        state = effir.State(module)
        state["rng"] = PRNGKey(ref["key"])
        state["bn"] = (ref["running_mean"], ref["running_var"])
        results.append(model.call_value_and_grad(module, "loss_grad", args, state))
    assert len(texts) == 3  # three different gradient programs
    assert_grads_are_jax(results[0][1], ref)
    for loss, grads in results[1:]:
        assert loss == results[0][0]
        for a, b in zip(grads, results[0][1], strict=True):
            np.testing.assert_array_equal(a, b)
