"""Hypothesis: random static programs give the interpreter's results when
compiled (effir.compile), bit for bit for random values and integers, to
1e-5 for floats. The programs draw from elementwise operators, reductions,
matrix products, shape operators, ifs on data, loops over sequences (with
and without an if in the body), while loops of data-dependent length,
boolean masks and dropout on a PRNG cell, so the pipeline, fusion, the
kernels and schedules, whole loops, VM loops, the executor's dynamic-shape
kernels and state passing are all exercised."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from tests.support.compiled_runs import assert_same_run

from .fuzz.generator import HypothesisChooser, Program, generate


@st.composite
def static_programs(draw: st.DrawFn) -> Program:
    """The fuzzer's generator (tests/backends/tvm/fuzz/generator.py) with its
    ``base`` fragments only, its choices drawn by Hypothesis so that a
    failure shrinks."""
    return generate(HypothesisChooser(draw), ["base"])


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(static_programs())
def test_compiled_static_programs_give_the_interpreters_results(program: Program) -> None:
    module = effir.check(effir.parse(program.text, source_name="generated.effir"))
    assert_same_run(module, *program.args, steps=2)
