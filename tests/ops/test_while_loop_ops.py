"""``cf.while_loop``'s ``max_iterations`` as a run-time value (the loop's
fourth argument, an integer scalar) and ``pad_outputs`` (the outputs padded
to ``max_iterations`` rows of zeros, with the count of rows written), as
the MXNet control-flow design has them: the type relation, the numpy rule
(the reference semantics), the text format, and the located errors for bad
values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir

HEADER = '#[version = "0.0.5"]\n'
STATE = "(int32, float32)"


def program(limit: str = "", params: str = "", step_out: str = "multiply(%s.1, 2f)") -> str:
    """``@main`` doubling a counter's float until the counter reaches %k:
    ``limit`` is what follows ``init`` in the call."""
    return (
        HEADER + f"def @main(%x: float32, %k: int32{params}) {{\n"
        f"  let %c = fn (%s: {STATE}) {{ less(%s.0, %k) }};\n"
        f"  let %b = fn (%s: {STATE}) {{ ({step_out}, (add(%s.0, 1), add(%s.1, 1f))) }};\n"
        f"  cf.while_loop(%c, %b, (0, %x){limit})\n"
        "}\n"
    )


def reference(x: float, k: int, limit: int | None, pad: bool) -> tuple:
    """What MXNet's while_loop gives, written out in numpy."""
    outs, i, v = [], 0, x
    while (limit is None or len(outs) < limit) and i < k:
        outs.append(v * 2)
        i, v = i + 1, v + 1
    stacked = np.array(outs, np.float32)
    if not pad:
        return stacked, (np.int32(i), np.float32(v))
    assert limit is not None
    padded = np.concatenate([stacked, np.zeros(limit - len(outs), np.float32)])
    return padded, (np.int32(i), np.float32(v)), np.int64(len(outs))


def assert_same(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(-2, 6),
    st.integers(0, 7),
    st.sampled_from(["int32", "int64", "uint8", "int8"]),
    st.booleans(),
)
def test_a_run_time_max_iterations_stops_the_loop_as_the_attribute_does(k, limit, dtype, pad):
    x = np.float32(0.5)
    padding = ", pad_outputs=True" if pad else ""
    given_at_run_time = effir.check(effir.parse(program(f", %m{padding}", params=f", %m: {dtype}")))
    static = effir.check(effir.parse(program(f", max_iterations={limit}{padding}")))
    want = reference(0.5, k, limit, pad)
    assert_same(effir.interpret(given_at_run_time, x, np.int32(k), np.asarray(limit, dtype)), want)
    assert_same(effir.interpret(static, x, np.int32(k)), want)


def test_types_of_a_run_time_limit_and_of_padded_outputs() -> None:
    def result(text: str) -> str:
        return effir.astext(effir.check(effir.parse(text))["main"].body.checked_type)

    assert (
        result(program(", %m", params=", %m: int64")) == "(Tensor[(?), float32], (int32, float32))"
    )
    assert (
        result(program(", max_iterations=5, pad_outputs=True"))
        == "(Tensor[(5), float32], (int32, float32), int64)"
    )
    tuple_out = "(multiply(%s.1, 2f), %s.0)"
    assert (
        result(program(", %m, pad_outputs=True", ", %m: int32", tuple_out))
        == "((Tensor[(?), float32], Tensor[(?), int32]), (int32, float32), int64)"
    )


def test_the_text_format_round_trips_the_fourth_argument_and_the_option() -> None:
    for limit, params in (
        (", %m", ", %m: int64"),
        (", %m, pad_outputs=True", ", %m: int32"),
        (", max_iterations=3, pad_outputs=True", ""),
    ):
        module = effir.parse(program(limit, params))
        text = effir.astext(module)
        assert f"cf.while_loop(%c, %b, (0, %x){limit})" in text
        again = effir.parse(text)
        effir.assert_structural_equal(again, module)
        assert effir.astext(again) == text
    # the default stays unprinted: no option means exact outputs
    assert "pad_outputs" not in effir.astext(effir.parse(program(", max_iterations=3")))


@pytest.mark.parametrize(
    ("limit", "params", "message"),
    [
        (", %m", ", %m: float32", "max_iterations must be an integer scalar, got float32"),
        (", %m", ", %m: Tensor[(2), int32]", "max_iterations must be an integer scalar, got Tensor[(2), int32]"),
        (", %m", ", %m: bool", "max_iterations must be an integer scalar, got bool"),
        (", %m", ", %m: (int32,)", "max_iterations must be a tensor, got (int32,)"),
        (", max_iterations=-1", "", "max_iterations must be >= 0, got -1"),
        (", %m, max_iterations=2", ", %m: int32", "max_iterations is given twice"),
        (", pad_outputs=True", "", "pad_outputs pads the outputs to max_iterations rows: give"),
    ],
)  # fmt: skip
def test_bad_max_iterations_are_located_type_errors(limit, params, message) -> None:
    module = effir.parse(program(limit, params), source_name="w.effir")
    with pytest.raises(effir.TypeError) as err:
        effir.check(module)
    assert message in err.value.message
    assert err.value.location == "w.effir:5:3"


def test_padding_needs_outputs_of_known_shape() -> None:
    text = program(
        ", max_iterations=3, pad_outputs=True",
        step_out="boolean_mask(%s.1, greater(%s.1, 0f))",
    )
    with pytest.raises(effir.TypeError, match="the per-step output's shape must be known"):
        effir.check(effir.parse(text))


def test_a_negative_run_time_max_iterations_is_a_located_run_time_error() -> None:
    module = effir.parse(program(", %m", ", %m: int64"), source_name="w.effir")
    with pytest.raises(effir.EvalError) as err:
        effir.interpret(module, np.float32(1), np.int32(3), np.int64(-2))
    assert err.value.message == "cf.while_loop: max_iterations must be >= 0, got -2"
    assert err.value.location == "w.effir:5:3"


def test_a_padded_loop_that_ran_zero_times_is_all_padding() -> None:
    tuple_out = "(multiply(%s.1, 2f), %s.0)"
    module = effir.parse(program(", %m, pad_outputs=True", ", %m: int32", tuple_out))
    outs, final, count = effir.interpret(module, np.float32(1), np.int32(0), np.int32(4))
    assert_same(outs, (np.zeros(4, np.float32), np.zeros(4, np.int32)))
    assert_same(count, np.int64(0))
    assert_same(final, (np.int32(0), np.float32(1)))


@pytest.mark.parametrize(
    ("limit", "params", "args", "message"),
    [
        (", pad_outputs=True", "", (), "pad_outputs pads the outputs to max_iterations rows"),
        (", %m", ", %m: float32", (np.float32(2),), "max_iterations must be an integer scalar"),
    ],
)
def test_an_unchecked_program_meets_the_same_checks_when_it_runs(limit, params, args, message):
    """The interpreter runs programs nobody type-checked: the operator's
    numpy rule refuses what the type relation would have."""
    module = effir.parse(program(limit, params), source_name="w.effir")
    with pytest.raises(effir.EvalError) as err:
        effir.interpret(module, np.float32(1), np.int32(3), *args)
    assert err.value.message.startswith(f"cf.while_loop: {message}")
    assert err.value.location == "w.effir:5:3"
