"""The kernel builder and its schedules (effir/backends/tvm/kernel/primitive.py,
schedule/): fused primitive functions compiled by TVM give the
interpreter's results; the schedules change speed, never values (scheduled
and unscheduled builds agree); constants, tuples, keys, symbolic dimensions,
the cache, zero-copy calls and the errors a user can meet; CUDA code that
nvcc compiles to PTX for sm_90."""

from __future__ import annotations

import re
import shutil
import time
from typing import Any

import numpy as np
import pytest

import effir
from effir.backends.tvm.kernel.primitive import Kernel, build_kernel, compile_cuda_to_ptx
from effir.backends.tvm.runtime.errors import BackendError
from effir.backends.tvm.schedule.cost import expression_cost
from effir.backends.tvm.schedule.inline import INLINE_BUDGET
from effir.backends.tvm.target import cuda_source_to_ptx, make_target
from effir.ir.expr import Constant, Function, Tuple, TupleGetItem, Var, const
from effir.ir.module import IRModule
from effir.ir.op import call_op
from effir.ir.types import KeyType, TensorType, TupleType
from effir.ir.visitor import pre_order
from effir.passes.analyses.infer_type import infer_expr
from effir.passes.infra.pipeline import run_pipeline
from effir.passes.transforms.fuse import is_primitive
from effir.runtime.values import PRNGKey

HEADER = '#[version = "0.0.5"]\n'


def parse(text: str, passes: str = "to-anf,fuse") -> effir.IRModule:
    mod = effir.check(effir.parse(HEADER + text, source_name="kernel.effir"))
    return effir.check(run_pipeline(mod, passes)) if passes else mod


def primitives(mod: effir.IRModule) -> list[Function]:
    return [
        n
        for fn in mod.functions.values()
        for n in pre_order(fn)
        if isinstance(n, Function) and is_primitive(n)
    ]


def assert_close(out: Any, ref: Any) -> None:
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert_close(o, r)
    elif isinstance(ref, PRNGKey):
        assert isinstance(out, PRNGKey) and np.array_equal(out.data, ref.data)
    else:
        assert out.dtype == ref.dtype and out.shape == ref.shape
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(out, ref)


def function(params: list[Var], body: Any) -> Function:
    fn = Function(tuple(params), body)
    infer_expr(fn)
    return fn


rng = np.random.default_rng(0)


