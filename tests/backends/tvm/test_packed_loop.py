"""``effir.compile_packed`` (backends/tvm/loop/cpu/packed.py): one compiled loop
over a packed batch whose step runs only the row tiles still active. Its
results equal each sequence run alone by the interpreter, for random
lengths (with 0, 1, equal lengths, a batch that is not a multiple of the
tile; hypothesis over lengths), from a padded batch in any order and from
PyTorch's packed layout; arguments that are not a packed batch are refused
with an effir error. The compiled runs are isolated (tests/support/isolated.py):
the kernel indexes with data."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.frontend.packed import PackedScanError
from tests.support.isolated import run_isolated

PROGRAM = """#[version = "0.0.5"]
def @main(%xs: Tensor[(t, b, 3), float32], %h0: Tensor[(b, 4), float32],
          %w: Tensor[(12, 3), float32], %u: Tensor[(12, 4), float32]) {
  let %step = fn (%x: Tensor[(b, 3), float32], %h: Tensor[(b, 4), float32]) {
    let %gx = split(nn.dense(%x, %w), indices_or_sections=3, axis=1);
    let %gh = split(nn.dense(%h, %u), indices_or_sections=3, axis=1);
    let %z = sigmoid(%gx.0 + %gh.0);
    let %r = sigmoid(%gx.1 + %gh.1);
    let %n = tanh(%gx.2 + %r * %gh.2);
    ((), (1f - %z) * %n + %z * %h)
  };
  cf.foreach(%step, %xs, %h0).1
}
"""

# The step reads an element of x itself (not only through a product): the
# packed loop gathers it into a buffer of its own. A tuple state too.
TUPLES = """#[version = "0.0.5"]
def @main(%xs: (Tensor[(t, b, 3), float32], Tensor[(t, b, 4), float32]),
          %h0: (Tensor[(b, 4), float32], Tensor[(b, 4), float32]),
          %w: Tensor[(4, 3), float32]) {
  let %step = fn (%x: (Tensor[(b, 3), float32], Tensor[(b, 4), float32]),
                  %s: (Tensor[(b, 4), float32], Tensor[(b, 4), float32])) {
    let %h = tanh(nn.dense(%x.0, %w) + %x.1 * %s.0);
    ((), (%h, %s.1 + %h))
  };
  cf.foreach(%step, %xs, %h0).1
}
"""

COMMON = f"""
import numpy as np, effir
PROGRAM = '''{PROGRAM}'''
TUPLES = '''{TUPLES}'''
module = effir.check(effir.parse(PROGRAM))


def alone(module, xs, lengths, h0, *captured):
    '''Each sequence run alone by the interpreter.'''
    out = []
    for b, length in enumerate(lengths):
        x = xs[:length, b : b + 1]
        out.append(np.asarray(effir.interpret(module, x, h0[b : b + 1], *captured))[0])
    return np.stack(out)


def inputs(lengths, seed):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    t = max(int(lengths.max()), 1)
    xs = rng.standard_normal((t, len(lengths), 3), dtype=np.float32)
    h0 = rng.standard_normal((len(lengths), 4), dtype=np.float32)
    w = (rng.standard_normal((12, 3)) / 2).astype(np.float32)
    u = (rng.standard_normal((12, 4)) / 2).astype(np.float32)
    return xs, lengths, h0, w, u
"""


def test_packed_loop_equals_each_sequence_alone():
    """Fixed cases, interpreted reference; the lengths from hypothesis (a
    batch of 1 to 13, lengths 0 to 40: chunks of 16 steps, tiles of 4)."""
    run_isolated(
        COMMON
        + """
from hypothesis import given, settings, strategies as st

packed = effir.compile_packed(module, tile=4)
cases = [[5, 0, 9, 1, 3, 7], [4, 4, 4, 4, 4, 4], [1], [0, 0, 0], [17, 1, 33, 2, 16, 40, 3, 9, 1]]
for seed, lengths in enumerate(cases):
    xs, lengths, h0, w, u = inputs(lengths, seed)
    want = alone(module, xs, lengths, h0, w, u)
    got = packed(xs, lengths, h0, w, u)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=str(lengths))
    # the same through packed_scan, and the mask-free interpreted path agrees
    np.testing.assert_allclose(effir.packed_scan(packed, xs, lengths, h0, w, u), got)
print("fixed ok")

# A numpy reference for the many examples (checked against the interpreter above).
def sigmoid(x):
    return 1 / (1 + np.exp(-x))

