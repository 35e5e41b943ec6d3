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
from tests.support.grad_harness import check_compiled_equals_interpreted, check_grad

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


CONSTRUCTOR = """
def @main(%x: T3, %w: T3) {
  let %xs = Cons(%x, Cons(tanh(%x), Nil));
  let %ys = Cons(%w, Cons(multiply(%x, %w), Nil));
  let %zs = @foldr(Cons, %ys, %xs);
  let %s = @foldl(fn (%a: T3, %v: T3) { tanh(add(multiply(%a, %v), %w)) }, %x, %zs);
  sum(%s)
}
"""


def test_a_constructor_and_a_closure_literal_as_arguments():
    # @foldr(Cons, ...) is the prelude's @concat: the copy calls Cons itself
    check_grad(_prelude(CONSTRUCTOR), _args(2, 4), ["x", "w"], specialise=True)


DROPOUT = """
global @rng: Ref[Key] = ref(random.key(3));
def @main(%x: T3, %w: T3) {
  let %xs = Cons(%x, Cons(tanh(%x), Cons(multiply(%x, %x), Nil)));
  let %f = fn (%acc: T3, %v: T3) { add(%acc, nn.dropout(multiply(%v, %w), @rng, rate=0.5)) };
  let %s = @foldl(%f, %w, %xs);
  sum(multiply(%s, %s))
}
"""


def test_a_closure_drawing_dropout_masks_folded_over_a_list():
    # A1: state passing threads the key through the closure and @foldl; the
    # copy takes the key as the closure's captured state, and each step's
    # backward uses its step's mask
    from effir.backends.interpreter import interpret_a2

    g = effir.value_and_grad(_prelude(DROPOUT), wrt=["x", "w"])

    def forward(x, w):
        return float(interpret_a2(g, x, w, entry="main", state=effir.State(g)))

    x, w = _args(2, 5)
    state = effir.State(g)
    value, grads = interpret_a2(g, x, w, entry="main_grad", state=state)
    assert value == forward(x, w)
    forward_state = effir.State(g)
    interpret_a2(g, x, w, entry="main", state=forward_state)
    assert state["rng"] == forward_state["rng"]  # the key advanced as the forward's
    eps = 1e-6
    for i, got in enumerate(grads):
        numeric = np.zeros(3)
        for j in range(3):
            plus, minus = [x.copy(), w.copy()], [x.copy(), w.copy()]
            plus[i][j] += eps
            minus[i][j] -= eps
            numeric[j] = (forward(*plus) - forward(*minus)) / (2 * eps)
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7)


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


def check_compiled_nested_gradient() -> None:
    # Before: TVM's InternalError ("The type of Tuple must be TupleType ...
    # R.Any": a pullback closure's tuple of cotangents read without a cast),
    # and before that the prelude's match? functions and @main's own match?
    # refused by effir.compile.
    g = effir.value_and_grad(_prelude(NESTED), wrt=["x", "w", "b"], specialise=True)
    args = _args(3, 2)
    check_compiled_equals_interpreted(g, args)


@pytest.mark.nightly  # 5 s of CPU (the pipeline and build of the gradient program) tests/backends/tvm/test_adts.py has the closure's tuple result in a second
def test_the_compiled_gradient_of_map_inside_the_closure_folded_by_foldl():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_higher_order import check_compiled_nested_gradient"
        "; check_compiled_nested_gradient()"
    )
    run.check()
    assert "ok" in run.stdout


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


# @map and @foldl as the prelude's: the specialised gradient program built
# by TVM equals the interpreter.
COMPILED = """
type List[A] { Cons(A, List[A]), Nil }
def @map[A, B](%f: fn(A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) { Cons(%x, %rest) => Cons(%f(%x), @map(%f, %rest)), Nil => Nil }
}
def @foldl[A, B](%f: fn(A, B) -> A, %acc: A, %xs: List[B]) -> A {
  match (%xs) { Cons(%x, %rest) => @foldl(%f, %f(%acc, %x), %rest), Nil => %acc }
}
def @main(%x: T3, %w: T3) {
  let %g = fn (%v: T3) { sigmoid(multiply(%v, %w)) };
  let %xs = @map(%g, Cons(%x, Cons(multiply(%x, %x), Cons(tanh(%x), Nil))));
  let %f = fn (%acc: T3, %v: T3) { add(%acc, multiply(%v, %w)) };
  let %s = @foldl(%f, zeros(shape=[3], dtype="float64"), %xs);
  sum(multiply(%s, %s))
}
"""


