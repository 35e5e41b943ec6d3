"""Eager runs give what scripted, traced and compiled runs give: the same
structure (a list a loop body returns is a list), the same promotion rule
(effir/frontend/promotion.py, docs/frontend.md "Eager equals scripted") and the same
integer widths (the IR's: ``argmax`` and an integer ``sum`` are int32)."""

import numpy as np
import pytest

import effir
from effir import Tensor
from tests.frontend.helpers import define

F32 = "float32"
XS = np.arange(12, dtype=F32).reshape(3, 4)


def _pairs(x, s):
    return [x * 2.0, effir.op.sum(x, axis=0)], s + x


def _counted(s):
    i, acc = s
    return [acc, effir.op.cast(i, dtype="float32")], (i + 1, acc * 0.5)


def _structure(value):
    if isinstance(value, tuple | list):
        return (type(value).__name__, [_structure(v) for v in value])
    return (np.shape(value), str(np.asarray(value).dtype))


def test_foreach_list_outputs_are_a_list_eagerly_and_traced() -> None:
    eager = effir.foreach(_pairs, XS, np.zeros(4, F32))
    traced = effir.trace(
        lambda xs, h: effir.foreach(_pairs, xs, h), Tensor[(3, 4), F32], Tensor[(4,), F32]
    )
    got = traced.interpret(XS, np.zeros(4, F32))
    assert isinstance(eager[0], list) and len(eager[0]) == 2
    assert eager[0][0].shape == (3, 4) and eager[0][1].shape == (3,)
    np.testing.assert_array_equal(eager[0][0], got[0][0])
    np.testing.assert_array_equal(eager[0][1], got[0][1])


def test_while_loop_two_list_outputs_of_different_shapes_eagerly() -> None:
    init = (np.int32(0), np.ones(4, F32))
    outs, (i, acc) = effir.while_loop(lambda s: s[0] < 3, _counted, init, outputs=True)
    assert isinstance(outs, list) and outs[0].shape == (3, 4) and outs[1].shape == (3,)
    np.testing.assert_array_equal(outs[1], np.arange(3, dtype=F32))
    assert int(i) == 3


def test_traced_body_returning_a_list_gives_lists_while_built() -> None:
    def loop(xs: Tensor[(3, 4), F32], h: Tensor[(4,), F32]):
        outs, h = effir.foreach(_pairs, xs, h)
        assert isinstance(outs, list)
        return outs[0], outs[1], h

    traced = effir.trace(loop)
    eager = loop(XS, np.zeros(4, F32))
    for got, want in zip(traced.interpret(XS, np.zeros(4, F32)), eager, strict=True):
        assert _structure(got) == _structure(want)
        np.testing.assert_array_equal(got, want)


def test_zero_steps_keep_the_list() -> None:
    outs, _ = effir.foreach(_pairs, np.zeros((0, 4), F32), np.zeros(4, F32))
    assert isinstance(outs, list) and outs[0].shape == (0, 4) and outs[1].shape == (0,)


COUNTED = """
@effir.script
def counted(xs: effir.Tensor[(3, 4), F32]):
    s = np.zeros((4,), dtype="float32")
    i = 0
    for x in xs:
        s = s + i * x
        i = i + 1
    return s, i

@effir.script
def ranged(xs: effir.Tensor[(3, 4), F32]):
    s = np.zeros((4,), dtype="float32")
    for i in range(3):
        s = s + i * xs[i] + 0.5 * i
    return s
"""