def normal(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# ===================================================== fused programs
GATE = """
def @main(%x: Tensor[(5, 20), float32], %h: Tensor[(5, 12), float32],
          %w: Tensor[(12, 20), float32], %u: Tensor[(12, 12), float32],
          %b: Tensor[(12), float32]) {
  %0 = nn.dense(%x, %w);
  %1 = add(%0, %b);
  %2 = sigmoid(%1);
  %3 = nn.dense(%h, %u);
  %4 = tanh(%3);
  %5 = multiply(%2, %4);
  %6 = subtract(1f, %2);
  %7 = multiply(%6, %h);
  add(%5, %7)
}
"""
REDUCE = """
def @main(%x: Tensor[(6, 40), float32], %y: Tensor[(40), float32]) {
  %0 = exp(%x);
  %1 = sum(%0, axis=[1], keepdims=True);
  %2 = multiply(%1, 2f);
  %3 = add(%x, %y);
  %4 = mean(%3, axis=[0]);
  %5 = max(%x, axis=[1]);
  (%2, %4, %5)
}
"""
INTEGERS = """
def @main(%a: Tensor[(4, 9), int32], %b: Tensor[(9), int32]) {
  %0 = multiply(%a, %b);
  %1 = add(%0, 7);
  %2 = maximum(%1, -20);
  %3 = cast(%2, dtype="int8");
  %4 = less(%3, 3i8);
  where(%4, %a, %b)
}
"""
SHAPES = """
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = transpose(%x, axes=[2, 0, 1]);
  %1 = reshape(%0, newshape=[4, 6]);
  %2 = exp(%1);
  %3 = strided_slice(%2, begin=[1, 0], end=[4, 6], strides=[2, 1]);
  negative(%3)
}
"""


def arguments(mod: effir.IRModule) -> tuple[Any, ...]:
    args = []
    for p in mod["main"].params:
        t = p.type_annotation
        if t.dtype.startswith("int"):
            args.append(rng.integers(-9, 9, t.shape).astype(t.dtype))
        else:
            args.append(normal(*t.shape))
    return tuple(args)


@pytest.mark.parametrize(
    "text", [GATE, REDUCE, INTEGERS, SHAPES], ids=["gate", "reduce", "ints", "shapes"]
)
def test_fused_kernels_give_the_interpreters_results(text: str) -> None:
    mod = parse(text)
    fns = primitives(mod)
    assert fns, "fuse made no kernel"
    kernels = {fn: build_kernel(fn, "llvm") for fn in fns}
    args = arguments(mod)
    assert_close(effir.interpret(mod, *args, kernels=kernels), effir.interpret(mod, *args))


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(1, 256, 768), (5, 20, 7), (32, 64, 48), (8, 16, 20)],
)
def test_dense_epilogue_schedules_agree_with_unscheduled(m: int, k: int, n: int) -> None:
    """The matmul schedules (GEMV rfactor for one row, weight packing for
    many, plain tiles otherwise) with a bias+tanh epilogue."""
    x, w, b = Var("x", TensorType((m, k))), Var("w", TensorType((n, k))), Var("b", TensorType((n,)))
    dense = call_op("nn.dense", x, w)
    fn = function([x, w, b], call_op("tanh", call_op("add", dense, b)))
    args = (normal(m, k), normal(n, k) * 0.1, normal(n))
    scheduled = build_kernel(fn, "llvm")
    assert "vectorized" in scheduled.source("tir")
    expected = np.tanh(args[0] @ args[1].T + args[2])
    np.testing.assert_allclose(scheduled(*args), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        build_kernel(fn, "llvm", schedule=False)(*args), expected, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "attrs"),
    [
        ((6, 16), (16, 32), {}),
        ((3, 5, 8), (8, 33), {}),
        ((2, 1, 4, 5), (3, 5, 6), {}),
        ((16, 9), (20, 9), {"transpose_b": True}),
        ((9, 16), (9, 20), {"transpose_a": True}),
    ],
)
def test_matmul_schedules(a_shape: tuple, b_shape: tuple, attrs: dict) -> None:
    a, b = Var("a", TensorType(a_shape)), Var("b", TensorType(b_shape))
    fn = function([a, b], call_op("nn.relu", call_op("nn.matmul", a, b, **attrs)))
    args = (normal(*a_shape), normal(*b_shape))
    A = np.swapaxes(args[0], -1, -2) if attrs.get("transpose_a") else args[0]
    B = np.swapaxes(args[1], -1, -2) if attrs.get("transpose_b") else args[1]
    np.testing.assert_allclose(
        build_kernel(fn, "llvm")(*args), np.maximum(A @ B, 0), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    ("a_type", "b_type", "product"),
    [
        # autodiff's weight gradient: both operands transposed stacks of steps
        (
            "(1024, 64)",
            "(16, 64, 64)",
            "nn.dense(transpose(%a), transpose(reshape(%b, newshape=[1024, 64])))",
        ),
        ("(64, 1024)", "(1024, 64)", "nn.matmul(%a, %b)"),
        ("(1024, 64)", "(1024, 64)", "nn.matmul(%a, %b, transpose_a=True)"),
    ],
)
def test_large_products_pack_both_operands(a_type: str, b_type: str, product: str) -> None:
    """A product of 2**22 multiply-adds (schedule/cpu/gemm.py): the transposes
    fuse into its kernel, both operands are copied once into panels of the
    register tile (the transposed matrices are never written), and the
    result is the interpreter's, with the epilogue."""
    mod = parse(
        f"""def @main(%a: Tensor[{a_type}, float32], %b: Tensor[{b_type}, float32]) {{
          let %p = {product};
          tanh(%p)
        }}"""
    )
    (fn,) = primitives(mod)
    kernel = build_kernel(fn, "llvm")
    tir = kernel.source("tir")
    assert len(re.findall(r"alloc_buffer\(\(\d+, 1024, \d+\)", tir)) == 2, tir
    assert "alloc_buffer((64, 1024)" not in tir  # the transposed matrix is never written
    args = arguments(mod)
    out = effir.interpret(mod, *args, kernels={fn: kernel})
    # sums of 1,024 products of N(0, 1) values, in another order than numpy's
    np.testing.assert_allclose(out, effir.interpret(mod, *args), rtol=1e-4, atol=1e-4)


