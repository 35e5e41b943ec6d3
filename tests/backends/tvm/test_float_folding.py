"""Float expressions of constants in compiled code are IEEE's, bit for bit
(kernel/constant_calls.py [RULE TE-FOLD]): TVM's rewrite simplifier rewrote
them as if they were reals (``x - x`` to 0, ``(x + y) - y`` to x,
``x - (x + y)`` to ``0 - y``, ``x == x`` to true, ``select(c, y, z) - z``
to ``select(c, y - z, 0)``, then ``x * 0`` and ``0 / x`` to 0 and ``x + 0``
to x), wherever fusion put the program's constants into a kernel (-O1;
-O2 folds them with numpy first). Each case compiles at every level and
compares with the interpreter: NaN for NaN, every other value bit for
bit (zeros' and infinities' signs). Compiled runs go through
``tests/support/isolated.py``, with the build cache off (tests/conftest.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.isolated import run_isolated, run_isolated_call

HEADER = '#[version = "0.0.5"]\n'
SIZE = 16  # the kernels' loops are vectorised
SPECIAL = [
    "inf",
    "-inf",
    "nan",
    "0",
    "-0",
    "1",
    "-1",
    "1e8",
    "3e38",
    "1e-45",
    "0.5",
    "-3",
    "1e-8",
    "7",
    "2",
    "-2",
]
"""The parameters' values, as numpy reads them (``%x`` these, ``%y`` these
reversed): infinities, NaN, signed zeros, large, tiny and ordinary values."""


def mismatches(sources: list[str], dtype: str, levels: tuple[int, ...]) -> list[str]:
    """Each program of ``sources`` (``@main(%x, %y, %c)``: two ``dtype``
    vectors of ``SPECIAL`` values and a boolean vector) compiled at each of
    ``levels``: the outputs that differ from the interpreter's (NaN equal to
    NaN, anything else bit for bit) and every build's error."""
    import numpy as np

    import effir

    x = np.array([float(v) for v in SPECIAL], dtype)
    args = (x, x[::-1].copy(), np.arange(SIZE) % 3 == 0)
    bad = []
    for src in sources:
        module = effir.check(effir.parse(src, source_name="float_folding.effir"))
        want = [np.asarray(w) for w in _leaves(effir.interpret(module, *args))]
        for level in levels:
            try:
                got = [
                    np.asarray(g) for g in _leaves(effir.compile(module, opt_level=level)(*args))
                ]
            except effir.Error as err:
                bad.append(f"-O{level}: {type(err).__name__}: {err.message[:300]}\n{src}")
                continue
            for g, w in zip(got, want, strict=True):
                if not _same(g, w):
                    bad.append(f"-O{level}: want {w.tolist()}, got {g.tolist()}\n{src}")
    return bad


def _leaves(value: object) -> list[object]:
    return [leaf for v in value for leaf in _leaves(v)] if isinstance(value, tuple) else [value]


def _same(got: object, want: object) -> bool:
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.kind != "f":
        return got.tobytes() == want.tobytes()
    nan = np.isnan(want)
    return bool((np.isnan(got) == nan).all()) and got[~nan].tobytes() == want[~nan].tobytes()


def _check(sources: list[str], dtype: str = "float32", levels: tuple[int, ...] = (0, 1, 2)) -> None:
    problems = run_isolated_call(
        "tests.backends.tvm.test_float_folding", "mismatches", sources, dtype, levels
    )
    assert not problems, "\n".join(problems)


def _main(body: str, dtype: str = "float32") -> str:
    vector = f"Tensor[({SIZE},), {dtype}]"
    return (
        f"{HEADER}def @main(%x: {vector}, %y: {vector}, %c: Tensor[({SIZE},), bool]) {{\n"
        f"  {body}\n}}\n"
    )


INF, NAN, ZERO = "divide(1f, 0f)", "divide(0f, 0f)", "subtract(1f, 1f)"

