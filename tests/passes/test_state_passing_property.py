"""State passing preserves meaning, bit for bit.

For random effectful A1 programs (``a1_programs.py``), running the A1 program
with ``effir.interpret`` and its A2 form ``state_passing(explicate(a1))`` with
``interpret_a2`` gives the same results, the same final state and the same
``debug.print`` outputs, in the same order, bit for bit. ``@main`` runs twice
on one ``State``, so the second run starts from the state the first one left.

The A2 module must also type-check, mention no global cell (no
``ref_read``/``ref_write`` of one, no effectful surface operator), declare its
entry's state in declaration order, and pass the linearity verifier.

The first tests (generator sanity and coverage) need only the interpreter;
the pass modules are imported inside the property tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir import GlobalVar, IRModule, Op, RefRead, RefWrite, astext, op_def, pre_order
from effir.runtime.values import ADTValue, PRNGKey
from tests.support.state_passing_observation import (
    COMMON,
    difference,
    explicate_then_state_passing,
    observe,
    parse_a1,
)

from .a1_programs import FEATURES, KNOWN_REJECTIONS, A1Program, a1_programs


# ------------------------------------------------------------ the generator
def test_generated_programs_parse_check_run_and_cover_every_construct() -> None:
    seen: set[str] = set()

    @settings(max_examples=300, derandomize=True, **COMMON)
    @given(a1_programs())
    def sane(program: A1Program) -> None:
        seen.update(program.features)
        module = parse_a1(program)
        first = observe(effir.interpret, module, program, module)
        again = observe(effir.interpret, module, program, module)
        assert first.difference(again) is None, "the interpreter is not deterministic"

    sane()
    assert seen == FEATURES, f"never generated: {sorted(FEATURES - seen)}"


# ------------------------------------------------------------ the property
def a2_problems(a1: IRModule, a2: IRModule) -> list[str]:
    """What in ``a2`` is still global state, or breaks the entry convention."""
    cells = set(a1.cells)
    found: list[str] = []
    for name, fn in a2.functions.items():
        for node in pre_order(fn):
            if isinstance(node, RefRead | RefWrite) and isinstance(node.ref, GlobalVar):
                if node.ref.name in cells:
                    found.append(f"@{name} accesses a global cell: {astext(node)[:200]}")
            elif isinstance(node, GlobalVar) and node.name in cells:
                found.append(f"@{name} mentions the global cell @{node.name}")
            elif isinstance(node, Op) and op_def(node).effect in ("random", "state"):
                found.append(f"@{name} still calls the effectful operator {node.name}")
    order = [*a1.cells, "io"]
    attrs = a2.functions["main"].attrs
    for key in ("state_in", "state_out"):
        listed = list(attrs.get(key, ()))
        if listed != sorted(listed, key=lambda c: order.index(c) if c in order else -1):
            found.append(f"@main's {key} {listed} is not in declaration order")
    return found


def check_state_passing(program: A1Program, passes: Callable[[IRModule], IRModule]) -> None:
    """The property, for one program and one way of running the passes."""
    from effir.passes.analyses.verify_linear import verify_linear

    a1 = parse_a1(program)
    expected = observe(effir.interpret, a1, program, a1)
    rejected_for = [why for f, why in KNOWN_REJECTIONS.items() if f in program.features]
    try:
        a2 = passes(a1)
    except effir.EffectError as err:
        # a documented limitation, for the documented reason, and located
        reasons = [why for why in rejected_for if why in err.message]
        assert reasons, f"state passing rejected the program: {err}\n\nA1:\n{program.text}"
        assert err.span is not None, f"the rejection is not located: {err}\n{program.text}"
        return
    a2_text = astext(a2)
    context = f"\n\nA1 ({program!r})\n\nA2:\n{a2_text}"
    assert not rejected_for, (
        f"expected a rejection ({rejected_for[0]}); if the pass now supports it, "
        f"drop it from KNOWN_REJECTIONS{context}"
    )
    try:
        effir.check(a2)
    except effir.TypeError as err:
        pytest.fail(f"the A2 program does not type-check: {err}{context}")
    problems = a2_problems(a1, a2)
    assert not problems, "\n".join(problems) + context
    try:
        verify_linear(a2)
    except effir.Error as err:
        pytest.fail(f"the A2 program is not linear: {err}{context}")
    try:
        actual = observe(interpret_a2, a2, program, a1)
    except effir.Error as err:
        pytest.fail(f"the A2 program fails: {err}{context}")
    problem = expected.difference(actual)
    assert problem is None, f"A1 and A2 differ: {problem}{context}"


def state_passing_alone(module: IRModule) -> IRModule:
    from effir.passes.transforms.state_passing import state_passing

    return state_passing(module)


@settings(max_examples=300, derandomize=True, **COMMON)
@given(a1_programs())
def test_state_passing_preserves_results_state_and_prints(program: A1Program) -> None:
    check_state_passing(program, explicate_then_state_passing)


@settings(max_examples=60, derandomize=True, **COMMON)
@given(a1_programs())
def test_state_passing_runs_explicate_itself(program: A1Program) -> None:
    check_state_passing(program, state_passing_alone)


@pytest.mark.nightly
@settings(max_examples=int(os.environ.get("EFFIR_NIGHTLY_EXAMPLES", "5000")), **COMMON)
@given(a1_programs())
def test_state_passing_preserves_results_state_and_prints_nightly(program: A1Program) -> None:
    """Fresh random programs every night (not derandomized); hypothesis prints
    the seed that reproduces a failure."""
    check_state_passing(program, explicate_then_state_passing)


# ------------------------------------------------------------ the comparator itself
def test_difference_is_bit_exact() -> None:
    f = np.array([0.0, 1.0], np.float32)
    assert difference(f, f.copy(), "x") is None
    assert difference(np.array([np.nan], np.float32), np.array([np.nan], np.float32), "x") is None
    assert difference(f, np.array([-0.0, 1.0], np.float32), "x") is not None  # sign of zero
    assert difference(f, f.astype(np.float64), "x") is not None  # dtype
    assert difference(f, f.reshape(2, 1), "x") is not None  # shape
    assert difference(np.float32(1), np.array(1, np.float32), "x") is not None  # not an array
    assert difference(PRNGKey([1, 2]), PRNGKey([1, 2]), "k") is None
    assert difference(PRNGKey([1, 2]), PRNGKey([2, 1]), "k") is not None
    some = ADTValue("Some", (f,))
    assert difference((some, f), (ADTValue("Some", (f.copy(),)), f), "t") is None
    assert difference(some, ADTValue("NoneT"), "t") is not None
    assert difference((f,), (f, f), "t") is not None
    problem = difference((f, (f, PRNGKey([0, 1]))), (f, (f, PRNGKey([0, 2]))), "r")
    assert problem is not None and problem.startswith("r.1.1:")


@settings(max_examples=60, derandomize=True, **COMMON)
@given(a1_programs())
def test_state_passing_is_the_identity_on_a2_programs(program: A1Program) -> None:
    """An A2 program (``io.print`` threading the world token, keys and
    statistics as values) has nothing left to thread: running the pass again
    gives the same module (in A-normal form, which the pass establishes), as
    ``effir.compile``'s default pipeline does on the A2 module ``effir.grad``
    returns."""
    from effir.ir.structural import structural_equal
    from effir.passes.transforms.anf import to_anf
    from effir.passes.transforms.state_passing import state_passing

    a1 = parse_a1(program)
    try:
        a2 = explicate_then_state_passing(a1)
    except effir.EffectError:
        return  # a documented rejection (the property above checks it)
    again = state_passing(a2)
    assert structural_equal(again, to_anf(a2)), f"A2:\n{astext(a2)}\n\nagain:\n{astext(again)}"
