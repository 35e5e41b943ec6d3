"""Helpers first written for tests/passes/test_state_passing_property.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck

import effir
from effir.ir import IRModule
from effir.runtime.values import ADTValue, PRNGKey, RefValue, describe_value
from tests.passes.a1_programs import A1Program

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


def explicate_then_state_passing(module: IRModule) -> IRModule:
    from effir.passes.transforms.explicate import explicate
    from effir.passes.transforms.state_passing import state_passing

    return state_passing(explicate(module))
