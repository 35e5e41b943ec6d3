"""Symbolic dimensions through calls (driver/specialise.py,
passes/transforms/specialise_dims.py): a global function the partial evaluator does
not inline (a recursive one) and whose dimensions are symbolic compiles,
its kernels bound at each call as the entry's are, its gradient too; the
messages of what still cannot be compiled name the user's value and say
"symbolic" or "data-dependent" for what each is. Compiled code runs in a
subprocess (tests/support/isolated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.backends.tvm.relax.types import unknown_shape
from effir.backends.tvm.runtime.errors import BackendError
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'

ENCODE = """
def @encode(%t: Tensor[(n), int32], %emb: Tensor[(10, 4), float32], %k: int32)
    -> Tensor[(4), float32] {
  let %e = take(%emb, %t, axis=0);
  let %s = sum(tanh(%e), axis=[0]);
  if (greater(%k, 0)) { add(%s, @encode(%t, %emb, subtract(%k, 1))) } else { %s }
}

def @main(%t: Tensor[(n), int32], %emb: Tensor[(10, 4), float32]) {
  @encode(%t, %emb, 2)
}
"""

SCAN = """
def @scan(%xs: Tensor[(t, b, 4), float32], %h: Tensor[(b, 4), float32],
          %w: Tensor[(4, 4), float32], %k: int32) -> Tensor[(b, 4), float32] {
  let %step = fn (%x: Tensor[(b, 4), float32], %s: Tensor[(b, 4), float32]) {
    let %n = tanh(add(%x, nn.dense(%s, %w)));
    (%n, %n)
  };
  let %r = cf.foreach(%step, %xs, %h);
  if (greater(%k, 0)) {
    @scan(%xs, add(%r.1, sum(%r.0, axis=[0])), %w, subtract(%k, 1))
  } else {
    %r.1
  }
}

def @main(%xs: Tensor[(t, b, 4), float32], %h: Tensor[(b, 4), float32],
          %w: Tensor[(4, 4), float32]) {
  sum(@scan(%xs, %h, %w, 2))
}
"""


def parse(text: str) -> effir.IRModule:
    return effir.parse(HEADER + text, source_name="calls.effir")


def check_a_recursive_callee_of_symbolic_size() -> None:
    # Before: "@encode: a kernel needs static shapes: dimension n of
    # parameter %p1 (Tensor[(n), int32]) is not known".
    module = parse(ENCODE)
    compiled = effir.compile(module)
    emb = np.random.default_rng(0).standard_normal((10, 4)).astype("float32")
    for n in (3, 5, 3):
        tokens = np.arange(n, dtype="int32") % 10
        np.testing.assert_allclose(
            compiled(tokens, emb), effir.interpret(module, tokens, emb), rtol=1e-5
        )
    assert [dict(b.dims) for b in compiled.report.builds] == [{"n": 3}, {"n": 5}]
    print("ok")


def check_a_loop_in_a_callee_of_a_symbolic_batch() -> None:
    # Before: "a loop whose per-step output (Tensor[(b, 4), float32]) has a
    # data-dependent shape is not compiled": b is the caller's batch.
    module = parse(SCAN)
    rs = np.random.default_rng(1)
    w = (rs.standard_normal((4, 4)) * 0.5).astype("float32")
    for t, b in ((3, 2), (2, 5)):
        xs = (rs.standard_normal((t, b, 4)) * 0.1).astype("float32")
        h = np.zeros((b, 4), "float32")
        np.testing.assert_allclose(
            effir.compile(module)(xs, h, w), effir.interpret(module, xs, h, w), rtol=1e-5
        )
        grad = effir.value_and_grad(module, wrt=["w"])
        value, (dw,) = effir.compile(grad, entry="main_grad")(xs, h, w)
        ref_value, (ref_dw,) = effir.interpret(grad, xs, h, w, entry="main_grad")
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(dw, ref_dw, rtol=1e-4, atol=1e-6)
    print("ok")


CHECKS = [
    "check_a_recursive_callee_of_symbolic_size",
    "check_a_loop_in_a_callee_of_a_symbolic_batch",
]


@pytest.mark.parametrize("check", CHECKS)
def test_compiled(check: str) -> None:
    done = run_isolated(f"from tests.backends.tvm.test_symbolic_calls import {check}; {check}()")
    assert done.check().stdout.strip().endswith("ok")


def test_unknown_shapes_are_named_for_what_they_are():
    assert unknown_shape(("b", 4)).startswith("a symbolic shape (b: a size of the")
    assert unknown_shape(("?", 4)) == "a data-dependent shape (?)"


def test_a_kernels_unbound_dimension_names_the_users_value():
    from effir.backends.tvm.kernel.primitive import lower_kernel

    module = effir.check(
        parse(
            "def @main(%p0: Tensor[(n), float32]) { fn (%p1: Tensor[(n), float32]) { tanh(%p1) } }"
        )
    )
    kernel = module["main"].body
    with pytest.raises(BackendError) as caught:
        lower_kernel(kernel, "llvm", inputs=["the input %hidden"])
    message = caught.value.message
    assert "the input %hidden (Tensor[(n), float32]) has the symbolic dimension n" in message
    assert "%p1" not in message