# Each rewrite of TVM's that is wrong for floats, on constants that it
# changes (the comment: IEEE's value, then what the rewrite gave), each
# added to %x so that the kernel fuses the constants with a parameter.
REWRITES = {
    # x - x to 0
    "inf_minus_inf": f"subtract({INF}, {INF})",  # NaN, 0
    "nan_minus_nan": f"subtract({NAN}, {NAN})",  # NaN, 0
    # (x + y) - y to x, (x + y) - x to y
    "large_sum_minus_addend": "subtract(add(1f, 100000000f), 100000000f)",  # 0, 1
    "large_sum_minus_augend": "subtract(add(100000000f, 1f), 100000000f)",  # 0, 1
    "overflowing_sum_minus_addend": "subtract(add(3e38f, 3e38f), 3e38f)",  # inf, 3e38
    # x - (x + y) and x - (y + x) to 0 - y
    "minus_large_sum": "subtract(100000000f, add(100000000f, 1f))",  # 0, -1
    "minus_large_sum_swapped": "subtract(100000000f, add(1f, 100000000f))",  # 0, -1
    "negative_zero_minus_sum": "subtract(-0f, add(-0f, 0f))",  # -0, +0
    # x / x: IEEE NaN for infinities and zeros
    "inf_over_inf": f"divide({INF}, {INF})",  # NaN
    "zero_over_zero": f"divide({ZERO}, {ZERO})",  # NaN
    # reassociated constant additions
    "reassociated_sum": "add(add(1f, 100000000f), -100000000f)",  # 0
    # min and max of infinities and NaN (numpy propagates NaN)
    "max_of_inf_and_nan": f"maximum({INF}, {NAN})",  # NaN
    "min_of_nan_and_inf": f"minimum({NAN}, negative({INF}))",  # NaN
    "max_of_inf": f"maximum(negative({INF}), 3e38f)",  # 3e38
}

# The same with a parameter: x * 0 and 0 / x to 0, x + 0 to x, once the
# constant is a literal 0 (a cancelled ``1 - 1``).
WITH_PARAMETERS = {
    "times_cancelled_zero": f"multiply(%x, {ZERO})",  # NaN for inf and NaN, -0 for negatives
    "cancelled_zero_over": f"divide({ZERO}, %x)",  # NaN for 0 and NaN, -0 for negatives
    "plus_cancelled_zero": f"add(%x, {ZERO})",  # +0 for -0
    "cancelled_zero_minus": f"subtract({ZERO}, %x)",  # +0 for +0, not -x's -0
    "negative_of_parameter": "negative(%x)",  # -0 for +0
    "select_minus_inf": f"subtract(where(%c, %x, {INF}), {INF})",  # NaN where %c is false
    "nan_equals_itself": f"where(equal({NAN}, {NAN}), %x, %y)",  # %y: nan == nan is false
    "nan_differs_from_itself": f"where(not_equal({NAN}, {NAN}), %x, %y)",  # %x
}


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_a_float_expression_of_constants_is_ieee_at_every_level(name: str) -> None:
    _check([_main(f"add({REWRITES[name]}, %x)")])


@pytest.mark.parametrize("name", sorted(WITH_PARAMETERS))
def test_a_rewrite_of_a_parameter_and_constants_is_ieee_at_every_level(name: str) -> None:
    _check([_main(WITH_PARAMETERS[name])])


@pytest.mark.parametrize(
    ("dtype", "body"),
    [
        # 2049 is not a float16: 2048 + 1 rounds to 2048
        ("float16", "subtract(add(2048f16, 1f16), 2048f16)"),
        ("float16", "subtract(divide(1f16, 0f16), divide(1f16, 0f16))"),
        # 1e16 + 1 rounds to 1e16 in float64
        ("float64", "subtract(add(10000000000000000f64, 1f64), 10000000000000000f64)"),
        ("float64", "subtract(divide(1f64, 0f64), divide(1f64, 0f64))"),
    ],
)
def test_every_float_dtype_keeps_its_rounding(dtype: str, body: str) -> None:
    _check([_main(f"add({body}, %x)", dtype)], dtype)