def test_reductions_and_norms_schedule() -> None:
    x = Var("x", TensorType((16, 64)))
    for body in (
        call_op("sum", x, axis=[0]),
        call_op("max", x, axis=[1], keepdims=True),
        call_op("nn.softmax", x),
        call_op("nn.log_softmax", x, axis=0),
    ):
        fn = function([x], body)
        value = normal(16, 64)
        assert_close(
            build_kernel(fn, "llvm")(value), build_kernel(fn, "llvm", schedule=False)(value)
        )


def test_a_long_chain_of_transcendentals_builds_quickly() -> None:
    """[RULE SCHED-BUDGET] Inlining twelve tanh/sigmoid/exp into one expression
    would take minutes of LLVM code generation; the budget keeps it linear."""
    x = Var("x", TensorType((4, 64)))
    body: Any = x
    for k in range(12):
        body = call_op(("tanh", "sigmoid", "exp")[k % 3], body)
    fn = function([x], body)
    start = time.perf_counter()
    kernel = build_kernel(fn, "llvm")
    assert time.perf_counter() - start < 20
    value = normal(4, 64)
    expected = value
    for k in range(12):
        f = (np.tanh, lambda v: 1 / (1 + np.exp(-v)), np.exp)[k % 3]
        expected = f(expected)
    np.testing.assert_allclose(kernel(value), expected, rtol=1e-5)


def test_expression_cost_counts_let_substitution() -> None:
    from tvm import tirx

    v = tirx.Var("v", "float32")
    x = tirx.Var("x", "float32")
    expr = tirx.Let(v, x + x, v * v * v)  # v stands for a 3-node expression, used 3 times
    assert expression_cost(expr).size == 3 * 3 + 2
    assert INLINE_BUDGET > 100


# ======================================================== constants, tuples
def test_constants_scalar_array_and_huge() -> None:
    x = Var("x", TensorType((3,), "uint64"))
    big = Constant(np.array(2**64 - 5, "uint64"))
    table = Constant(np.array([1, 2, 3], "uint64"))
    fn = function([x], call_op("add", call_op("multiply", x, table), big))
    value = np.array([0, 1, 7], "uint64")
    with np.errstate(over="ignore"):
        expected = value * np.array([1, 2, 3], "uint64") + np.uint64(2**64 - 5)
    np.testing.assert_array_equal(build_kernel(fn, "llvm")(value), expected)
    y = Var("y", TensorType((2, 2)))
    fn = function([y], call_op("add", y, Constant(np.array(0.5, "float32"))))
    np.testing.assert_array_equal(
        build_kernel(fn, "llvm")(np.ones((2, 2), "float32")), np.full((2, 2), 1.5)
    )