def reference(xs, lengths, h0, w, u):
    out = h0.copy()
    for b, length in enumerate(lengths):
        h = h0[b]
        for t in range(length):
            gx, gh = np.split(w @ xs[t, b], 3), np.split(u @ h, 3)
            z, r = sigmoid(gx[0] + gh[0]), sigmoid(gx[1] + gh[1])
            h = (1 - z) * np.tanh(gx[2] + r * gh[2]) + z * h
        out[b] = h
    return out

xs, lengths, h0, w, u = inputs(cases[-1], 9)
np.testing.assert_allclose(reference(xs, lengths, h0, w, u), alone(module, xs, lengths, h0, w, u), rtol=1e-5, atol=1e-6)

@settings(max_examples=30, deadline=None, database=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=13), st.integers(0, 2**16))
def check(lengths, seed):
    xs, lengths, h0, w, u = inputs(lengths, seed)
    got = packed(xs, lengths, h0, w, u)
    np.testing.assert_allclose(got, reference(xs, lengths, h0, w, u), rtol=1e-5, atol=1e-6)

check()
assert packed.builds == 1, packed.builds  # the batch size and lengths are data
print("hypothesis ok")
"""
    ).check()


def test_packed_layout_tuples_outputs_and_the_wider_tile():
    """PyTorch's packed layout (``run_packed``) gives the sorted rows' final
    states; a step reading x itself and a tuple state; the 8-row tile; the
    per-step outputs when @main returns them."""
    run_isolated(
        COMMON
        + """
packed = effir.compile_packed(module, tile=8)
xs, lengths, h0, w, u = inputs([21, 13, 13, 9, 2, 1, 1, 1, 1, 1, 0], 5)
order = np.argsort(-lengths, kind="stable")
ordered = lengths[order]
sizes = np.array([(ordered > t).sum() for t in range(ordered[0])])
data = np.concatenate([xs[t, order[: sizes[t]]] for t in range(ordered[0])])
want = alone(module, xs, lengths, h0, w, u)
got = packed(xs, lengths, h0, w, u)
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
active = sizes[0]
got = packed.run_packed(data, sizes, h0[order[:active]], w, u)
np.testing.assert_allclose(got, want[order[:active]], rtol=1e-5, atol=1e-6)

tuples = effir.check(effir.parse(TUPLES))
rng = np.random.default_rng(2)
lengths = np.array([3, 7, 1, 0, 5])
xs = (rng.standard_normal((7, 5, 3), dtype=np.float32), rng.standard_normal((7, 5, 4), dtype=np.float32))
h0 = (rng.standard_normal((5, 4), dtype=np.float32), np.zeros((5, 4), np.float32))
w = rng.standard_normal((4, 3), dtype=np.float32)
got = effir.compile_packed(tuples)(xs, lengths, h0, w)
for b, length in enumerate(lengths):
    alone_b = effir.interpret(tuples, tuple(x[:length, b : b + 1] for x in xs),
                              tuple(h[b : b + 1] for h in h0), w)
    for leaf, want_leaf in zip(got, alone_b):
        np.testing.assert_allclose(leaf[b], np.asarray(want_leaf)[0], rtol=1e-5, atol=1e-6)

# @main returns the whole scan: the per-step outputs too, as each
# sequence alone gives them, zero past its end (packed layout: its rows).
both = effir.check(effir.parse(PROGRAM.replace("((), (1f", "let %o = (1f").replace(
    "%z * %h)", "%z * %h;\\n    (%o, %o)").replace("cf.foreach(%step, %xs, %h0).1", "cf.foreach(%step, %xs, %h0)")))
xs, lengths, h0, w, u = inputs([6, 0, 2, 9, 1], 7)
outs, final = effir.compile_packed(both)(xs, lengths, h0, w, u)
assert outs.shape == xs.shape[:2] + (4,)
for b, length in enumerate(lengths):
    want_outs, want_final = effir.interpret(both, xs[:length, b : b + 1], h0[b : b + 1], w, u)
    np.testing.assert_allclose(outs[:length, b], np.asarray(want_outs)[:, 0], rtol=1e-5, atol=1e-6)
    assert not outs[length:, b].any()
    np.testing.assert_allclose(final[b], np.asarray(want_final)[0], rtol=1e-5, atol=1e-6)
