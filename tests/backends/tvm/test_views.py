"""A primitive function that rearranges axes and keeps the elements' order
is a view, not a kernel (relax/views.py [RULE LOWER-VIEW]): the decision is
the interpreter's (a chain is a view exactly when it leaves ``arange`` in
order), and compiled, a view's result is the interpreter's with no kernel
built. Compiled runs go through ``tests/support/isolated.py``."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import effir
from effir.backends.tvm.relax.views import view_shape
from tests.support.isolated import run_isolated
from tests.support.shape_strategies import prime_factors

HEADER = '#[version = "0.0.5"]\n'


def program(shape: list[int], steps: list[str]) -> str:
    """``@main`` of a tensor of ``shape``: each step (text with ``{}`` for
    its operand) of the one before."""
    lines, before = [], "%x"
    for k, step in enumerate(steps):
        lines.append(f"  let %v{k} = {step.format(before)};")
        before = f"%v{k}"
    dims = ", ".join(map(str, shape))
    body = "\n".join(lines)
    return f"{HEADER}def @main(%x: Tensor[({dims}), float32]) {{\n{body}\n  {before}\n}}\n"


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[int], list[str]]:
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    current, steps = list(shape), []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["transpose", "reshape", "expand_dims", "squeeze"]))
        if kind == "transpose":
            perm = draw(st.permutations(range(len(current))))
            steps.append(f"transpose({{}}, axes={list(perm)})")
            current = [current[p] for p in perm]
        elif kind == "reshape":
            rank = draw(st.integers(1, 4))
            new = [1] * rank
            for f in prime_factors(math.prod(current)):
                new[draw(st.integers(0, rank - 1))] *= f
            steps.append(f"reshape({{}}, newshape={new})")
            current = new
        elif kind == "expand_dims":
            axis = draw(st.integers(0, len(current)))
            steps.append(f"expand_dims({{}}, axis={axis})")
            current.insert(axis, 1)
        elif 1 in current:
            steps.append("squeeze({})")
            current = [d for d in current if d != 1]
    assume(steps)
    return shape, steps


@settings(max_examples=150, deadline=None)
@given(chains())
def test_a_chain_is_a_view_exactly_when_it_keeps_the_order(chain: tuple) -> None:
    shape, steps = chain
    module = effir.check(effir.parse(program(shape, steps)))
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    out = np.asarray(effir.interpret(module, x))
    in_order = bool(np.array_equal(out.ravel(), x.ravel()))
    view = view_shape(module["main"])
    assert (view is not None) == in_order, (steps, view)
    if view is not None:
        assert view == list(out.shape)


def test_what_computes_or_mixes_dtypes_is_no_view() -> None:
    for body in ["tanh(%x)", 'cast(%x, dtype="float64")', "strided_slice(%x, begin=[1], end=[3])"]:
        module = effir.check(
            effir.parse(f"{HEADER}def @main(%x: Tensor[(4, 2), float32]) {{ {body} }}")
        )
        assert view_shape(module["main"]) is None, body


SEGMENTS = ["transpose({}, axes=[1, 2, 0])", "reshape({}, newshape=[0, 0, 4, 4])",
            "transpose({}, axes=[2, 3, 0, 1])"]  # fmt: skip
"""The checkpointed loop's steps cut into segments (benchmarks/mlp_scan.py's
gradient): (16, 3, 2) -> (4, 4, 3, 2), a reshape."""


def compiled_kernels(text: str) -> str:
    """``text`` compiled and run against the interpreter: its kernel count,
    as JSON (``-1`` when the results differ)."""
    module = effir.check(effir.parse(text, source_name="views.effir"))
    shape = [int(d) for d in module["main"].params[0].type_annotation.shape]
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    compiled = effir.compile(module)
    same = np.array_equal(np.asarray(compiled(x)), np.asarray(effir.interpret(module, x)))
    return json.dumps(compiled.report.builds[0].kernels if same else -1)


def test_compiled_a_view_builds_no_kernel_and_a_copy_one() -> None:
    for steps, kernels in [(SEGMENTS, 0), (["transpose({}, axes=[1, 0, 2])"], 1)]:
        code = (
            "from tests.backends.tvm.test_views import compiled_kernels\n"
            f"print(compiled_kernels({program([16, 3, 2], steps)!r}))\n"
        )
        built = json.loads(run_isolated(code).check().stdout.strip().splitlines()[-1])
        assert built == kernels, (steps, built)
