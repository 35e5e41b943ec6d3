"""Helpers first written for tests/autodiff/test_grad_loops.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

RNN = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 2, 3), float64], %h0: Tensor[(2, 3), float64],
          %w: Tensor[(3), float64], %c: (Tensor[(3), float64], Tensor[(3), float64])) {
  let %step = fn (%x: Tensor[(2, 3), float64], %s: (Tensor[(2, 3), float64], Tensor[(2, 3), float64])) {
    let %a = tanh(add(multiply(%x, %w), multiply(%s.0, %c.0)));
    let %b = if (greater(sum(%a), 0f64)) { multiply(%a, %s.1) } else { exp(%a) };
    ((exp(%a), %b), (%a, add(%s.1, %c.1)))
  };
  let %r = cf.foreach(%step, %xs, (%h0, %h0));
  add(add(sum(%r.0.0), sum(%r.0.1)), sum(multiply(%r.1.0, %r.1.1)))
}
"""


def _leaves(value):
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


WHILE = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64], %limit: float64) {
  let %r = cf.while_loop(fn (%s: (Tensor[(3), float64], float64)) { less(%s.1, %limit) },
    fn (%s: (Tensor[(3), float64], float64)) {
      let %h = tanh(multiply(%s.0, %w));
      (sum(%h), (%h, add(%s.1, 1f64)))
    }, (%x, 0f64), max_iterations=6);
  add(sum(%r.0), sum(%r.1.0))
}
"""


KEYED = """#[version = "0.0.5"]
def @main(%xs: Tensor[(5, 3), float64], %w: Tensor[(3), float64], %k: Key, %limit: int32) {
  let %r = cf.foreach(fn (%x: Tensor[(3), float64], %s: (Tensor[(3), float64], Key)) {
    let %keys = random.split(%s.1);
    let %d = random.dropout(tanh(add(multiply(%x, %w), %s.0)), %keys.1, rate=0.5);
    (%d, (%d, %keys.0))
  }, %xs, (%w, %k));
  let %v = cf.while_loop(fn (%s: (Tensor[(3), float64], Key, int32)) { less(%s.2, %limit) },
    fn (%s: (Tensor[(3), float64], Key, int32)) {
      let %keys = random.split(%s.1);
      let %d = random.dropout(multiply(%s.0, %w), %keys.1, rate=0.25);
      (sum(%d), (tanh(%d), %keys.0, add(%s.2, 1)))
    }, (%r.1.0, %r.1.1, 0), max_iterations=4);
  add(add(sum(%r.0), sum(%v.0)), sum(%v.1.0))
}
"""


SCAN_AND_MAP = """#[version = "0.0.5"]
def @main(%xs: Tensor[(4, 2), float64], %ys: Tensor[(4), float64], %h0: Tensor[(2), float64],
          %n: Tensor[(4), int32]) {
  let %r = cf.foreach(fn (%p: (Tensor[(2), float64], Tensor[(), float64], Tensor[(), int32]),
                          %h: Tensor[(2), float64]) {
    let %k = cast(%p.2, dtype="float64");
    ((), tanh(add(multiply(%h, %p.0), multiply(%p.1, %k))))
  }, (%xs, %ys, %n), %h0);
  let %m = cf.foreach(fn (%x: Tensor[(2), float64], %u: ()) { (exp(%x), ()) }, %xs, ());
  add(sum(%r.1), sum(%m.0))
}
"""
