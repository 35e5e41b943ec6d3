"""kernel/symbolic_shapes.py's size arithmetic against Python's (no build): a
slice of a size known only at run time has ``range(n)[b:e:s]``'s start and
length for every n, and numpy's broadcasting of two such sizes is decided
as numpy decides it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

from effir.backends.tvm.kernel.symbolic_shapes import KernelSizes, _stretch, sliced


def _value(expr: tirx.PrimExpr, values: dict[tirx.Var, int]) -> int:
    bound = tvm_ffi.structural_map(
        expr, (tirx.Var, lambda v: tirx.const(values[v], "int64") if v in values else v)
    )
    result = tvm.sym.Analyzer().simplify(bound)
    assert isinstance(result, tirx.IntImm), result
    return int(result)


BOUNDS = [None, -7, -3, -1, 0, 1, 2, 5, 2**31 - 1]


@pytest.mark.parametrize("step", [1, 2, 3, -1, -2])
def test_a_slice_of_a_run_time_size_is_pythons(step: int) -> None:
    n = tirx.Var("n", "int64")
    for begin, end in itertools.product(BOUNDS, BOUNDS):
        start, length = sliced(n, begin, end, step)
        for size in range(7):
            want = range(size)[begin:end:step]
            assert _value(length, {n: size}) == len(want), (size, begin, end, step)
            if len(want):
                assert _value(start, {n: size}) == want.start, (size, begin, end, step)


def test_two_run_time_sizes_broadcast_as_numpy() -> None:
    sizes = KernelSizes(["a", "b"])
    a, b = sizes.variables["a"], sizes.variables["b"]
    for x, y in [(a, b), (a, tirx.const(3, "int64")), (tirx.const(3, "int64"), b)]:
        size, ok = _stretch(x, y, sizes)
        for p, q in itertools.product(range(4), range(4)):
            values = {a: p, b: q}
            px, qy = _value(x, values), _value(y, values)
            try:
                (want,) = np.broadcast_shapes((px,), (qy,))
            except ValueError:
                assert not _value(ok, values), (px, qy)
                continue
            assert _value(ok, values) and _value(size, values) == want, (px, qy)
