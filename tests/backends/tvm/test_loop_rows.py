"""[ROWS] (loop/rows.py): a whole loop whose rows are independent (a GRU
over a batch) runs by blocks of rows across the thread pool, each block
through every step, with no barrier per step (batch 32); a loop
whose step mixes rows keeps the serial form; batch 1 stays serial. The
split's results equal the interpreter's and, bit for bit, the serial
form's (the same arithmetic per row)."""

from __future__ import annotations

import pytest

from effir.backends.tvm.loop import build_loop, lower_loop
from effir.backends.tvm.loop.cpu import rows
from effir.backends.tvm.loop.cpu import schedule as cpu_schedule
from tests.support.gru_programs import gru_text
from tests.support.isolated import run_isolated
from tests.support.loop_programs import foreach_of, module

MIXING = {
    # a reduction over the batch axis
    "sum over the batch": """
def @main(%xs: Tensor[(t, b, 16), float32], %h0: Tensor[(b, 16), float32],
          %w: Tensor[(16, 16), float32], %p: Tensor[(b, b), float32]) {
  let %step = fn (%x: Tensor[(b, 16), float32], %h: Tensor[(b, 16), float32]) {
    let %m = sum(%h, axis=[0], keepdims=True);
    let %h_new = tanh(nn.dense(%x, %w) + %h * 0.5f + %m * 0.01f);
    (%h_new, %h_new)
  };
  cf.foreach(%step, %xs, %h0)
}
""",
    # the carry on the right of a product: row i reads every row of %h
    "matmul with the carry on the right": """
def @main(%xs: Tensor[(t, b, 16), float32], %h0: Tensor[(b, 16), float32],
          %w: Tensor[(16, 16), float32], %p: Tensor[(b, b), float32]) {
  let %step = fn (%x: Tensor[(b, 16), float32], %h: Tensor[(b, 16), float32]) {
    let %h_new = tanh(nn.dense(%x, %w) + nn.matmul(%p, %h, transpose_a=False, transpose_b=False));
    (%h_new, %h_new)
  };
  cf.foreach(%step, %xs, %h0)
}
""",
    # a captured tensor indexed by the row: refused (conservatively)
    "a captured tensor of the batch's rows": """
def @main(%xs: Tensor[(t, b, 16), float32], %h0: Tensor[(b, 16), float32],
          %w: Tensor[(16, 16), float32], %p: Tensor[(b, b), float32]) {
  let %step = fn (%x: Tensor[(b, 16), float32], %h: Tensor[(b, 16), float32]) {
    let %h_new = tanh(nn.dense(%x, %w) + %h * sum(%p, axis=[1], keepdims=True));
    (%h_new, %h_new)
  };
  cf.foreach(%step, %xs, %h0)
}
""",
}


def _blocks(text: str, batch: int) -> int:
    _, body, _ = foreach_of(module(text))
    captured = build_loop(body).captured  # the batch is symbolic: nothing built yet
    return lower_loop(body, {"b": batch}, captured, {}, None, parallel=True).row_blocks


@pytest.mark.parametrize(("batch", "blocks"), [(32, 2), (8, 1), (1, 1)])
def test_the_hidden_256_gru_splits_at_batch_32(
    batch: int, blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads: batch 32 runs as two blocks of 16 rows; batch 8's work
    (2**26.6 multiply-adds at SYMBOLIC_EXTENT steps) is not worth a
    barrier; batch 1 stays serial. Scheduled only, not built."""
    monkeypatch.setattr(rows, "pool_threads", lambda: 2)
    assert _blocks(gru_text(256), batch) == blocks


def test_batch_1_stays_serial_whatever_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "pool_threads", lambda: 2)
    monkeypatch.setattr(cpu_schedule, "PARALLEL_MIN_WORK", 1)
    assert _blocks(gru_text(16), 1) == 1
    assert _blocks(gru_text(16), 6) == 1  # blocks of 3 rows: fewer than ROW_BLOCK_MIN_ROWS
    assert _blocks(gru_text(16), 8) == 2


@pytest.mark.parametrize("name", sorted(MIXING))
def test_a_step_that_mixes_rows_is_not_split(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows, "pool_threads", lambda: 2)
    monkeypatch.setattr(cpu_schedule, "PARALLEL_MIN_WORK", 1)
    assert _blocks(MIXING[name], 32) == 1


CHECK = """
import numpy as np
import effir
from effir.backends.tvm.loop import build_loop
from effir.backends.tvm.loop.cpu import rows
from effir.backends.tvm.loop.cpu import schedule as cpu_schedule
from tests.support.loop_programs import GRU, assert_close, foreach_of, gru_inputs, module
from tests.backends.tvm.test_loop_rows import MIXING

rows.pool_threads = lambda: 2
cpu_schedule.PARALLEL_MIN_WORK = 1  # the small GRU's work would keep it serial
split = rows.row_blocks


def run(mod, blocks, b, args):
    # the row blocks and the results of mod's loop built for batch b
    rows.row_blocks = split if blocks else (lambda *a: 1)
    _, body, _ = foreach_of(mod)
    k = build_loop(body, module=mod, dims={"b": b})
    params = [p.name_hint for p in mod["main"].params]
    captured = [args[params.index(v.name_hint)] for v in k.captured]
    return k.specialise({"b": b}).lowered.row_blocks, k(args[0], args[1], *captured)


gru = module(GRU)
for t, b in [(11, 8), (16, 32), (1, 12)]:
    args = gru_inputs(np.random.default_rng(t * 100 + b), t, b)
    (blocks, by_rows), (one, serial) = run(gru, True, b, args), run(gru, False, b, args)
    assert (blocks, one) == (2, 1), (blocks, one)
    assert_close(by_rows, effir.interpret(gru, *args))
    for a, e in zip(by_rows, serial, strict=True):
        assert np.array_equal(a, e), (t, b)  # bit for bit
for name, text in MIXING.items():
    mod = module(text)
    rng = np.random.default_rng(1)
    shapes = [(5, 32, 16), (32, 16), (16, 16), (32, 32)]
    args = [rng.uniform(-1, 1, s).astype("float32") for s in shapes]
    blocks, out = run(mod, True, 32, args)
    assert blocks == 1, name
    for a, e in zip(out, effir.interpret(mod, *args), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=name)  # sums of 32 terms
print("ok")
"""


def test_split_by_rows_equals_the_interpreter_and_the_serial_form() -> None:
    """The small GRU split into two blocks of rows (the work threshold
    lowered), at batches 8, 32 and 12 (blocks of 4, 16, 6 rows; lengths
    around the prologue's tile): the interpreter's values, and the serial
    form's bit for bit; the row-mixing loops, not split, the interpreter's."""
    result = run_isolated(CHECK)
    result.check()
    assert result.stdout.strip().endswith("ok")
