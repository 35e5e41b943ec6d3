"""[RULE KERNEL-ROUND] (effir/backends/tvm/kernel/rounding.py): in a gradient program an
operator's float product is rounded where the operator ends, whatever
kernel it is fused into, so the compiled value of ``x*y - x*z`` does not
depend on the fusion around it (LLVM contracted whichever product had a
single use in the kernel into a fused multiply-add) and equals numpy's bit
for bit; contraction inside one operator (a matrix product) stays. Other
programs keep LLVM's contraction across operators."""

from __future__ import annotations

import numpy as np

import effir
from effir.autodiff.api import replays_keys
from effir.backends.tvm.kernel import rounding
from effir.backends.tvm.kernel.primitive import lower_kernel
from effir.backends.tvm.kernel.rounding import FENCE
from effir.ir.expr import Function

HEADER = '#[version = "0.0.5"]\n'
ARGS = "%x: Tensor[(256), float32], %y: Tensor[(256), float32], %z: Tensor[(256), float32]"
# one kernel: both products have a single use
ALONE = f"def @main({ARGS}) {{ subtract(multiply(%x, %y), multiply(%x, %z)) }}"
# x*y is also returned: its own kernel, read by the subtraction's
SHARED = f"""def @main({ARGS}) {{
  let %p = multiply(%x, %y);
  (subtract(%p, multiply(%x, %z)), add(%p, %p))
}}"""


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(17)
    return [rng.normal(size=256).astype(np.float32) for _ in range(3)]


def _as_gradient_program(text: str) -> effir.IRModule:
    """The module of ``text`` with @main marked as ``grad`` marks what it
    generates."""
    module = effir.check(effir.parse(HEADER + text))
    return module.with_function("main", replays_keys(module["main"]))


def test_a_product_rounds_the_same_in_every_fusion_of_a_gradient_program():
    x, y, z = _inputs()
    want = x * y - x * z  # numpy: two products, each rounded, then the difference
    for text in (ALONE, SHARED):
        compiled = effir.compile(_as_gradient_program(text))
        out = compiled(x, y, z)
        got = out[0] if isinstance(out, tuple) else out
        np.testing.assert_array_equal(np.asarray(got), want)


def test_only_products_between_operators_are_fenced():
    """The fence wraps ``multiply``'s result, not a matrix product's
    multiply-adds (nn.dense keeps its FMAs) nor an addition."""
    text = """def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(16, 8), float32],
                        %b: Tensor[(16), float32]) {
      add(multiply(nn.dense(%x, %w), %b), %b)
    }"""
    module = _as_gradient_program(text)
    fn = module["main"]
    kernel = Function(fn.params, fn.body, fn.ret_type, attrs={"Primitive": 1})
    with rounding.per_operator(True):
        script = lower_kernel(kernel, "llvm").module.script()
    assert script.count(FENCE) == 1, script
    assert FENCE not in lower_kernel(kernel, "llvm").module.script()  # the rule off
    x, w, b = (
        np.random.default_rng(0).normal(size=s).astype(np.float32) for s in [(4, 8), (16, 8), (16,)]
    )
    compiled = effir.compile(module)
    np.testing.assert_allclose(compiled(x, w, b), (x @ w.T) * b + b, rtol=1e-5, atol=1e-6)


def test_only_gradient_programs_round_per_operator():
    """A module ``grad`` generated functions in is lowered with the rule on;
    another keeps LLVM's contraction across operators (a GRU's gates)."""
    plain = effir.check(effir.parse(HEADER + ALONE))
    assert not rounding.gradient_program(plain)
    assert rounding.gradient_program(_as_gradient_program(ALONE))
    assert not rounding.active()
    with rounding.per_operator(True):
        assert rounding.active()
    assert not rounding.active()