def test_tuple_key_parameters_and_results() -> None:
    pair = Var("pair", TupleType((TensorType((2,)), TensorType((2,), "int32"))))
    key = Var("key", KeyType())
    first = TupleGetItem(pair, 0)
    body = Tuple((call_op("exp", first), key, Tuple((first, first))))
    fn = function([pair, key], body)
    kernel = build_kernel(fn, "llvm")
    value = (np.array([0.0, 1.0], "float32"), np.array([3, 4], "int32"))
    out = kernel(value, PRNGKey([7, 9]))
    np.testing.assert_allclose(out[0], np.exp(value[0]), rtol=1e-6)
    assert out[1] == PRNGKey([7, 9])
    # outputs never alias an input or each other
    assert out[2][0] is not out[2][1] and not np.shares_memory(out[2][0], value[0])
    np.testing.assert_array_equal(out[2][1], value[0])


def test_identity_kernel_copies() -> None:
    x = Var("x", TensorType((4,)))
    fn = function([x], x)
    value = normal(4)
    out = build_kernel(fn, "llvm")(value)
    assert not np.shares_memory(out, value) and np.array_equal(out, value)


def test_symbolic_dimensions_are_bound_per_build() -> None:
    mod = parse("def @main(%x: Tensor[(n, 8), float32]) { %0 = exp(%x); sum(%0, axis=[1]) }")
    (fn,) = primitives(mod)
    for n in (1, 5):
        value = normal(n, 8)
        out = build_kernel(fn, "llvm", dims={"n": n})(value)
        np.testing.assert_allclose(out, np.exp(value).sum(1), rtol=1e-5)
    with pytest.raises(BackendError, match="dimension n"):
        build_kernel(fn, "llvm")


def test_empty_tensors() -> None:
    x = Var("x", TensorType((0, 3)))
    fn = function([x], Tuple((call_op("exp", x), call_op("sum", x, axis=[0]))))
    out = build_kernel(fn, "llvm")(np.zeros((0, 3), "float32"))
    assert out[0].shape == (0, 3)
    np.testing.assert_array_equal(out[1], np.zeros(3, "float32"))


# ================================================================ calling
@pytest.fixture(scope="module")
def axpy() -> Kernel:
    x, y = Var("x", TensorType((64,))), Var("y", TensorType((64,)))
    return build_kernel(
        function([x, y], call_op("add", call_op("multiply", x, const(2.0)), y)), "llvm"
    )


def test_cache_reuses_builds(axpy: Kernel) -> None:
    x, y = Var("x", TensorType((64,))), Var("y", TensorType((64,)))
    again = function([x, y], call_op("add", call_op("multiply", x, const(2.0)), y))
    assert build_kernel(again, "llvm") is axpy
    assert build_kernel(again, "llvm", schedule=False) is not axpy


def test_arrays_of_any_layout_and_call_into(axpy: Kernel) -> None:
    base = normal(2, 64)
    strided = normal(128)[::2]  # not contiguous: copied
    frozen = normal(64)
    frozen.setflags(write=False)  # DLPack cannot export it: copied
    misaligned = np.frombuffer(normal(65).tobytes()[4:], "float32")  # 4 bytes off 64-byte alignment
    for x in (base[1], strided, misaligned):
        np.testing.assert_allclose(axpy(x, frozen), 2 * x + frozen, rtol=1e-6)
    out = np.empty(64, "float32")
    axpy.call_into((base[0], frozen), [out])
    np.testing.assert_allclose(out, 2 * base[0] + frozen, rtol=1e-6)
    view = np.empty((64, 2), "float32")[:, 0]  # a strided output: computed aside, copied in
    axpy.call_into((base[0], frozen), [view])
    np.testing.assert_allclose(view, out)


def test_wrong_arguments_are_backend_errors(axpy: Kernel) -> None:
    with pytest.raises(BackendError, match="takes 2 arguments"):
        axpy(normal(64))
    with pytest.raises(BackendError, match=r"input 1 .* Tensor\[\(64\), float32\]"):
        axpy(normal(64), normal(63))
    with pytest.raises(BackendError, match="dtype float64"):
        axpy(normal(64), normal(64, dtype="float64"))
    with pytest.raises(BackendError, match="output 0"):
        axpy.call_into((normal(64), normal(64)), [np.empty(64, "int32")])


