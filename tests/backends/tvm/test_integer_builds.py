"""Mixed-width integer casts and nested integer arithmetic build, and wrap
as the interpreter's (te_ops [RULE TE-LET]): an int64 accumulator plus a
widened int32 loop counter, ``divide(divide(a, b), c)`` on int32 and their
siblings failed to build with TVM's "conflicts with memorization" (its
``NarrowDataType`` met a let variable of a narrower range outside its let).
Compiled runs go through ``tests/support/isolated.py``."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.isolated import run_isolated_call
from tests.support.tiers import suite_and_nightly

HEADER = '#[version = "0.0.5"]\n'
INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
# The 32- and 64-bit results in the suite, all eight nightly (as
# test_compiled_semantics.py sweeps them).
TIERED_INTS = suite_and_nightly(INTS[4:], INTS[:4])
FLOATS = ["float16", "float32", "float64"]
# Nonzero in every integer dtype they are cast to (no multiple of 256), so
# that divisions by them are defined; the floats' are their magnitudes (a
# negative float cast to an unsigned dtype is unspecified, docs/semantics.md).
VALUES = [1, -1, 7, -7, 127, -127, 100, 3]


def mismatches(src: str, opt_level: int) -> list[str]:
    """``src`` interpreted and compiled at ``opt_level`` on ``VALUES`` in
    each dtype: the outputs that differ (as text), or the build's error.
    (At level 1 no pass merges the outputs' equal casts, so each output is
    the fused kernel it is in a program of its own.)"""
    import warnings

    import numpy as np

    import effir
    from effir.backends.tvm.driver.compile import compile as compile_module

    warnings.simplefilter("ignore")
    module = effir.check(effir.parse(src, source_name="ints.effir"))
    params = module["main"].params
    args = []
    for p in params:
        dtype = p.type_annotation.dtype
        values = np.array(VALUES, np.int64)
        args.append((np.abs(values) if dtype in FLOATS else values).astype(dtype))
    try:
        ref = effir.interpret(module, *args)
    except effir.EvalError as err:  # (a division by zero): compiled code raises it too
        ref = err
    try:
        out = compile_module(module, opt_level=opt_level)(*args)
    except effir.EvalError as err:
        out = err
    except Exception as err:
        return [f"{type(err).__name__}: {err}"]
    if isinstance(ref, Exception) or isinstance(out, Exception):
        return [] if str(ref) == str(out) else [f"want {ref}, got {out}"]
    ref = ref if isinstance(ref, tuple) else (ref,)
    out = out if isinstance(out, tuple) else (out,)
    bad = []
    for k, (r, o) in enumerate(zip(ref, out, strict=True)):
        r, o = np.asarray(r), np.asarray(o)
        if r.dtype != o.dtype or r.tobytes() != o.tobytes():
            bad.append(f"output {k}: want {r.tolist()} {r.dtype}, got {o.tolist()} {o.dtype}")
    return bad


def _check(src: str, opt_level: int = 1) -> None:
    problems = run_isolated_call(
        "tests.backends.tvm.test_integer_builds", "mismatches", src, opt_level
    )
    assert not problems, src + "\n" + "\n".join(problems)


def _params(dtypes: list[str]) -> str:
    return ", ".join(f"%{d}: Tensor[(8), {d}]" for d in dtypes)


@pytest.mark.parametrize("dtypes", TIERED_INTS)
def test_a_widened_counter_added_to_an_accumulator_builds_for_every_pair_of_dtypes(
    dtypes: list[str],
) -> None:
    """``add(%acc: int64, cast(%i, "int64"))`` for every other integer (and
    float) dtype of ``%i``, and its siblings: each wrapping operator and the
    division on each pair of dtypes, the cast on either side."""
    for dst in dtypes:
        outs = []
        for src in INTS + FLOATS:
            if src == dst:
                continue
            widened = f'cast(%{src}, dtype="{dst}")'
            outs += [
                f"add(%{dst}, {widened})",
                f"subtract({widened}, %{dst})",
                f"multiply(%{dst}, {widened})",
                f"divide(%{dst}, {widened})",
                f'cast(add(%{dst}, {widened}), dtype="{src}")',
            ]
        _check(f"{HEADER}def @main({_params(INTS + FLOATS)}) {{\n  ({', '.join(outs)})\n}}\n")


@pytest.mark.parametrize("dtypes", TIERED_INTS)
def test_a_widened_value_added_to_itself_builds_for_every_pair_of_dtypes(
    dtypes: list[str],
) -> None:
    """``let %c = cast(%a, dtype="int64"); add(%c, %c)`` (ONNX CumSum with
    a run-time int32 axis made it): one let variable met twice in one
    kernel, for every narrower dtype of ``%a``, at both levels."""
    for dst in dtypes:
        lets, outs = [], []
        for src in INTS:
            if src != dst:
                lets.append(f'  let %c_{src} = cast(%{src}, dtype="{dst}");')
                outs.append(f"add(%c_{src}, %c_{src})")
        body = "\n".join(lets)
        src_text = f"{HEADER}def @main({_params(INTS)}) {{\n{body}\n  ({', '.join(outs)})\n}}\n"
        for level in (1, 2):
            _check(src_text, level)


@pytest.mark.parametrize("dtypes", TIERED_INTS)
def test_nested_integer_arithmetic_builds_for_every_dtype(dtypes: list[str]) -> None:
    """``divide(divide(%a, %b), %c)`` on int32 and its siblings: each
    arithmetic operator nested in each other one, every integer dtype."""
    outer = ["add", "subtract", "multiply", "divide"]
    for t in dtypes:
        outs = [f"{f}({g}(%{t}, %b), %c)" for f in outer for g in [*outer, "maximum"]]
        outs += [
            f"power(divide(%{t}, %b), maximum(%c, 1{_suffix(t)}))",
            f"sum(divide(divide(%{t}, %b), %c))",
        ]
        params = f"%{t}: Tensor[(8), {t}], %b: Tensor[(8), {t}], %c: Tensor[(8), {t}]"
        _check(f"{HEADER}def @main({params}) {{\n  ({', '.join(outs)})\n}}\n")


# ---------------------------------------------------------------- property
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


def _suffix(dtype: str) -> str:
    return ("u" if dtype[0] == "u" else "i") + dtype.lstrip("uint")


@st.composite
def _expression(draw: st.DrawFn, dtype: str, depth: int) -> str:
    """An integer expression of ``dtype``: parameters (one per dtype),
    literals (negative and zero included), casts from any dtype, and the
    arithmetic operators nested ``depth`` deep."""
    kinds = ["param", "literal"] + (["cast", "binary", "negative"] if depth else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "param":
        return f"%{dtype}"
    if kind == "literal":
        value = draw(st.sampled_from([0, 1, -1, 2, -3, 127, -128]))
        if dtype[0] == "u" and value < 0:
            value = -value
        return f"{value}{_suffix(dtype)}"
    if kind == "cast":
        src = draw(st.sampled_from(INTS + FLOATS))
        inner = f"%{src}" if src in FLOATS else draw(_expression(src, depth - 1))
        return f'cast({inner}, dtype="{dtype}")'
    if kind == "negative":
        return f"negative({draw(_expression(dtype, depth - 1))})"
    op = draw(st.sampled_from(_BINARY))
    return f"{op}({draw(_expression(dtype, depth - 1))}, {draw(_expression(dtype, depth - 1))})"


@st.composite
def _programs(draw: st.DrawFn) -> str:
    outs = []
    for _ in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(INTS))
        outs.append(draw(_expression(dtype, 3)))
    return f"{HEADER}def @main({_params(INTS + FLOATS)}) {{\n  ({', '.join(outs)},)\n}}\n"


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_programs(), st.sampled_from([1, 2]))
def test_random_integer_expressions_compile_to_the_interpreters_values(
    src: str, opt_level: int
) -> None:
    """Random nested integer arithmetic over every dtype, with casts between
    them and literals that fold to zero or are negative: the compiled
    program builds and gives the interpreter's values (or its error)."""
    _check(src, opt_level)
