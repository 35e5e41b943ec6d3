"""[RULE KERNEL-ROUND] An operator's float result is rounded where the operator
ends, whatever kernel it is inlined into.

Why
---
TVM's LLVM code generator allows LLVM to contract any multiply and add
into one fused multiply-add (``AllowFPOpFusion = Fast``, hard-wired in
TVM's ``llvm_instance.cc``), which rounds once instead of twice. After
the schedules inline one operator's compute into another's
(``compute_inline``), a product that one operator returns and an add of
the next meet in one expression, and LLVM's DAG combiner decides per
basic block whether to contract them: ``a*b + c*d`` fuses the product that
has a single use in the block, so the same expression rounds differently
depending on what else the kernel computes (a product computed twice and
merged by CSE has two uses). The value of ``multiply`` then depended on
the fusion around it: compiled, the gradients of ``checkpoint="none"``
(whose forward stores the step's residuals) and ``"loop"`` (whose
backward recomputes them inside its reverse loop) differed in the last
bits, though both compute the same operators on the same values.

The rule
--------
Every float tensor an operator's ``te`` rule returns whose compute ends in
a product (``Mul``, under its ``Let`` bindings) is wrapped in LLVM's
``llvm.arithmetic.fence``, an identity that LLVM does not contract,
reassociate or fold across; it emits no instruction. So a multiply and an
add of two operators are rounded as two operations, as numpy rounds them,
in every kernel; contraction stays within one operator (a matrix
product's multiply-adds, a polynomial inside ``tanh``), whose expression
is the same wherever the operator is computed. The fence is LLVM's: code
built for CUDA replaces each fenced product by CUDA's ``__fmul_rn``
(``__dmul_rn`` for float64), a multiply nvcc never contracts into an add
(``for_cuda``: the whole loops of loop/cuda/, whose steps are lowered as
the CPU's are; other CUDA kernels are built without the fence).

Where
-----
In gradient programs only: a module holding a function ``grad`` generated
(marked ``replays_keys``, effir.autodiff.api) is lowered with the rule on
(``per_operator``; relax/lower.py's ``run``), so that its checkpointing modes
agree bit for bit. Elsewhere LLVM contracts across operators: the fence
costs what the contraction saves where elementwise products and sums meet
(a GRU step's gates, ``(1 - z) * n + z * h``: hidden 32, T=1000, batch 1,
1.00 against 0.74 ms a call), and an inference program has no second
fusion of itself to agree with.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx
from tvm.target import codegen

from effir.passes.analyses.verify_linear.verifier import REPLAYS_KEYS

from ....ir.module import IRModule
from .rules import TEValue

FENCE = "llvm.arithmetic.fence"
_PER_OPERATOR: ContextVar[bool] = ContextVar("effir_round_per_operator", default=False)


def gradient_program(module: IRModule) -> bool:
    """Whether ``module`` holds a function ``grad`` generated."""
    return any(fn.attrs.get(REPLAYS_KEYS) for fn in module.functions.values())


@contextmanager
def per_operator(on: bool) -> Iterator[None]:
    """Kernels and whole loops lowered within round per operator when ``on``."""
    token = _PER_OPERATOR.set(on)
    try:
        yield
    finally:
        _PER_OPERATOR.reset(token)


def active() -> bool:
    """Whether the rule is on where code is lowered now."""
    return _PER_OPERATOR.get()


def rounded(value: TEValue) -> TEValue:
    """``value`` (an operator's result: a tensor or a tuple of them) with
    each float compute that ends in a product fenced."""
    if isinstance(value, tuple):
        return tuple(rounded(v) for v in value)
    if not isinstance(value, te.Tensor) or not isinstance(value.op, te.ComputeOp):
        return value
    op = value.op
    if op.num_outputs != 1 or not str(value.dtype).startswith("float"):
        return value
    (body,) = op.body
    if not _ends_in_product(body):
        return value
    fenced = tirx.call_llvm_pure_intrin(str(value.dtype), FENCE, body)
    return te.ComputeOp(op.name, op.tag, op.attrs, op.axis, [], [fenced]).output(0)


_CUDA_PRODUCTS = {"float32": "__fmul_rn", "float64": "__dmul_rn"}


def for_cuda(stmt: Any) -> Any:
    """``stmt`` with each fence replaced by what CUDA rounds alike: a fenced
    float32 or float64 product becomes ``__fmul_rn``/``__dmul_rn`` (never
    contracted), any other fenced value the value itself."""
    fence_id = int(codegen.llvm_lookup_intrinsic_id(FENCE))

    def on_call(call: Any, mutator: Any) -> Any:
        call = mutator.default_mutate(call)
        if call.op.name != "tirx.call_llvm_pure_intrin" or int(call.args[0]) != fence_id:
            return call
        return _cuda_product(call.args[1], str(call.ty))

    return tvm_ffi.structural_mutate(stmt, [(tvm.ir.expr.Call, on_call)])


def _cuda_product(expr: Any, dtype: str) -> Any:
    """A fenced value (its ``Let`` bindings, then the product) with the
    product made CUDA's unfused multiply."""
    lets = []
    while isinstance(expr, tirx.Let):
        lets.append(expr)
        expr = expr.body
    name = _CUDA_PRODUCTS.get(dtype)
    if isinstance(expr, tirx.Mul) and name is not None:
        expr = tirx.call_pure_extern(dtype, name, expr.a, expr.b)
    for let in reversed(lets):
        expr = tirx.Let(let.var, let.value, expr)
    return expr


def _ends_in_product(expr: Any) -> bool:
    while isinstance(expr, tirx.Let):
        expr = expr.body
    return isinstance(expr, tirx.Mul)


__all__ = ["FENCE", "active", "for_cuda", "gradient_program", "per_operator", "rounded"]
