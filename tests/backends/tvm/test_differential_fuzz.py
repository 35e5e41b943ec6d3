"""Differential fuzzing of the compiled path: generated
programs (tests/backends/tvm/fuzz/generator.py) compiled with
``effir.compile`` and interpreted, in a subprocess per batch so that a crash
is a reported failure naming its program (fuzz/harness.py). Every outcome
other than ``ok`` fails the test with the program's text and arguments:
mismatches, non-effir exceptions, crashes, time-outs and refusals (a
feature is enabled here only once its constructs compile).

The suite runs a fixed, seeded set: one small program per fragment of every
enabled feature (the deep bucket included when enabled), then a few random
mixes. The nightly tier (``make nightly``) runs 2,000 random programs (or
``EFFIR_FUZZ_COUNT``, from ``EFFIR_FUZZ_SEED``); the CLI does the same with a
table: ``python -m tests.backends.tvm.fuzz.harness --count 2000 --seed 1``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from .fuzz.generator import FEATURES, WIDENED, Program, one_fragment_programs, programs
from .fuzz.harness import (
    SELF_TEST_CRASH,
    _differ,
    failures_report,
    run_batch,
    run_programs,
    summary,
)

# Every feature: each class of defect it found is fixed (keys and dropout through
# `if`, integer wrap-around, every foreach/while form and length, ADTs,
# errors raised as the interpreter's, loops and recursion 10,000 deep). A
# class that breaks again shows here with its program. The widened groups
# run in test_differential_fuzz_widened.py, at every level and pass.
ENABLED = frozenset(FEATURES) - WIDENED
assert ENABLED <= set(FEATURES)
# EFFIR_FUZZ_FEATURES=int,keys_if (or "all") runs other features without
# editing ENABLED: how to check a fix before switching its feature on.
if os.environ.get("EFFIR_FUZZ_FEATURES"):
    _asked = os.environ["EFFIR_FUZZ_FEATURES"]
    ENABLED = frozenset(FEATURES if _asked == "all" else _asked.split(","))
SEED = 0
MIXED = 6  # random programs of several fragments, after one of each fragment


def test_fixed_programs_run_compiled_as_interpreted() -> None:
    progs = one_fragment_programs(SEED, 1, ENABLED)
    progs += programs(SEED, MIXED, ENABLED, max_fragments=4)
    outcomes = run_batch(progs, timeout=120)
    failures = failures_report(progs, outcomes)
    assert not failures, failures


@pytest.mark.nightly
def test_nightly_random_programs_run_compiled_as_interpreted() -> None:
    count = int(os.environ.get("EFFIR_FUZZ_COUNT", "2000"))
    seed = int(os.environ.get("EFFIR_FUZZ_SEED", "1"))
    progs = programs(seed, count, ENABLED, deep_share=20)
    outcomes = run_programs(progs, batch_size=50, timeout=300)
    print(summary(progs, outcomes, show=0))
    failures = failures_report(progs, outcomes)
    assert not failures, failures


# ------------------------------------------------------ the harness itself


def test_a_crash_names_its_program_and_the_rest_of_the_batch_still_runs() -> None:
    ok = programs(SEED, 2, ["base"], max_fragments=1)
    crash = Program(SELF_TEST_CRASH, [], frozenset(), label="crash")
    outcomes = run_batch([ok[0], crash, ok[1]])
    assert [o.kind for o in outcomes] == ["ok", "crash", "ok"]
    assert "SIGSEGV" in outcomes[1].detail


def test_values_compare_floats_to_a_tolerance_and_the_rest_exactly() -> None:
    f = np.array([1.0, 2.0], np.float32)
    assert _differ(f * (1 + 1e-7), f, "r") is None
    assert "expected" in _differ(f * 1.01, f, "r")
    assert _differ(np.array([np.nan], np.float32), np.array([np.nan], np.float32), "r") is None
    assert _differ(np.array([3], np.uint8), np.array([4], np.uint8), "r")
    assert "int32[2]" in _differ(np.zeros(2, np.int32), np.zeros(2, np.int64), "r")
    assert _differ((f,), (f, f), "r")
