"""``effir.grad`` / ``value_and_grad`` on programs with calls, tuples, ``if``,
``match``, recursion and closures, against central finite differences in
float64; errors that name what cannot be differentiated and where."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.vjp import DifferentiationError
from tests.support.grad_harness import check_grad
from tests.support.tiers import suite_and_nightly

HEADER = '#[version = "0.0.5"]\n'

CALLS_IF_TUPLES = (
    HEADER
    + """
def @f(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) -> Tensor[(3), float64] {
  tanh(multiply(%x, %w))
}
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64], %c: bool) {
  let %y = @f(%x, %w);
  let %t = (%y, (%x, %w));
  let %z = if (%c) { exp(%t.0) } else { multiply(%t.1.0, %t.1.1) };
  sum(multiply(%z, %y))
}
"""
)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), c=st.booleans())
def test_calls_tuples_and_the_taken_branch(seed, c):
    rng = np.random.default_rng(seed)
    m = effir.parse(CALLS_IF_TUPLES)
    check_grad(m, [rng.normal(size=3), rng.normal(size=3), np.array(c)], ["x", "w"])


def test_grad_returns_only_the_gradients_and_defaults_to_every_float_parameter():
    m = effir.parse(CALLS_IF_TUPLES)
    g = effir.grad(m)
    x, w = np.array([0.1, 0.2, 0.3]), np.array([1.0, -1.0, 0.5])
    grads = effir.interpret(g, x, w, np.array(True), entry="main_grad")
    _, expected = effir.interpret(
        effir.value_and_grad(m, wrt=["x", "w"]), x, w, np.array(True), entry="main_grad"
    )
    assert len(grads) == 2
    for a, b in zip(grads, expected, strict=True):
        np.testing.assert_array_equal(a, b)


MATCH = (
    HEADER
    + """
type Shape { Circle(Tensor[(2), float64]), Pair(Tensor[(2), float64], Tensor[(2), float64]) }
def @main(%x: Tensor[(2), float64], %w: Tensor[(2), float64], %c: bool) {
  let %s = if (%c) { Circle(%w) } else { Pair(%w, %x) };
  let %r = match (%s) {
    Circle(%a) => multiply(%x, %x),
    Pair(%a, %b) => multiply(%x, exp(%w)),
  };
  sum(%r)
}
"""
)


@pytest.mark.parametrize("c", [True, False])
def test_match_differentiates_the_taken_clause(c):
    rng = np.random.default_rng(3)
    m = effir.parse(MATCH)
    check_grad(m, [rng.normal(size=2), rng.normal(size=2), np.array(c)], ["x", "w"])


RECURSION_CLOSURES = (
    HEADER
    + """
def @pow(%x: Tensor[(2), float64], %n: int32) -> Tensor[(2), float64] {
  if (less(%n, 1)) { ones(shape=[2], dtype="float64") } else { multiply(%x, @pow(%x, subtract(%n, 1))) }
}
def @main(%x: Tensor[(2), float64], %w: Tensor[(2), float64]) {
  let %scale = fn (%v: Tensor[(2), float64]) { multiply(%v, %w) };
  let %rec = fn (%v: Tensor[(2), float64], %k: int32) -> Tensor[(2), float64] {
    if (less(%k, 1)) { %v } else { %rec(tanh(%scale(%v)), subtract(%k, 1)) }
  };
  let %y = @pow(%x, 3);
  sum(add(%rec(%y, 2), %scale(%x)))
}
"""
)


def test_recursion_global_and_local_closures_capturing_weights():
    rng = np.random.default_rng(4)
    m = effir.parse(RECURSION_CLOSURES)
    check_grad(m, [rng.normal(size=2), rng.normal(size=2)], ["x", "w"])
    g = effir.grad(m, wrt=["x"], specialise=False)
    assert "pow_vjp" in g.functions  # one vjp per global, called recursively


def test_non_scalar_output_takes_its_cotangent_and_output_picks_a_field():
    m = effir.parse(
        HEADER
        + """
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  (multiply(%x, %w), sum(exp(%x)))
}
"""
    )
    x, w, ct = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.25, -1.0]), np.array([1.0, 0.0, 2.0])
    g = effir.grad(m, wrt=["x"], output=0)
    assert [p.name_hint for p in g["main_grad"].params] == ["x", "w", "cotangent"]
    (gx,) = effir.interpret(g, x, w, ct, entry="main_grad")
    np.testing.assert_array_equal(gx, ct * w)
    (gx,) = effir.interpret(effir.grad(m, wrt=["x"], output=1), x, w, entry="main_grad")
    np.testing.assert_allclose(gx, np.exp(x))


def test_the_grad_pass_in_a_pipeline():
    m = effir.parse(CALLS_IF_TUPLES)
    out = effir.pipeline("grad{wrt=w,checkpoint=loop}")(m)
    value, (gw,) = effir.interpret(out, np.ones(3), np.ones(3), np.array(False), entry="main_grad")
    assert value == pytest.approx(
        float(effir.interpret(m, np.ones(3), np.ones(3), np.array(False)))
    )
    assert gw.shape == (3,)


# ---------------------------------------------------------------- errors
def _error(src: str, **kwargs) -> DifferentiationError:
    with pytest.raises(DifferentiationError) as info:
        effir.grad(effir.parse(HEADER + src), **kwargs)
    return info.value


def test_errors_name_the_parameter_and_the_reason():
    src = "def @main(%x: Tensor[(2), float64], %n: int32) { sum(%x) }"
    assert "no parameter %y" in str(_error(src, wrt=["y"]))
    assert "no float tensor" in str(_error(src, wrt=["n"]))
    assert "checkpoint must be one of" in str(_error(src, checkpoint="all"))
    assert "must be a float tensor" in str(
        _error("def @main(%x: Tensor[(2), float64]) { shape_of(%x) }")
    )


def test_state_is_never_differentiated():
    src = """global @bn: Ref[Tensor[(2), float64]] = ref(zeros(shape=[2], dtype="float64"));
