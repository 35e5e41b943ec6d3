"""[COLUMNS] (loop/columns.py): a step whose constant operands overflow one
core's L2 but fit the pool's, at a batch too small for the row split (the
hidden-256 GRU at batch 1, issue 18), runs its contraction's column panels
across the pool; every other regime keeps its decision (batch 32: rows;
hidden 32, batch 8: serial). The split's results equal, bit for bit, the
serial step's (each element the same sum in the same order)."""

from __future__ import annotations

from pathlib import Path

import pytest

from effir.backends.tvm.loop import build_loop, columns, lower_loop, rows
from effir.backends.tvm.loop.columns import L2Caches, StepFacts, read_l2, split_columns
from tests.backends.tvm.test_loop import foreach_of, module
from tests.backends.tvm.test_loop_tiles import gru_text
from tests.isolated import run_isolated

ZEN3 = L2Caches(512 << 10, 2)
"""The development machine: two cores, 512 KiB of L2 each."""

GRU_256_B1 = StepFacts(const_bytes=768 * 256 * 4 + 768 * 4, rows=1, work=768 * 256)


@pytest.mark.parametrize(
    ("facts", "threads", "l2", "split"),
    [
        (GRU_256_B1, 2, ZEN3, True),  # 789 KB: over 448 KB, within 2 x 448 KB
        (GRU_256_B1, 2, L2Caches(1 << 20, 2), False),  # fits one core's L2
        (GRU_256_B1, 2, L2Caches(256 << 10, 2), False),  # overflows both
        (GRU_256_B1, 2, L2Caches(512 << 10, 1), False),  # one L2 for both threads
        (GRU_256_B1, 1, ZEN3, False),  # no second thread
        (GRU_256_B1, 2, None, False),  # caches unknown
        (StepFacts(GRU_256_B1.const_bytes, 8, 8 * 768 * 256), 2, ZEN3, False),  # rows' regime
        (StepFacts(GRU_256_B1.const_bytes, 4, 4 * 768 * 256), 2, ZEN3, True),  # too few rows
        (StepFacts(600 << 10, 1, 1 << 15), 2, ZEN3, False),  # too little work a step
        (StepFacts(GRU_256_B1.const_bytes, 0, 0), 2, ZEN3, False),  # no contraction
    ],
)
def test_the_criterion(facts: StepFacts, threads: int, l2: L2Caches | None, split: bool) -> None:
    assert split_columns(facts, threads, l2) == split


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str):
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, text in [("level", level), ("type", kind), ("size", size)]:
        (d / name).write_text(f"{text}\n")
    (d / "shared_cpu_list").write_text(f"{shared}\n")


def test_l2_caches_from_sysfs(tmp_path: Path) -> None:
    """Private L2s (as on the development machine), SMT siblings sharing
    one, and a tree without L2 entries (no split: caches unknown)."""
    for cpu in (0, 1):
        _cache(tmp_path / "private", cpu, 0, 1, "Data", "32K", str(cpu))
        _cache(tmp_path / "private", cpu, 1, 2, "Unified", "512K", str(cpu))
        _cache(tmp_path / "private", cpu, 2, 3, "Unified", "32768K", "0-1")
        _cache(tmp_path / "smt", cpu, 0, 2, "Unified", "1M", "0-1")
        _cache(tmp_path / "no_l2", cpu, 0, 1, "Data", "32K", str(cpu))
    assert read_l2([0, 1], tmp_path / "private") == L2Caches(512 << 10, 2)
    assert read_l2([0, 1], tmp_path / "smt") == L2Caches(1 << 20, 1)
    assert read_l2([0, 1], tmp_path / "no_l2") is None
    assert read_l2([0, 1], tmp_path / "missing") is None


@pytest.fixture
def zen3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads on the development machine's caches, whatever runs the test."""
    monkeypatch.setattr(rows, "pool_threads", lambda: 2)
    monkeypatch.setattr(columns, "pool_l2", lambda threads: ZEN3)


@pytest.mark.parametrize(
    ("hidden", "batch", "row_blocks", "by_columns", "in_step"),
    [(256, 1, 1, True, 1), (256, 32, 2, False, 0), (256, 8, 1, False, 0), (32, 1, 1, False, 0)],
)
def test_decisions_of_the_gru(
    zen3: None, hidden: int, batch: int, row_blocks: int, by_columns: bool, in_step: int
) -> None:
    """Hidden 256: batch 1 splits its step's product by columns (one
    parallel loop in the step), batch 32 by rows (as before), batch 8 stays
    serial (its rows are the row split's, its call's work below its
    threshold); hidden 32 (12 KB of weights) stays serial. Scheduled only."""
    _, body, _ = foreach_of(module(gru_text(hidden)))
    captured = build_loop(body).captured  # the batch is symbolic: nothing built yet
    lowered = lower_loop(body, {"b": batch}, captured, {}, None, parallel=True)
    assert (lowered.row_blocks, lowered.split_columns) == (row_blocks, by_columns)
    assert lowered.unscheduled == []
    script = lowered.func.script()
    assert script[script.index("for t in range(") :].count("T.parallel(") == in_step


def test_no_split_without_the_pool(zen3: None) -> None:
    _, body, _ = foreach_of(module(gru_text(256)))
    captured = build_loop(body).captured
    lowered = lower_loop(body, {"b": 1}, captured, {}, None, parallel=False)
    assert not lowered.split_columns and "T.parallel(" not in lowered.func.script()


CHECK = """
import numpy as np
import effir
from effir.backends.tvm.loop import build_loop, columns, rows
from tests.backends.tvm.test_loop import assert_close, foreach_of, module
from tests.backends.tvm.test_loop_tiles import gru_text

rows.pool_threads = lambda: 2
columns.pool_l2 = lambda threads: columns.L2Caches(512 << 10, 2)
decide = columns.split_columns
mod = module(gru_text(256))
_, body, _ = foreach_of(mod)


def run(split, b, args):
    columns.split_columns = decide if split else (lambda *a: False)
    k = build_loop(body, module=mod, dims={"b": b})
    params = [p.name_hint for p in mod["main"].params]
    captured = [args[params.index(v.name_hint)] for v in k.captured]
    return k.specialize({"b": b}).lowered.split_columns, k(args[0], args[1], *captured)


rng = np.random.default_rng(7)
for t, b in [(9, 1), (3, 2)]:
    args = [
        rng.standard_normal((t, b, 256), dtype=np.float32),
        rng.standard_normal((b, 256), dtype=np.float32),
        (rng.standard_normal((768, 256)) / 16).astype(np.float32),
        (rng.standard_normal((768, 256)) / 16).astype(np.float32),
        (rng.standard_normal(768) * 0.1).astype(np.float32),
    ]
    (split, by_columns), (serial, one_thread) = run(True, b, args), run(False, b, args)
    assert (split, serial) == (True, False), (split, serial)
    for a, e in zip(by_columns, one_thread, strict=True):
        assert np.array_equal(a, e), (t, b)  # bit for bit
    if b == 1:
        got, want = by_columns, effir.interpret(mod, *args)
        for a, e in zip(got, want, strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)  # sums of 256 terms
print("ok")
"""


def test_split_by_columns_equals_the_serial_step_bit_for_bit() -> None:
    """The hidden-256 GRU built with its step split by columns and serial
    (the decision switched off), at batch 1 and 2: the same bits; at batch
    1 also the interpreter's values."""
    result = run_isolated(CHECK)
    result.check()
    assert result.stdout.strip().endswith("ok")
