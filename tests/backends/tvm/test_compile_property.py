"""Hypothesis: random static programs give the interpreter's results when
compiled (effir.compile), bit for bit for random values and integers, to
1e-5 for floats. The programs draw from elementwise operators, reductions,
matrix products, shape operators, ifs on data, loops over sequences (with
and without an if in the body), while loops of data-dependent length,
boolean masks and dropout on a PRNG cell, so the pipeline, fusion, the
kernels and schedules, whole loops, VM loops, the executor's dynamic-shape
kernels and state passing are all exercised."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir

from .test_compile import assert_same_run

HEADER = '#[version = "0.0.5"]\nglobal @rng: Ref[Key] = ref(random.key(5));\n'


@dataclass
class Program:
    text: str
    inputs: list[tuple[int, ...]]

    def __repr__(self) -> str:
        return "\n" + self.text


def _shape_text(shape: tuple[int, ...]) -> str:
    return (
        "Tensor[(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + "), float32]"
    )


@st.composite
def static_programs(draw: st.DrawFn) -> Program:
    inputs = [(4, 3), (4, 3), (3, 3), (3,), (5, 3)]
    values: list[tuple[str, tuple[int, ...]]] = [(f"%x{i}", s) for i, s in enumerate(inputs)]
    lines: list[str] = []

    def pick(shape: tuple[int, ...] | None = None) -> tuple[str, tuple[int, ...]]:
        pool = [v for v in values if shape is None or v[1] == shape]
        return draw(st.sampled_from(pool))

    for k in range(draw(st.integers(2, 7))):
        name = f"%v{k}"
        kind = draw(
            st.sampled_from(
                [
                    "unary",
                    "binary",
                    "reduce",
                    "dense",
                    "transpose",
                    "if",
                    "loop",
                    "dropout",
                    "while",
                    "mask",
                ]
            )
        )
        if kind == "unary":
            x, s = pick()
            op = draw(st.sampled_from(["tanh", "sigmoid", "negative", "nn.relu", "exp"]))
            arg = f"tanh({x})" if op == "exp" else x
            lines.append(f"let {name} = {op}({arg});")
            out = s
        elif kind == "binary":
            x, s = pick()
            y, _ = pick(s)
            op = draw(st.sampled_from(["add", "subtract", "multiply", "maximum"]))
            lines.append(f"let {name} = {op}({x}, {y});")
            out = s
        elif kind == "reduce":
            x, s = pick((4, 3))
            op = draw(st.sampled_from(["sum", "mean", "max"]))
            axis = draw(st.sampled_from([0, 1]))
            lines.append(f"let {name} = {op}({x}, axis=[{axis}]);")
            out = (3,) if axis == 0 else (4,)
        elif kind == "dense":
            x, s = pick((4, 3))
            lines.append(f"let {name} = nn.dense({x}, %x2);")
            out = (4, 3)
        elif kind == "transpose":
            x, s = pick((3, 3))
            lines.append(f"let {name} = transpose({x});")
            out = (3, 3)
        elif kind == "if":
            x, s = pick()
            y, _ = pick(s)
            lines.append(
                f"let {name} = if (greater(sum({x}), sum({y}))) {{ tanh({x}) }} "
                f"else {{ multiply({y}, 0.5f) }};"
            )
            out = s
        elif kind == "loop":
            h, s = pick((3,))
            branchy = draw(st.booleans())
            step = (
                "if (greater(sum(%xt), 0f)) { tanh(add(%xt, %h)) } else { sigmoid(%h) }"
                if branchy
                else "tanh(add(multiply(%xt, 0.5f), %h))"
            )
            lines.append(
                f"let {name} = cf.foreach(fn (%xt: Tensor[(3), float32], %h: Tensor[(3), float32]) "
                f"{{ let %n = {step}; (sum(%n), %n) }}, %x4, {h}).1;"
            )
            out = (3,)
        elif kind == "while":  # as many steps as the data asks, at most 20
            h, _ = pick((3,))
            lines.append(
                f"let {name} = cf.while_loop("
                "fn (%s: (int32, Tensor[(3), float32])) { less(sum(multiply(%s.1, %s.1)), 50f) }, "
                "fn (%s: (int32, Tensor[(3), float32])) { "
                "let %y = add(multiply(%s.1, 1.5f), 0.25f); (sum(%y), (add(%s.0, 1), %y)) }, "
                f"(0, {h}), max_iterations=20).1.1;"
            )
            out = (3,)
        elif kind == "mask":  # a data-dependent shape, reduced back to a static one
            x, s = pick((4, 3))
            mask = f"greater(sum({x}, axis=[1]), 0f)"  # the rows whose sum is positive
            lines.append(f"let {name} = sum(boolean_mask({x}, {mask}), axis=[0]);")
            out = (3,)
        else:
            x, s = pick()
            lines.append(f"let {name} = nn.dropout({x}, @rng, rate=0.5f);")
            out = s
        values.append((name, out))
    outputs = [v for v, _ in values[len(inputs) :]][-3:]
    params = ", ".join(f"%x{i}: {_shape_text(s)}" for i, s in enumerate(inputs))
    body = "\n  ".join(lines)
    text = HEADER + f"def @main({params}) {{\n  {body}\n  ({', '.join(outputs)},)\n}}\n"
    return Program(text, inputs)


@settings(
    max_examples=int(os.environ.get("EFFIR_COMPILE_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(static_programs(), st.integers(0, 2**16))
def test_compiled_static_programs_give_the_interpreters_results(
    program: Program, seed: int
) -> None:
    module = effir.check(effir.parse(program.text, source_name="generated.effir"))
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(np.float32) for s in program.inputs]
    assert_same_run(module, *args, steps=2)
