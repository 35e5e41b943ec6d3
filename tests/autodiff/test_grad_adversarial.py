"""Adversarial tests of ``effir.grad``: programs the other autodiff tests do
not write, each checked for the claims docs/autodiff.md makes:

(a) the gradients equal central finite differences in float64;
(b) ``checkpoint="none"``, ``"loop"`` and ``"sqrt"`` give bit-identical
    gradients (and values);
(c) compiled gradients equal interpreted ones (test_grad_adversarial_compiled.py);
(d) every refusal is an effir error with a source location;
(e) no work or Python recursion that grows faster than the program.

Loops nested in loops and in branches, branches and ``match`` in loop
bodies, weights used by a loop body in hoisted and non-hoisted terms at
once, tuple carries and tuple sequences, 0- and 1-step loops, segment
boundaries, ``while_loop`` with data-dependent trip counts, keys and batch
norm inside loops, ``wrt`` subsets, a given output cotangent, recursion,
random loop nests (hypothesis), deep programs. A defect not fixed here is
an ``xfail(strict=True)`` test naming it."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import effir
from effir.ir.diagnostics import Error
from effir.ir.vjp import DifferentiationError
from effir.runtime.values import PRNGKey
from tests.support.adversarial_grad_programs import (
    INTEGER_OUTPUT_FIELD,
    H,
    V,
    _output_of,
    leaves,
    nested_loops,
    tuples,
)
from tests.support.grad_harness import numeric_grad
from tests.support.tiers import suite_and_nightly

MODES = ("none", "loop", "sqrt")
B = "Tensor[(3, 4), float64]"


def check_all_modes(
    src: str,
    args: list,
    wrt: list[str],
    fd: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    specialise: bool = False,
):
    """``value_and_grad`` of ``@main`` in every checkpoint mode: the value is
    ``@main``'s, the modes agree bit for bit, and (``fd``) the gradients
    equal finite differences. Returns the gradients."""
    m = effir.parse(src)
    results = {}
    for mode in MODES:
        g = effir.value_and_grad(m, wrt=wrt, checkpoint=mode, specialise=specialise)
        results[mode] = effir.interpret(g, *args, entry="main_grad")
    value, grads = results["none"]
    np.testing.assert_array_equal(value, effir.interpret(m, *args))
    for mode in ("loop", "sqrt"):
        for i, (a, b) in enumerate(
            zip(leaves(results["none"]), leaves(results[mode]), strict=True)
        ):
            np.testing.assert_array_equal(a, b, err_msg=f"{mode}, leaf {i}")
    if fd:
        names = [p.name_hint for p in m["main"].params]
        for name, got in zip(wrt, grads, strict=True):
            want = numeric_grad(m, args, names.index(name))
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"d/d{name}")
    return grads


def rng_for(*key: int) -> np.random.Generator:
    return np.random.default_rng(list(key))


# ------------------------------------------------- loops in loops, branches
NESTED3 = (
    H
    + f"""def @main(%xs: Tensor[(2, 3, 2, 2), float64], %w: {V}) {{
  let %l1 = fn (%a: Tensor[(3, 2, 2), float64], %h1: {V}) {{
    let %l2 = fn (%b: Tensor[(2, 2), float64], %h2: {V}) {{
      let %l3 = fn (%x: {V}, %h3: {V}) {{
        let %n = tanh(add(multiply(%x, %w), multiply(%h3, %h1)));
        (sum(%n), %n)
      }};
      let %r3 = cf.foreach(%l3, %b, %h2);
      (%r3.0, multiply(%r3.1, %w))
    }};
    let %r2 = cf.foreach(%l2, %a, %h1);
    (sum(%r2.0), tanh(%r2.1))
  }};
  let %r1 = cf.foreach(%l1, %xs, %w);
  add(sum(%r1.0), sum(%r1.1))
}}"""
)


def test_loops_nested_three_deep_capturing_outer_carries():
    """The innermost body reads the outermost step's carry (%h1) and %w."""
    rng = rng_for(1)
    check_all_modes(NESTED3, [rng.normal(size=(2, 3, 2, 2)) * 0.5, rng.normal(size=2)], ["xs", "w"])


LOOP_IN_IF = (
    H
    + f"""def @main(%xs: Tensor[(4, 2), float64], %w: {V}, %c: bool) {{
  let %z = if (%c) {{
    let %r = cf.foreach(fn (%x: {V}, %h: {V}) {{
      let %n = tanh(add(multiply(%x, %w), %h)); (%n, %n) }}, %xs, %w);
    sum(%r.0)
  }} else {{ sum(multiply(%w, %w)) }};
  multiply(%z, %z)
}}"""
)


@pytest.mark.parametrize("c", [True, False])
def test_a_loop_inside_a_branch(c):
    rng = rng_for(2)
    args = [rng.normal(size=(4, 2)), rng.normal(size=2), np.array(c)]
    grads = check_all_modes(LOOP_IN_IF, args, ["xs", "w"])
    if not c:
        np.testing.assert_array_equal(grads[0], np.zeros((4, 2)))


BRANCH_AND_MATCH_IN_BODY = (
    H
    + f"""type Opt {{ Some(Tensor[(2), float64]), No }}
def @main(%xs: Tensor[(5, 2), float64], %w: Tensor[(2, 2), float64], %v: {V}) {{
  let %r = cf.foreach(fn (%x: {V}, %h: {V}) {{
    let %a = tanh(add(nn.dense(reshape(%x, newshape=[1, 2]), %w), reshape(%h, newshape=[1, 2])));
    let %a1 = reshape(%a, newshape=[2]);
    let %o = if (greater(sum(%a1), 0f64)) {{ Some(multiply(%a1, %v)) }} else {{ No }};
    let %b = match (%o) {{ Some(%y) => add(%y, sum(%w)), No => exp(%a1) }};
    (multiply(%b, sum(multiply(%w, %w))), %b)
  }}, %xs, %v);
  add(sum(%r.0), sum(%r.1))
}}"""
)


def test_if_and_match_inside_a_loop_body_using_the_weight_three_ways():
    rng = rng_for(3)
    args = [rng.normal(size=(5, 2)), rng.normal(size=(2, 2)), rng.normal(size=2)]
    check_all_modes(BRANCH_AND_MATCH_IN_BODY, args, ["xs", "w", "v"])


LOOP_IF_LOOP = (
    H
    + f"""def @main(%xs: Tensor[(4, 3, 2), float64], %w: {V}) {{
  let %r = cf.foreach(fn (%row: Tensor[(3, 2), float64], %h: {V}) {{
    let %z = if (greater(sum(%h), 0f64)) {{
      let %in = cf.foreach(fn (%x: {V}, %g: {V}) {{
        let %n = tanh(add(multiply(%x, %w), %g)); (%n, %n) }}, %row, %h);
      %in.1
    }} else {{ tanh(multiply(%h, %w)) }};
    (sum(%z), %z)
  }}, %xs, %w);
  add(sum(%r.0), sum(%r.1))
}}"""
)


