"""``effir.packed_scan`` (effir/frontend/packed.py): variable-length batches
run over a shrinking prefix of the batch sorted by length, equal to running
each sequence alone, interpreted and compiled; the segments never run a
step on a prefix wider than its active rows rounded up to the tile."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.frontend.packed import PackedScanError, segments

I, H = 3, 4

MASKED_GRU = f"""#[version = "0.0.5"]
def @main(%xs: Tensor[(t, b, {I}), float32], %done: Tensor[(t, b, 1), float32],
          %h0: Tensor[(b, {H}), float32], %w: Tensor[({3 * H}, {I}), float32],
          %u: Tensor[({3 * H}, {H}), float32]) {{
  let %step = fn (%x: (Tensor[(b, {I}), float32], Tensor[(b, 1), float32]),
                  %h: Tensor[(b, {H}), float32]) {{
    let %gx = split(nn.dense(%x.0, %w), indices_or_sections=3, axis=1);
    let %gh = split(nn.dense(%h, %u), indices_or_sections=3, axis=1);
    let %z = maximum(sigmoid(%gx.0 + %gh.0), %x.1);
    let %r = sigmoid(%gx.1 + %gh.1);
    let %n = tanh(%gx.2 + %r * %gh.2);
    ((), (1f - %z) * %n + %z * %h)
  }};
  cf.foreach(%step, (%xs, %done), %h0).1
}}
"""


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def reference(xs, lengths, h0, w, u):
    """Each sequence alone, step by step."""
    out = h0.copy()
    for b, length in enumerate(lengths):
        h = h0[b]
        for t in range(length):
            gx, gh = np.split(w @ xs[t, b], 3), np.split(u @ h, 3)
            z, r = sigmoid(gx[0] + gh[0]), sigmoid(gx[1] + gh[1])
            h = (1 - z) * np.tanh(gx[2] + r * gh[2]) + z * h
        out[b] = h
    return out


def inputs(lengths, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    xs = rng.standard_normal((max(int(lengths.max()), 1), len(lengths), I), dtype=np.float32)
    h0 = rng.standard_normal((len(lengths), H), dtype=np.float32)
    w = (rng.standard_normal((3 * H, I)) / 2).astype(np.float32)
    u = (rng.standard_normal((3 * H, H)) / 2).astype(np.float32)
    return xs, lengths, h0, w, u


CASES = {
    "random with 0 and 1": [5, 0, 9, 1, 3, 7],
    "all equal": [4, 4, 4, 4, 4, 4],
    "all zero": [0, 0, 0],
    "one sequence": [6],
}


@pytest.mark.parametrize("lengths", list(CASES.values()), ids=list(CASES))
def test_interpreted_equals_each_sequence_alone(lengths):
    module = effir.parse(MASKED_GRU)
    xs, lengths, h0, w, u = inputs(lengths)
    want = reference(xs, lengths, h0, w, u)
    run = lambda *a: effir.interpret(module, *a)  # noqa: E731
    got = effir.packed_scan(run, xs, lengths, h0, w, u, tile=2, call_cost=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.tvm
def test_compiled_equals_each_sequence_alone():
    compiled = effir.compile(effir.parse(MASKED_GRU))
    for lengths in ([5, 0, 9, 1, 3, 7], [4, 4, 4, 4, 4, 4]):  # batch sizes 6 and 4: two builds
        xs, lengths, h0, w, u = inputs(lengths, seed=1)
        got = effir.packed_scan(compiled, xs, lengths, h0, w, u, tile=4, call_cost=0)
        np.testing.assert_allclose(got, reference(xs, lengths, h0, w, u), rtol=1e-5, atol=1e-6)
    assert sorted(b.dims["b"] for b in compiled.report.builds) == [4, 6]


def test_segments_shrink_with_the_active_rows():
    lengths = np.array([9, 7, 5, 3, 1, 0])  # sorted, longest first
    # Calls free: the prefix shrinks as soon as a tile of rows is done.
    assert segments(lengths, tile=2, call_cost=0) == [(6, 0, 1), (4, 1, 5), (2, 5, 9)]
    assert segments(lengths, tile=1, call_cost=0) == [
        (5, 0, 1),
        (4, 1, 3),
        (3, 3, 5),
        (2, 5, 7),
        (1, 7, 9),
    ]
    # Calls dear: fewer segments, never fewer row-steps than needed.
    assert len(segments(lengths, tile=2, call_cost=10)) == 2  # 58 against 60 with three
    assert segments(lengths, tile=2, call_cost=100) == [(6, 0, 9)]
    assert segments(np.array([4, 4, 4]), tile=2) == [(3, 0, 4)]
    assert segments(np.array([0, 0]), tile=8) == []
    # Every active row is in its step's prefix; with free calls no prefix is
    # wider than the active rows rounded up to the tile.
    lengths = np.sort(np.random.default_rng(3).integers(0, 50, 37))[::-1]
    for call_cost in (0, 50, 1e9):
        covered = 0
        for rows, start, stop in segments(lengths, 8, call_cost):
            assert start == covered
            covered = stop
            for t in range(start, stop):
                active = int((lengths > t).sum())
                assert active <= rows
                assert call_cost or rows <= -(-active // 8) * 8 or rows == len(lengths)
        assert covered == lengths[0]


def test_arguments_that_are_not_a_packed_batch_are_refused():
    xs, lengths, h0, w, u = inputs([2, 1])
    with pytest.raises(PackedScanError, match="exceeds the 2 steps"):
        effir.packed_scan(lambda *a: a[2], xs, np.array([3, 1]), h0)
    with pytest.raises(PackedScanError, match="integers >= 0"):
        effir.packed_scan(lambda *a: a[2], xs, np.array([-1, 1]), h0)
    with pytest.raises(PackedScanError, match="lengths"):
        effir.packed_scan(lambda *a: a[2], xs, np.array([1, 1, 1]), h0)
