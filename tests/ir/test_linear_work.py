"""Parsing and printing do work linear in a program's depth, for every deep
construct of `tests/deep_programs.py`: twice the depth, at most about twice
the lines of Python executed (`work`, not time: the tests hold on any
machine under any load). And the printer never builds a construct's text
as one string at each level of nesting, which copies the text below it
again at every level: quadratic in C, where lines executed do not show it
(20,000 nested closures took 39 s to print)."""

from types import GeneratorType

import pytest

import effir
from effir.ir import printer
from effir.ir.trampoline import run
from tests.deep_programs import DEEP_PROGRAMS, stage_action, work

DEPTH = 200
LINEAR = 2.1  # a linear stage gives 1.96 to 2.00 at these depths


def assert_linear(stage: str, construct: str) -> None:
    def stage_work(depth: int) -> int:
        return work(stage_action(stage, DEEP_PROGRAMS[construct](depth)))

    stage_work(DEPTH // 4)  # warm: imports and caches filled once
    small, large = stage_work(DEPTH), stage_work(2 * DEPTH)
    assert large <= LINEAR * small, (
        f"{stage} of {construct}: {small} lines at depth {DEPTH}, {large} at {2 * DEPTH} "
        f"({large / small:.2f}x): not linear"
    )


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_parse_is_linear(construct: str) -> None:
    assert_linear("parse", construct)


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_print_is_linear(construct: str) -> None:
    assert_linear("print", construct)


def test_print_names_many_variables_of_one_name_in_linear_work():
    # 2,000 nested `let %v`: each %v prints as the first free `v_k`.
    text = DEEP_PROGRAMS["nested let"](2_000)
    assert "%v_1999 = " in effir.astext(effir.parse(text))
    assert_linear("print", "nested let")


@pytest.mark.parametrize("construct", list(DEEP_PROGRAMS))
def test_printer_does_not_copy_the_text_below_each_construct(construct, monkeypatch):
    """The characters of the strings the printer's steps hand back to the
    step above them: the text of each construct, if it is built as a
    string, so quadratic in the depth; pieces of constant size if the
    text is put together once, at the end."""
    handed_back = 0

    def counting_run(computation):
        def counted(step):
            nonlocal handed_back
            value = None
            while True:
                try:
                    child = step.send(value)
                except StopIteration as stop:
                    if isinstance(stop.value, str):
                        handed_back += len(stop.value)
                    return stop.value
                if not isinstance(child, GeneratorType):  # a step's immediate value
                    if isinstance(child, str):
                        handed_back += len(child)
                    value = child
                    continue
                value = yield counted(child)

        return run(counted(computation))

    monkeypatch.setattr(printer, "run", counting_run)
    sizes = []
    for depth in (DEPTH, 2 * DEPTH):
        handed_back = 0
        text = effir.astext(effir.parse(DEEP_PROGRAMS[construct](depth)))
        sizes.append(handed_back)
        assert handed_back <= 4 * len(text), f"{construct} at depth {depth}: text copied"
    assert sizes[1] <= LINEAR * sizes[0]
