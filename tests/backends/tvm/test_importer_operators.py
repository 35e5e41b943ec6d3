"""The operators the importers added that the Relax lowering runs itself
(relax/dynamic.py): ``dyn.arange`` (its length counted, checked, then its
values filled) and ``forget_dims`` (the value, its sizes made shape
variables), compiled against the interpreter; in a subprocess."""

from __future__ import annotations

from tests.isolated import run_isolated

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
print("ok")
"""


def test_arange_and_forget_dims_compiled_equal_the_interpreter():
    run = run_isolated(CHECKS, timeout=600).check()
    assert run.stdout.strip().endswith("ok")