def check_compiled_specialised_gradient() -> None:
    g = effir.value_and_grad(effir.parse(HEADER + COMPILED.replace("T3", T)))
    assert "foldl_spec" in g.functions and "map_spec" in g.functions
    args = _args(2, 6)
    check_compiled_equals_interpreted(g, args)


@pytest.mark.tvm
def test_the_compiled_specialised_gradient_equals_the_interpreted():
    from tests.support.isolated import run_isolated

    run = run_isolated(
        "from tests.autodiff.test_grad_higher_order import check_compiled_specialised_gradient"
        "; check_compiled_specialised_gradient()"
    )
    run.check()
    assert "ok" in run.stdout


DIMENSIONS = """
type List[A] { Cons(A, List[A]), Nil }
def @fold(%f: fn (Tensor[(n), float64], Tensor[(n), float64]) -> Tensor[(n), float64],
          %acc: Tensor[(n), float64], %xs: List[Tensor[(n), float64]]) -> Tensor[(n), float64] {
  match (%xs) { Cons(%x, %rest) => @fold(%f, %f(%acc, %x), %rest), Nil => %acc }
}
def @main(%x: Tensor[(m), float64], %w: Tensor[(n, 2), float64]) {
  let %s = sum(%w);
  let %f = fn (%a: Tensor[(m), float64], %v: Tensor[(m), float64]) { add(%a, multiply(%v, %s)) };
  let %r = @fold(%f, %x, Cons(%x, Cons(tanh(%x), Nil)));
  sum(multiply(%r, %r))
}
"""


def test_a_closure_in_its_callers_symbolic_dimensions():
    # @fold's n is @main's m at this call, and @main's own n is another
    # size: the copy is written in @main's dimensions (n renamed m), so it
    # binds its parameter, now of type fn (Tensor[(m)]...), to the closure.
    # Before the renaming: a copy that did not type-check.
    m = effir.parse(HEADER + DIMENSIONS)
    rng = np.random.default_rng(7)
    check_grad(m, [rng.normal(size=4), rng.normal(size=(3, 2))], ["x", "w"], specialise=True)


GROWING = """
def @h(%f: fn (T3) -> T3, %x: T3, %n: int32) -> T3 {
  if (equal(%n, 0)) { %f(%x) } else {
    let %g = fn (%v: T3) { %f(%f(%v)) };
    @h(%g, %x, subtract(%n, 1))
  }
}
def @main(%x: T3, %w: T3, %n: int32) {
  let %f = fn (%v: T3) { tanh(multiply(%v, %w)) };
  sum(@h(%f, %x, %n))
}
"""


def test_a_recursion_wrapping_its_function_argument_ends_in_a_refusal():
    # every level passes a new closure: the copies are bounded (MAX_DEPTH,
    # MAX_COPIES), and the closure still passed at the end is refused
    from effir.autodiff.specialise import MAX_COPIES, specialise_function_arguments
    from effir.passes.analyses.infer_type import check
    from effir.passes.transforms.partial_eval import partial_eval

    m = effir.parse(HEADER + GROWING.replace("T3", T))
    with pytest.raises(DifferentiationError) as info:
        effir.grad(m, wrt=["x", "w"])
    assert "closure used as a value" in str(info.value) and "%f(%f(%v))" in str(info.value)
    out = specialise_function_arguments(check(partial_eval(m)), "main")
    assert 0 < sum(name.startswith("h_spec") for name in out.functions) <= MAX_COPIES
