"""`effir check` and `effir opt -O2` do work linear in a program's depth,
for every deep construct of `tests/deep_programs.py`: twice the depth, at
most about twice the lines of Python executed (`work`, not time: the tests
hold on any machine under any load). Quadratic paths found here: the type
solver's occurs check walked a let's whole type at each binding, and the
completeness check every variable's whole type; effect inference walked
each expression's whole type for what it may hold; partial evaluation
walked each closure's whole body for its free variables; state passing
scanned every reference per allocation; the linearity check walked each
value's whole type for a key."""

import pytest

import effir
from tests.deep_programs import DEEP_PROGRAMS, stage_action, work

DEPTH = 200
LINEAR = 2.1  # a linear stage gives 1.96 to 2.00 at these depths; a quadratic one 2.16 to 3.8


def stage_work(stage: str, construct: str, depth: int) -> int:
    action = stage_action(stage, DEEP_PROGRAMS[construct](depth))

    def run() -> None:
        try:
            action()
        except effir.Error:  # a program the command rejects: as it should, in linear time
            pass

    return work(run)


def assert_linear(stage: str, construct: str) -> None:
    stage_work(stage, construct, DEPTH // 4)  # warm: imports and caches filled once
    small = stage_work(stage, construct, DEPTH)
    large = stage_work(stage, construct, 2 * DEPTH)
    assert large <= LINEAR * small, (
        f"{stage} on {construct}: {small} lines at depth {DEPTH}, {large} at {2 * DEPTH} "
        f"({large / small:.2f}x): not linear"
    )


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_check_is_linear(construct: str) -> None:
    assert_linear("check", construct)


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_the_linearity_check_is_linear(construct: str) -> None:
    assert_linear("check --linear", construct)


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_opt_o2_is_linear(construct: str) -> None:
    assert_linear("opt -O2", construct)


def _nested_loops(n: int) -> str:
    """``n`` cf.foreach loops, each body running the next on its state."""
    body = "%s"
    for _ in range(n):
        step = (
            f"fn (%r: Tensor[(2), float32], %s: Tensor[(2), float32]) {{ ((), add({body}, %r)) }}"
        )
        body = f"cf.foreach({step}, %xs, %s).1"
    return (
        '#[version = "0.0.5"]\n'
        f"def @main(%xs: Tensor[(3, 2), float32], %s: Tensor[(2), float32]) {{\n  {body}\n}}\n"
    )


def test_dce_of_an_unchecked_module_is_linear_in_the_nesting_of_loops() -> None:
    """Effect inference without types let every loop body flow into every
    value inside it (2.6x the work for twice the loops); it types the module
    first now, where it can (infer_effects [RULE EFFECT-TYPED])."""
    from effir.passes.transforms.dce import dce

    modules = {n: effir.parse(_nested_loops(n)) for n in (6, 24, 48)}  # not checked
    work(lambda: dce(modules[6]))  # warm
    small, large = work(lambda: dce(modules[24])), work(lambda: dce(modules[48]))
    assert large <= LINEAR * small, f"{small} lines at 24 loops, {large} at 48: not linear"


def _dropped_closures(n: int) -> str:
    """``let %a0 = add(%x, 1f); let %a1 = fn () { %a0 }; ...``: unused
    closures, each capturing the let before it."""
    lets = ["let %a0 = add(%x, 1f);"] + [f"let %a{i} = fn () {{ %a{i - 1} }};" for i in range(1, n)]
    return '#[version = "0.0.5"]\ndef @main(%x: float32) {\n  ' + "\n  ".join(lets) + "\n  %x\n}\n"


def test_to_gnf_removes_a_chain_of_dropped_closures_in_linear_work() -> None:
    """Each let is kept while the closure after it captures it, until that
    closure goes: once one walk per link (3.9x the work for twice the
    chain), now one backward sweep finds them all (to_gnf._Dying)."""
    from effir.passes.transforms.to_gnf import to_gnf

    modules = {n: effir.parse(_dropped_closures(n)) for n in (12, 50, 100)}
    work(lambda: to_gnf(modules[12]))  # warm
    small, large = work(lambda: to_gnf(modules[50])), work(lambda: to_gnf(modules[100]))
    assert large <= LINEAR * small, f"{small} lines at 50 closures, {large} at 100: not linear"
    assert effir.astext(to_gnf(modules[100])).count("let ") == 0
