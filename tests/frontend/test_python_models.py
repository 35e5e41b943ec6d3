"""Three models a JAX or PyTorch user writes, in effir's Python frontend as
written, compiled and trained (no static-size copy, no IR text):

- an MLP with batch norm and dropout applied at each step of a scan over
  a sequence of symbolic length (``for x, y in zip(xs, ys)``), its cells
  (running statistics, key) carried by the compiled calls;

- a tree network over an ``@effir.adt`` type (a recursive ``match``), its
  gradient by ``effir.value_and_grad``, a few SGD steps that reduce the
  loss over trees of different shapes;
- a greedy decoder, a ``while`` loop whose output has as many steps as it
  runs, the batch symbolic, calling the step function it shares with a
  teacher-forced loss that a few SGD steps reduce.

Each compiled result is checked against the interpreter. Compiled code
runs in a subprocess (tests/support/isolated.py)."""

import shutil

import numpy as np
import pytest

import effir
from effir import Tensor
from tests.support.isolated import run_isolated

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)

F32 = "float32"
H = 4  # a tree node's width
ROW = Tensor[(1, H), F32]


@effir.adt
class Tree:
    """A binary tree with a vector at each leaf."""

    class Leaf:
        x: Tensor[(1, H), F32]

    class Node:
        left: "Tree"
        right: "Tree"


@effir.script
def embed(t: Tree, w: Tensor[(2 * H, H), F32], b: Tensor[(H,), F32]) -> ROW:
    match t:
        case Tree.Leaf(x):
            return np.tanh(x)
        case Tree.Node(left, right):
            both = np.concatenate([embed(left, w, b), embed(right, w, b)], axis=1)
            return np.tanh(both @ w + b)


@effir.script
def tree_loss(
    t: Tree, w: Tensor[(2 * H, H), F32], b: Tensor[(H,), F32], target: ROW
) -> Tensor[(), F32]:
    d = embed(t, w, b) - target
    return np.sum(d * d)


def _trees(rs: np.random.Generator) -> list[tuple[Tree, np.ndarray]]:
    def leaf() -> Tree:
        return Tree.Leaf(rs.standard_normal((1, H)).astype(F32))

    shapes = [
        Tree.Node(leaf(), leaf()),
        Tree.Node(Tree.Node(leaf(), leaf()), leaf()),
        Tree.Node(leaf(), Tree.Node(leaf(), Tree.Node(leaf(), leaf()))),
    ]
    return [(t, (rs.standard_normal((1, H)) * 0.5).astype(F32)) for t in shapes]


