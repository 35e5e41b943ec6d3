"""The ``te`` rules (effir/backends/tvm/kernel/te_ops) against the numpy rules.

Each case builds a one-operator kernel with ``build_kernel`` (scheduled for
the host CPU, as the backend runs it) on small random inputs and compares
it with the operator's numpy rule: bit for bit for integers and booleans,
to 1e-5 relative for float32. The cases cover several shapes, numpy
broadcasting, 0-d tensors, attribute variants, integer, float and boolean
dtypes; the tests after the table pin the semantics TVM's own lowering gets
differently (NaN, integer division, float16, the exp/tanh approximations).
A registry test fails when an operator that a kernel may contain has no
rule.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import effir
from effir.backends.tvm.kernel import te_ops  # noqa: F401  (registers the rules)
from effir.backends.tvm.kernel.primitive import build_kernel
from effir.ir.expr import Function, Var
from effir.ir.op import all_ops, call_op, op_def
from effir.ir.types import TensorType, TupleType, Type
from effir.passes.analyses.infer_type import infer_expr
from tests.support.isolated import run_isolated

# ------------------------------------------------------------------ helpers
TOLERANCE = {"float16": (2e-3, 1e-4), "float32": (1e-5, 1e-6), "float64": (1e-10, 1e-12)}


def type_of(value: Any) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(type_of(v) for v in value))
    return TensorType(tuple(value.shape), str(value.dtype))


def one_op(name: str, args: tuple[Any, ...], **attrs: Any) -> tuple[Function, Any]:
    """``fn (%p0, ...) { name(%p0, ..., attrs) }``, typed, and its call."""
    params = [Var(f"p{k}", type_of(a)) for k, a in enumerate(args)]
    call = call_op(name, *params, **attrs)
    fn = Function(tuple(params), call)
    infer_expr(fn)
    return fn, call


def run_both(name: str, args: tuple[Any, ...], **attrs: Any) -> tuple[Any, Any]:
    """(the kernel's result, the numpy rule's result)."""
    fn, call = one_op(name, args, **attrs)
    kernel = build_kernel(fn, "llvm")
    return kernel(*args), op_def(name).rule("numpy")(args, call.attrs)


def assert_matches(out: Any, ref: Any, what: str = "") -> None:
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == len(ref), what
        for k, (o, r) in enumerate(zip(out, ref, strict=True)):
            assert_matches(o, r, f"{what}.{k}")
        return
    assert out.dtype == ref.dtype and out.shape == ref.shape, (what, out.dtype, ref.dtype)
    if ref.dtype.kind == "f":
        rtol, atol = TOLERANCE[str(ref.dtype)]
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(out, ref, err_msg=what)


def check(name: str, *args: Any, **attrs: Any) -> None:
    out, ref = run_both(name, tuple(args), **attrs)
    assert_matches(out, ref, name)


# ---------------------------------------------------------------- inputs
def normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32") -> Any:
    return rng.standard_normal(shape).astype(dtype)


def positive(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32") -> Any:
    return (rng.random(shape) + 0.1).astype(dtype)


def ints(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dtype: str = "int32",
    lo: int = -50,
    hi: int = 50,
) -> Any:
    return rng.integers(lo, hi, shape).astype(dtype)


def bools(rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
    return rng.random(shape) < 0.5


def nonzero(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "int32") -> Any:
    values = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)
    return values.astype(dtype)


Case = tuple[str, Callable[[np.random.Generator], tuple[Any, ...]], dict[str, Any]]


def case(name: str, make: Callable[[np.random.Generator], tuple[Any, ...]], **attrs: Any) -> Any:
    shown = ",".join(f"{k}={v}" for k, v in attrs.items())
    return pytest.param(name, make, attrs, id=f"{name}[{shown}]" if shown else name)


def _unary_cases() -> list[Any]:
    out = []
    for op in ("negative", "exp", "tanh", "sigmoid", "nn.relu"):
        out.append(case(op, lambda r: (normal(r, (3, 17)) * 4,)))
        out.append(case(op, lambda r: (normal(r, (5,), "float64") * 4,)))
    for op in ("log", "sqrt"):
        out.append(case(op, lambda r: (positive(r, (3, 17)) * 5,)))
        out.append(case(op, lambda r: (positive(r, (4,), "float64"),)))
    for op in ("abs", "sin", "cos", "floor", "ceil"):
        out.append(case(op, lambda r: (normal(r, (3, 17)) * 4,)))
        out.append(case(op, lambda r: (normal(r, (5,), "float16") * 4,)))
    out.append(case("abs", lambda r: (np.array([-128, -3, 0, 5, 127], "int8"),)))
    out.append(case("abs", lambda r: (ints(r, (9,), "int64", -(2**40), 2**40),)))
    out.append(case("abs", lambda r: (ints(r, (9,), "uint16", 0, 60000),)))
    for op in ("exp", "tanh", "sigmoid", "log"):
        out.append(case(op, lambda r: (positive(r, (4, 4), "float16"),)))
    out += [
        case("negative", lambda r: (np.array([-128, -1, 0, 5, 127], "int8"),)),
        case("negative", lambda r: (np.array([0, 1, 200], "uint8"),)),
        case("nn.relu", lambda r: (ints(r, (2, 9)),)),
        case("logical_not", lambda r: (bools(r, (3, 5)),)),
        case("exp", lambda r: (np.array(1.5, "float32"),)),  # a 0-d tensor
    ]
    return out


def _binary_cases() -> list[Any]:
    out = []
    for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum"):
        out.append(case(op, lambda r: (normal(r, (2, 3, 4)), normal(r, (3, 1)))))
        out.append(case(op, lambda r: (normal(r, (4,), "float64"), normal(r, (4,), "float64"))))
        out.append(case(op, lambda r: (ints(r, (3, 4)), nonzero(r, (4,)))))
    for op in ("add", "subtract", "multiply"):
        out.append(
            case(
                op, lambda r: (ints(r, (16,), "int8", -128, 127), ints(r, (16,), "int8", -128, 127))
            )
        )
        out.append(
            case(op, lambda r: (ints(r, (9,), "uint8", 0, 255), ints(r, (9,), "uint8", 0, 255)))
        )
        out.append(case(op, lambda r: (positive(r, (5,), "float16"), positive(r, (5,), "float16"))))
    out += [
        case("divide", lambda r: (ints(r, (20,), "int16", -300, 300), nonzero(r, (20,), "int16"))),
        case(
            "divide", lambda r: (ints(r, (12,), "uint32", 0, 1000), ints(r, (12,), "uint32", 1, 30))
        ),
        case("power", lambda r: (positive(r, (3, 4)) * 3, normal(r, (4,)))),
        case("power", lambda r: (ints(r, (10,), "int8", -5, 5), ints(r, (10,), "int8", 0, 12))),
        case("power", lambda r: (ints(r, (10,), "uint8", 0, 9), ints(r, (10,), "uint8", 0, 200))),
        case("power", lambda r: (ints(r, (6,), "int32", -9, 9), ints(r, (6,), "int32", 0, 40))),
        case("add", lambda r: (np.array(2.0, "float32"), normal(r, (2, 3)))),  # 0-d broadcasts
    ]
    for op in ("mod", "fmod"):
        out.append(case(op, lambda r: (normal(r, (3, 4)) * 5, normal(r, (4,)) * 2)))
        out.append(case(op, lambda r: (normal(r, (6,), "float16") * 5, normal(r, (6,), "float16"))))
        out.append(case(op, lambda r: (ints(r, (20,), "int32", -300, 300), nonzero(r, (20,)))))
        out.append(
            case(op, lambda r: (ints(r, (12,), "uint8", 0, 255), ints(r, (12,), "uint8", 1, 9)))
        )
        out.append(
            case(op, lambda r: (np.array([-128, 127, -7], "int8"), np.array([-1, -1, 2], "int8")))
        )
        special = [0.0, -0.0, 5.5, -5.5, np.inf, -np.inf, np.nan]
        grid = np.array([(a, b) for a in special for b in special], "float64").T
        out.append(case(op, lambda r, grid=grid: (grid[0].copy(), grid[1].copy())))
    for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        out.append(case(op, lambda r: (normal(r, (3, 4)).round(), normal(r, (1, 4)).round())))
        out.append(
            case(op, lambda r: (ints(r, (8,), "int32", -3, 3), ints(r, (8,), "int32", -3, 3)))
        )
        out.append(case(op, lambda r: (bools(r, (6,)), bools(r, (6,)))))
        out.append(case(op, lambda r: (ints(r, (5,), "uint8", 0, 4), ints(r, (5,), "uint8", 0, 4))))
    for op in ("logical_and", "logical_or"):
        out.append(case(op, lambda r: (bools(r, (3, 4)), bools(r, (4,)))))
    return out


def _other_elementwise_cases() -> list[Any]:
    return [
        case("where", lambda r: (bools(r, (3, 1)), normal(r, (3, 4)), normal(r, (4,)))),
        case("where", lambda r: (bools(r, (5,)), ints(r, (5,)), np.array(7, "int32"))),
        case("cast", lambda r: (normal(r, (9,)) * 100,), dtype="int32"),
        case(
            "cast",
            lambda r: (np.array([0.0, -0.0, 0.5, np.nan, -np.inf], "float32"),),
            dtype="bool",
        ),
        case("cast", lambda r: (ints(r, (7,), "int32", -300, 300),), dtype="uint8"),
        case("cast", lambda r: (ints(r, (7,), "int32", -3, 3),), dtype="bool"),
        case("cast", lambda r: (bools(r, (6,)),), dtype="float32"),
        case("cast", lambda r: (bools(r, (6,)),), dtype="int64"),
        case("cast", lambda r: (normal(r, (6,), "float64") * 1e3,), dtype="float16"),
        case("cast", lambda r: (ints(r, (6,), "int64", -(2**40), 2**40),), dtype="float32"),
    ]


def _reduction_cases() -> list[Any]:
    out = []
    for exclusive in (False, True):
        for reverse in (False, True):
            flags = {"exclusive": exclusive, "reverse": reverse}
            out.append(case("cumsum", lambda r: (normal(r, (3, 5)),), axis=1, **flags))
            out.append(
                case("cumsum", lambda r: (ints(r, (4, 2), "int8", -128, 127),), axis=0, **flags)
            )
    out.append(case("cumsum", lambda r: (normal(r, (7,), "float16"),), axis=-1))
    out.append(case("cumsum", lambda r: (ints(r, (6,), "int64", -(2**62), 2**62),), axis=0))
    out.append(case("cumsum", lambda r: (np.zeros((2, 0), "float32"),), axis=1))
    for op in ("sum", "mean", "max", "min", "prod"):
        make = (
            (lambda r: (positive(r, (2, 3, 4)) + 0.5,))
            if op == "prod"
            else (lambda r: (normal(r, (2, 3, 4)),))
        )
        out.append(case(op, make))
        out.append(case(op, make, axis=[1]))
        out.append(case(op, make, axis=[0, 2], keepdims=True))
        out.append(case(op, make, axis=[-1], exclude=True))
    out += [
        case("sum", lambda r: (normal(r, (64, 48)),), axis=[0]),
        case("sum", lambda r: (normal(r, (8, 256)),), axis=[1]),
        case("max", lambda r: (normal(r, (8, 256)),), axis=[1]),
        case("sum", lambda r: (ints(r, (3, 40), "int8", -128, 127),), axis=[1]),  # wraps
        case("prod", lambda r: (ints(r, (4, 9), "int32", -9, 9),), axis=[1]),
        case("sum", lambda r: (ints(r, (5, 6), "uint8", 0, 255),), axis=[0]),
        case("max", lambda r: (bools(r, (3, 4)),), axis=[1]),
        case("min", lambda r: (bools(r, (3, 4)),), axis=[0]),
        case("max", lambda r: (ints(r, (3, 4), "uint16", 0, 60000),)),
        case("sum", lambda r: (positive(r, (4, 32), "float16"),), axis=[1]),
        case("mean", lambda r: (positive(r, (4, 32), "float16"),), axis=[1]),
        case("sum", lambda r: (normal(r, (3, 4)),), axis=[0, 1], exclude=True),  # over no axis
        case("mean", lambda r: (normal(r, (0, 3)),), axis=[0]),  # an empty axis: NaN
        case("sum", lambda r: (normal(r, (0, 3)),), axis=[0]),
        case("prod", lambda r: (ints(r, (2, 0)),), axis=[1]),
        case("nn.dense", lambda r: (normal(r, (2, 0)), normal(r, (3, 0)))),
    ]
    for attrs in (
        {},
        {"axis": [0]},
        {"axis": [1], "keepdims": True},
        {"axis": [1], "select_last_index": True},
        {"select_last_index": True},
        {"axis": [0], "exclude": True},
    ):
        out.append(case("argmax", lambda r: (ints(r, (5, 6), "int32", 0, 3),), **attrs))
    out += [
        case("argmax", lambda r: (normal(r, (7, 33)),), axis=[1]),
        case("argmax", lambda r: (bools(r, (4, 5)),), axis=[1]),
        case("argmax", lambda r: (positive(r, (4, 5), "float16").round(1),), axis=[0]),
        case("argmax", lambda r: (normal(r, (3, 4)),), axis=[0, 1], exclude=True),  # zeros
    ]
    return out


def _shape_cases() -> list[Any]:
    x = lambda r: (normal(r, (2, 3, 4)),)  # noqa: E731
    return [
        case("reshape", x, newshape=[6, -1]),
        case("reshape", x, newshape=[0, -1]),
        case("reshape", lambda r: (ints(r, (4, 6)),), newshape=[2, 3, 4]),
        case("transpose", x),
        case("transpose", x, axes=[1, 0, 2]),
        case("transpose", x, axes=[-1, 0, 1]),
        case("expand_dims", x, axis=0),
        case("expand_dims", x, axis=-1, num_newaxis=2),
        case("expand_dims", x, axis=1, num_newaxis=0),
        case("squeeze", lambda r: (normal(r, (1, 3, 1, 2)),)),
        case("squeeze", lambda r: (normal(r, (1, 3, 1, 2)),), axis=[2]),
        case(
            "concatenate",
            lambda r: ((normal(r, (2, 3)), normal(r, (1, 3)), normal(r, (4, 3))),),
            axis=0,
        ),
        case(
            "concatenate", lambda r: ((ints(r, (2, 3)), ints(r, (2, 0)), ints(r, (2, 2))),), axis=-1
        ),
        case("stack", lambda r: ((normal(r, (2, 3)), normal(r, (2, 3))),), axis=0),
        case("stack", lambda r: ((bools(r, (4,)), bools(r, (4,)), bools(r, (4,))),), axis=-1),
        case("split", lambda r: (normal(r, (6, 4)),), indices_or_sections=3),
        case("split", lambda r: (normal(r, (3, 7)),), indices_or_sections=[1, 4], axis=1),
        case("split", lambda r: (ints(r, (7,)),), indices_or_sections=[5, 2, -1]),
        case("strided_slice", x, begin=[1, 0], end=[2, 3], strides=[1, 2]),
        case("strided_slice", x, begin=[-1], end=[-4], strides=[-1], axes=[2]),
        case("strided_slice", x, begin=[0, 1], end=[2**31 - 1, 5]),
        case("strided_slice", x, begin=[0, -2, 1], end=[1, 2, -1], slice_mode="size"),
        case("take", lambda r: (normal(r, (3, 5)), np.array([[0, 7], [-1, 2]], "int32")), axis=1),
        case("take", lambda r: (normal(r, (3, 5)), np.array([0, 25, -3], "int64")), mode="wrap"),
        case(
            "take", lambda r: (ints(r, (4, 2)), np.array([3, 0, 1], "uint8")), axis=0, mode="fast"
        ),
        case("take", lambda r: (normal(r, (4,)), np.array([2**64 - 1, 1], "uint64"))),
        case("take", lambda r: (normal(r, (4,)), np.array(2, "int32"))),
        case(
            "scatter_add",
            lambda r: (
                normal(r, (4, 3)),
                np.array([[1, 9], [-2, 1]], "int32"),
                normal(r, (2, 2, 3)),
            ),
        ),
        case(
            "scatter_add",
            lambda r: (ints(r, (2, 5)), np.array([0, 7, -1], "int64"), ints(r, (2, 3))),
            axis=1,
            mode="wrap",
        ),
        case(
            "scatter_add",
            lambda r: (
                positive(r, (3,), "float16"),
                np.array(2, "uint8"),
                positive(r, (), "float16"),
            ),
            mode="fast",
        ),
        case(
            "strided_set",
            lambda r: (normal(r, (2, 3, 4)), normal(r, (1, 2, 4))),
            begin=[1, 0],
            end=[2, 3],
            strides=[1, 2],
        ),
        case(
            "strided_set",
            lambda r: (ints(r, (2, 3, 4)), ints(r, (2, 3, 2))),
            begin=[-1],
            end=[-4],
            strides=[-2],
            axes=[2],
        ),
        case("broadcast_to", lambda r: (normal(r, (3, 1)),), shape=[2, 3, 4]),
        case("broadcast_to", lambda r: (np.array(5, "int8"),), shape=[2, 2]),
        case("zeros", lambda r: (), shape=[2, 3], dtype="int16"),
        case("ones", lambda r: (), shape=[4], dtype="bool"),
        case("full", lambda r: (np.array(2.7, "float32"),), shape=[2, 2], dtype="int32"),
        case("full", lambda r: (np.array(np.nan, "float32"),), shape=[3], dtype="bool"),
        case("full", lambda r: (np.array(3, "int64"),), shape=[], dtype="float64"),
    ]


def _nn_cases() -> list[Any]:
    return [
        case("nn.dense", lambda r: (normal(r, (3, 20)), normal(r, (5, 20)))),
        case("nn.dense", lambda r: (normal(r, (2, 3, 8)), normal(r, (4, 8))), units=4),
        case(
            "nn.dense",
            lambda r: (ints(r, (3, 6), "int8"), ints(r, (4, 6), "int8")),
            out_dtype="int32",
        ),
        case(
            "nn.dense", lambda r: (positive(r, (2, 16), "float16"), positive(r, (3, 16), "float16"))
        ),
        case("nn.dense", lambda r: (normal(r, (8,)), normal(r, (3, 8)))),
        case("nn.matmul", lambda r: (normal(r, (3, 5)), normal(r, (5, 4)))),
        case("nn.matmul", lambda r: (normal(r, (2, 1, 3, 5)), normal(r, (4, 5, 6)))),
        case(
            "nn.matmul",
            lambda r: (normal(r, (5, 3)), normal(r, (4, 5))),
            transpose_a=True,
            transpose_b=True,
        ),
        case(
            "nn.matmul",
            lambda r: (normal(r, (3, 5), "float64"), normal(r, (6, 5), "float64")),
            transpose_b=True,
        ),
        case("nn.softmax", lambda r: (normal(r, (3, 10)) * 5,)),
        case("nn.softmax", lambda r: (normal(r, (4, 3, 2)),), axis=0),
        case("nn.softmax", lambda r: (positive(r, (2, 8), "float16"),)),
        case("nn.log_softmax", lambda r: (normal(r, (3, 10)) * 5,)),
        case("nn.log_softmax", lambda r: (normal(r, (4, 6), "float64"),), axis=0),
        case("nn.layer_norm", lambda r: (normal(r, (3, 8)), normal(r, (8,)), normal(r, (8,)))),
        case(
            "nn.layer_norm",
            lambda r: (normal(r, (5, 3)), normal(r, (5,)), normal(r, (5,))),
            axis=0,
            center=False,
            epsilon=0.1,
        ),
        case(
            "nn.layer_norm",
            lambda r: (normal(r, (2, 4)), normal(r, (4,)), normal(r, (4,))),
            scale=False,
        ),
        case(
            "nn.batch_norm_infer",
            lambda r: (
                normal(r, (4, 3, 2)),
                normal(r, (3,)),
                normal(r, (3,)),
                normal(r, (3,)),
                positive(r, (3,)),
            ),
        ),
        case(
            "nn.batch_norm_infer",
            lambda r: (
                normal(r, (4, 5)),
                normal(r, (5,)),
                normal(r, (5,)),
                normal(r, (5,)),
                positive(r, (5,)),
            ),
            axis=-1,
            epsilon=1e-3,
        ),
        case(
            "nn.batch_norm_train",
            lambda r: (
                normal(r, (6, 3, 2)),
                normal(r, (3,)),
                normal(r, (3,)),
                normal(r, (3,)),
                positive(r, (3,)),
            ),
        ),
        case(
            "nn.batch_norm_train",
            lambda r: (
                normal(r, (5, 4)),
                normal(r, (5,)),
                normal(r, (5,)),
                normal(r, (5,)),
                positive(r, (5,)),
            ),
            axis=0,
            momentum=0.3,
        ),
        case(
            "nn.batch_norm_train",
            lambda r: (
                normal(r, (0, 3)),
                normal(r, (3,)),
                normal(r, (3,)),
                normal(r, (3,)),
                positive(r, (3,)),
            ),
        ),
    ]


CASES = _unary_cases() + _binary_cases() + _other_elementwise_cases()
CASES += _reduction_cases() + _shape_cases() + _nn_cases()


@pytest.mark.parametrize(("name", "make", "attrs"), CASES)
def test_rule_matches_numpy_rule(name: str, make: Callable, attrs: dict[str, Any]) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((name, sorted(attrs.items()))).encode()))
    check(name, *make(rng), **attrs)


# ------------------------------------------------------------- the registry
NN_OPS = (
    "nn.dense",
    "nn.matmul",
    "nn.softmax",
    "nn.log_softmax",
    "nn.layer_norm",
    "nn.batch_norm_infer",
    "nn.batch_norm_train",
)
KERNEL_TRAITS = {"elementwise", "broadcast", "injective", "reduction", "out_fusable"}


def test_every_kernel_operator_has_a_te_rule() -> None:
    """Every pure operator that fusion may put in a kernel (by its traits),
    and the nn operators, can be lowered."""
    required = {
        d.name
        for d in all_ops()
        if d.effect == "pure"
        and d.traits & KERNEL_TRAITS
        and not d.traits & {"dynamic_shape", "control_flow"}
    }
    required |= set(NN_OPS)
    missing = sorted(n for n in required if "te" not in op_def(n).rules)
    assert not missing, f"operators without a te rule: {missing}"
    tested = {p.values[0] for p in CASES}
    assert required <= tested, f"operators without a test case: {sorted(required - tested)}"


# --------------------------------------------------- semantics TVM differs on
def test_nan_propagates_as_in_numpy() -> None:
    rng = np.random.default_rng(1)
    a = normal(rng, (4, 64))
    b = normal(rng, (4, 64))
    a[rng.random(a.shape) < 0.2] = np.nan
    b[rng.random(b.shape) < 0.2] = np.nan
    for op in ("maximum", "minimum", "not_equal", "equal", "less", "greater_equal"):
        check(op, a, b)
    check("nn.relu", a)
    for op in ("max", "min", "argmax"):
        check(op, a, axis=[0])
        check(op, a, axis=[1])
    check("argmax", a, axis=[1], select_last_index=True)
    check("argmax", np.full((3, 2), np.nan, "float32"), axis=[0])


def test_exp_tanh_sigmoid_over_the_float32_range() -> None:
    """[RULE TE-MATH] The vectorisable approximations agree with numpy to 1e-5
    relative everywhere: tiny, moderate and huge arguments, the overflow and
    underflow thresholds, subnormal results, infinities and NaN."""
    grid = np.concatenate(
        [
            np.linspace(-110, 110, 4001),
            np.geomspace(1e-12, 100, 2000),
            -np.geomspace(1e-12, 100, 2000),
            [0.0, -0.0, 88.72, 88.73, -87.33, -103.9, -104.0, np.inf, -np.inf, np.nan],
        ]
    ).astype("float32")
    for op in ("exp", "tanh", "sigmoid"):
        out, ref = run_both(op, (grid,))
        finite = np.isfinite(ref) & (np.abs(ref) > 1e-37)  # normal results: relative error
        np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-5, err_msg=op)
        np.testing.assert_allclose(out[~finite], ref[~finite], rtol=0, atol=1e-37, equal_nan=True)


def test_integer_division_truncates_and_never_traps() -> None:
    """[RULE TE-DIV] C's truncation; INT_MIN / -1 wraps; a zero divisor fails
    as in the interpreter [RULE RUNTIME-CHECK], without trapping."""
    a = np.array([7, -7, 7, -7, -128, 5, -3], "int8")
    b = np.array([2, 2, -2, -2, -1, 1, 7], "int8")
    check("divide", a, b)
    fn, _ = one_op("divide", (a, b))
    with pytest.raises(effir.EvalError, match="divide: integer division by zero"):
        build_kernel(fn, "llvm")(a, np.zeros_like(b))
    u = np.array([7, 0, 255], "uint8")
    fn, _ = one_op("divide", (u, u))
    assert np.array_equal(build_kernel(fn, "llvm")(u, np.array([2, 1, 5], "uint8")), [3, 0, 51])
    with pytest.raises(effir.EvalError, match="divide: integer division by zero"):
        build_kernel(fn, "llvm")(u, np.array([2, 0, 0], "uint8"))


def test_integer_overflow_wraps() -> None:
    big = np.array([2**31 - 1, -(2**31), 65536], "int32")
    check("add", big, np.array([1, -1, 65536], "int32"))
    check("multiply", big, np.array([2, 3, 65536], "int32"))
    check("negative", big)
    check("power", np.array([3, -2, 7], "int16"), np.array([20, 15, 9], "int16"))


def test_float16_rounds_once_per_operator() -> None:
    rng = np.random.default_rng(2)
    x, y = normal(rng, (64,), "float16"), normal(rng, (64,), "float16")
    for op in ("add", "multiply", "divide", "maximum"):
        check(op, x, y)
    check("sum", x.reshape(8, 8), axis=[1])


def test_batch_norm_train_of_one_value_per_channel_fails_when_it_runs() -> None:
    """As the interpreter (and PyTorch) refuse it: with static shapes the
    kernel builder knows it at build time, and the kernel fails when it
    runs, with the interpreter's EvalError (a program that never reaches
    it runs: tests/backends/tvm/test_error_classes.py)."""
    args = (np.ones((1, 3), "float32"),) + tuple(np.ones(3, "float32") for _ in range(4))
    fn, _ = one_op("nn.batch_norm_train", args)
    kernel = build_kernel(fn, "llvm")
    message = "expected more than 1 value per channel when training, got input of shape (1, 3)"
    with pytest.raises(effir.EvalError, match=re.escape(f"nn.batch_norm_train: {message}")):
        kernel(*args)


BATCH_NORM_SIGNATURE = (
    "%g: Tensor[(3), float32], %b: Tensor[(3), float32], "
    "%rm: Tensor[(3), float32], %rv: Tensor[(3), float32]"
)


def test_batch_norm_train_after_a_mask_equals_the_static_kernel_bit_for_bit() -> None:
    """One rule builds both kernels: with the count of values per channel
    known at build time, and after a mask (known at run time only). Both
    give the same bits (the statistics are sum / count either way), and an
    empty batch after a mask keeps the running statistics, as the
    interpreter does."""
    header = '#[version = "0.0.5"]\n'
    static = (
        f"{header}def @main(%x: Tensor[(6, 3), float32], {BATCH_NORM_SIGNATURE}) {{\n"
        "  nn.batch_norm_train(%x, %g, %b, %rm, %rv, momentum=0.3f)\n}\n"
    )
    masked = (
        f"{header}def @main(%x: Tensor[(6, 3), float32], %k: Tensor[(6), bool], "
        f"{BATCH_NORM_SIGNATURE}) {{\n"
        "  nn.batch_norm_train(boolean_mask(%x, %k), %g, %b, %rm, %rv, momentum=0.3f)\n}\n"
    )
    code = f"""
