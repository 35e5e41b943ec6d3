"""The size limit in the interpreter (effir/runtime/limits.py) where an
operator's result size is symbolic in its type: each operator's result is
checked, from its arguments' actual sizes, before it is computed (found:
a 1 GiB intermediate computed under a 256 MiB limit, a 149 GiB outer
product attempted where the compiled module refuses up front)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.diagnostics import EvalError
from effir.runtime.limits import ENV

H = '#[version = "0.0.5"]\n'
# n x n from a vector of n: the result's size is n * n, its type (n, n).
OUTER = H + (
    "def @main(%x: Tensor[(n), float32]) {\n"
    "  let %col = expand_dims(%x, axis=1);\n"
    "  let %row = expand_dims(%x, axis=0);\n"
    "  let %big = multiply(%col, %row);\n"
    "  sum(%big)\n"
    "}\n"
)


def _module(src: str) -> effir.IRModule:
    return effir.check(effir.parse(src, source_name="limits.effir"))


def test_an_outer_product_of_symbolic_size_is_refused_before_it_is_computed(monkeypatch):
    monkeypatch.setenv(ENV, "1M")
    module = _module(OUTER)
    with pytest.raises(EvalError) as caught:
        effir.interpret(module, np.ones(1000, np.float32))
    assert caught.value.message == (
        "multiply: its result would take 3.81 MiB, more than the limit of 1 MiB "
        f"(set {ENV} to allow more)"
    )
    assert caught.value.line == 5  # the multiply, not the sum
    assert effir.interpret(module, np.ones(500, np.float32)) == 250000.0  # 0.95 MiB


@pytest.mark.parametrize(
    ("body", "op"),
    [
        ("add(expand_dims(%x, axis=1), expand_dims(%x, axis=0))", "add"),
        ("concatenate((%x, %x, %x, %x, %x))", "concatenate"),
        ("stack((%x, %x, %x, %x, %x), axis=0)", "stack"),
        ("subtract(expand_dims(%x, axis=1), %x)", "subtract"),
        ("nn.dense(expand_dims(%x, axis=1), expand_dims(%x, axis=1))", "nn.dense"),
        ("(%x, split(concatenate((%x, %x, %x, %x, %x)), indices_or_sections=1).0)", "concatenate"),
    ],
)
def test_every_operator_of_symbolic_result_size_is_checked(monkeypatch, body: str, op: str):
    """Broadcasting, joining, copying and contracting operators, and a
    tuple's field: each refuses a result over the limit whose size its
    type leaves symbolic."""
    monkeypatch.setenv(ENV, "4K")
    module = _module(f"{H}def @main(%x: Tensor[(n), float32]) {{\n  {body}\n}}\n")
    with pytest.raises(
        EvalError, match=f" error: {op}: its result would take .* more than the limit"
    ):
        effir.interpret(module, np.ones(300, np.float32))
    effir.interpret(module, np.ones(20, np.float32))  # under the limit: computed


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 64))
def test_the_interpreter_refuses_exactly_what_is_over_the_limit(n: int, m: int, kib: int):
    """The outer product of an n- and an m-vector (types symbolic) is
    refused if and only if its n * m * 4 bytes exceed the limit."""
    src = H + (
        "def @main(%a: Tensor[(n), float32], %b: Tensor[(m), float32]) {\n"
        "  sum(multiply(expand_dims(%a, axis=1), expand_dims(%b, axis=0)))\n"
        "}\n"
    )
    module = _module(src)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, f"{kib}K")
        over = n * m * 4 > kib * 1024
        args = (np.ones(n, np.float32), np.ones(m, np.float32))
        if over:
            with pytest.raises(EvalError, match=" error: multiply: its result would take"):
                effir.interpret(module, *args)
        else:
            assert effir.interpret(module, *args) == n * m