def test_a_whole_loop_computes_its_constants_as_the_interpreter() -> None:
    """A loop body is lowered by loop/evaluate.py, which folds as the kernel
    builder does."""
    state = f"(int32, Tensor[({SIZE},), float32])"
    body = (
        f"let %r = cf.while_loop(fn (%s: {state}) {{ less(%s.0, 3) }},\n"
        f"    fn (%s: {state}) {{\n"
        f"      ((), (add(%s.0, 1), add(%s.1, subtract(add(100000000f, 1f), 100000000f))))\n"
        f"    }}, (0, %x));\n"
        f"  add(%r.1.1, subtract({INF}, {INF}))"
    )
    _check([_main(body)])


def test_an_integer_division_by_a_constant_zero_still_fails_at_run_time() -> None:
    """A call whose numpy rule raises is not folded: its ``te`` rule's check
    raises the interpreter's error when the program runs."""
    code = f"""
import numpy as np
import effir

module = effir.check(effir.parse('''{HEADER}def @main(%x: Tensor[(2,), int32]) {{
  add(divide(7, subtract(3, 3)), %x)
}}
'''))
results = []
for level in (0, 1, 2):
    compiled = effir.compile(module, opt_level=level)
    try:
        compiled(np.zeros(2, np.int32))
        results.append("no error")
    except effir.EvalError as err:
        results.append(type(err).__name__)
print(results)
"""
    run = run_isolated(code, timeout=300).check()
    assert run.stdout.strip().splitlines()[-1] == str(["EvalError"] * 3)


# ---------------------------------------------------------------- property
_CONSTANTS = ["inf", "-inf", "nan", "0", "-0", "1", "-1", "1e8", "3e38", "1e-45", "0.5", "-3"]
_LITERALS = {"inf": INF, "-inf": f"negative({INF})", "nan": NAN, "-0": "-0f"}
_ARITHMETIC = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


@st.composite
def _trees(draw: st.DrawFn, depth: int = 3, in_sum: bool = False) -> str:
    """A float32 expression of constants (``SPECIAL``'s kinds: infinities,
    NaN, signed zeros, large and tiny values) and the parameters, of
    ``depth`` levels at most. A product is never an operand of a sum or a
    difference (``in_sum``): LLVM contracts the two into one fused
    multiply-add, which rounds once, by design (kernel/rounding.py
    [RULE KERNEL-ROUND] says where it does not)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from(["%x", "%y"]))
        value = draw(st.sampled_from(_CONSTANTS))
        return _LITERALS.get(value, f"{value}f")
    kind = draw(st.sampled_from([*_ARITHMETIC, "negative", "abs", "where", "equal"]))
    if kind == "multiply" and in_sum:
        kind = "divide"
    sub = lambda inner_sum: _trees(depth - 1, inner_sum)  # noqa: E731
    if kind in ("negative", "abs"):
        return f"{kind}({draw(sub(in_sum))})"
    if kind == "where":
        a, b = draw(sub(False)), draw(sub(False))
        return f"where(less({a}, {b}), {draw(sub(in_sum))}, {draw(sub(in_sum))})"
    if kind == "equal":
        a = draw(sub(False))
        return f"where(equal({a}, {a}), {draw(sub(in_sum))}, {draw(sub(in_sum))})"
    summing = kind in ("add", "subtract")
    return f"{kind}({draw(sub(summing))}, {draw(sub(summing))})"


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(_trees(in_sum=True), min_size=4, max_size=4))
def test_float_expressions_compiled_at_o1_agree_with_the_interpreter_bit_for_bit(
    trees: list[str],
) -> None:
    """Random float32 expressions of constants and parameters, four to a
    program (a tuple: one build checks four), compiled at -O1, where fusion
    puts the constants into kernels: the interpreter's values, NaN for NaN
    and every other value bit for bit."""
    _check([_main("(" + ", ".join(f"add({t}, %x)" for t in trees) + ")")], levels=(1,))