import numpy as np, effir
r = np.random.default_rng(7)
x = r.normal(size=(6, 3)).astype("float32")
g, b, rm = (r.normal(size=3).astype("float32") for _ in range(3))
rv = r.uniform(0.5, 2, 3).astype("float32")
static = effir.check(effir.parse({static!r}))
masked = effir.check(effir.parse({masked!r}))
bits = lambda out: [np.asarray(a).view("uint32") for a in out]
full = np.ones(6, bool)
got, want = bits(effir.compile(masked)(x, full, g, b, rm, rv)), bits(effir.compile(static)(x, g, b, rm, rv))
assert all(np.array_equal(p, q) for p, q in zip(got, want, strict=True)), (got, want)
none = np.zeros(6, bool)
got = bits(effir.compile(masked)(x, none, g, b, rm, rv))
want = bits(effir.interpret(masked, x, none, g, b, rm, rv))
assert all(np.array_equal(p, q) for p, q in zip(got, want, strict=True)), (got, want)
print("ok")
"""
    run_isolated(code).check()


def test_scalar_and_broadcast_shapes() -> None:
    rng = np.random.default_rng(3)
    check("where", np.array(True), np.array(1.0, "float32"), normal(rng, (2, 2)))
    check("maximum", normal(rng, (1, 3, 1)), normal(rng, (2, 1, 5)))
    check("sum", np.array(4.0, "float32"))
