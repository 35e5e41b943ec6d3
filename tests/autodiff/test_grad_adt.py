"""Gradients through constructors and ``match``: tensors put in an ADT
value (a user ADT, the prelude's ``List`` and ``Option``) and taken out
again get the gradient of what is done with them, against central finite
differences in float64 (docs/autodiff.md "ADTs")."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from tests.support.grad_harness import check_compiled_equals_interpreted, check_grad

HEADER = '#[version = "0.0.5"]\n'

BOX = (
    HEADER
    + """
type Box { Box(Tensor[(3), float64], Tensor[(), int32]), Empty }
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


POLYMORPHIC = """
def @twice[A](%v: A, %n: Tensor[(), int32]) -> (A, A) { (%v, %v) }
def @main(%x: Tensor[(3), float64], %w: Tensor[(2), float64]) {
  let %t = @twice(%x, 1);
  let %u = @twice((%w, 2), 1);
  let %s = @twice(Cons(%w, Nil), 0);
  let %h = match (%s.1) { Cons(%a, _) => %a, Nil => %w };
  add(sum(multiply(%t.0, exp(%t.1))), sum(multiply(%u.1.0, %h)))
}
"""


def test_a_polymorphic_function_is_differentiated_per_instantiation():
    # before: one @twice_vjp for every A, whose pullback returned () for a
    # value of type A (a TypeCheckError in the gradient program)
    rng = np.random.default_rng(5)
    m = effir.parse(HEADER + LIST + POLYMORPHIC)
    check_grad(m, [rng.normal(size=3), rng.normal(size=2)], ["x", "w"])
    g = effir.grad(m, specialise=False)
    assert {"twice_vjp", "twice_vjp_1", "twice_vjp_2"} <= set(g.functions)


def test_the_gradient_module_prints_and_parses_back():
    m = effir.parse(HEADER + LIST + SHARED)
    g = effir.value_and_grad(m, specialise=False)
    assert "ListCtZero" in str(g) and "@ListCtAdd" in str(g)
    again = effir.parse(str(g))
    rng = np.random.default_rng(6)
    x, w = rng.normal(size=3), rng.normal(size=3)
    want = effir.interpret(g, x, w, entry="main_grad")
    got = effir.interpret(again, x, w, entry="main_grad")
    np.testing.assert_array_equal(got[1][0], want[1][0])
    np.testing.assert_array_equal(got[1][1], want[1][1])


# A list built by recursion, mapped and folded by recursive functions and
# matched twice (its cotangents added by the generated @ListCtAdd): the
# TVM build of the gradient program equals the interpreter.
COMPILED = """
type List[A] { Cons(A, List[A]), Nil }
""" + LISTS.replace(
    "  sum(multiply(%s, %s))\n",
    "  let %h = match (%xs) { Cons(_, Cons(%a, _)) => %a, _ => %x };\n"
    "  add(sum(multiply(%s, %s)), sum(multiply(%h, %w)))\n",
)


def test_the_compiled_list_program():
    rng = np.random.default_rng(7)
    check_grad(
        effir.parse(HEADER + COMPILED), [rng.normal(size=3) for _ in range(3)], ["x", "y", "w"]
    )


def check_compiled_adt_gradient() -> None:
    g = effir.value_and_grad(effir.parse(HEADER + COMPILED), specialise=False)
    rng = np.random.default_rng(8)
    args = [rng.normal(size=3) for _ in range(3)]
    check_compiled_equals_interpreted(g, args)


@pytest.mark.tvm
def test_the_compiled_gradient_through_lists_equals_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_adt import check_compiled_adt_gradient"
        "; check_compiled_adt_gradient()"
    )
    run.check()
    assert "ok" in run.stdout


