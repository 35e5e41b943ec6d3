"""Gradients through constructors and ``match``: tensors put in an ADT
value (a user ADT, the prelude's ``List`` and ``Option``) and taken out
again get the gradient of what is done with them, against central finite
differences in float64 (docs/autodiff.md "ADTs")."""

from __future__ import annotations

import numpy as np
import pytest

import effir

from .grad_harness import check_grad

HEADER = '#[version = "0.0.5"]\n'

BOX = (
    HEADER
    + """
type Boxed { Box(Tensor[(3), float64], Tensor[(), int32]), Empty }
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64], %c: bool) {
  let %b = if (%c) { Box(%x, 2) } else { Empty };
  let %y = match (%b) {
    Box(%v, %n) => multiply(multiply(%v, %v), %w),
    Empty => multiply(%w, %w),
  };
  sum(%y)
}
"""
)


@pytest.mark.parametrize("c", [True, False])
def test_a_tensor_in_a_user_adt_gets_its_gradient(c):
    rng = np.random.default_rng(0)
    check_grad(effir.parse(BOX), [rng.normal(size=3), rng.normal(size=3), np.array(c)], ["x", "w"])


OPTION = """
def @main(%x: Tensor[(2, 3), float64], %y: Tensor[(2, 3), float64], %w: Tensor[(3), float64]) {
  let %o = Some((%x, sigmoid(%y)));
  let %p = Some(%o);
  let %z = match (%p) {
    Some(Some((%a, %b))) => add(multiply(%a, %w), multiply(%b, %a)),
    _ => %x,
  };
  sum(%z)
}
"""


def test_nested_patterns_of_the_prelude_option():
    rng = np.random.default_rng(1)
    m = effir.parse(HEADER + OPTION, module=effir.prelude())
    args = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), rng.normal(size=3)]
    check_grad(m, args, ["x", "y", "w"])


# The prelude's List, and @hd and @nth as it defines them: partial
# evaluation of a module holding the whole prelude fails today on @flip
# (a well-formedness error in dce, outside autodiff), so the specialised
# tests carry the parts they use.
LIST = """
type List[A] { Cons(A, List[A]), Nil }
def @hd[A](%xs: List[A]) -> A { match? (%xs) { Cons(%x, _) => %x } }
def @tl[A](%xs: List[A]) -> List[A] { match? (%xs) { Cons(_, %rest) => %rest } }
def @nth[A](%xs: List[A], %n: Tensor[(), int32]) -> A {
  if (equal(%n, 0)) { @hd(%xs) } else { @nth(@tl(%xs), subtract(%n, 1)) }
}
"""

LISTS = """
def @build(%x: Tensor[(3), float64], %n: Tensor[(), int32]) -> List[Tensor[(3), float64]] {
  if (less(%n, 1)) {
    Nil
  } else {
    let %h = tanh(multiply(%x, cast(%n, dtype="float64")));
    Cons(%h, @build(%h, subtract(%n, 1)))
  }
}
def @scale(%xs: List[Tensor[(3), float64]], %w: Tensor[(3), float64]) -> List[Tensor[(3), float64]] {
  match (%xs) {
    Cons(%h, %t) => Cons(sigmoid(multiply(%h, %w)), @scale(%t, %w)),
    Nil => Nil,
  }
}
def @total(%xs: List[Tensor[(3), float64]]) -> Tensor[(3), float64] {
  match (%xs) {
    Cons(%h, %t) => add(%h, @total(%t)),
    Nil => zeros(shape=[3], dtype="float64"),
  }
}
def @main(%x: Tensor[(3), float64], %y: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %xs = Cons(%y, Cons(multiply(%y, %x), @build(%x, 3)));
  let %s = @total(@scale(%xs, %w));
  sum(multiply(%s, %s))
}
"""


@pytest.mark.parametrize("specialise", [False, True])
def test_a_list_built_by_recursion_mapped_and_folded(specialise):
    rng = np.random.default_rng(2)
    m = effir.parse(HEADER + LIST + LISTS)
    args = [rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)]
    check_grad(m, args, ["x", "y", "w"], specialise=specialise)


SHARED = """
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %xs = Cons(%x, Cons(%w, Nil));
  let %a = match (%xs) { Cons(%h, _) => %h, Nil => %w };
  let %b = match (%xs) { Cons(_, Cons(%h2, _)) => %h2, _ => %x };
  sum(multiply(%a, exp(%b)))
}
"""


def test_an_adt_value_used_twice_sums_its_cotangents():
    rng = np.random.default_rng(3)
    m = effir.parse(HEADER + SHARED, module=effir.prelude())
    check_grad(m, [rng.normal(size=3), rng.normal(size=3)], ["x", "w"])


PRELUDE_CALLS = """
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %xs = Cons(%x, Cons(%w, Nil));
  sum(multiply(@hd(%xs), exp(@nth(%xs, 1))))
}
"""


def test_prelude_list_functions_after_specialisation():
    rng = np.random.default_rng(4)
    m = effir.parse(HEADER + LIST + PRELUDE_CALLS)
    check_grad(m, [rng.normal(size=3), rng.normal(size=3)], ["x", "w"], specialise=True)
