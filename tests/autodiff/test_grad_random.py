"""Random differentiable programs (straight-line code, tuples, a branch, a
loop whose body is itself random) against finite differences in float64,
drawn by hypothesis, in every checkpointing mode."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from tests.support.grad_harness import check_grad

UNARY = ["tanh", "sigmoid", "negative", "exp(tanh({}))"]
BINARY = ["add", "subtract", "multiply"]


@st.composite
def block(draw, names: list[str], prefix: str, steps: int) -> tuple[list[str], str]:
    """Let bindings over the variables ``names`` (each Tensor[(2), float64]);
    returns the lines and the last variable."""
    lines: list[str] = []
    scope = list(names)
    for i in range(steps):
        v = f"%{prefix}{i}"
        kind = draw(st.sampled_from(["unary", "binary", "tuple"]))
        a = draw(st.sampled_from(scope))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            expr = op.format(a) if "{}" in op else f"{op}({a})"
        elif kind == "binary":
            expr = f"{draw(st.sampled_from(BINARY))}({a}, {draw(st.sampled_from(scope))})"
        else:  # a tuple and a projection of it
            b = draw(st.sampled_from(scope))
            lines.append(f"let {v}t = ({a}, {b});")
            expr = f"{v}t.{draw(st.integers(0, 1))}"
        lines.append(f"let {v} = {expr};")
        scope.append(v)
    return lines, scope[-1]


@st.composite
def programs(draw) -> str:
    body_lines, body_out = draw(block(["%x", "%h", "%w"], "b", draw(st.integers(1, 4))))
    main_lines, main_out = draw(block(["%a", "%w", "%r1", "%r0"], "m", draw(st.integers(1, 4))))
    then_lines, then_out = draw(block(["%a", "%w"], "t", 2))
    body = "\n    ".join(body_lines)
    main = "\n  ".join(main_lines)
    then = "\n    ".join(then_lines)
    return f"""#[version = "0.0.5"]
def @main(%xs: Tensor[(3, 2), float64], %a: Tensor[(2), float64], %w: Tensor[(2), float64],
          %c: bool) {{
  let %step = fn (%x: Tensor[(2), float64], %h: Tensor[(2), float64]) {{
    {body}
    (tanh({body_out}), tanh(add({body_out}, %h)))
  }};
  let %r = cf.foreach(%step, %xs, %a);
  let %r0 = sum(%r.0, axis=[0]);
  let %r1 = %r.1;
  {main}
  let %z = if (%c) {{
    {then}
    multiply({then_out}, {main_out})
  }} else {{ tanh({main_out}) }};
  sum(%z)
}}
"""


@settings(max_examples=8, deadline=None)
@given(
    src=programs(),
    seed=st.integers(0, 2**16),
    c=st.booleans(),
    mode=st.sampled_from(["none", "loop", "sqrt"]),
)
def test_random_programs_against_finite_differences(src, seed, c, mode):
    m = effir.parse(src)
    rng = np.random.default_rng(seed)
    args = [rng.normal(size=(3, 2)), rng.normal(size=2), rng.normal(size=2), np.array(c)]
    check_grad(m, args, ["xs", "a", "w"], checkpoint=mode, rtol=1e-5, atol=1e-6)