LOOP = """
type Option[A] { Some(A), None }
def @main(%xs: Tensor[(5, 3), float64], %w: Tensor[(3), float64], %h0: Tensor[(3), float64]) {
  let %o = Some((%w, 2));
  let %step = fn (%x: Tensor[(3), float64], %h: Tensor[(3), float64]) {
    let %v = match (%o) { Some((%a, _)) => %a, None => %x };
    let %n = tanh(add(multiply(%h, %v), %x));
    (%n, %n)
  };
  let %r = cf.foreach(%step, %xs, %h0);
  sum(multiply(%r.0, %r.0))
}
"""


def test_an_adt_captured_by_a_loop_body_in_every_checkpoint_mode():
    # the ADT's cotangent is a loop accumulator (a zero, then @OptionCtAdd)
    m = effir.parse(HEADER + LOOP)
    rng = np.random.default_rng(9)
    args = [rng.normal(size=(5, 3)), rng.normal(size=3), rng.normal(size=3)]
    grads = [check_grad(m, args, ["xs", "w", "h0"], checkpoint=c) for c in ("none", "sqrt")]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_array_equal(a, b)


LIST_PARAMETER = """
def @f(%ws: List[Tensor[(3), float64]], %x: Tensor[(3), float64]) {
  match (%ws) {
    Cons(%a, Cons(%b, _)) => sum(multiply(tanh(multiply(%a, %x)), %b)),
    _ => sum(%x),
  }
}
def @main(%a: Tensor[(3), float64], %b: Tensor[(3), float64], %x: Tensor[(3), float64]) {
  @f(Cons(%a, Cons(%b, Nil)), %x)
}
"""


def test_the_gradient_with_respect_to_an_adt_parameter_is_its_cotangent_adt():
    from effir.runtime.values import ADTValue
    from tests.support.grad_harness import numeric_grad

    m = effir.parse(HEADER + LIST + LIST_PARAMETER)
    rng = np.random.default_rng(10)
    a, b, x = (rng.normal(size=3) for _ in range(3))
    g = effir.grad(m, entry="f", wrt=["ws", "x"], specialise=False)
    ws = ADTValue("Cons", (a, ADTValue("Cons", (b, ADTValue("Nil")))))
    d_ws, d_x = effir.interpret(g, ws, x, entry="f_grad")
    assert d_ws.constructor == "ConsCt" and d_ws.fields[1].constructor == "ConsCt"
    assert d_ws.fields[1].fields[1].constructor == "ListCtZero"  # the unused tail: no walk
    for got, i in ((d_ws.fields[0], 0), (d_ws.fields[1].fields[0], 1), (d_x, 2)):
        np.testing.assert_allclose(got, numeric_grad(m, [a, b, x], i), rtol=1e-6, atol=1e-7)


TUPLE_PATTERN = """
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %t = (%x, (%w, 2));
  let %r = match (%t) { (%a, (%b, _)) => multiply(%a, exp(%b)) };
  sum(%r)
}
"""


def test_a_tuple_pattern_passes_the_gradient_to_the_matched_tuple():
    # before: the pattern variables' cotangents were dropped (zero gradients)
    rng = np.random.default_rng(11)
    check_grad(
        effir.parse(HEADER + TUPLE_PATTERN), [rng.normal(size=3) for _ in range(2)], ["x", "w"]
    )


