"""Constants of a program in compiled code (te_ops [RULE TE-OPAQUE]):
``divide(%x, 0f)`` (or a constant that folds to 0) did not build ("Divide
by zero"), ``divide(0f, %x)``, ``multiply(%x, 0f)`` and ``add(%x, 0f)``
gave 0 or x where IEEE gives NaN, -0 or +0, ``random.key(-5)`` and
``random.fold_in(%k, -1)`` did not build ("cannot make uint from negative
value"), and a ``fold_in`` of -1 then gave the wrong key (its uint32
additions could not wrap). Every float dtype, every integer dtype, in a
kernel and in a whole compiled loop. Compiled runs go through
``tests/support/isolated.py``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.isolated import run_isolated_call

HEADER = '#[version = "0.0.5"]\n'
FLOATS = ["float16", "float32", "float64"]
INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
SPECIAL = [1.0, -1.0, 0.0, -0.0, "inf", "-inf", "nan", 3.0]


def mismatches(src: str, args: list, opt_levels: tuple[int, ...] = (0, 2)) -> list[str]:
    """``src`` on ``args`` (numpy reprs), interpreted and compiled at each of
    ``opt_levels``: the outputs that differ bit for bit (any NaN equals any
    NaN: its sign is not specified), or the build's error."""
    import warnings

    import numpy as np

    import effir
    from effir.runtime.values import PRNGKey

    warnings.simplefilter("ignore")
    namespace = {"np": np, "PRNGKey": PRNGKey, "inf": np.inf, "nan": np.nan}
    values = [eval(a, namespace) for a in args]  # the test's own reprs
    module = effir.check(effir.parse(src, source_name="constants.effir"))
    ref = effir.interpret(module, *values)
    bad = []
    for level in opt_levels:
        try:
            out = effir.compile(module, opt_level=level)(*values)
        except Exception as err:
            bad.append(f"-O{level}: {type(err).__name__}: {err}")
            continue
        for k, (r, o) in enumerate(zip(_leaves(ref), _leaves(out), strict=True)):
            if not _same(r, o):
                bad.append(f"-O{level} output {k}: want {r!r}, got {o!r}")
    return bad


def _leaves(value: object) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _same(a: object, b: object) -> bool:
    import numpy as np

    if type(a).__name__ == "PRNGKey":
        return type(b).__name__ == "PRNGKey" and repr(a) == repr(b)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        return bool((nan == np.isnan(b)).all()) and a[~nan].tobytes() == b[~nan].tobytes()
    return a.tobytes() == b.tobytes()


def _check(src: str, args: list, opt_levels: tuple[int, ...] = (0, 2)) -> None:
    problems = run_isolated_call(
        "tests.backends.tvm.test_compiled_constants", "mismatches", src, args, opt_levels
    )
    assert not problems, src + "\n" + "\n".join(problems)


def _suffix(dtype: str) -> str:
    return {"float16": "f16", "float32": "f", "float64": "f64"}.get(dtype) or (
        ("u" if dtype[0] == "u" else "i") + dtype.lstrip("uint")
    )


def _specials(dtype: str) -> str:
    return f"np.array([{', '.join(str(v) for v in SPECIAL)}], {dtype!r})"


def test_float_arithmetic_with_zero_constants_is_ieee_in_every_float_dtype() -> None:
    """``x / 0`` is +-inf or NaN, ``0 / x`` keeps its sign and is NaN for
    x = 0, ``x * 0`` is NaN for infinities and -0 for negatives, ``x + 0``
    is +0 for x = -0; the zero written, negated, or folded from ``1 - 1``;
    at every level (-O1 fuses the constants with the division: the
    divisor ``1 - 1`` folded to a literal 0 there, [RULE TE-DIVISOR])."""
    for dtype in FLOATS:
        z = f"0{_suffix(dtype)}"
        one = f"1{_suffix(dtype)}"
        outs = [
            f"divide(%x, {z})",
            f"divide(%x, negative({z}))",
            f"divide(%x, subtract({one}, {one}))",
            f"divide({z}, %x)",
            f"divide({z}, {z})",
            f"multiply(%x, {z})",
            f"multiply({z}, %x)",
            f"add(%x, {z})",
            f"subtract(%x, negative({z}))",
            f"multiply(%x, {one})",
            f"where(greater(%x, {z}), {z}, negative({z}))",
        ]
        src = f"{HEADER}def @main(%x: Tensor[(8), {dtype}]) {{\n  ({', '.join(outs)})\n}}\n"
        _check(src, [_specials(dtype)], (0, 1, 2))


