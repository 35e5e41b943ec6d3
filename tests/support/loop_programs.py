"""Helpers first written for tests/backends/tvm/test_loop.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import numpy as np

import effir
from effir.ir.expr import Call, Function, Let, Op, Var
from effir.ir.visitor import pre_order
from effir.passes.infra.pipeline import run_pipeline
from effir.runtime.values import PRNGKey
from tests.support.gru_programs import NEW_STATE, gates

HEADER = '#[version = "0.0.5"]\n'


def module(text: str, passes: str = "to-anf,fuse") -> effir.IRModule:
    mod = effir.check(effir.parse(HEADER + text, source_name="loop.effir"))
    return effir.check(run_pipeline(mod, passes)) if passes else mod


def foreach_of(mod: effir.IRModule, entry: str = "main") -> tuple[Call, Function, dict]:
    """The first cf.foreach call of ``@entry``, its body and the functions
    bound by lets in ``@entry`` (what the body may call through a variable)."""
    bound: dict[Var, Function] = {}
    call = None
    for node in pre_order(mod[entry]):
        if isinstance(node, Let) and isinstance(node.value, Function):
            bound[node.var] = node.value
        if (
            call is None
            and isinstance(node, Call)
            and isinstance(node.callee, Op)
            and node.callee.name == "cf.foreach"
        ):
            call = node
    assert call is not None
    body = call.args[0]
    if isinstance(body, Var):
        body = bound.pop(body)
    assert isinstance(body, Function)
    return call, body, bound


def assert_close(actual, expected) -> None:
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close(a, e)
        return
    if isinstance(expected, PRNGKey):
        expected = expected.data
    if isinstance(actual, PRNGKey):
        actual = actual.data
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(actual, expected)


def uniform(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------- the GRU
GRU = f"""
def @gru_cell(%x: Tensor[(b, 8), float32], %h: Tensor[(b, 16), float32],
              %w: Tensor[(48, 8), float32], %u: Tensor[(48, 16), float32],
              %bias: Tensor[(48), float32]) -> (Tensor[(b, 16), float32], Tensor[(b, 16), float32]) {{
{gates(2)}
  let %h_new = {NEW_STATE};
  (%h_new, %h_new)
}}
def @main(%xs: Tensor[(t, b, 8), float32], %h0: Tensor[(b, 16), float32],
          %w: Tensor[(48, 8), float32], %u: Tensor[(48, 16), float32],
          %bias: Tensor[(48), float32]) {{
  let %step = fn (%x, %h) {{ @gru_cell(%x, %h, %w, %u, %bias) }};
  cf.foreach(%step, %xs, %h0)
}}
"""


def gru_inputs(rng: np.random.Generator, t: int, b: int) -> tuple[np.ndarray, ...]:
    return (
        uniform(rng, t, b, 8),
        uniform(rng, b, 16),
        uniform(rng, 48, 8, scale=0.4),
        uniform(rng, 48, 16, scale=0.3),
        uniform(rng, 48),
    )
