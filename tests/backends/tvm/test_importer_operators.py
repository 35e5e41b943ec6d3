"""The operators the importers added that the Relax lowering runs itself
(relax/dynamic.py): ``dyn.arange`` (its length counted, checked, then its
values filled), ``unique`` (rows counted, then gathered) and
``forget_dims`` (the value, its sizes made shape variables), compiled
against the interpreter; in a subprocess."""

from __future__ import annotations

from tests.support.isolated import run_isolated

CHECKS = """
import numpy as np, effir

def same(text, *args):
    module = effir.parse('#[version = "0.0.5"]\\n' + text)
    got = effir.compile(module)(*args)
    want = effir.interpret(module, *args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6)
    return module

ranges = same(
    'def @main(%a: float32, %b: float32, %c: float32, %i: int8, %j: int64) {'
    ' (dyn.arange(%a, %b, %c), dyn.arange(%i, -128i8, -1i8), dyn.arange(%j, 3i64, 2i64)) }',
    np.float32(-1), np.float32(2.5), np.float32(0.75), np.int8(100), np.int64(-5),
)
for bad, message in (((np.float32(1), np.float32(2), np.float32(0)), "the step (delta) is 0"),
                     ((np.float32(1), np.float32(np.inf), np.float32(1)), "must be finite")):
    try:
        effir.compile(ranges)(*bad, np.int8(0), np.int64(0))
    except effir.EvalError as err:
        assert message in str(err) and "dyn.arange" in str(err), err
    else:
        raise AssertionError(message)

# forget_dims joined with other values in a recursive fold over a list,
# at every optimisation level (a static Relax shape here broke -O2)
folded = '''type List[A] { Cons(A, List[A]), Nil, }
def @main(%a: Tensor[(2, 2), float32]) {
  let %w = forget_dims(%a);
  let %all = fn (%xs: List[Tensor[(?, ?), float32]]) -> Tensor[(?, ?), float32] {
    match? (%xs) {
      Cons(%x: Tensor[(?, ?), float32], Nil) => %x,
      Cons(%y: Tensor[(?, ?), float32], %rest: List[Tensor[(?, ?), float32]]) => concatenate((%y, %all(%rest))),
    }
  };
  (%all(Cons(%w, Cons(%w, Nil))), forget_dims(%a, axes=[1]))
}'''
module = effir.parse('#[version = "0.0.5"]\\n' + folded)
a = np.arange(4, dtype=np.float32).reshape(2, 2)
for level in (0, 1, 2):
    out, same_a = effir.compile(module, opt_level=level)(a)
    np.testing.assert_array_equal(out, np.concatenate([a, a]))
    np.testing.assert_array_equal(same_a, a)

# unique: without and with an axis, sorted or in first-occurrence order,
# NaNs as one value (greater than every number), booleans, an empty axis
cases = [
    (None, "", np.array([2.0, np.nan, 1.0, 1.0, np.nan, -3.0], np.float32)),
    (None, ", sorted=False", np.array([[2, 1], [1, 3]], np.int32)),
    (0, "", np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.int8)),
    (-1, ", sorted=False", np.array([[1, 0, 1], [2, 3, 2]], np.float32)),
    (1, "", np.random.default_rng(0).integers(0, 2, (2, 5, 3)).astype(np.int64)),
    (None, "", np.array([True, False, True])),
]
for axis, flags, x in cases:
    shape = ", ".join(map(str, x.shape))
    attrs = ("" if axis is None else f", axis={axis}") + flags
    same(f"def @main(%x: Tensor[({shape}), {x.dtype}]) {{ unique(%x{attrs}) }}", x)
empty = effir.parse('#[version = "0.0.5"]\\ndef @main(%x: Tensor[(0, 2), float32]) { unique(%x, axis=0) }')
try:
    effir.compile(empty)(np.zeros((0, 2), np.float32))
except effir.EvalError as err:
    assert "unique of an empty axis (axis 0 has length 0)" in str(err), err
else:
    raise AssertionError("an empty axis")
print("ok")
"""


def test_arange_unique_and_forget_dims_compiled_equal_the_interpreter():
    run = run_isolated(CHECKS, timeout=600).check()
    assert run.stdout.strip().endswith("ok")