def test_a_loop_in_a_branch_in_a_loop_body():
    rng = rng_for(4)
    check_all_modes(LOOP_IF_LOOP, [rng.normal(size=(4, 3, 2)), rng.normal(size=2)], ["xs", "w"])


# ------------------------------------------- hoisted and non-hoisted terms
def hoisted(steps: int) -> str:
    """%w in nn.dense twice (hoisted factors) and in sum(%w) (in the loop);
    %b as a broadcast bias (hoisted) and in products (in the loop)."""
    return (
        H
        + f"""def @main(%xs: Tensor[({steps}, 3, 4), float64], %h0: {B},
          %w: Tensor[(4, 4), float64], %b: Tensor[(4), float64]) {{
  let %r = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = tanh(add(add(nn.dense(%h, %w), %x), %b));
    let %c = multiply(%a, sum(%w));
    let %d = add(nn.dense(%c, %w), multiply(%b, %b));
    let %e = multiply(%d, tanh(%b));
    (sum(%e), tanh(%e))
  }}, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}}"""
    )


def _hoisted_args(steps: int, seed: int = 5) -> list:
    rng = rng_for(seed, steps)
    return [
        rng.normal(size=(steps, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=(4, 4)) * 0.3,
        rng.normal(size=4) * 0.3,
    ]


@pytest.mark.parametrize("steps", [0, 1, 4, 9])
def test_weights_in_hoisted_and_in_loop_terms(steps):
    check_all_modes(hoisted(steps), _hoisted_args(steps), ["xs", "h0", "w", "b"])


@pytest.mark.parametrize("wrt", [["w"], ["b"], ["h0"], ["b", "w"], ["xs"]])
def test_wrt_subsets_give_the_same_gradients_as_all(wrt):
    """A subset of ``wrt`` changes what is accumulated (the others' terms
    are dead): each gradient is bit for bit the one asked with all four."""
    args = _hoisted_args(10, 6)
    m = effir.parse(hoisted(10))
    every = ["xs", "h0", "w", "b"]
    full = effir.interpret(
        effir.grad(m, wrt=every, checkpoint="sqrt", specialise=False), *args, entry="main_grad"
    )
    for mode in MODES:
        g = effir.grad(m, wrt=wrt, checkpoint=mode, specialise=False)
        part = effir.interpret(g, *args, entry="main_grad")
        for name, got in zip(wrt, part, strict=True):
            np.testing.assert_array_equal(got, full[every.index(name)], err_msg=f"{mode} {name}")


BIASES = [(4,), (1, 4), (3, 1), (), (3, 4)]
PRODUCTS = [
    ("nn.dense(%h, %w)", (4, 4)),
    ("nn.matmul(%h, %w, transpose_b=True)", (4, 4)),
    ("nn.matmul(%h, %w)", (4, 4)),
    ("nn.matmul(%w, %h)", (3, 3)),
    ("nn.matmul(%w, %h, transpose_a=True)", (3, 3)),
]
SHAPES = [(b, p) for b in BIASES for p in PRODUCTS]


@pytest.mark.parametrize(
    "bias,product",
    [
        *SHAPES[::6],
        *(pytest.param(*s, marks=pytest.mark.nightly) for s in SHAPES if s not in SHAPES[::6]),
    ],
)
def test_hoisting_recognises_only_the_sums_it_may_hoist(bias, product):
    """A bias broadcast over leading axes, over a middle axis, or not at
    all, and a weight multiplied on either side, transposed or not: only
    some of these terms are sums over steps of a product or a leading-axis
    reduction (hoist.py); each must give the gradient either way."""
    expr, wshape = product
    btype = "float64" if bias == () else f"Tensor[({', '.join(map(str, bias))}), float64]"
    src = (
        H
        + f"""def @main(%xs: Tensor[(9, 3, 4), float64], %h0: {B},
          %w: Tensor[({wshape[0]}, {wshape[1]}), float64], %b: {btype}) {{
  let %r = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = tanh(add(add({expr}, multiply(%x, %b)), %b)); (sum(%a), %a) }}, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}}"""
    )
    rng = rng_for(21, len(bias), wshape[0])
    args = [
        rng.normal(size=(9, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=wshape) * 0.3,
    ]
    args.append(np.asarray(rng.normal(size=bias) * 0.3))
    check_all_modes(src, args, ["xs", "h0", "w", "b"])


@pytest.mark.parametrize("steps", [4, 6, 7, 8, 11, 15, 16, 17, 26])
def test_segment_boundaries_are_bit_identical(steps):
    """Lengths around the sqrt geometry's choices (a divisor of T near
    sqrt(T), or a tail: primes, squares, one past a square)."""
    src = (
        H
        + f"""def @main(%xs: Tensor[({steps}, 3, 4), float64], %h0: {B},
          %w: Tensor[(4, 4), float64], %v: Tensor[(4), float64]) {{
  let %r = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = tanh(add(add(nn.dense(%h, %w), multiply(%x, %v)), %v));
    (multiply(%a, %x), %a) }}, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}}"""
    )
    rng = rng_for(7, steps)
    args = [
        rng.normal(size=(steps, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=(4, 4)) * 0.3,
        rng.normal(size=4) * 0.5,
    ]
    check_all_modes(src, args, ["xs", "h0", "w", "v"], fd=steps <= 6)


def stacked_layers(steps: int, dtype: str = "float64") -> str:
    """Two recurrent layers, the second iterating over the first's stacked
    outputs: its x_t's cotangent is only products ct_t @ U (computed after
    the loop from the stacked ct_t), its weights' terms hoisted."""
    return (
        H
        + f"""def @main(%xs: Tensor[({steps}, 3, 4), float64], %h0: {B},
          %w1: Tensor[(4, 4), float64], %u1: Tensor[(4, 4), float64],
          %w2: Tensor[(4, 4), float64], %u2: Tensor[(4, 4), float64], %b: Tensor[(4), float64]) {{
  let %l1 = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = tanh(add(add(nn.dense(%x, %u1), nn.dense(%h, %w1)), %b)); (%a, %a) }}, %xs, %h0);
  let %l2 = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = sigmoid(add(nn.dense(%x, %u2), nn.dense(%h, %w2))); (multiply(%a, %x), %a) }},
    %l1.0, %l1.1);
  add(sum(%l2.0), sum(multiply(%l2.1, %l1.1)))
}}"""
    ).replace("float64", dtype)


@pytest.mark.parametrize("steps,dtype", [(4, "float64"), (10, "float64"), (16, "float32")])
def test_stacked_recurrent_layers(steps, dtype):
    rng = rng_for(20, steps)
    args = [rng.normal(size=(steps, 3, 4)) * 0.5, rng.normal(size=(3, 4))]
    args += [rng.normal(size=(4, 4)) * 0.3 for _ in range(4)] + [rng.normal(size=4) * 0.3]
    args = [a.astype(dtype) for a in args]
    wrt = ["xs", "h0", "w1", "u1", "w2", "u2", "b"]
    check_all_modes(stacked_layers(steps, dtype), args, wrt, fd=steps <= 4)


@pytest.mark.parametrize("steps", [0, 1, 2, 5, 9])
def test_tuple_carries_and_tuple_sequences(steps):
    rng = rng_for(8, steps)
    args = [
        rng.normal(size=(steps, 2)),
        rng.normal(size=(steps, 2)),
        rng.normal(size=2),
        rng.normal(size=2),
    ]
    check_all_modes(tuples(steps), args, ["xs", "ys", "h", "w"])


SCALARS = (
    H
    + """def @main(%xs: Tensor[(7), float64], %h: float64, %w: float64) {
  let %r = cf.foreach(fn (%x: float64, %c: float64) {
    let %n = tanh(add(multiply(%x, %w), %c)); (multiply(%n, %w), %n) }, %xs, %h);
  add(sum(%r.0), %r.1)
}"""
)


def test_scalar_carry_over_a_vector():
    rng = rng_for(9)
    check_all_modes(
        SCALARS, [rng.normal(size=7), np.float64(0.3), np.float64(0.7)], ["xs", "h", "w"]
    )


@pytest.mark.parametrize(
    "result",
    [
        "sum(%r.0)",  # the carry unused
        "sum(%r.1)",  # the outputs unused
        "sum(%w)",  # the loop dead
        "add(sum(multiply(%r.1, %r.1)), sum(multiply(%r.0, %r.0)))",
    ],
)
def test_loop_results_used_partly_twice_or_not_at_all(result):
    src = (
        H
        + f"""def @main(%xs: Tensor[(5, 3, 4), float64], %h0: {B}, %w: Tensor[(4, 4), float64]) {{
  let %r = cf.foreach(fn (%x: {B}, %h: {B}) {{
    let %a = tanh(add(nn.dense(%h, %w), %x)); (%a, %a) }}, %xs, %h0);
  {result}
}}"""
    )
    rng = rng_for(10)
    args = [
        rng.normal(size=(5, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=(4, 4)) * 0.3,
    ]
    check_all_modes(src, args, ["xs", "h0", "w"])


SYMBOLIC = (
    H
    + """def @main(%xs: Tensor[(n, 3, 4), float64], %h0: Tensor[(3, 4), float64],
          %w: Tensor[(4, 4), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(3, 4), float64], %h: Tensor[(3, 4), float64]) {
    let %a = tanh(add(nn.dense(%h, %w), %x)); (multiply(%a, sum(%w)), %a) }, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}"""
)


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_symbolic_length_with_hoisted_terms(steps):
    rng = rng_for(11, steps)
    args = [rng.normal(size=(steps, 3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(4, 4)) * 0.3]
    check_all_modes(SYMBOLIC, args, ["xs", "h0", "w"])


# --------------------------------------------------------- while_loop
WHILE_OVER_FOREACH = (
    H
    + f"""def @main(%x: {V}, %w: {V}, %xs: Tensor[(3, 2), float64], %lim: float64) {{
  let %r = cf.while_loop(fn (%s: ({V}, float64)) {{ less(%s.1, %lim) }},
    fn (%s: ({V}, float64)) {{
      let %in = cf.foreach(fn (%y: {V}, %g: {V}) {{
        let %n = tanh(add(multiply(%y, %w), %g)); (%n, %n) }}, %xs, %s.0);
      let %h = multiply(%in.1, %w);
      (sum(%in.0), (%h, add(%s.1, add(1f64, sum(multiply(%h, %h))))))
    }}, (%x, 0f64), max_iterations=20);
  add(sum(%r.0), sum(%r.1.0))
}}"""
)


@pytest.mark.parametrize("limit", [0.0, 0.5, 3.0, 100.0])
def test_while_loop_with_data_dependent_trips_over_a_foreach(limit):
    """The trip count depends on the values (each step adds 1 + |h|^2 to
    the counter): 0, 1, a few, then max_iterations."""
    rng = rng_for(12)
    args = [rng.normal(size=2), rng.normal(size=2), rng.normal(size=(3, 2)), np.float64(limit)]
    check_all_modes(WHILE_OVER_FOREACH, args, ["x", "w", "xs"])


FOREACH_OVER_WHILE = (
    H
    + f"""def @main(%xs: Tensor[(5, 2), float64], %w: {V}) {{
  let %r = cf.foreach(fn (%x: {V}, %h: {V}) {{
    let %v = cf.while_loop(fn (%s: ({V}, float64)) {{ less(%s.1, 2f64) }},
      fn (%s: ({V}, float64)) {{
        let %n = tanh(add(multiply(%s.0, %w), %x));
        (%n, (%n, add(%s.1, add(0.5f64, sum(multiply(%n, %n))))))
      }}, (%h, 0f64), max_iterations=5);
    (sum(%v.0), %v.1.0)
  }}, %xs, %w);
  add(sum(%r.0), sum(%r.1))
}}"""
)


def test_foreach_over_a_while_loop_whose_trips_vary_per_step():
    rng = rng_for(13)
    check_all_modes(FOREACH_OVER_WHILE, [rng.normal(size=(5, 2)), rng.normal(size=2)], ["xs", "w"])


BRANCHY_WHILE = (
    H
    + f"""def @main(%x: {V}, %w: {V}) {{
  let %r = cf.while_loop(fn (%s: ({V}, {V}, int32)) {{ less(sum(multiply(%s.1, %s.1)), 4f64) }},
    fn (%s: ({V}, {V}, int32)) {{
      let %h = if (greater(sum(%s.0), 0f64)) {{ tanh(multiply(%s.0, %w)) }}
               else {{ multiply(sigmoid(%s.0), %w) }};
      (sum(%h), (%h, add(%s.1, add(multiply(%h, %h), 0.3f64)), add(%s.2, 1)))
    }}, (%x, %x, 0), max_iterations=50);
  add(sum(%r.0), sum(multiply(%r.1.0, %r.1.1)))
}}"""
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_while_loop_with_a_branch_and_a_tuple_carry(seed):
    rng = rng_for(14, seed)
    check_all_modes(BRANCHY_WHILE, [rng.normal(size=2) * 0.3, rng.normal(size=2)], ["x", "w"])


# ------------------------------------------------------------- effects
KEYS_IN_NESTED_LOOPS = (
    H
    + """def @main(%xs: Tensor[(5, 4, 3), float64], %w: Tensor[(3), float64], %k: Key) {
  let %r = cf.foreach(fn (%row: Tensor[(4, 3), float64], %s: (Tensor[(3), float64], Key)) {
    let %ks = random.split(%s.1);
    let %in = cf.foreach(fn (%x: Tensor[(3), float64], %t: (Tensor[(3), float64], Key)) {
      let %kk = random.split(%t.1);
      let %d = random.dropout(tanh(add(multiply(%x, %w), %t.0)), %kk.1, rate=0.5);
      (%d, (%d, %kk.0)) }, %row, (%s.0, %ks.1));
    (sum(%in.0), (%in.1.0, %ks.0))
  }, %xs, (%w, %k));
  add(sum(%r.0), sum(%r.1.0))
}"""
)


def test_keys_carried_by_nested_loops():
    """Dropout in the inner body, its key split in both bodies: every
    recomputation draws the forward's masks (the finite differences use
    the same key, so the masks are the gradient's)."""
    rng = rng_for(15)
    args = [rng.normal(size=(5, 4, 3)), rng.normal(size=3), PRNGKey([0, 3])]
    check_all_modes(KEYS_IN_NESTED_LOOPS, args, ["xs", "w"])


DROPOUT_AND_BATCH_NORM_IN_A_LOOP = (
    H
    + """global @rng: Ref[Key] = ref(random.key(3));
global @bn: Ref[(Tensor[(4), float64], Tensor[(4), float64])] =
  ref((zeros(shape=[4], dtype="float64"), ones(shape=[4], dtype="float64")));
def @main(%xs: Tensor[(STEPS, 6, 4), float64], %h0: Tensor[(6, 4), float64],
          %w: Tensor[(4, 4), float64], %gamma: Tensor[(4), float64], %beta: Tensor[(4), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(6, 4), float64], %h: Tensor[(6, 4), float64]) {
    let %a = tanh(add(nn.dense(%h, %w), %x));
    let %d = nn.dropout(%a, @rng, rate=0.25);
    let %n = nn.batch_norm(%d, %gamma, %beta, @bn, training=True);
    (sum(%n), tanh(%n))
  }, %xs, %h0);
  add(sum(%r.0), sum(%r.1))
}"""
)


@pytest.mark.parametrize("steps", [1, 5])
def test_dropout_and_batch_norm_inside_a_loop(steps):
    """A1 globals used in a loop body: state passing threads the key and the
    running statistics through the carry. Every mode gives the same bits,
    the same new key and statistics as @main, and the finite differences
    of @main from the same state."""
    from effir.backends.interpreter import interpret_a2

    m = effir.parse(DROPOUT_AND_BATCH_NORM_IN_A_LOOP.replace("STEPS", str(steps)))
    rng = rng_for(16, steps)
    args = [
        rng.normal(size=(steps, 6, 4)),
        rng.normal(size=(6, 4)),
        rng.normal(size=(4, 4)) * 0.4,
        rng.normal(size=4),
        rng.normal(size=4),
    ]
    wrt = ["xs", "h0", "w", "gamma", "beta"]
    results = {}
    for mode in MODES:
        g = effir.value_and_grad(m, wrt=wrt, checkpoint=mode, specialise=False)
        state = effir.State(g)
        results[mode] = (interpret_a2(g, *args, entry="main_grad", state=state), state)
    (value, grads), state = results["none"]
    want_state = effir.State(g)
    want = interpret_a2(g, *args, entry="main", state=want_state)
    np.testing.assert_array_equal(value, want)
    assert state["rng"] == want_state["rng"]
    for mode in ("loop", "sqrt"):
        for a, b in zip(leaves(results["none"][0]), leaves(results[mode][0]), strict=True):
            np.testing.assert_array_equal(a, b)
        assert results[mode][1]["rng"] == state["rng"]
        for a, b in zip(results[mode][1]["bn"], state["bn"], strict=True):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(state["bn"], want_state["bn"], strict=True):
        np.testing.assert_array_equal(a, b)

    def main(*xs):
        return float(interpret_a2(g, *xs, entry="main", state=effir.State(g)))

    for i, name in enumerate(wrt):
        point = np.array(args[i])
        num = np.zeros_like(point)
        for j in np.ndindex(point.shape):
            hi, lo = list(args), list(args)
            hi[i], lo[i] = point.copy(), point.copy()
            hi[i][j] += 1e-6
            lo[i][j] -= 1e-6
            num[j] = (main(*hi) - main(*lo)) / 2e-6
        np.testing.assert_allclose(grads[i], num, rtol=1e-5, atol=1e-6, err_msg=name)


# ------------------------------------------- output cotangent, recursion
OUTPUT = (
    H
    + f"""def @main(%xs: Tensor[(5, 2), float64], %w: {V}) {{
  let %r = cf.foreach(fn (%x: {V}, %h: {V}) {{
    let %n = tanh(add(multiply(%x, %w), %h)); (%n, %n) }}, %xs, %w);
  (%r.0, sum(%r.1))
}}"""
)


def test_a_given_output_cotangent_through_a_loop():
    """output=0 (the stacked outputs) with a cotangent: the gradient of
    sum(ct * outputs), in every mode, bit-identical."""
    rng = rng_for(17)
    xs, w, ct = rng.normal(size=(5, 2)), rng.normal(size=2), rng.normal(size=(5, 2))
    m = effir.parse(OUTPUT)
    dotted = effir.parse(
        OUTPUT.replace("(%r.0, sum(%r.1))", "sum(multiply(%r.0, %ct))").replace(
            f"%w: {V}) {{", f"%w: {V}, %ct: Tensor[(5, 2), float64]) {{"
        )
    )
    got = {}
    for mode in MODES:
        g = effir.grad(m, wrt=["xs", "w"], output=0, checkpoint=mode, specialise=False)
        got[mode] = effir.interpret(g, xs, w, ct, entry="main_grad")
    for mode in ("loop", "sqrt"):
        for a, b in zip(got["none"], got[mode], strict=True):
            np.testing.assert_array_equal(a, b)
    for i in range(2):
        want = numeric_grad(dotted, [xs, w, ct], i)
        np.testing.assert_allclose(got["none"][i], want, rtol=1e-5, atol=1e-6)


RECURSION = (
    H
    + f"""def @rec(%n: int32, %h: {V}, %w: {V}, %xs: Tensor[(3, 2), float64]) -> {V} {{
  if (greater(%n, 0)) {{
    let %r = cf.foreach(fn (%x: {V}, %g: {V}) {{
      let %q = tanh(add(multiply(%x, %w), %g)); (%q, %q) }}, %xs, %h);
    @rec(subtract(%n, 1), %r.1, %w, %xs)
  }} else {{ %h }}
}}
def @main(%xs: Tensor[(3, 2), float64], %ys: Tensor[(4, 2), float64], %w: {V}, %n: int32) {{
  let %r = cf.foreach(fn (%y: {V}, %h: {V}) {{
    let %o = @rec(%n, add(%h, %y), %w, %xs); (sum(%o), %o) }}, %ys, %w);
  add(sum(%r.0), sum(%r.1))
}}"""
)


@pytest.mark.parametrize("depth", [0, 3])
@pytest.mark.parametrize("specialise", [False, True])
def test_a_recursive_function_running_a_loop_called_from_a_loop(depth, specialise):
    rng = rng_for(18, depth)
    args = [rng.normal(size=(3, 2)), rng.normal(size=(4, 2)), rng.normal(size=2), np.int32(depth)]
    check_all_modes(RECURSION, args, ["xs", "ys", "w"], specialise=specialise)


# ------------------------------------------- random loop nests (hypothesis)
@st.composite
def loop_nests(draw, depth: int = 0) -> str:
    """The body of a step ``(%x{d}: Tensor[(2), float64], %h{d}) -> (out, h')``:
    some arithmetic on %x, %h, %w and the enclosing steps' carries, then
    maybe an inner loop (a foreach over %xs's rows, a while_loop with a
    data-dependent trip count, or either inside a branch)."""
    d = depth
    seen = [f"%h{i}" for i in range(d + 1)] + [f"%x{d}", "%w"]
    a, b = draw(st.sampled_from(seen)), draw(st.sampled_from(seen))
    op = draw(st.sampled_from(["add", "multiply", "subtract"]))
    fn = draw(st.sampled_from(["tanh", "sigmoid", "exp(tanh({}))"]))
    arg = f"{op}({a}, multiply({b}, %w))"
    lines = [f"let %a{d} = {fn.format(arg) if '{}' in fn else f'{fn}({arg})'};"]
    last = f"%a{d}"
    kinds = ["foreach", "while", "if-foreach"]  # the outer step always has an inner loop
    kind = draw(st.sampled_from(kinds if d == 0 else ["none", *kinds] if d < 2 else ["none"]))
    if kind != "none":
        inner = draw(loop_nests(d + 1))
        e = d + 1
        body = f"fn (%x{e}: {V}, %h{e}: {V}) {{ {inner} }}"
        if kind == "while":
            loop = (
                f"cf.while_loop(fn (%c{e}: ({V}, float64)) {{ less(%c{e}.1, 1.5f64) }}, "
                f"fn (%c{e}: ({V}, float64)) {{ let %f{e} = {body}; let %s{e} = %f{e}(%w, %c{e}.0); "
                f"(%s{e}.0, (%s{e}.1, add(%c{e}.1, add(0.4f64, sum(multiply(%s{e}.1, %s{e}.1)))))) }}, "
                f"({last}, 0f64), max_iterations=4)"
            )
            result = f"%r{e}.1.0"
        else:
            steps = draw(st.integers(0, 5))
            loop = f"cf.foreach({body}, strided_slice(%xs, begin=[0], end=[{steps}], axes=[0]), {last})"
            result = f"%r{e}.1"
        if kind == "if-foreach":
            lines.append(
                f"let %r{e} = if (greater(sum({last}), 0f64)) {{ {loop} }} "
                f'else {{ (zeros(shape=[{steps}], dtype="float64"), tanh({last})) }};'
            )
        else:
            lines.append(f"let %r{e} = {loop};")
        lines.append(f"let %b{d} = add({result}, multiply({last}, %h{d}));")
        last = f"%b{d}"
    lines.append(f"(sum({last}), {last})")
    return "\n".join(lines)


# No shrinking: seconds, not minutes. The suite draws a few examples, the nightly tier more.
LOOP_NEST_SETTINGS = dict(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])


def check_random_loop_nests(body, steps, seed):
    """Random nests of foreach / while_loop / loops in branches, two deep
    below the outer foreach (whose length is 0..6, around sqrt's 4)."""
    src = (
        H
        + f"""def @main(%xs: Tensor[(5, 2), float64], %ys: Tensor[({steps}, 2), float64],
          %hinit: {V}, %w: {V}) {{
  let %r0 = cf.foreach(fn (%x0: {V}, %h0: {V}) {{ {body} }}, %ys, %hinit);
  add(sum(%r0.0), sum(multiply(%r0.1, %r0.1)))
}}"""
    )
    rng = rng_for(19, seed)
    args = [
        rng.normal(size=(5, 2)),
        rng.normal(size=(steps, 2)),
        rng.normal(size=2),
        rng.normal(size=2),
    ]
    check_all_modes(src, args, ["xs", "ys", "hinit", "w"], rtol=1e-4, atol=1e-6)


test_random_loop_nests = settings(max_examples=4, **LOOP_NEST_SETTINGS)(
    given(body=loop_nests(), steps=st.integers(0, 6), seed=st.integers(0, 2**16))(
        check_random_loop_nests
    )
)
test_random_loop_nests_nightly = pytest.mark.nightly(
    settings(max_examples=12, **LOOP_NEST_SETTINGS)(
        given(body=loop_nests(), steps=st.integers(0, 6), seed=st.integers(0, 2**16))(
            check_random_loop_nests
        )
    )
)


# ------------------------------------------------ defects fixed here
READS_STATE_ONLY = (
    H
    + """global @bn: Ref[(Tensor[(3), float64], Tensor[(3), float64])] =
  ref((zeros(shape=[3], dtype="float64"), ones(shape=[3], dtype="float64")));
def @main(%x: Tensor[(4, 3), float64], %g: Tensor[(3), float64], %b: Tensor[(3), float64]) {
  sum(tanh(nn.batch_norm(%x, %g, %b, @bn, training=False)))
}"""
)


def test_an_entry_that_reads_state_but_writes_none():
    """Batch norm in inference mode reads the running statistics and writes
    none: in A2 the entry has state_in but no state_out, and returns its
    result unwrapped. grad took every A2 entry's result for a tuple
    (an AttributeError, entry.py)."""
    from effir.backends.interpreter import interpret_a2

    m = effir.parse(READS_STATE_ONLY)
    rng = rng_for(30)
    args = [rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=3)]
    for mode in MODES:
        g = effir.value_and_grad(m, checkpoint=mode)
        value, grads = interpret_a2(g, *args, entry="main_grad", state=effir.State(g))
        np.testing.assert_array_equal(value, effir.interpret(m, *args))
        for i, got in enumerate(grads):
            np.testing.assert_allclose(got, numeric_grad(m, args, i), rtol=1e-6, atol=1e-8)
    grads = interpret_a2(effir.grad(m, wrt="g"), *args, entry="main_grad", state=effir.State(m))
    assert len(grads) == 1 and grads[0].shape == (3,)


def test_output_must_be_a_field_index():
    """output="0" was a bare TypeError from a comparison in entry.py."""
    with pytest.raises(DifferentiationError, match="output='0'") as info:
        effir.grad(effir.parse(OUTPUT), output="0", specialise=False)
    assert ":2:1" in str(info.value)  # @main's definition
    with pytest.raises(DifferentiationError, match="output=2"):
        effir.grad(effir.parse(OUTPUT), output=2, specialise=False)


def test_wrt_names_must_be_strings():
    """wrt=[0] was a bare AttributeError (entry.py choose_wrt)."""
    with pytest.raises(DifferentiationError, match="wrt: 0 is not a parameter name") as info:
        effir.grad(effir.parse(OUTPUT), wrt=[0], output=1, specialise=False)
    assert ":2:1" in str(info.value)


def test_the_grad_pass_takes_output():
    """The pass had no ``output`` option: a tuple result could not be
    differentiated from pipeline text."""
    from effir.passes.infra.pipeline import pipeline

    m = effir.parse(OUTPUT)
    rng = rng_for(32)
    xs, w, ct = rng.normal(size=(5, 2)), rng.normal(size=2), rng.normal(size=(5, 2))
    g = pipeline("grad{wrt=w,output=0,value=false,specialise=false}")(m)
    want = effir.grad(m, wrt=["w"], output=0, specialise=False)
    np.testing.assert_array_equal(
        effir.interpret(g, xs, w, ct, entry="main_grad")[0],
        effir.interpret(want, xs, w, ct, entry="main_grad")[0],
    )
    (dw,) = effir.interpret(
        pipeline("grad{wrt=w,output=1,value=false}")(m), xs, w, entry="main_grad"
    )
    np.testing.assert_allclose(
        dw,
        numeric_grad(effir.parse(OUTPUT.replace("(%r.0, sum(%r.1))", "sum(%r.1)")), [xs, w], 1),
        rtol=1e-6,
    )
    with pytest.raises(DifferentiationError, match="output=3"):
        pipeline("grad{output=3}")(m)


UNANNOTATED = {
    "foreach": f"""def @main(%xs: Tensor[(3, 2), float64], %h: {V}) {{
  let %r = cf.foreach(fn (%x, %s) {{ let %n = tanh(add(%x, %s)); (%n, %n) }}, %xs, %h);
  sum(%r.1) }}""",
    "int-sequence": f"""def @main(%xs: Tensor[(3), int32], %h: {V}) {{
  let %r = cf.foreach(fn (%x, %s) {{ (cast(%x, dtype="float64"), tanh(%s)) }}, %xs, %h);
  add(sum(%r.0), sum(%r.1)) }}""",
    "while": f"""def @main(%h: {V}) {{
  let %r = cf.while_loop(fn (%c) {{ less(%c.0, 2) }},
    fn (%s) {{ (tanh(%s.1), (add(%s.0, 1), tanh(%s.1))) }}, (0, %h));
  add(sum(%r.0), sum(%r.1.1)) }}""",
    # a closure called by the loop body: its %g_vjp is dead in the gradient
    "called": f"""def @main(%h: {V}) {{
  let %g = fn (%t) {{ (tanh(%t.1), (add(%t.0, 1), tanh(%t.1))) }};
  let %r = cf.while_loop(fn (%c: (int32, {V})) {{ less(%c.0, 2) }},
    fn (%s: (int32, {V})) {{ %g(%s) }}, (0, %h));
  add(sum(%r.0), sum(%r.1.1)) }}""",
    # the same, the loop's result unused: no backward calls %g_vjp
    "called-dead": f"""def @main(%h: {V}) {{
  let %g = fn (%t) {{ (tanh(%t.1), (add(%t.0, 1), tanh(%t.1))) }};
  let %r = cf.while_loop(fn (%c: (int32, {V})) {{ less(%c.0, 2) }},
    fn (%s: (int32, {V})) {{ %g(%s) }}, (0, %h));
  sum(tanh(%h)) }}""",
}


@pytest.mark.parametrize("name", sorted(UNANNOTATED))
def test_closures_with_unannotated_parameters(name):
    """Parameters the type checker infers from the closure's one use (a
    loop, a call). The gradient program copies the closure where nothing
    uses it any more (a loop rebuilds its body; a closure's %f_vjp the
    recomputing loop does not call), and checking it failed: "cannot
    infer the argument types of this call" (reverse.py, typed_params)."""
    src = H + UNANNOTATED[name]
    m = effir.parse(src)
    rng = rng_for(31)
    names = [p.name_hint for p in m["main"].params]
    args = (
        [rng.normal(size=(3, 2)), rng.normal(size=2)] if len(names) == 2 else [rng.normal(size=2)]
    )
    if name == "int-sequence":
        args[0] = np.array([1, -2, 3], dtype="int32")
    wrt = [n for n in names if n != "xs" or name != "int-sequence"]
    check_all_modes(src, args, wrt)


def vjp_rule_calls(module, op: str, mode: str) -> int:
    """How many times ``grad`` asks ``op``'s vjp rule for a rule's code."""
    from effir.ir.op import lookup_op

    definition = lookup_op(op)
    rule = definition.rules["vjp"]
    calls = 0

    def counting(*args):
        nonlocal calls
        calls += 1
        return rule(*args)

    definition.rules["vjp"] = counting
    try:
        effir.grad(module, wrt=["a0", "w"], checkpoint=mode, specialise=False)
    finally:
        definition.rules["vjp"] = rule
    return calls


@pytest.mark.parametrize(
    "mode",
    [
        "none",
        "loop",
        "sqrt",
    ],
)
def test_nested_loops_are_differentiated_once_per_level(mode):
    """Each body is differentiated a bounded number of times, not once per
    path through the nest: 8 loops nested differentiate the innermost tanh
    about 8 times in loop/sqrt; "none" did it 382 times (two per level)."""
    depth = 8
    m = effir.parse(nested_loops(depth))
    calls = vjp_rule_calls(m, "tanh", mode)
    assert calls <= 3 * depth, calls


def test_nested_loops_are_correct():
    """The program of the work-count test, 3 deep, against finite differences."""
    rng = rng_for(40)
    args = [rng.normal(size=(1, 1, 1, 2)), rng.normal(size=2), rng.normal(size=2)]
    check_all_modes(nested_loops(3), args, ["a0", "w"])


def nested_loops_with_branches(depth: int) -> str:
    """``nested_loops`` with an ``if`` after each inner loop: its pullback
    is a residual "none" cannot stack, so every level falls back."""
    return nested_loops(depth, branches=True)


def test_nested_loops_that_fall_back_are_differentiated_polynomially_often():
    """Under "none", a loop whose residuals cannot be stacked is
    differentiated again to recompute; a loop that failed once falls back
    at once when an enclosing body is differentiated again, so the work
    is quadratic in the depth, not 2^depth (383 tanh rules at depth 8)."""
    depth = 8
    m = effir.parse(nested_loops_with_branches(depth))
    calls = vjp_rule_calls(m, "tanh", "none")
    assert calls <= depth * depth, calls


def test_nested_loops_with_branches_are_correct():
    rng = rng_for(45)
    args = [rng.normal(size=(1, 1, 2)), rng.normal(size=2), rng.normal(size=2)]
    check_all_modes(nested_loops_with_branches(2), args, ["a0", "w"])


SHARED_BODY = (
    H
    + f"""def @main(%xs: Tensor[(6, 3, 4), float64], %h0: {B}, %w: Tensor[(4, 4), float64]) {{
  let %step = fn (%x: {B}, %h: {B}) {{ let %a = tanh(add(nn.dense(%h, %w), %x)); (sum(%a), %a) }};
  let %r1 = cf.foreach(%step, %xs, %h0);
  let %r2 = cf.foreach(%step, %xs, %r1.1);
  add(add(sum(%r1.0), sum(%r2.0)), sum(%r2.1))
}}"""
)


def test_one_closure_as_the_body_of_two_loops():
    rng = rng_for(41)
    args = [
        rng.normal(size=(6, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=(4, 4)) * 0.3,
    ]
    check_all_modes(SHARED_BODY, args, ["xs", "h0", "w"])


def test_one_closure_as_the_body_of_two_loops_recomputed():
    """loop and sqrt copy the body (fresh binders); specialised, it is inlined."""
    rng = rng_for(41)
    args = [
        rng.normal(size=(6, 3, 4)) * 0.5,
        rng.normal(size=(3, 4)),
        rng.normal(size=(4, 4)) * 0.3,
    ]
    m = effir.parse(SHARED_BODY)
    got = []
    for mode in ("loop", "sqrt"):
        g = effir.value_and_grad(m, wrt=["xs", "h0", "w"], checkpoint=mode, specialise=False)
        got.append(leaves(effir.interpret(g, *args, entry="main_grad")))
    for a, b in zip(*got, strict=True):
        np.testing.assert_array_equal(a, b)
    check_all_modes(SHARED_BODY, args, ["xs", "h0", "w"], specialise=True)


UNIT_IN_CARRY = (
    H
    + f"""def @main(%x: {V}) {{
  let %r = cf.while_loop(fn (%c: (int32, ())) {{ less(%c.0, 2) }},
    fn (%s: (int32, ())) {{ (multiply(%x, 3f64), (add(%s.0, 1), ())) }}, (0, ()));
  sum(%r.0)
}}"""
)


def test_a_unit_field_in_a_recomputed_carry():
    """The typed program generator's while_loops carry (int32, ())."""
    check_all_modes(UNIT_IN_CARRY, [np.array([0.5, -1.0])], ["x"])


def test_an_integer_field_in_a_loops_outputs():
    rng = rng_for(42)
    check_all_modes(
        INTEGER_OUTPUT_FIELD, [rng.normal(size=(5, 2)), rng.normal(size=2)], ["xs", "w"]
    )


def global_body(bindings: int) -> str:
    """``cf.foreach(@g, ...)`` with ``@g`` of about ``3 * bindings`` nodes."""
    lines = ["let %v0 = tanh(add(%x, %h));"]
    lines += [f"let %v{i} = tanh(multiply(%v{i - 1}, 0.9f64));" for i in range(1, bindings)]
    last = f"%v{bindings - 1}"
    return (
        H
        + f"""def @g(%x: {V}, %h: {V}) -> ({V}, {V}) {{ {" ".join(lines)} ({last}, {last}) }}
def @main(%xs: Tensor[(3, 2), float64], %w: {V}) {{
  let %r = cf.foreach(@g, %xs, %w);
  add(sum(%r.0), sum(%r.1))
}}"""
    )


def test_a_small_global_function_as_a_loop_body_is_inlined():
    rng = rng_for(43)
    check_all_modes(
        global_body(3), [rng.normal(size=(3, 2)), rng.normal(size=2)], ["xs", "w"], specialise=True
    )


def test_a_large_global_function_as_a_loop_body():
    rng = rng_for(43)
    check_all_modes(
        global_body(120),
        [rng.normal(size=(3, 2)) * 0.1, rng.normal(size=2)],
        ["xs", "w"],
        specialise=True,
    )


GLOBAL_BODY_TWICE = (
    H
    + f"""def @g(%x: {V}, %h: {V}) -> ({V}, {V}) {{
  let %f = fn (%y: {V}) {{ tanh(%y) }};
  let %i = cf.foreach(fn (%a: float64, %c: {V}) {{
    let %n = %f(add(%c, %a)); (sum(%n), %n) }}, %x, %h);
  let %v = tanh(add(%x, %i.1));
  (%v, multiply(%v, 0.9f64))
}}
def @main(%xs: Tensor[(3, 2), float64], %w: {V}) {{
  let %r = cf.foreach(@g, %xs, %w);
  let %s = cf.foreach(@g, %xs, %r.1);
  let %d = @g(%w, %w);
  add(add(sum(%r.0), sum(%s.1)), sum(%d.0))
}}"""
)


def test_a_global_function_as_the_body_of_two_loops_and_called():
    """Unspecialised: the global (with a closure and a loop of its own) is
    the body of two loops and also called directly (``@g_vjp``)."""
    rng = rng_for(44)
    check_all_modes(
        GLOBAL_BODY_TWICE, [rng.normal(size=(3, 2)) * 0.5, rng.normal(size=2)], ["xs", "w"]
    )


def test_a_polymorphic_global_function_as_a_loop_body_is_refused():
    src = (
        H
        + f"""def @g[A](%x: A, %h: {V}) -> (A, {V}) {{ (%x, tanh(%h)) }}
def @main(%xs: Tensor[(3, 2), float64], %w: {V}) {{
  let %r = cf.foreach(@g, %xs, %w);
  sum(%r.1)
}}"""
    )
    with pytest.raises(DifferentiationError, match="monomorphic global function") as err:
        effir.grad(effir.parse(src), wrt=["w"], specialise=False)
    assert err.value.span is not None


# --------------------------------------------------------- deep programs
@pytest.mark.parametrize("times", suite_and_nightly(1, 2))
def test_a_let_chain_longer_than_the_recursion_limit(times):
    n = times * sys.getrecursionlimit() + 100
    lines = ["let %v0 = tanh(%x);"]
    lines += [f"let %v{i} = tanh(multiply(%v{i - 1}, %w));" for i in range(1, n)]
    src = H + f"def @main(%x: {V}, %w: {V}) {{\n" + "\n".join(lines) + f"\nsum(%v{n - 1})\n}}"
    x, w = np.array([0.3, -0.2]), np.array([0.9, 1.1])
    (gx,) = effir.interpret(
        effir.grad(effir.parse(src), wrt=["x"], specialise=False), x, w, entry="main_grad"
    )
    want, y = 1 - np.tanh(x) ** 2, np.tanh(x)
    for _ in range(1, n):
        want, y = want * w * (1 - np.tanh(y * w) ** 2), np.tanh(y * w)
    np.testing.assert_allclose(gx, want, rtol=1e-10)


@pytest.mark.parametrize("loops", suite_and_nightly(120, 1200))
def test_many_sequential_loops(loops):
    """Loops one after another, each starting from the last one's carry;
    the gradient is built in time linear in their number."""
    import time

    def program(count: int) -> str:
        lines, prev = [], "%x"
        for i in range(count):
            lines.append(
                f"let %r{i} = cf.foreach(fn (%a: {V}, %h: {V}) {{ "
                f"let %n = tanh(add(multiply(%a, %w), %h)); (%n, %n) }}, %xs, {prev});"
            )
            prev = f"%r{i}.1"
        return (
            H
            + f"def @main(%xs: Tensor[(2, 2), float64], %x: {V}, %w: {V}) {{\n"
            + "\n".join(lines)
            + f"\nsum({prev})\n}}"
        )

    count = loops
    times = []
    for n in (count // 4, count):
        m = effir.parse(program(n))
        start = time.process_time()
        g = effir.grad(m, wrt=["x", "w"], checkpoint="sqrt", specialise=False)
        times.append(time.process_time() - start)
    assert times[1] < 4 * 3 * times[0] + 0.5, times  # 4x the loops: about 4x the time
    args = [np.full((2, 2), 0.1), np.full(2, 0.1), np.full(2, 0.5)]
    grads = effir.interpret(g, *args, entry="main_grad")
    m = effir.parse(program(count))
    for i, name in ((1, "x"), (2, "w")):
        np.testing.assert_allclose(
            grads[i - 1], numeric_grad(m, args, i), rtol=1e-5, atol=1e-8, err_msg=name
        )


@pytest.mark.parametrize("depth", suite_and_nightly(40, 2 * sys.getrecursionlimit()))
def test_nested_branches_in_a_loop_body_deeper_than_the_recursion_limit(depth):
    """An if nested in the then-branch of an if, ``depth`` times, inside a
    foreach body, in every mode (the body is recomputed in loop and sqrt)."""
    inner = "tanh(%h)"
    for i in range(depth):
        inner = f"if (%c) {{ let %u{i} = {inner}; tanh(multiply(%u{i}, %w)) }} else {{ exp(%h) }}"
    src = (
        H + f"def @main(%xs: Tensor[(3, 2), float64], %x: {V}, %w: {V}, %c: bool) {{\n"
        f" let %r = cf.foreach(fn (%a: {V}, %h: {V}) {{ let %n = {inner}; (%n, add(%n, %a)) }}, %xs, %x);\n"
        f" sum(%r.1)\n}}"
    )
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * depth + 1000))  # the parser recurses per nesting
    try:
        m = effir.parse(src)
    finally:
        sys.setrecursionlimit(limit)
    args = [np.full((3, 2), 0.1), np.array([0.2, -0.1]), np.array([0.9, 1.1]), np.array(True)]
    check_all_modes_parsed(m, args, ["x", "w"], fd=depth < sys.getrecursionlimit())


def check_all_modes_parsed(m, args, wrt, fd=True):
    """``check_all_modes`` for a module already parsed."""
    results = {}
    for mode in MODES:
        g = effir.value_and_grad(m, wrt=wrt, checkpoint=mode, specialise=False)
        results[mode] = leaves(effir.interpret(g, *args, entry="main_grad"))
    for mode in ("loop", "sqrt"):
        for a, b in zip(results["none"], results[mode], strict=True):
            np.testing.assert_array_equal(a, b)
    if fd:
        names = [p.name_hint for p in m["main"].params]
        for k, name in enumerate(wrt):
            want = numeric_grad(m, args, names.index(name))
            np.testing.assert_allclose(results["none"][1 + k], want, rtol=1e-5, atol=1e-7)


# The suite draws a few examples, the nightly tier more.
TYPED_PROGRAM_SETTINGS = dict(
    deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate]
)


def check_random_typed_programs_fail_only_with_effir_errors(data):
    """Programs from the typed program generator (closures with inferred
    parameters, references and cells, ADTs, while_loops carrying ``()``,
    polymorphic helpers), differentiated in every mode with and without
    specialisation: ``grad`` and the gradient program either work or raise
    an effir error; where all three modes work, they agree bit for bit and
    the value is ``@main``'s."""
    from effir.backends.interpreter import interpret_a2
    from tests.passes.typed_programs import typed_programs

    p = data.draw(typed_programs())
    output = _output_of(p.result_type)
    if output is False:
        return
    specialise = data.draw(st.booleans())
    results = {}
    for mode in MODES:
        try:
            g = effir.value_and_grad(
                p.module, checkpoint=mode, output=output, specialise=specialise
            )
            value = interpret_a2(g, *p.args, entry="main", state=effir.State(g))
            extra = []
            if any(q.name_hint == "cotangent" for q in g["main_grad"].params):
                field = value if output is None else value[output]
                extra = [np.ones(np.shape(field), dtype=np.asarray(field).dtype)]
            results[mode] = (
                value,
                interpret_a2(g, *p.args, *extra, entry="main_grad", state=effir.State(g)),
            )
        except Error as e:
            assert ":" in str(e).split("\n")[0], str(e)  # located: <file>:line:col
            return
    for mode in ("loop", "sqrt"):
        for a, b in zip(leaves(results["none"][1]), leaves(results[mode][1]), strict=True):
            np.testing.assert_array_equal(a, b)
    value, (got, _) = results["none"][0], results["none"][1]
    for a, b in zip(leaves(got), leaves(value), strict=True):
        np.testing.assert_array_equal(a, b)


test_random_typed_programs_fail_only_with_effir_errors = settings(
    max_examples=40, **TYPED_PROGRAM_SETTINGS
)(given(data=st.data())(check_random_typed_programs_fail_only_with_effir_errors))
test_random_typed_programs_fail_only_with_effir_errors_nightly = pytest.mark.nightly(
    settings(max_examples=200, **TYPED_PROGRAM_SETTINGS)(
        given(data=st.data())(check_random_typed_programs_fail_only_with_effir_errors)
    )
)
