"""Helpers first written for tests/autodiff/test_grad_sqrt_tape.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

# dropout inside the step: the step splits its key and carries one half on
KEYED = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 3), float64], %h0: Tensor[(HID), float64],
          %w: Tensor[(HID), float64], %v: Tensor[(3, HID), float64], %k: Key) {
  let %r = cf.foreach(fn (%x: Tensor[(3), float64], %s: (Tensor[(HID), float64], Key)) {
    let %keys = random.split(%s.1);
    let %a = tanh(add(multiply(%s.0, %w), sum(multiply(%v, expand_dims(%x, axis=1)), axis=[0])));
    let %d = random.dropout(%a, %keys.1, rate=0.5);
    (sum(multiply(%d, %d)), (%d, %keys.0))
  }, %xs, (%h0, %k));
  add(sum(%r.0), sum(multiply(%r.1.0, %w)))
}
"""


# an RNN cell whose weights are hoisted (nn.dense: weight-gradient terms
# summed per chunk), with dropout: "loop" runs it in segments too
KEYED_CELL = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 2, 3), float64], %h0: Tensor[(2, 4), float64],
          %w: Tensor[(4, 3), float64], %u: Tensor[(4, 4), float64], %b: Tensor[(4), float64],
          %k: Key) {
  let %step = fn (%x: Tensor[(2, 3), float64], %s: (Tensor[(2, 4), float64], Key)) {
    let %keys = random.split(%s.1);
    let %n = tanh(add(add(nn.dense(%x, %w), %b), nn.dense(%s.0, %u)));
    let %d = random.dropout(%n, %keys.1, rate=0.25);
    (sum(%d, axis=[1]), (%d, %keys.0))
  };
  let %r = cf.foreach(%step, %xs, (%h0, %k));
  add(sum(multiply(%r.0, %r.0)), sum(%r.1.0))
}
"""


# ADT values in the carry: a List the loop grows and reads, an Option
LISTED = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
def @main(%xs: Tensor[(LEN, 3), float64], %w: T3, %h0: T3) {
  let %r = cf.foreach(fn (%x: T3, %c: (T3, List[T3], Option[T3])) {
    let %h = %c.0;
    let %prev = match (%c.1) { Cons(%p, _) => %p, Nil => %h };
    let %o = match (%c.2) { Some(%q) => multiply(%q, %w), None => %x };
    let %n = tanh(add(multiply(%h, %w), add(%x, multiply(%prev, %o))));
    (%n, (%n, Cons(%n, %c.1), Some(sigmoid(%n))))
  }, %xs, (%h0, Cons(%w, Nil), None));
  let %last = match (%r.1.1) { Cons(%a, Cons(%b, _)) => multiply(%a, %b), _ => %w };
  add(sum(multiply(%r.0, %r.0)), sum(%last))
}
""".replace("T3", "Tensor[(3), float64]")


# ------------------------------------------------ adversarial carries and places
T3 = "Tensor[(3), float64]"


# a carry that is only a key: nothing of it is stacked, all of it is taped
ONLY_KEY = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 3), float64], %w: T3, %k: Key) {
  let %r = cf.foreach(fn (%x: T3, %s: Key) {
    let %ks = random.split(%s);
    (random.dropout(tanh(multiply(%x, %w)), %ks.1, rate=0.5), %ks.0)
  }, %xs, %k);
  sum(multiply(%r.0, %r.0))
}
""".replace("T3", T3)


# a key and ADT values in one nested carry; tuple xs; only the final carry read
MIXED = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%xs: Tensor[(LEN, 3), float64], %ys: Tensor[(LEN, 2), float64], %w: T3, %h0: T3,
          %k: Key) {
  let %r = cf.foreach(fn (%xy: (T3, Tensor[(2), float64]), %c: ((T3, Key), (List[T3], T3))) {
    let %h = %c.0.0;
    let %ks = random.split(%c.0.1);
    let %prev = match (%c.1.0) { Cons(%p, _) => %p, Nil => %h };
    let %i = add(%xy.0, multiply(%prev, %c.1.1));
    let %n = tanh(add(multiply(%h, %w), multiply(%i, sum(%xy.1))));
    let %d = random.dropout(%n, %ks.1, rate=0.4);
    (sum(%d), ((%d, %ks.0), (Cons(%n, %c.1.0), multiply(%c.1.1, %w))))
  }, (%xs, %ys), ((%h0, %k), (Nil, %w)));
  let %last = match (%r.1.1.0) { Cons(%a, _) => %a, Nil => %w };
  add(sum(multiply(%r.1.0.0, %last)), sum(%r.1.1.1))
}
""".replace("T3", T3)
