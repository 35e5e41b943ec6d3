"""Eager runs give what scripted, traced and compiled runs give: the same
structure (a list a loop body returns is a list), the same promotion rule
(effir/frontend/promotion.py, docs/frontend.md "Dtypes") and the same
integer widths (the IR's: ``argmax`` and an integer ``sum`` are int32)."""

import numpy as np

import effir
from effir import Tensor

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