def test_negative_seeds_and_data_of_keys_compile_in_every_integer_dtype() -> None:
    """``random.key(-5)`` and ``random.fold_in(%k, -1)`` as constants, of
    every signed dtype (and the largest unsigned values), as the same values
    given as data do."""
    outs = []
    for dtype in INTS:
        info_min = {"int8": -128, "int16": -32768, "int32": -(2**31), "int64": -(2**63)}
        value = info_min.get(dtype, 2 ** int(dtype.lstrip("uint")) - 1)
        for v in (value, -5 if dtype[0] == "i" else 5, -1 if dtype[0] == "i" else 1):
            lit = f"{v}{_suffix(dtype)}"
            outs += [f"random.key({lit})", f"random.fold_in(%k, {lit})"]
    outs.append(f"random.fold_in(random.fold_in(%k, -1), {2**32 - 1}u32)")
    src = f"{HEADER}def @main(%k: Key) {{\n  ({', '.join(outs)})\n}}\n"
    _check(src, ["PRNGKey(np.array([1, 2], np.uint32))"])


def test_negative_integer_constants_cast_to_unsigned_dtypes() -> None:
    """A negative constant cast to each unsigned dtype wraps, as numpy's
    ``astype`` does, and INT_MIN compares as itself."""
    outs = []
    for src_dtype in ("int8", "int32", "int64"):
        for dst in ("uint8", "uint16", "uint32", "uint64"):
            outs.append(f'add(%u_{dst}, cast(-5{_suffix(src_dtype)}, dtype="{dst}"))')
    outs += [
        f"equal(%i, {-(2**31)}i32)",
        f"less_equal(%i, {-(2**31)}i32)",
        f"add(%u_uint64, {2**64 - 2}u64)",
    ]
    params = ", ".join(f"%u_{d}: Tensor[(2), {d}]" for d in ("uint8", "uint16", "uint32", "uint64"))
    src = f"{HEADER}def @main({params}, %i: Tensor[(2), int32]) {{\n  ({', '.join(outs)})\n}}\n"
    args = [f"np.array([1, 7], {d!r})" for d in ("uint8", "uint16", "uint32", "uint64")]
    _check(src, [*args, f"np.array([{-(2**31)}, 3], 'int32')"])


def test_constants_in_a_whole_compiled_loop() -> None:
    """The same constants in the body of a cf.foreach compiled as one loop
    (loop/evaluate.py builds its constants as kernels do)."""
    src = (
        f"{HEADER}def @main(%xs: Tensor[(4, 8), float32], %h0: Tensor[(8), float32]) {{\n"
        "  let %step = fn (%x, %h) {\n"
        "    let %n = add(multiply(divide(%x, 0f), 0f), add(%h, 0f));\n"
        "    (%n, divide(0f, %x))\n"
        "  };\n"
        "  cf.foreach(%step, %xs, %h0)\n}\n"
    )
    rows = ", ".join([str(SPECIAL)] * 4).replace("'", "")
    _check(src, [f"np.array([{rows}], 'float32')", _specials("float32")])


# ---------------------------------------------------------------- property
_FLOAT_LITERALS = ["0f", "-0f", "1f", "-1f", "2f", "0.5f"]


