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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir import GlobalVar, IRModule, Op, RefRead, RefWrite, astext, op_def, pre_order
from effir.runtime.values import ADTValue, PRNGKey, RefValue, describe_value

from .a1_programs import FEATURES, KNOWN_REJECTIONS, A1Program, a1_programs

COMMON: dict[str, Any] = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CALLS = 2  # runs of @main on one state


# ------------------------------------------------------------ comparing values
def difference(a: Any, b: Any, where: str) -> str | None:
    """Why ``a`` and ``b`` differ (None when they are the same bits): arrays
    of one dtype and shape with identical bytes, keys with identical words,
    tuples and ADT values field by field. Iterative, so long lists are fine."""
    work = [(a, b, where)]
    while work:
        x, y, at = work.pop()
        shown = f"{at}: {describe_value(x, limit=120)} != {describe_value(y, limit=120)}"
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
                return shown + f" ({type(x).__name__} vs {type(y).__name__})"
            if x.dtype != y.dtype or x.shape != y.shape:
                return shown + f" ({x.dtype}{x.shape} vs {y.dtype}{y.shape})"
            if np.ascontiguousarray(x).tobytes() != np.ascontiguousarray(y).tobytes():
                return shown
        elif isinstance(x, PRNGKey) or isinstance(y, PRNGKey):
            if not (isinstance(x, PRNGKey) and isinstance(y, PRNGKey)):
                return shown
            if not np.array_equal(x.data, y.data):
                return shown
        elif isinstance(x, tuple) or isinstance(y, tuple):
            if not (isinstance(x, tuple) and isinstance(y, tuple)) or len(x) != len(y):
                return shown
            work.extend((f, g, f"{at}.{i}") for i, (f, g) in enumerate(zip(x, y, strict=True)))
        elif isinstance(x, ADTValue) or isinstance(y, ADTValue):
            if not (isinstance(x, ADTValue) and isinstance(y, ADTValue)):
                return shown
            if x.constructor != y.constructor or len(x.fields) != len(y.fields):
                return shown
            work.extend(
                (f, g, f"{at}.{x.constructor}[{i}]")
                for i, (f, g) in enumerate(zip(x.fields, y.fields, strict=True))
            )
        elif isinstance(x, RefValue) or isinstance(y, RefValue):
            if not (isinstance(x, RefValue) and isinstance(y, RefValue)):
                return shown
            work.append((x.value, y.value, f"ref_read({at})"))
        elif x is not y and x != y:
            return shown
    return None


@dataclass
class Observed:
    """What one program instance did: ``@main``'s results, run after run, the
    final state and every ``(label, value)`` printed."""

    results: list[Any]
    state: dict[str, Any]
    prints: list[tuple[str, Any]]

    def difference(self, other: Observed) -> str | None:
        for i, (a, b) in enumerate(zip(self.results, other.results, strict=True)):
            if (problem := difference(a, b, f"result of run {i + 1}")) is not None:
                return problem
        if set(self.state) != set(other.state):
            return f"state cells {sorted(self.state)} != {sorted(other.state)}"
        for name, value in self.state.items():
            if (problem := difference(value, other.state[name], f"final @{name}")) is not None:
                return problem
        for i, ((la, a), (lb, b)) in enumerate(zip(self.prints, other.prints, strict=False)):
            if la != lb:
                return f"print {i}: label {la!r} != {lb!r}"
            if (problem := difference(a, b, f"print {i} ({la})")) is not None:
                return problem
        if len(self.prints) != len(other.prints):
            return f"{len(self.prints)} prints != {len(other.prints)}"
        return None


Runner = Callable[..., Any]


def observe(run: Runner, module: IRModule, program: A1Program, a1: IRModule) -> Observed:
    """Run ``@main`` ``CALLS`` times on a fresh state of ``a1``'s cells."""
    state = effir.State(a1, seed=program.seed)
    prints: list[tuple[str, Any]] = []

    def sink(label: str, value: Any) -> None:
        prints.append((label, value))

    results = [
        run(module, *(a.copy() for a in program.args), state=state, sink=sink) for _ in range(CALLS)
    ]
    return Observed(results, state.values(), prints)


def parse_a1(program: A1Program) -> IRModule:
    module = effir.parse(program.text, source_name="a1.effir")
    effir.check(module)
    return module


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
    from effir.passes.verify_linear import verify_linear

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


def explicate_then_state_passing(module: IRModule) -> IRModule:
    from effir.passes.explicate import explicate
    from effir.passes.state_passing import state_passing

    return state_passing(explicate(module))


def state_passing_alone(module: IRModule) -> IRModule:
    from effir.passes.state_passing import state_passing

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
    from effir.passes.anf import to_anf
    from effir.passes.state_passing import state_passing

    a1 = parse_a1(program)
    try:
        a2 = explicate_then_state_passing(a1)
    except effir.EffectError:
        return  # a documented rejection (the property above checks it)
    again = state_passing(a2)
    assert structural_equal(again, to_anf(a2)), f"A2:\n{astext(a2)}\n\nagain:\n{astext(again)}"
