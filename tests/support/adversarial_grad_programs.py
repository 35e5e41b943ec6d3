"""Helpers first written for tests/autodiff/test_grad_adversarial.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import numpy as np

from effir.runtime.values import PRNGKey

H = '#[version = "0.0.5"]\n'


V = "Tensor[(2), float64]"


def leaves(value) -> list:
    """The tensors (and keys) of a result, in order; an ADT value's fields
    are taken apart, its constructor kept as a string."""
    from effir.runtime.values import ADTValue

    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    if isinstance(value, ADTValue):
        return [np.asarray(value.constructor), *leaves(tuple(value.fields))]
    if isinstance(value, PRNGKey):
        return [np.asarray(value.data)]
    return [np.asarray(value)]


# ------------------------------------------------ tuple carries and xs
def tuples(steps: int) -> str:
    return (
        H
        + f"""def @main(%xs: Tensor[({steps}, 2), float64], %ys: Tensor[({steps}, 2), float64],
          %h: {V}, %w: {V}) {{
  let %r = cf.foreach(fn (%p: ({V}, {V}), %s: ({V}, ({V}, {V}))) {{
    let %a = tanh(add(multiply(%p.0, %s.1.0), %s.0));
    let %b = multiply(%p.1, %w);
    ((%a, (%b, %a)), (%b, (%a, add(%s.1.1, %w))))
  }}, (%xs, %ys), (%h, (%w, %h)));
  add(add(sum(%r.0.0), sum(%r.0.1.1)), add(sum(%r.1.0), sum(multiply(%r.1.1.0, %r.1.1.1))))
}}"""
    )


# ------------------------------------------- defects left to loops.py's owners
def nested_loops(depth: int, branches: bool = False) -> str:
    """``depth`` foreach loops nested (length-1 sequences but the innermost),
    each step's output its inner loop's summed outputs (``branches``: its
    carry through an ``if``)."""

    def seq(d: int) -> str:
        return "Tensor[(" + ", ".join(["1"] * d + ["2"]) + "), float64]"

    def level(d: int) -> str:
        if d == depth:
            return f"let %n = tanh(add(multiply(%a{d}, %w), %h{d})); (sum(%n), %n)"
        inner = f"fn (%a{d + 1}: {seq(depth - d - 1)}, %h{d + 1}: {V}) {{ {level(d + 1)} }}"
        loop = f"let %r{d} = cf.foreach({inner}, %a{d}, %h{d});"
        if branches:
            return (
                f"{loop} let %q{d} = if (greater(sum(%r{d}.1), 0f64)) {{ tanh(%r{d}.1) }} "
                f"else {{ multiply(%r{d}.1, 0.5f64) }}; (sum(%r{d}.0), %q{d})"
            )
        return f"{loop} (sum(%r{d}.0), tanh(%r{d}.1))"

    top = level(0).rsplit(" (sum", 1)[0]
    return (
        H
        + f"def @main(%a0: {seq(depth)}, %h0: {V}, %w: {V}) {{ {top} add(sum(%r0.0), sum(%r0.1)) }}"
    )


INTEGER_OUTPUT_FIELD = (
    H
    + f"""def @main(%xs: Tensor[(5, 2), float64], %w: {V}) {{
  let %r = cf.foreach(fn (%x: {V}, %h: {V}) {{
    let %n = tanh(add(multiply(%x, %w), %h));
    ((%n, argmax(%n)), %n) }}, %xs, %w);
  sum(%r.0.0)
}}"""
)


# ------------------------------------- random typed programs: errors are effir's
def _output_of(t):
    """``output=`` for a result type: None for a float tensor, the first
    float tensor field of a tuple; False when there is none."""
    from effir.ir.types import TensorType, TupleType

    def is_float(u) -> bool:
        return isinstance(u, TensorType) and u.dtype.startswith("float")

    if is_float(t):
        return None
    if isinstance(t, TupleType):
        return next((i for i, f in enumerate(t.fields) if is_float(f)), False)
    return False
