"""Slices with negative strides, compiled (te_ops [RULE TE-OPAQUE]):
``strided_set`` with a negative stride wrote the wrong rows and left
uninitialised values in its result, and the compiled gradient through a
reversing slice was wrong, because TVM's ``FlattenBuffer`` rewrites ``(c -
i) // d`` as ``i // -d + c // d``. Every slicing operator (``strided_slice``,
its adjoint ``strided_set``, ``split``) and their gradients, with negative
strides, static and run-time sizes, composed with reversals and reshapes,
against the interpreter. Compiled runs go through ``tests/support/isolated.py``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.isolated import run_isolated_call

HEADER = '#[version = "0.0.5"]\n'
BIG = 2**31 - 1  # an end past every size: "to the end" (-BIG: "to the start")


def mismatches(src: str, args: list[list], dtype: str, grad: bool) -> list[str]:
    """``src`` on ``args`` (as ``dtype`` arrays), interpreted and compiled at
    opt levels 0 and 2 (and, with ``grad``, its gradient for each input):
    the differences, as text."""
    import warnings

    import numpy as np

    import effir

    warnings.simplefilter("ignore")
    module = effir.check(effir.parse(src, source_name="slices.effir"))
    values = [np.array(a, dtype) for a in args]
    programs = [(module, "main")]
    if grad:
        programs.append((effir.value_and_grad(module, specialise=False), "main_grad"))
    bad = []
    for program, entry in programs:
        ref = effir.interpret(program, *values, entry=entry)
        for level in (0, 2):
            out = effir.compile(program, opt_level=level, entry=entry)(*values, entry=entry)
            want = np.concatenate([np.ravel(v) for v in _leaves(ref)])
            got = np.concatenate([np.ravel(v) for v in _leaves(out)])
            if want.shape != got.shape or not np.allclose(want, got, rtol=1e-5, atol=1e-6):
                bad.append(f"{entry} at -O{level}: want {want.tolist()}, got {got.tolist()}")
    return bad


def _leaves(value: object) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _check(src: str, args: list[list], dtype: str = "float32", grad: bool = False) -> None:
    problems = run_isolated_call(
        "tests.backends.tvm.test_strided_compiled", "mismatches", src, args, dtype, grad
    )
    assert not problems, src + "\n" + "\n".join(problems)


def _rows(n: int, width: int = 3, scale: float = 1.0) -> list[list[float]]:
    """Row r is ``width * r, ...`` (times ``scale``): which row went where
    shows in the values."""
    return [[scale * (width * r + c) for c in range(width)] for r in range(n)]


def test_strided_set_with_a_negative_stride_writes_the_interpreters_rows() -> None:
    """Found: begin=[3], end=[0], strides=[-2] on 64 rows wrote row 3 from
    outside the value (``2.4e-322``); a whole reversal (begin=[-1],
    strides=[-1]) shifted the rows by one element."""
    for n, attrs, rows in [
        (64, "begin=[3], end=[0], strides=[-2]", 2),
        (5, f"begin=[-1], end=[{-BIG}], strides=[-1]", 5),
        (9, "begin=[8, 2], end=[-10, 0], strides=[-3, -1]", 3),
    ]:
        width = 2 if "8, 2" in attrs else 3
        src = (
            f"{HEADER}def @main(%x: Tensor[({n}, 3), float32], "
            f"%v: Tensor[({rows}, {width}), float32]) {{\n"
            f"  strided_set(%x, %v, {attrs})\n}}\n"
        )
        value = [[-1.0 - c - 3 * r for c in range(width)] for r in range(rows)]
        _check(src, [_rows(n), value])


def test_the_gradient_through_a_reversing_slice_is_the_interpreters() -> None:
    """Found: 5.34 compiled against -6.55 interpreted: the gradient of a
    strided_slice is a strided_set of its cotangent."""
    src = (
        f"{HEADER}def @main(%x: Tensor[(6, 3), float32], %w: Tensor[(3, 3), float32]) {{\n"
        f"  sum(multiply(strided_slice(%x, begin=[5], end=[{-BIG}], strides=[-2]), %w))\n}}\n"
    )
    weights = [[0.5 - r + 0.25 * c for c in range(3)] for r in range(3)]
    _check(src, [_rows(6), weights], grad=True)


def test_a_reversed_read_of_a_strided_set_is_the_interpreters() -> None:
    """A consumer that reverses a strided_set (as a loop's backward reverses
    its cotangents) gives TVM the ``(c - i) // d`` form even for a positive
    stride."""
    src = (
        f"{HEADER}def @main(%x: Tensor[(8, 3), float32], %v: Tensor[(4, 3), float32]) {{\n"
        f"  strided_slice(strided_set(%x, %v, begin=[1], end=[{BIG}], strides=[2]),"
        f" begin=[-1], end=[{-BIG}], strides=[-1])\n}}\n"
    )
    _check(src, [_rows(8), _rows(4)])


def test_slices_of_sizes_known_at_run_time_with_negative_strides() -> None:
    """The same with the sliced axis ``?`` (its start and length computed at
    run time, kernel/symbolic_shapes.py ``sliced``)."""
    outs = [
        "strided_slice(%x, begin=[3], end=[0], strides=[-2])",
        "strided_set(%x, strided_slice(%x, begin=[3], end=[0], strides=[-2]),"
        " begin=[6], end=[3], strides=[-2])",
        f"strided_set(%x, negative(strided_slice(%x, begin=[-1], end=[{-BIG}], strides=[-3])),"
        f" begin=[-1], end=[{-BIG}], strides=[-3])",
        "split(strided_slice(%x, begin=[-2], end=[-100], strides=[-1]), indices_or_sections=[1, 3]).1",
    ]
    src = f"{HEADER}def @main(%x: Tensor[(?, 3), float32]) {{\n  ({', '.join(outs)})\n}}\n"
    _check(src, [_rows(7)])


def test_a_static_axis_sliced_beside_a_run_time_one_keeps_its_sliced_size() -> None:
    """Found by the property below: with the rows ``?``, a slice of the
    static columns was ignored (``(?, 3)`` sliced to one column came out
    ``(8, 3)``): the run-time sizes started from the input's shape, not
    the relation's (kernel/symbolic_shapes.py)."""
    outs = [
        f"strided_slice(%x, begin=[-1, -1], end=[{-BIG}, {-BIG}], strides=[-3, -3])",
        f"strided_slice(%x, begin=[0, 2], end=[{BIG}, 3])",
        "strided_slice(%x, begin=[1], end=[3], axes=[1])",
    ]
    src = f"{HEADER}def @main(%x: Tensor[(?, 3), float32]) {{\n  ({', '.join(outs)})\n}}\n"
    _check(src, [_rows(8)])