@st.composite
def _float_expression(draw: st.DrawFn, depth: int) -> str:
    """Exactly rounded float32 arithmetic over a parameter holding
    infinities, NaN and signed zeros, and literals that are or fold to
    zero (compared bit for bit: no approximated operator)."""
    leaves = ["%x", *_FLOAT_LITERALS]
    if not depth or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    op = draw(st.sampled_from(["add", "subtract", "multiply", "divide", "negative"]))
    if op == "negative":
        return f"negative({draw(_float_expression(depth - 1))})"
    a, b = draw(_float_expression(depth - 1)), draw(_float_expression(depth - 1))
    return f"{op}({a}, {b})"


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(_float_expression(3), min_size=1, max_size=4))
def test_random_float_expressions_with_special_constants_are_ieee(outs: list[str]) -> None:
    """Random expressions over IEEE special values and zero constants:
    compiled, the interpreter's values bit for bit (NaN's sign aside)."""
    src = f"{HEADER}def @main(%x: Tensor[(8), float32]) {{\n  ({', '.join(outs)},)\n}}\n"
    _check(src, [_specials("float32")])


# ------------------------------------------------- divisors folded to zero
_FINITE = ["0", "-0", "1", "-1", "2", "0.5", "1.5"]
_ZEROS = ["0", "-0"]


@st.composite
def _finite_constant(draw: st.DrawFn, depth: int, suffix: str) -> str:
    """A constant expression of exactly rounded, finite values. (No
    subtraction inside: TVM's float cancellation, ``(x + y) - y`` to x,
    is another defect, test_fuzz_findings.py.)"""
    if not depth or draw(st.booleans()):
        return draw(st.sampled_from(_FINITE)) + suffix
    op = draw(st.sampled_from(["add", "multiply", "negative"]))
    a = draw(_finite_constant(depth - 1, suffix))
    if op == "negative":
        return f"negative({a})"
    return f"{op}({a}, {draw(_finite_constant(depth - 1, suffix))})"


@st.composite
def _folded_zero(draw: st.DrawFn, suffix: str) -> str:
    """A divisor that is +0 or -0, written so that TVM can fold it: a
    constant minus itself (its simplifier's ``x - x``), a zero times a
    constant, a negated zero, a constant plus its negation."""
    zero = draw(st.sampled_from(_ZEROS)) + suffix
    c = draw(_finite_constant(2, suffix))
    return draw(
        st.sampled_from(
            [
                f"subtract({c}, {c})",
                f"multiply({zero}, {c})",
                f"negative({zero})",
                f"subtract({zero}, {draw(st.sampled_from(_ZEROS))}{suffix})",
                f"add({c}, negative({c}))",
                zero,
            ]
        )
    )


@st.composite
def _divisions_by_folded_zeros(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A program of one to three divisions by folded zeros (the dividend:
    the parameter of special values, a constant or a zero), some used
    further, of one float dtype."""
    dtype = draw(st.sampled_from(FLOATS))
    suffix = _suffix(dtype)
    outs = []
    for _ in range(draw(st.integers(1, 3))):
        dividend = draw(
            st.sampled_from(
                ["%x", draw(_finite_constant(2, suffix)), draw(st.sampled_from(_ZEROS)) + suffix]
            )
        )
        quotient = f"divide({dividend}, {draw(_folded_zero(suffix))})"
        outs.append(
            draw(
                st.sampled_from(
                    [
                        quotient,
                        f"add({quotient}, %x)",
                        f"multiply({quotient}, {draw(_finite_constant(1, suffix))})",
                    ]
                )
            )
        )
    src = f"{HEADER}def @main(%x: Tensor[(8), {dtype}]) {{\n  ({', '.join(outs)},)\n}}\n"
    return src, [_specials(dtype)]


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_divisions_by_folded_zeros())
def test_divisions_by_folded_zeros_build_and_are_ieee_at_every_level(
    program: tuple[str, list[str]],
) -> None:
    """[RULE TE-DIVISOR] A float division by a value TVM folds to +0 or -0
    builds at -O0, -O1 and -O2 and gives the interpreter's infinities,
    NaN and zero signs (NaN's own sign aside), float16, 32 and 64."""
    src, args = program
    _check(src, args, (0, 1, 2))