def test_source_kinds(axpy: Kernel) -> None:
    assert "T.prim_func" in axpy.source("tir")
    assert "define" in axpy.source("ll")
    assert axpy.source("asm").strip()
    with pytest.raises(BackendError, match="cuda"):
        axpy.source("cuda")


# ================================================================= errors
def test_operator_without_te_rule_is_located() -> None:
    text = HEADER + "def @main(%x: Tensor[(3), float32]) {\n  shape_of(%x)\n}\n"
    mod = effir.check(effir.parse(text, source_name="opaque.effir"))
    fn = mod["main"]
    with pytest.raises(BackendError, match="operator shape_of has no TVM lowering") as err:
        build_kernel(fn, "llvm")
    assert err.value.location == "opaque.effir:3:3"


def test_non_operator_body_is_rejected() -> None:
    mod = parse(
        "def @f(%x: float32) { %x }\ndef @main(%y: float32) { @f(%y) }",
        passes="",
    )
    with pytest.raises(BackendError, match="not a call of @f") as err:
        build_kernel(mod["main"], "llvm")
    assert err.value.location == "kernel.effir:3:26"


# =================================================================== CUDA
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
def test_cuda_kernels_compile_to_ptx() -> None:
    """Generated CUDA for a fused dense+bias+tanh and for an elementwise
    chain compiles with nvcc for sm_90 (running it needs a GPU)."""
    x, w, b = (
        Var("x", TensorType((32, 256))),
        Var("w", TensorType((768, 256))),
        Var("b", TensorType((768,))),
    )
    gate = function([x, w, b], call_op("tanh", call_op("add", call_op("nn.dense", x, w), b)))
    y = Var("y", TensorType((32, 768)))
    chain = function([y], call_op("multiply", call_op("sigmoid", y), call_op("exp", y)))
    for fn in (gate, chain):
        kernel = build_kernel(fn, "cuda")
        assert "__global__" in kernel.source()
        ptx = compile_cuda_to_ptx(kernel)
        assert ".target sm_90" in ptx and ".entry" in ptx