# ---------------------------------------------------------------- property
def _bound(draw: st.DrawFn) -> int | None:
    return draw(st.one_of(st.none(), st.integers(-8, 8), st.sampled_from([BIG, -BIG])))


@st.composite
def _slice(draw: st.DrawFn) -> tuple[list[int], list[int], list[int]]:
    """begin, end and strides for the two axes of a (rows, 3) tensor,
    negative strides as likely as positive ones."""
    begin, end, strides = [], [], []
    for _ in range(2):
        step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        b, e = _bound(draw), _bound(draw)
        # an omitted bound is the start (or end) in the step's direction
        begin.append(b if b is not None else (0 if step > 0 else -1))
        end.append(e if e is not None else (BIG if step > 0 else -BIG))
        strides.append(step)
    return begin, end, strides


def _attrs(spec: tuple[list[int], list[int], list[int]]) -> str:
    begin, end, strides = spec
    return f"begin={begin}, end={end}, strides={strides}"


@st.composite
def _programs(draw: st.DrawFn) -> tuple[str, list[list], bool]:
    """A slice, a strided_set of a value computed from it, and a consumer
    that may reverse, reshape or slice again; on a static or a run-time
    number of rows; sometimes differentiated."""
    spec = _attrs(draw(_slice()))
    rows = draw(st.sampled_from(["8", "?"]))
    # (exactly rounded operators only: a gradient through an approximated
    # exp or tanh differs by more than a tolerance can tell from a wrong row)
    inner = draw(
        st.sampled_from(["%x", "multiply(%x, %x)", "reshape(transpose(%x), newshape=[8, 3])"])
    )
    if rows == "?" and inner.startswith("reshape"):
        inner = "%x"
    sliced = f"strided_slice({inner}, {spec})"
    body = draw(
        st.sampled_from(
            [
                sliced,
                f"strided_set({inner}, multiply({sliced}, 2f), {spec})",
                f"strided_slice(strided_set(%x, {sliced}, {spec}), {_attrs(draw(_slice()))})",
            ]
        )
    )
    outer = draw(
        st.sampled_from(
            [
                "{}",
                f"strided_slice({{}}, begin=[-1], end=[{-BIG}], strides=[-1])",
                "negative({})",
            ]
        )
    )
    body = outer.format(body)
    grad = draw(st.booleans())
    if grad:
        body = f"sum(multiply({body}, {body}))"
    src = f"{HEADER}def @main(%x: Tensor[({rows}, 3), float32]) {{\n  {body}\n}}\n"
    return src, [_rows(8, scale=0.1)], grad


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_programs())
def test_random_slices_compile_to_the_interpreters_values(
    program: tuple[str, list[list], bool],
) -> None:
    """Random slices and strided_sets with negative strides, composed, on
    static and run-time sizes, and their gradients: compiled at -O0 and
    -O2, the interpreter's values."""
    src, args, grad = program
    _check(src, args, grad=grad)
