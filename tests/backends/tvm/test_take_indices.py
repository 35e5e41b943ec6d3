"""A kernel's constant ``take`` indices are arguments of its call
(relax/take_indices.py [RULE LOWER-TAKE-INDEX]): kernels that differ only in
the step they take are one kernel, with the interpreter's results for every
mode, axis and index (in range, negative, past the end). Compiled runs go
through ``tests/support/isolated.py``."""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir.backends.tvm.relax.take_indices import lifted_take_indices
from effir.ir.expr import Function
from effir.ir.module import IRModule
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'
SHAPE = (5, 3, 2)

takes = st.tuples(
    st.sampled_from(["clip", "wrap", "fast"]),
    st.sampled_from([0, 1, 2, -1, None]),
    st.integers(-8, 8),
)

compiled_takes = st.tuples(  # axis -1 is lowered apart from axis 2: another kernel
    st.sampled_from(["clip", "wrap", "fast"]),
    st.sampled_from([0, 1, 2, None]),
    st.integers(-8, 8),
)


def program(cases: list[tuple[str, int | None, int]]) -> str:
    """``@main`` of one ``take`` of ``%x`` (shape ``SHAPE``) per case (a
    ``fast`` one only in range, out of range it fails), each in a kernel
    of its own: ``tanh`` of it, times 2."""
    fields = []
    for mode, axis, index in cases:
        if mode == "fast":
            size = int(np.prod(SHAPE)) if axis is None else SHAPE[axis]
            index %= size
        axis_text = "None" if axis is None else str(axis)
        fields.append(f'multiply(tanh(take(%x, {index}, axis={axis_text}, mode="{mode}")), 2f)')
    shape = ", ".join(map(str, SHAPE))
    body = fields[0] if len(fields) == 1 else f"({', '.join(fields)})"
    return f"{HEADER}def @main(%x: Tensor[({shape}), float32]) {{\n  {body}\n}}\n"


def argument() -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 7 - 2


@settings(max_examples=60, deadline=None)
@given(st.lists(takes, min_size=1, max_size=4))
def test_the_lifted_function_is_the_interpreters(cases: list) -> None:
    """The property, in the interpreter: the function with its indices
    lifted, called with their values, gives what the function gives."""
    module = effir.check(effir.parse(program(cases)))
    lifted, values = lifted_take_indices(module["main"])
    assert isinstance(lifted, Function)
    assert len(values) == len(cases)  # every index here is liftable
    assert all(v.shape == () for v in values)
    ref = effir.interpret(module, argument())
    got = effir.interpret(effir.check(IRModule({"main": lifted})), argument(), *values)
    for r, g in zip(_leaves(ref), _leaves(got), strict=True):
        np.testing.assert_array_equal(g, r)


def test_what_reads_differently_is_not_lifted() -> None:
    """An index out of range of a ``fast`` take fails at run time, and an
    empty axis has no index in range: each keeps its constant."""
    for body, shape in [
        ('take(%x, 9, axis=0, mode="fast")', "(5, 3)"),
        ('take(%x, -1, axis=1, mode="fast")', "(5, 3)"),
        ("take(%x, 2, axis=0)", "(0, 3)"),
    ]:
        src = f"{HEADER}def @main(%x: Tensor[{shape}, float32]) {{ {body} }}\n"
        fn = effir.check(effir.parse(src))["main"]
        assert lifted_take_indices(fn) == (fn, [])


def shared_kernels(text: str) -> str:
    """``text`` compiled and run against the interpreter: its kernel count,
    as JSON (``-1`` when the results differ)."""
    module = effir.check(effir.parse(text, source_name="takes.effir"))
    compiled = effir.compile(module)
    ref, got = effir.interpret(module, argument()), compiled(argument())
    same = all(
        np.allclose(g, r, rtol=1e-6, atol=1e-6)
        for r, g in zip(_leaves(ref), _leaves(got), strict=True)
    )
    return json.dumps(compiled.report.builds[0].kernels if same else -1)


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(compiled_takes, min_size=2, max_size=4))
def test_takes_of_other_steps_share_one_kernel_compiled(cases: list) -> None:
    """Compiled: the interpreter's results, and one kernel for the takes of
    one axis whatever their index and mode (an axis of its own is a
    kernel of its own: its result's shape differs)."""
    code = (
        "from tests.backends.tvm.test_take_indices import shared_kernels\n"
        f"print(shared_kernels({program(cases)!r}))\n"
    )
    kernels = json.loads(run_isolated(code).check().stdout.strip().splitlines()[-1])
    assert kernels != -1, "compiled results differ from the interpreter's"
    assert kernels == len({axis for _, axis, _ in cases})


def _leaves(value: object) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]
