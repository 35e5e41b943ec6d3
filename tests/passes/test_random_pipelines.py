"""Random pipelines of the optimisation passes preserve meaning: random
effectful programs go through the effect passes and then any sequence of
the registered passes that keep values (everything but split-keys), and the
interpreter gives the same results, final state and prints, bit for bit,
with verification after every pass."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.infra.pipeline import pipeline, run_pipeline
from effir.passes.infra.transform import PassContext, registered_passes
from tests.support.state_passing_observation import observe, parse_a1

from .a1_programs import A1Program, a1_programs

# Passes that keep every value (split-keys changes random values by design;
# the effect passes run first, once; grad adds a function, it optimises nothing).
OPTIMISATIONS = sorted(
    name
    for name in registered_passes()
    if name not in ("split-keys", "explicate", "state-passing", "grad")
)


@pytest.mark.tvm  # the pipelines draw lower-tvm among the passes
@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(a1_programs(), st.lists(st.sampled_from(OPTIMISATIONS), min_size=1, max_size=6))
def test_random_pipelines_keep_results_state_and_prints(program: A1Program, names) -> None:
    a1 = parse_a1(program)
    context = PassContext(verify=True)
    a2 = run_pipeline(a1, "explicate,state-passing", context)
    # A pass that needs A-normal form gets it (to-gnf and to-bbnf leave it).
    passes = registered_passes()
    steps = [
        step for name in names for step in (["to-anf"] if passes[name].requires else []) + [name]
    ]
    optimised = effir.check(pipeline(",".join(steps))(a2, context))
    expected = observe(interpret_a2, a2, program, a1)
    got = observe(interpret_a2, optimised, program, a1)
    assert (problem := expected.difference(got)) is None, f"{','.join(names)}: {problem}"


def test_the_optimisations_are_registered():
    assert {"partial-eval", "cse", "dce", "to-anf"} <= set(OPTIMISATIONS)