order = np.argsort(-lengths, kind="stable")
ordered = lengths[order]
sizes = np.array([(ordered > t).sum() for t in range(ordered[0])])
data = np.concatenate([xs[t, order[: sizes[t]]] for t in range(ordered[0])])
packed_outs, _ = effir.compile_packed(both).run_packed(data, sizes, h0[order[: sizes[0]]], w, u)
want = np.concatenate([outs[t, order[: sizes[t]]] for t in range(ordered[0])])
np.testing.assert_allclose(packed_outs, want, rtol=1e-6)
# packed_scan gives the final state only, as its contract says
np.testing.assert_allclose(effir.packed_scan(effir.compile_packed(both), xs, lengths, h0, w, u), final)
print("ok")
"""
    ).check()


def test_parts_split_the_tiles_bit_identically():
    """[PARTS] The row tiles split across the pool for the whole call (a
    threshold of 0: every call is worth it) give the serial build's results
    bit for bit, and each sequence's alone: final states, the per-step
    outputs, PyTorch's layout, a tuple state with x read by the step, tiles
    of 4 and 8, lengths of 0, a batch not a multiple of the tile; a call
    under the threshold stays serial (one build per count of parts)."""
    run_isolated(
        COMMON
        + """
from effir.backends.tvm.loop.cpu import rows
from effir.backends.tvm.loop.cpu import schedule as cpu_schedule

threads = 2
rows.pool_threads = lambda: threads  # two parts whatever the pool (a pool of one runs both)
both = effir.check(effir.parse(PROGRAM.replace("((), (1f", "let %o = (1f").replace(
    "%z * %h)", "%z * %h;\\n    (%o, %o)").replace("cf.foreach(%step, %xs, %h0).1", "cf.foreach(%step, %xs, %h0)")))
cases = [[17, 1, 33, 2, 16, 40, 3, 9, 1, 0, 25, 40, 7], [5, 5, 5, 5, 5, 5, 5, 5, 5], [3, 1]]
for tile in (4, 8):
    serial = effir.compile_packed(both, tile=tile, parallel=False)
    split = effir.compile_packed(both, tile=tile)
    for seed, lengths in enumerate(cases):
        xs, lengths, h0, w, u = inputs(lengths, seed)
        want_outs, want = serial(xs, lengths, h0, w, u)
        cpu_schedule.PARALLEL_MIN_WORK = 0
        outs, got = split(xs, lengths, h0, w, u)
        order = np.argsort(-lengths, kind="stable")
        sizes = np.array([(lengths[order] > t).sum() for t in range(lengths.max())])
        data = np.concatenate([xs[t, order[: sizes[t]]] for t in range(len(sizes))])
        p_outs, p_final = split.run_packed(data, sizes, h0[order[: sizes[0]]], w, u)
        cpu_schedule.PARALLEL_MIN_WORK = 1 << 27
        assert np.array_equal(got, want) and np.array_equal(outs, want_outs), (tile, lengths)
        assert np.array_equal(p_final, want[order[: sizes[0]]])
        packed_want = np.concatenate([want_outs[t, order[: sizes[t]]] for t in range(len(sizes))])
        assert np.array_equal(p_outs, packed_want)
        alone_b = [effir.interpret(both, xs[:n, b : b + 1], h0[b : b + 1], w, u)[1]
                   for b, n in enumerate(lengths)]
        np.testing.assert_allclose(got, np.stack([np.asarray(a)[0] for a in alone_b]),
                                   rtol=1e-5, atol=1e-6)
    builds = sorted(key[1] for key in split.loop._builds)
    assert builds == [1, threads], builds  # split but [3, 1]'s one tile
fresh = effir.compile_packed(both, tile=4)
fresh(*inputs(cases[0], 0))  # under the threshold: serial
assert [key[1] for key in fresh.loop._builds] == [1]

tuples = effir.check(effir.parse(TUPLES))
rng = np.random.default_rng(2)
lengths = np.array([3, 7, 1, 0, 5, 6, 6, 2, 7, 4])
xs = (rng.standard_normal((7, 10, 3), dtype=np.float32), rng.standard_normal((7, 10, 4), dtype=np.float32))
h0 = (rng.standard_normal((10, 4), dtype=np.float32), np.zeros((10, 4), np.float32))
w = rng.standard_normal((4, 3), dtype=np.float32)
want = effir.compile_packed(tuples, tile=4, parallel=False)(xs, lengths, h0, w)
cpu_schedule.PARALLEL_MIN_WORK = 0
got = effir.compile_packed(tuples, tile=4)(xs, lengths, h0, w)
for leaf, want_leaf in zip(got, want):
    assert np.array_equal(leaf, want_leaf)