def test_counter_times_float_runs_scripted_as_eagerly() -> None:
    ns = define(COUNTED)
    for f in (ns["counted"], ns["ranged"]):
        effir.check(f.module)
        eager, scripted = f(XS), f.interpret(XS)
        eager = eager if isinstance(eager, tuple) else (eager,)
        scripted = scripted if isinstance(scripted, tuple) else (scripted,)
        for got, want in zip(scripted, eager, strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            assert np.asarray(got).dtype == np.asarray(want).dtype or isinstance(want, int)


MIXED = """
@effir.script
def mixed(x: effir.Tensor[(4,), F32], n: effir.Tensor[(4,), "int32"]):
    return x * n  # <-
"""


def test_tensors_of_two_dtypes_are_refused_with_the_cast_to_write() -> None:
    ns = define(MIXED)
    with pytest.raises(effir.FrontendError) as scripted:
        effir.check(ns["mixed"].module)
    assert "multiply: operands of dtypes float32 and int32" in scripted.value.message
    assert 'effir.op.cast(x, dtype="float32")' in scripted.value.hint
    assert scripted.value.span is not None
    with pytest.raises(effir.FrontendError) as eager:
        effir.op.multiply(XS[0], np.arange(4, dtype="int32"))
    assert eager.value.message == scripted.value.message
    assert eager.value.hint == scripted.value.hint
    fixed = define(MIXED.replace("x * n", 'x * effir.op.cast(n, dtype="float32")'))["mixed"]
    n = np.arange(4, dtype="int32")
    np.testing.assert_array_equal(fixed.interpret(XS[1], n), XS[1] * n.astype(F32))
    fixed = define(MIXED.replace("x * n", "x * np.float32(n)"))["mixed"]
    np.testing.assert_array_equal(fixed.interpret(XS[1], n), XS[1] * n.astype(F32))


WIDTHS = """
@effir.script
def widths(x: effir.Tensor[(2, 3), F32], n: effir.Tensor[(3,), "int32"]):
    return np.argmax(x, axis=1), np.sum(n), np.argmax(x)
"""


def test_integer_widths_eagerly_are_the_irs() -> None:
    f = define(WIDTHS)["widths"]
    x, n = XS[:2, :3], np.arange(3, dtype="int32")
    eager, scripted = f(x, n), f.interpret(x, n)
    assert [np.asarray(v).dtype for v in eager] == [np.dtype("int32")] * 3
    for got, want in zip(scripted, eager, strict=True):
        assert _structure(got) == _structure(want)
        np.testing.assert_array_equal(got, want)
    assert all(type(v) is np.ndarray for v in eager)  # the caller gets plain numpy


PAIRS = """
@effir.script
def pairs(xs: effir.Tensor[(3, 4), F32]):
    ys = []
    for i in range(3):
        x = xs[i]
        ys.append((x * 2.0, np.sum(x)))
    acc = np.zeros((4,), dtype="float32")
    for a, b in ys:
        acc = acc + a * b
    return ys[1], ys[-1][1], len(ys), acc, ys
"""


def _steps_stacked(value):
    """A returned list of per-step tuples as the program returns it: each
    field stacked along the steps (a list of tensors is its stacked tensor)."""
    if isinstance(value, list) and value and isinstance(value[0], tuple | list):
        return tuple(_steps_stacked(list(field)) for field in zip(*value, strict=True))
    if isinstance(value, list):
        return np.stack(value)
    if isinstance(value, tuple):
        return tuple(_steps_stacked(v) for v in value)
    return value


def _assert_same(got, want) -> None:
    assert _structure(got) == _structure(want), (got, want)
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def _leaves(value):
    if isinstance(value, tuple | list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_list_of_tuples_is_indexed_by_step_as_eagerly() -> None:
    """A loop's list of per-step tuples: ``ys[i]`` is step ``i``'s tuple,
    ``len(ys)`` the number of steps and ``for a, b in ys`` walks the steps,
    interpreted as eagerly and traced; returned, each field is stacked."""
    f = define(PAIRS)["pairs"]
    eager = f(XS)
    assert isinstance(eager[4], list) and len(eager[4]) == 3
    want = _steps_stacked(tuple(eager))
    want = (*want[:2], np.int32(3), *want[3:])  # a Python int eagerly
    _assert_same(f.interpret(XS), want)
    traced = effir.trace(f.fn, Tensor[(3, 4), F32]).interpret(XS)  # ys: a tuple of steps
    _assert_same((*traced[:4], _steps_stacked(list(traced[4]))), want)
    np.testing.assert_array_equal(want[0][0], XS[1] * 2)


def check_pairs_compiled() -> None:
    """Run in a subprocess: ``pairs`` compiled gives what it gives interpreted."""
    f = define(PAIRS)["pairs"]
    _assert_same(effir.compile(f)(XS), f.interpret(XS))
    print("ok")


@pytest.mark.tvm
def test_list_of_tuples_compiled_as_interpreted() -> None:
    from tests.support.isolated import run_isolated

    result = run_isolated(
        "from tests.frontend.test_eager_equals_scripted import check_pairs_compiled; "
        "check_pairs_compiled()"
    )
    result.check()
    assert "ok" in result.stdout


NEGATIVE = """
@effir.script
def last(xs: effir.Tensor[(3, 4), F32], ys: effir.Tensor[("n", 4), F32]):
    return xs[-1], xs[-3], ys[-1], xs[-2:]
"""


def test_negative_index_counts_from_the_end_as_eagerly() -> None:
    """``x[-1]`` is the last row (``take`` clips, so -1 would be row 0): a
    static length makes it ``n - 1``, an unknown one a wrapping ``take``."""
    f = define(NEGATIVE)["last"]
    ys = XS[:2] + 1.0
    _assert_same(f.interpret(XS, ys), f(XS, ys))
    np.testing.assert_array_equal(f.interpret(XS, ys)[2], ys[-1])


def test_negative_index_past_the_start_is_refused() -> None:
    f = define(NEGATIVE.replace("xs[-3]", "xs[-4]"))["last"]
    with pytest.raises(effir.FrontendError) as err:
        effir.check(f.module)
    assert err.value.message == "index -4 is out of range for a leading axis of 3"
    assert err.value.span is not None
    with pytest.raises(IndexError):
        f(XS, XS)


ZIPPED = """
@effir.script
def zipped(xs: effir.Tensor[(3, 4), F32]):
    ys = []
    for x in xs:
        ys.append((x * 2.0, np.sum(x)))
    zs = []
    for (a, b), x in zip(ys[1:], xs[:2]):
        zs.append(a * b - x)
    return zs
"""


def test_zip_walks_a_list_of_tuples_by_step() -> None:
    """``zip`` takes a loop's list of tuples (sliced too) with tensors, as
    Python zips the list: step by step (the sequences of one length)."""
    f = define(ZIPPED)["zipped"]
    want = np.stack([XS[i + 1] * 2 * XS[i + 1].sum() - XS[i] for i in range(2)])
    np.testing.assert_allclose(np.stack(f(XS)), want, rtol=1e-6)
    np.testing.assert_allclose(f.interpret(XS), want, rtol=1e-6)
