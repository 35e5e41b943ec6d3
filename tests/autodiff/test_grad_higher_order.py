"""Gradients through higher-order code that partial evaluation leaves
higher-order: a closure or a global function passed to a recursive function
(the prelude's ``map``, ``foldl``, ``foldr``), specialised before
differentiation (``effir/autodiff/specialise.py``), against central finite
differences in float64; and the refusal of what stays higher-order."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.vjp import DifferentiationError

from .grad_harness import check_grad

HEADER = '#[version = "0.0.5"]\n'
T = "Tensor[(3), float64]"


def _prelude(src: str):
    return effir.parse(HEADER + src.replace("T3", T), module=effir.prelude())


def _args(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=3) for _ in range(n)]


FOLDL_CLOSURE = """
def @main(%x: T3, %w: T3) {
  let %xs = Cons(%x, Cons(multiply(%x, %x), Cons(tanh(%x), Nil)));
  let %zero = zeros(shape=[3], dtype="float64");
  let %f = fn (%acc: T3, %v: T3) { add(%acc, multiply(%v, %w)) };
  let %s = @foldl(%f, %zero, %xs);
  sum(multiply(%s, %s))
}
"""


def test_foldl_with_a_closure_capturing_the_differentiated_weight():
    # before: "a closure used as a value ... cannot be differentiated": partial
    # evaluation unfolds @foldl once and leaves @foldl(%f, ...) recursive
    m = _prelude(FOLDL_CLOSURE)
    check_grad(m, _args(2, 0), ["x", "w"], specialise=True)
    g = effir.grad(m)
    copies = [n for n in g.functions if n.startswith("foldl_spec")]
    assert copies == ["foldl_spec", "foldl_spec_vjp"]  # one copy, its recursion reaches it


GLOBAL_ARGUMENT = """
def @step(%acc: T3, %v: T3) -> T3 { tanh(add(multiply(%acc, %v), %v)) }
def @main(%x: T3, %y: T3, %h: T3) {
  let %xs = Cons(%x, Cons(%y, Cons(multiply(%x, %y), Nil)));
  let %r = @foldr(@step, %h, %xs);
  let %s = @foldl(@step, %r, %xs);
  sum(multiply(%s, %r))
}
"""


def test_a_global_function_passed_to_foldl_and_foldr():
    check_grad(_prelude(GLOBAL_ARGUMENT), _args(3, 1), ["x", "y", "h"], specialise=True)


NESTED = """
def @main(%x: T3, %w: T3, %b: T3) {
  let %xs = Cons(%x, Cons(exp(%x), Cons(multiply(%x, %b), Nil)));
  let %g = fn (%v: T3) { sigmoid(add(multiply(%v, %w), %b)) };
  let %f = fn (%acc: T3, %v: T3) {
    let %ys = @map(%g, Cons(%v, Cons(%acc, Nil)));
    let %one = match? (%ys) { Cons(%a, Cons(%c, _)) => multiply(%a, %c) };
    add(%acc, %one)
  };
  let %s = @foldl(%f, %b, @map(%g, %xs));
  sum(multiply(%s, %s))
}
"""


def test_map_inside_the_closure_folded_by_foldl():
    check_grad(_prelude(NESTED), _args(3, 2), ["x", "w", "b"], specialise=True)


MAP_ACCUM = """
def @main(%x: T3, %w: T3) {
  let %xs = Cons(%x, Cons(exp(%x), Cons(multiply(%x, %w), Nil)));
  let %f = fn (%h: T3, %v: T3) {
    let %n = tanh(add(multiply(%h, %w), %v));
    (%n, multiply(%n, %v))
  };
  let %r = @map_accuml(%f, %w, %xs);
  let %t = @foldl(fn (%a: T3, %v: T3) { add(%a, %v) }, %r.0, %r.1);
  sum(multiply(%t, %t))
}
"""


def test_a_polymorphic_function_whose_own_closure_captures_the_argument():
    # @map_accuml[A, B, C] folds its own closure, which captures %f: the
    # copy at these types specialises @foldl on a closure that holds one
    check_grad(_prelude(MAP_ACCUM), _args(2, 3), ["x", "w"], specialise=True)


STORED = """
def @apply_all(%fs: List[fn (T3) -> T3], %x: T3) -> T3 {
  match (%fs) {
    Cons(%f, %rest) => @apply_all(%rest, %f(%x)),
    Nil => %x,
  }
}
def @main(%x: T3, %w: T3) {
  let %f = fn (%v: T3) { multiply(%v, %w) };
  let %g = fn (%v: T3) { tanh(multiply(%v, %w)) };
  sum(@apply_all(Cons(%f, Cons(%g, Nil)), %x))
}
"""


def test_a_function_stored_in_an_adt_and_called_later_is_refused_with_its_location():
    m = _prelude(STORED)
    with pytest.raises(DifferentiationError) as info:
        effir.grad(m, wrt=["w"])
    err = info.value
    assert "closure used as a value" in str(err)
    assert err.span is not None and "fn (%v" in str(err) and "tanh" in str(err)