@needs_nvcc
def test_ptx_of_a_program_whose_float16_kernels_sit_in_several_modules() -> None:
    """Kernels built apart or shared with an earlier build (relax/apart.py)
    are CUDA modules of their own, each with TVM's preamble of float16
    helpers (``max(half, half)``...): compiled as one source they defined
    those twice and nvcc refused the program's PTX."""

    def program(result: str) -> IRModule:
        return effir.check(
            effir.parse(
                f"""#[version = "0.0.5"]
def @main(%x: Tensor[(64), float16], %y: Tensor[(64, 64), float16]) {{
  let %a = exp(multiply(%x, %x));
  let %b = sum(%y, axis=[0]);
  let %c = nn.softmax(add(%a, %b));
  {result}
}}
"""
            )
        )

    for result in ("%c", "(%c, tanh(%b))", "(%c, sigmoid(%a), tanh(%b))"):
        spec = effir.compile(program(result), target="cuda").specialisation("main", {})
        source = spec.source("cuda")
        kernels = re.findall(
            r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\([^;]*\{", source
        )
        entries = re.findall(r"\.entry (\w+)\(", spec.ptx())
        assert kernels and sorted(entries) == sorted(kernels)


def test_ptx_of_cuda_code_nvcc_refuses_is_a_backend_error() -> None:
    """nvcc's refusal is a BackendError naming the compiler's first error,
    not TVM's bare RuntimeError."""
    target = make_target("cuda")
    with pytest.raises(BackendError, match="nvcc"):
        cuda_source_to_ptx('extern "C" __global__ void k() { undeclared(); }', target)


@needs_nvcc
@pytest.mark.parametrize(
    ("dtype", "value", "printed"),
    [
        ("int32", 10, "10"),
        ("int32", -7, "-7"),
        ("uint64", 2**64 - 5, "(uint64_t)(int64_t)-5"),
        ("float32", 2.0, "0x1p+1f"),
        ("float32", -0.0, "-0x0p+0f"),
        # TVM prints a float64 immediate with 15 digits after the point: 1e-20 was 0
        ("float64", 1e-20, "__longlong_as_double((int64_t)4307583784117748259)"),
        ("float64", -0.0, "__longlong_as_double((int64_t)(-9223372036854775807LL-1LL))"),
    ],
)
def test_cuda_kernels_with_opaque_constants_compile_to_ptx(
    dtype: str, value: Any, printed: str
) -> None:
    """A program constant is an opaque ``reinterpret`` until LowerIntrin
    [RULE TE-OPAQUE]; TVM's CUDA code generator printed it as ``*(int
    *)(&(10))``, which nvcc refused ("must be an lvalue"), so every CUDA
    build with a constant failed. On CUDA it is lowered to the immediate of
    the same bits (a negative int, a uint64 past int64's range, -0.0); a
    float64 one is ``__longlong_as_double`` of its bits."""
    x = Var("x", TensorType((4,), dtype))
    body = call_op("multiply", x, const(np.array(value, dtype=dtype)))
    kernel = build_kernel(function([x], body), "cuda")
    assert "(&(" not in kernel.source() and printed in kernel.source().replace(" ", "")
    ptx = compile_cuda_to_ptx(kernel)
    assert ".target sm_90" in ptx and ".entry" in ptx


@needs_nvcc
def test_cuda_kernels_of_the_importers_operators_compile_to_ptx() -> None:
    """The operators the importers added (mod and fmod of floats, whose
    float ``truncmod`` is CUDA's ``fmodf``, and of ints; abs, sin, cos,
    floor, ceil; cumsum's conditional reduction) generate CUDA that nvcc
    compiles for sm_90."""
    x, y = Var("x", TensorType((8, 16))), Var("y", TensorType((16,)))
    i, j = Var("i", TensorType((8, 16), "int32")), Var("j", TensorType((16,), "int32"))
    unary: Any = x
    for name in ("abs", "sin", "cos", "floor", "ceil"):
        unary = call_op(name, unary)
    for params, body in (
        ([x, y], call_op("add", call_op("mod", x, y), call_op("fmod", x, y))),
        ([i, j], call_op("add", call_op("mod", i, j), call_op("fmod", i, j))),
        ([x], unary),
        ([x], call_op("cumsum", x, axis=1, exclusive=True, reverse=True)),
    ):
        ptx = compile_cuda_to_ptx(build_kernel(function(params, body), "cuda"))
        assert ".target sm_90" in ptx and ".entry" in ptx


def test_cuda_schedules_build_for_every_kind_of_block() -> None:
    """Reductions (dlight's rules), a tuple reduction (argmax's running value
    kept in registers), norms, a chain over the inline budget (computed per
    thread) and staged integer power all generate CUDA."""
    x = Var("x", TensorType((4, 64)))
    g, b = Var("g", TensorType((64,))), Var("b", TensorType((64,)))
    chain: Any = x
    for k in range(12):
        chain = call_op(("tanh", "sigmoid", "exp")[k % 3], chain)
    i, j = Var("i", TensorType((6,), "int8")), Var("j", TensorType((6,), "int8"))
    for params, body in (
        ([x], call_op("argmax", x, axis=[1])),
        ([x], call_op("nn.softmax", x)),
        ([x, g, b], call_op("nn.layer_norm", x, g, b)),
        ([x], chain),
        ([i, j], call_op("power", i, j)),
    ):
        assert "__global__" in build_kernel(function(params, body), "cuda").source("cuda")


def test_ptx_needs_a_cuda_kernel(axpy: Kernel) -> None:
    with pytest.raises(BackendError, match="built for llvm"):
        compile_cuda_to_ptx(axpy)