def check_tree_network_trains() -> None:
    rs = np.random.default_rng(0)
    data = _trees(rs)
    w = (rs.standard_normal((2 * H, H)) * 0.3).astype(F32)
    b = np.zeros(H, F32)
    grad = effir.value_and_grad(tree_loss, wrt=["w", "b"])
    step = effir.compile(grad)
    forward = effir.compile(tree_loss)
    for t, target in data:  # compiled equals interpreted, value and gradients
        value, (dw, db) = step(t, w, b, target)
        ref_value, (ref_dw, ref_db) = effir.interpret(grad, t, w, b, target)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(dw, ref_dw, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(db, ref_db, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(forward(t, w, b, target), value, rtol=1e-6)

    def loss(w: np.ndarray, b: np.ndarray) -> float:
        return sum(float(forward(t, w, b, target)) for t, target in data)

    before = loss(w, b)
    for _ in range(8):  # SGD over the trees of different shapes
        for t, target in data:
            _, (dw, db) = step(t, w, b, target)
            w, b = w - 0.1 * dw, b - 0.1 * db
    after = loss(w, b)
    assert after < 0.7 * before, (before, after)
    print("ok", before, after)


V = 5  # vocabulary
D = 8  # hidden width
HB = Tensor[("b", D), F32]  # a symbolic batch: spelled outside annotations (ruff reads
TOKENS = Tensor[("b",), "int32"]  # a string in an annotation as a name)
LOGITS = Tensor[("b", V), F32]
SEQUENCE = Tensor[("t", "b"), "int32"]
TARGETS = Tensor[("t", "b", V), F32]


@effir.script
def cell(
    h: HB,
    tok: TOKENS,
    emb: Tensor[(V, D), F32],
    w: Tensor[(D, D), F32],
    u: Tensor[(D, V), F32],
) -> (HB, LOGITS):
    h = np.tanh(effir.op.take(emb, tok, axis=0) + h @ w)
    return h, h @ u


@effir.script
def decode(
    h0: HB,
    tok0: TOKENS,
    emb: Tensor[(V, D), F32],
    w: Tensor[(D, D), F32],
    u: Tensor[(D, V), F32],
):
    h = h0
    tok = tok0
    i = 0
    going = True
    outs = []
    while going:  # until every row says 0 (end), at most 12 steps
        h, logits = cell(h, tok, emb, w, u)
        tok = np.argmax(logits, axis=1)
        outs.append(tok)
        i = i + 1
        going = (i < 12) & (np.max(tok) > 0)
    return np.stack(outs)


@effir.script
def decoder_loss(
    h0: HB,
    inputs: SEQUENCE,
    targets: TARGETS,
    emb: Tensor[(V, D), F32],
    w: Tensor[(D, D), F32],
    u: Tensor[(D, V), F32],
) -> Tensor[(), F32]:
    h = h0
    total = 0.0
    for tok, target in zip(inputs, targets, strict=True):  # teacher forcing
        h, logits = cell(h, tok, emb, w, u)
        total = total - np.sum(effir.nn.log_softmax(logits) * target)
    return total


def check_greedy_decoder_trains() -> None:
    rs = np.random.default_rng(1)
    params = [
        (rs.standard_normal((V, D)) * 0.5).astype(F32),
        (rs.standard_normal((D, D)) * 0.3).astype(F32),
        (rs.standard_normal((D, V)) * 0.5).astype(F32),
    ]
    run = effir.compile(decode)
    lengths = set()
    for b in (3, 2):  # one program, the batch symbolic
        h0 = (rs.standard_normal((b, D)) * 0.5).astype(F32)
        tok0 = rs.integers(1, V, b).astype("int32")
        out = run(h0, tok0, *params)
        np.testing.assert_array_equal(out, effir.interpret(decode, h0, tok0, *params))
        assert out.shape[1] == b and out.dtype == np.int32
        lengths.add(out.shape[0])
    grad = effir.value_and_grad(decoder_loss, wrt=["emb", "w", "u"])
    step = effir.compile(grad)
    b, t = 3, 4
    h0 = (rs.standard_normal((b, D)) * 0.5).astype(F32)
    inputs = rs.integers(1, V, (t, b)).astype("int32")
    following = np.roll(inputs, -1, axis=0)
    following[-1] = 0  # then the end
    targets = np.eye(V, dtype=F32)[following]
    first, _ = step(h0, inputs, targets, *params)
    ref, _ = effir.interpret(grad, h0, inputs, targets, *params)
    np.testing.assert_allclose(first, ref, rtol=1e-5)
    value = first
    for _ in range(6):
        value, grads = step(h0, inputs, targets, *params)
        params = [p - 0.1 * g for p, g in zip(params, grads, strict=True)]
    last, _ = step(h0, inputs, targets, *params)
    assert last < 0.7 * first, (first, last)
    # the trained decoder runs again at another batch size
    out = run(h0[:2], inputs[0, :2], *params)
    np.testing.assert_array_equal(out, effir.interpret(decode, h0[:2], inputs[0, :2], *params))
    print("ok", first, last, sorted(lengths))


M_B, M_D, M_H = 8, 4, 16  # the MLP's batch, input and hidden widths
mlp_bn = effir.cell("mlp_bn", (np.zeros(M_H, F32), np.ones(M_H, F32)))
mlp_rng = effir.cell("mlp_rng", effir.random.key(0))
STEPS_IN = Tensor[("t", M_B, M_D), F32]
STEPS_OUT = Tensor[("t", M_B), F32]


@effir.script
def mlp_scan_loss(
    xs: STEPS_IN,
    ys: STEPS_OUT,
    w1: Tensor[(M_H, M_D), F32],
    gamma: Tensor[(M_H,), F32],
    beta: Tensor[(M_H,), F32],
    w2: Tensor[(1, M_H), F32],
) -> Tensor[(), F32]:
    total = np.float32(0.0)
    for x, y in zip(xs, ys, strict=True):  # a scan: batch norm and dropout at each step
        h = effir.nn.batch_norm(effir.nn.dense(x, w1), gamma, beta, mlp_bn, training=True)
        h = effir.nn.dropout(np.tanh(h), mlp_rng, rate=0.1)
        err = np.reshape(effir.nn.dense(h, w2), (M_B,)) - y
        total = total + np.sum(err * err)
    return total / np.float32(M_B)


def _mlp_batch(rs: np.random.Generator, t: int) -> tuple[np.ndarray, np.ndarray]:
    xs = rs.standard_normal((t, M_B, M_D)).astype(F32)
    return xs, np.sin(xs.sum(axis=2)).astype(F32)


def check_mlp_in_a_scan_trains() -> None:
    rs = np.random.default_rng(4)
    params = [
        (rs.standard_normal((M_H, M_D)) * 0.5).astype(F32),
        np.ones(M_H, F32),
        np.zeros(M_H, F32),
        (rs.standard_normal((1, M_H)) * 0.25).astype(F32),
    ]
    grad = effir.value_and_grad(mlp_scan_loss, wrt=["w1", "gamma", "beta", "w2"])
    step = effir.compile(grad)
    state, ref_state = effir.State(grad), effir.State(grad)
    for t in (3, 5):  # one program, the sequence length symbolic
        xs, ys = _mlp_batch(rs, t)
        value, grads = step(xs, ys, *params, state=state)
        ref_value, ref_grads = effir.interpret(grad, xs, ys, *params, state=ref_state)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        for g, ref in zip(grads, ref_grads, strict=True):
            np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state["mlp_bn"][0], ref_state["mlp_bn"][0], rtol=1e-5)
        assert np.array_equal(state["mlp_rng"].data, ref_state["mlp_rng"].data)
    xs, ys = _mlp_batch(rs, 4)
    first, _ = step(xs, ys, *params, state=state)
    for _ in range(10):
        _, grads = step(xs, ys, *params, state=state)
        params = [p - 0.05 * g for p, g in zip(params, grads, strict=True)]
    last, _ = step(xs, ys, *params, state=state)
    assert last < 0.8 * first, (first, last)
    print("ok", first, last)


def test_the_tree_network_runs_eagerly_as_interpreted():
    rs = np.random.default_rng(2)
    w = (rs.standard_normal((2 * H, H)) * 0.3).astype(F32)
    b = np.zeros(H, F32)
    for t, target in _trees(rs):
        np.testing.assert_allclose(
            effir.interpret(tree_loss, t, w, b, target), tree_loss(t, w, b, target), rtol=1e-6
        )


@pytest.mark.parametrize(
    "check",
    ["check_mlp_in_a_scan_trains", "check_tree_network_trains", "check_greedy_decoder_trains"],
)
def test_compiled_and_trained(check: str) -> None:
    done = run_isolated(f"from tests.frontend.test_python_models import {check}; {check}()")
    assert done.check().stdout.strip().startswith("ok")


def check_tree_network_builds_for_cuda() -> None:
    import tvm

    grad = effir.value_and_grad(tree_loss, wrt=["w", "b"])
    compiled = effir.compile(grad, target="cuda")  # static shapes: built at once
    (spec,) = compiled.specialisations.values()
    assert ".entry" in spec.ptx()
    decoder = effir.compile(decode, target="cuda", dims={"b": 2})
    built = list(decoder.specialisations.values())
    assert built and all(".entry" in s.ptx() for s in built)
    if tvm.cuda(0).exist:  # a lent GPU machine runs it
        rs = np.random.default_rng(3)
        w = (rs.standard_normal((2 * H, H)) * 0.3).astype(F32)
        b = np.zeros(H, F32)
        for t, target in _trees(rs):
            value, (dw, _) = compiled(t, w, b, target)
            ref_value, (ref_dw, _) = effir.interpret(grad, t, w, b, target)
            np.testing.assert_allclose(value, ref_value, rtol=1e-4)
            np.testing.assert_allclose(dw, ref_dw, rtol=1e-3, atol=1e-5)
        print("ok on the GPU")
        return
    print("ok")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_tree_network_builds_for_cuda() -> None:
    done = run_isolated(
        "from tests.frontend.test_python_models import check_tree_network_builds_for_cuda; "
        "check_tree_network_builds_for_cuda()"
    )
    assert done.check().stdout.strip().startswith("ok")