print("ok")
"""
    ).check()


def test_parts_balance_the_tile_steps():
    """[PARTS] The host's layout: every active (step, row tile) once, each
    part's active tiles a prefix of its own, the parts' tile-steps within
    one tile's length of each other."""
    from effir.backends.tvm.loop.cpu.packed import CHUNK_STEPS, _Plan, _sizes

    rng = np.random.default_rng(3)
    lengths = np.sort(rng.integers(1, 201, 64))[::-1]
    plan = _Plan.of(_sizes(lengths), 4, lambda t, r: t * 1000 + r, np.arange(64))
    for parts in (1, 2, 3):
        layout = plan.layout(parts)
        first, mine, index = layout.first, layout.mine, layout.index
        seen = set()
        for p in range(parts):
            for t in range(len(plan.per_step)):
                for k in range(first[p, t + 1] - first[p, t]):
                    j = int(mine[p, k])
                    assert j < plan.per_step[t]
                    seen.add((t, j))
                    assert index[first[p, t] + k, 0] == t * 1000 + j * 4
        assert len(seen) == plan.tiles == first[-1, -1]
        loads = np.diff(np.concatenate([[0], first[:, -1]]))
        assert loads.max() - loads.min() <= plan.per_step.size, loads
        steps = plan.per_step.size
        bounds = np.minimum(np.arange(0, steps + CHUNK_STEPS, CHUNK_STEPS), steps)
        assert layout.room == np.diff(first[:, bounds], axis=1).max()


def _packed():
    return effir.compile_packed(effir.check(effir.parse(PROGRAM)))


def _args(lengths, t=5, batch=None):
    batch = len(lengths) if batch is None else batch
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((t, batch, 3), dtype=np.float32),
        np.asarray(lengths),
        np.zeros((batch, 4), np.float32),
        np.zeros((12, 3), np.float32),
        np.zeros((12, 4), np.float32),
    )


def test_arguments_that_are_not_a_packed_batch_are_refused():
    """Refused before anything is built or run, with a PackedScanError."""
    packed = _packed()
    xs, lengths, h0, w, u = _args([2, 6, 1])
    with pytest.raises(PackedScanError, match="a length of 6 exceeds the 5 steps"):
        packed(xs, lengths, h0, w, u)
    xs, lengths, h0, w, u = _args([2, 5, 1])
    with pytest.raises(PackedScanError, match="not sorted longest first"):
        packed(xs, lengths, h0, w, u, enforce_sorted=True)
    with pytest.raises(PackedScanError, match=r"lengths \(B,\)"):
        packed(xs, lengths[:2], h0, w, u)
    with pytest.raises(PackedScanError, match=r"initial state \(B, ...\)"):
        packed(xs, lengths, h0[:2], w, u)
    with pytest.raises(PackedScanError, match="integers >= 0"):
        packed(xs, np.array([2, -1, 1]), h0, w, u)
    with pytest.raises(PackedScanError, match="takes 2 value"):
        packed(xs, lengths, h0, w)
    data = np.zeros((6, 3), np.float32)
    with pytest.raises(PackedScanError, match="must not increase"):
        packed.run_packed(data, np.array([2, 3, 1]), h0[:2], w, u)
    with pytest.raises(PackedScanError, match="sum to 5 rows"):
        packed.run_packed(data, np.array([3, 1, 1]), h0, w, u)
    with pytest.raises(PackedScanError, match="must have 3 rows"):
        packed.run_packed(data, np.array([3, 2, 1]), h0[:2], w, u)
    assert packed.builds == 0


def test_programs_that_are_not_a_packed_scan_are_refused():
    no_loop = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(b, 3), float32], %h: Tensor[(b, 3), float32]) { %x }'
    with pytest.raises(PackedScanError, match="must return a cf.foreach's result"):
        effir.compile_packed(effir.check(effir.parse(no_loop)))
    other = PROGRAM.replace("cf.foreach(%step, %xs, %h0).1", "cf.foreach(%step, %xs, %h0).1 * 2f")
    with pytest.raises(PackedScanError, match="must return a cf.foreach's result"):
        effir.compile_packed(effir.check(effir.parse(other)))
    computed = PROGRAM.replace(
        "let %step", "let %v = transpose(transpose(%u));\n  let %step"
    ).replace("nn.dense(%h, %u)", "nn.dense(%h, %v)")
    with pytest.raises(PackedScanError, match="reads %v, computed in @main"):
        effir.compile_packed(effir.check(effir.parse(computed)))
    batch_captured = PROGRAM.replace(
        "%u: Tensor[(12, 4), float32]", "%u: Tensor[(12, 4), float32], %m: Tensor[(b, 4), float32]"
    ).replace("%z * %h)", "%z * %h * %m)")
    with pytest.raises(effir.BackendError, match="has the batch dimension b"):
        effir.compile_packed(effir.check(effir.parse(batch_captured)))
    with pytest.raises(effir.BackendError, match="tile is one of"):
        effir.compile_packed(effir.check(effir.parse(PROGRAM)), tile=3)