def @main(%x: Tensor[(2), float64]) { let %m = ref_read(@bn); ref_write(@bn, %x); sum(multiply(%x, %m)) }"""
    assert "state" in str(_error(src, wrt=["bn"]))


def test_a_closure_used_as_a_value_is_a_located_error_unless_specialised():
    src = """def @apply(%f: fn (Tensor[(2), float64]) -> Tensor[(2), float64], %x: Tensor[(2), float64]) { %f(%x) }
def @main(%x: Tensor[(2), float64], %w: Tensor[(2), float64]) {
  let %g = fn (%v: Tensor[(2), float64]) { multiply(%v, %w) };
  sum(@apply(%g, %x))
}"""
    err = _error(src, specialise=False)
    assert "closure used as a value" in str(err)
    assert err.span is not None and "fn (%v" in str(err)
    # specialised first (the default), the call is inlined: differentiable
    m = effir.parse(HEADER + src)
    x, w = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    gx, gw = effir.interpret(effir.grad(m), x, w, entry="main_grad")
    np.testing.assert_array_equal(gx, w)
    np.testing.assert_array_equal(gw, x)


def test_a_missing_rule_names_the_operator_and_the_call(monkeypatch):
    from effir.ir.op import lookup_op

    rules = lookup_op("exp").rules
    monkeypatch.delitem(rules, "vjp")
    err = _error("def @main(%x: Tensor[(2), float64]) {\n  sum(exp(%x))\n}")
    assert "operator exp has no vjp rule" in str(err)
    assert ":3:" in str(err)  # the line of the call


# ------------------------------------------------------------ deep programs
def _nested_ifs(depth: int):
    from effir.ir.expr import Function, If, Let, Var
    from effir.ir.module import IRModule
    from effir.ir.op import call_op
    from effir.ir.types import TensorType

    x = Var("x", TensorType((2,), "float64"))
    c = Var("c", TensorType((), "bool"))
    body = call_op("tanh", x)
    for i in range(depth):
        v = Var(f"v{i}")
        body = Let(v, If(c, body, call_op("exp", x)), call_op("tanh", v))
    return IRModule({"main": Function((x, c), call_op("sum", body))})


@pytest.mark.parametrize("depth", suite_and_nightly(60, 2 * sys.getrecursionlimit()))
def test_nested_ifs_deeper_than_the_recursion_limit(depth):
    """Branches are differentiated on the trampoline, and each node's free
    variables come from one walk (not one per enclosing branch)."""
    m = _nested_ifs(depth)
    g = effir.grad(m, wrt=["x"], specialise=False)
    x = np.array([0.3, -0.2])
    (gx,) = effir.interpret(g, x, np.array(True), entry="main_grad")
    want = 1 - np.tanh(x) ** 2
    y = np.tanh(x)
    for _ in range(depth):
        want = want * (1 - np.tanh(y) ** 2)
        y = np.tanh(y)
    np.testing.assert_allclose(gx, want, rtol=1e-12)
