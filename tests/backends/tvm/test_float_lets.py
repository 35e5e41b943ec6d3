"""Float lets of a fused elementwise chain (kernel/lets.py [RULE TE-LETFLOAT]):
floated out of each other's values, a let bound to a NaN-propagating
``maximum``, a ``minimum`` or a ``where`` and read by a product or a quotient
made TVM's integer-set analysis abort the build ("IntImm supports only int
or uint or bool type, but float32 was supplied"), on every target and at
every level that fuses (the masked GRU of tests/frontend/test_packed.py was
one). Compiled runs go through ``tests/support/isolated.py``, with the build
cache off (tests/conftest.py), so every case is built."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.isolated import run_isolated_call

HEADER = '#[version = "0.0.5"]\n'
SHAPE = (2, 8)  # the inner axis is vectorised


def _main(dtype: str, body: str) -> str:
    params = ", ".join(f"%{p}: Tensor[{SHAPE}, {dtype}]" for p in "abc")
    return f"{HEADER}def @main({params}) {{\n{body}\n}}\n"


def mismatches(src: str, dtype: str, target: str, opt_levels: tuple[int, ...]) -> list[str]:
    """``src`` on three random arrays of ``dtype``, compiled for ``target``
    at each of ``opt_levels``: on llvm the outputs that differ from the
    interpreter's, on cuda a build without PTX; and every build's error."""
    import numpy as np

    import effir

    rng = np.random.default_rng(0)  # magnitudes in [0.5, 2]: a parameter is a safe divisor
    sign = np.where(rng.random((3, *SHAPE)) < 0.5, -1, 1)
    args = list((sign * rng.uniform(0.5, 2, (3, *SHAPE))).astype(dtype))
    module = effir.check(effir.parse(src, source_name="float_lets.effir"))
    want = np.asarray(effir.interpret(module, *args))
    tolerance = 1e-2 if dtype == "float16" else 1e-5
    bad = []
    for level in opt_levels:
        try:
            compiled = effir.compile(module, opt_level=level, target=target)
            if target == "cuda":
                (spec,) = compiled.specialisations.values()
                if ".entry" not in spec.ptx():
                    bad.append(f"-O{level}: no PTX")
                continue
            got = np.asarray(compiled(*args))
        except effir.Error as err:
            bad.append(f"-O{level}: {type(err).__name__}: {err.message[:300]}")
            continue
        if not np.allclose(got, want, rtol=tolerance, atol=tolerance, equal_nan=True):
            bad.append(f"-O{level}: want {want.tolist()}, got {got.tolist()}")
    return bad


def _check(
    src: str, dtype: str, target: str = "llvm", opt_levels: tuple[int, ...] = (1, 2)
) -> None:
    problems = run_isolated_call(
        "tests.backends.tvm.test_float_lets",
        "mismatches",
        src,
        dtype,
        target,
        opt_levels,
        timeout=240,
    )
    assert not problems, src + "\n" + "\n".join(problems)


# The smallest programs: the selection is a let's value once floated, its
# operands are reads (variables TVM's analyzers leave unbound), and the
# product or quotient reading it is a let's value too (``negative`` reads it).
SELECTED_THEN_SCALED = {
    "maximum_times": "negative(multiply(maximum(%a, %b), %c))",
    "minimum_over": "negative(divide(minimum(%a, %b), %c))",
    "where_times": "negative(multiply(where(greater(%a, %b), %a, %b), %c))",
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("name", sorted(SELECTED_THEN_SCALED))
def test_a_selection_scaled_by_a_read_builds_and_agrees(name: str, dtype: str) -> None:
    _check(_main(dtype, SELECTED_THEN_SCALED[name]), dtype)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", sorted(SELECTED_THEN_SCALED))
def test_a_selection_scaled_by_a_read_builds_for_cuda(name: str) -> None:
    _check(_main("float32", SELECTED_THEN_SCALED[name]), "float32", "cuda", (2,))


# ---------------------------------------------------------------- property
_UNARY = ["negative", "sigmoid", "tanh", "nn.relu"]
_SELECTIONS = ["maximum", "minimum", "where"]
_ARITHMETIC = ["add", "subtract", "multiply", "divide"]


@st.composite
def _chains(draw: st.DrawFn) -> str:
    """A chain of elementwise float32 operators, each reading the one before
    and a parameter (in either order), fused into one vectorised kernel and
    read by a last ``negative``, so that each is a let's value. Selections
    and arithmetic are drawn three times as often as functions (after which
    TVM's analyses know nothing of a value); a quotient divides by a
    parameter, never near zero."""
    params = ["%a", "%b", "%c"]
    previous = draw(st.sampled_from(params))
    lines = []
    for i in range(draw(st.integers(3, 8))):
        op = draw(st.sampled_from(_SELECTIONS * 3 + _ARITHMETIC * 3 + _UNARY))
        x, y = previous, draw(st.sampled_from(params))
        if op in _UNARY:
            expr = f"{op}({x})"
        elif op == "divide":
            expr = f"divide({x}, {y})"
        else:
            if draw(st.booleans()):
                x, y = y, x
            expr = f"where(greater({x}, {y}), {x}, {y})" if op == "where" else f"{op}({x}, {y})"
        lines.append(f"  let %v{i} = {expr};")
        previous = f"%v{i}"
    return _main("float32", "\n".join(lines) + f"\n  negative({previous})")


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_chains())
def test_fused_elementwise_chains_build_and_agree_with_the_interpreter(src: str) -> None:
    """Random fused chains of selections, approximated functions, products
    and quotients: they build and give the interpreter's values at the
    default level."""
    _check(src, "float32", opt_levels=(2,))