# ADT values in a loop's carried state: under loop and sqrt (and none,
# which falls back to loop where a residual is an ADT value) the forward
# pushes them on the tape (keytape.py), and each recomputed step pops the
# value its forward read.
CARRIED = """
type Option[A] { Some(A), None }
def @main(%xs: Tensor[(5, 3), float64], %w: T3, %h0: T3, %limit: int32) {
  let %r = cf.foreach(fn (%x: T3, %c: (T3, List[T3], Option[T3])) {
    let %h = %c.0;
    let %prev = match (%c.1) { Cons(%p, _) => %p, Nil => %h };
    let %o = match (%c.2) { Some(%q) => multiply(%q, %w), None => %x };
    let %n = tanh(add(multiply(%h, %w), add(%x, multiply(%prev, %o))));
    (%n, (%n, Cons(%n, %c.1), Some(sigmoid(%n))))
  }, %xs, (%h0, Cons(%w, Nil), None));
  let %v = cf.while_loop(fn (%s: (List[T3], int32)) { less(%s.1, %limit) },
    fn (%s: (List[T3], int32)) {
      let %y = match (%s.0) { Cons(%a, Cons(%b, _)) => tanh(multiply(%a, %b)), _ => %w };
      (sum(%y), (Cons(%y, %s.0), add(%s.1, 1)))
    }, (%r.1.1, 0), max_iterations=4);
  let %last = match (%v.1.0) { Cons(%a, Cons(%b, _)) => multiply(%a, %b), _ => %w };
  add(add(sum(multiply(%r.0, %r.0)), sum(%v.0)), sum(%last))
}
""".replace("T3", "Tensor[(3), float64]")


def test_adt_values_carried_by_loops_in_every_checkpoint_mode():
    # before: "... whose carried state holds an ADT ... cannot be stored per step"
    m = effir.parse(HEADER + LIST + CARRIED)
    rng = np.random.default_rng(12)
    for limit in (0, 3):  # the while_loop: no step, and three
        args = [rng.normal(size=(5, 3)), rng.normal(size=3), rng.normal(size=3), np.int32(limit)]
        grads = {"loop": check_grad(m, args, ["xs", "w", "h0"], checkpoint="loop")}
        for mode in ("none", "sqrt"):
            g = effir.grad(m, wrt=["xs", "w", "h0"], checkpoint=mode, specialise=False)
            grads[mode] = effir.interpret(g, *args, entry="main_grad")
        for mode in ("loop", "sqrt"):
            for a, b in zip(grads["none"], grads[mode], strict=True):
                np.testing.assert_array_equal(a, b)
    assert "GradPush(" in effir.astext(g)


def check_compiled_carried_adts() -> None:
    m = effir.parse(HEADER + "type List[A] { Cons(A, List[A]), Nil }\n" + CARRIED)
    g = effir.value_and_grad(m, wrt=["xs", "w", "h0"], checkpoint="sqrt", specialise=False)
    rng = np.random.default_rng(13)
    args = [rng.normal(size=(5, 3)), rng.normal(size=3), rng.normal(size=3), np.int32(3)]
    check_compiled_equals_interpreted(g, args)


@pytest.mark.nightly  # a long build (loops with a tape)
def test_the_compiled_gradient_of_loops_carrying_adts_equals_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_adt import check_compiled_carried_adts"
        "; check_compiled_carried_adts()"
    )
    run.check()
    assert "ok" in run.stdout


BARE_CARRY = """
type Option[A] { Some(A), None }
def @main(%xs: Tensor[(6, 3), float64], %w: T3) {
  let %r = cf.foreach(fn (%x: T3, %c: Option[T3]) {
    let %h = match (%c) { Some(%p) => %p, None => %w };
    let %n = tanh(add(multiply(%h, %w), %x));
    (%n, Some(%n))
  }, %xs, None);
  let %last = match (%r.1) { Some(%a) => %a, None => %w };
  add(sum(%r.0), sum(multiply(%last, %last)))
}
""".replace("T3", "Tensor[(3), float64]")


def test_a_carry_that_is_an_adt_value_itself():
    # no tensor left to stack per step: the whole carry goes on the tape
    m = effir.parse(HEADER + BARE_CARRY)
    rng = np.random.default_rng(14)
    args = [rng.normal(size=(6, 3)), rng.normal(size=3)]
    want = check_grad(m, args, ["xs", "w"], checkpoint="sqrt")
    g = effir.grad(m, wrt=["xs", "w"], checkpoint="none", specialise=False)
    for a, b in zip(want, effir.interpret(g, *args, entry="main_grad"), strict=True):
        np.testing.assert_array_equal(a, b)
