"""``effir.compile(precision=...)``: how float32 matrix products multiply
(precision.py [RULE COMPILE-PRECISION], schedule/cuda/tensor_core.py
[RULE SCHED-TENSORCORE]).

On the CPU a TF32 or bfloat16 program computes what the GPU's tensor cores
compute: its products equal numpy's on the rounded operands (the
reference, ``numpy_operand``), and differ from float32's. For CUDA the
products whose shape allows it run on the tensor cores: the PTX nvcc makes
of the kernels holds WMMA instructions of that precision, and none in
float32. Running them on a GPU (they equal the CPU's numbers up to the
order of the sums) is benchmarks/cuda_device.py's ``--part precision``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.backends.tvm.driver.build_cache import program_digest
from effir.backends.tvm.precision import PRECISIONS, numpy_operand
from effir.backends.tvm.target import make_target
from tests.support.gru_programs import NEW_STATE, gates

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gru_loop import gru_text  # noqa: E402
from gru_peers import weights  # noqa: E402

H = '#[version = "0.0.5"]\n'
DENSE = H + (
    "def @main(%x: Tensor[(32, 48), float32], %w: Tensor[(64, 48), float32],\n"
    "          %b: Tensor[(64), float32]) {\n"
    "  tanh(nn.dense(%x, %w) + %b)\n"
    "}\n"
)
REDUCED = ("tf32", "bfloat16")


def reference_dense(x: np.ndarray, w: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    xr, wr = (numpy_operand(a, precision).astype(np.float64) for a in (x, w))
    return np.tanh(xr @ wr.T + b)


def arrays(*shapes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


# ------------------------------------------------------------ the rounding
def test_tf32_rounds_ties_away_from_zero_and_bfloat16_to_even() -> None:
    one = np.float32(1.0)
    tie_tf32 = np.float32(1 + 2.0**-11)  # halfway between two TF32 neighbours
    tie_bf16 = np.float32(1 + 2.0**-8)
    odd_tie_bf16 = np.float32(1 + 3 * 2.0**-8)
    assert numpy_operand(np.array([tie_tf32, -tie_tf32]), "tf32").tolist() == [
        1 + 2.0**-10,
        -(1 + 2.0**-10),
    ]
    assert numpy_operand(np.array([tie_bf16, odd_tie_bf16]), "bfloat16").tolist() == [
        1.0,
        1 + 4 * 2.0**-8,
    ]
    special = np.array([np.inf, -np.inf, np.nan, one], np.float32)
    for p in REDUCED:
        got = numpy_operand(special, p)
        assert np.isposinf(got[0]) and np.isneginf(got[1]) and np.isnan(got[2]) and got[3] == 1


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_a_rounded_operand_is_the_nearest_value_of_its_format(x: float) -> None:
    for precision, dropped in (("tf32", 13), ("bfloat16", 16)):
        r = numpy_operand(np.array([x], np.float32), precision)[0]
        bits = int(np.array([r], np.float32).view(np.uint32)[0])
        if np.isfinite(r):
            assert bits & ((1 << dropped) - 1) == 0
            ulp = np.spacing(np.float32(abs(r)), dtype=np.float32) * (1 << dropped)
            assert abs(float(r) - x) <= ulp / 2


# ----------------------------------------------------------- on the CPU
@pytest.mark.parametrize("precision", REDUCED)
def test_a_cpu_program_multiplies_the_rounded_operands(precision: str) -> None:
    module = effir.check(effir.parse(DENSE))
    x, w, b = arrays((32, 48), (64, 48), (64,))
    got = effir.compile(module, precision=precision)(x, w, b)
    np.testing.assert_allclose(got, reference_dense(x, w, b, precision), rtol=1e-5, atol=1e-6)
    full = reference_dense(x, w, b, "float32")
    assert np.max(np.abs(got - full)) > 1e-4  # the option changes the numbers


def test_float32_is_the_default_and_the_interpreters_numbers() -> None:
    module = effir.check(effir.parse(DENSE))
    x, w, b = arrays((32, 48), (64, 48), (64,))
    compiled = effir.compile(module)
    assert compiled.precision == "float32"
    # the same float32 numbers up to the order of the dot products' additions
    # (the host CPU's vector lanes against numpy's BLAS): absolute, where
    # tanh's result is near 0
    got, want = compiled(x, w, b), effir.interpret(module, x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=8, deadline=None)
@given(
    st.sampled_from(REDUCED),
    st.integers(1, 6),
    st.integers(1, 9),
    st.integers(1, 7),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_matmul_in_any_layout_equals_the_rounded_reference(
    precision: str, m: int, k: int, n: int, ta: bool, tb: bool, seed: int
) -> None:
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    text = H + (
        f"def @main(%a: Tensor[{a_shape}, float32], %b: Tensor[{b_shape}, float32]) {{\n"
        f"  nn.matmul(%a, %b, transpose_a={ta}, transpose_b={tb})\n}}\n"
    )
    module = effir.check(effir.parse(text.replace(",)", ")")))
    a, b = arrays(a_shape, b_shape, seed=seed)
    ar, br = (numpy_operand(v, precision).astype(np.float64) for v in (a, b))
    want = (ar.T if ta else ar) @ (br.T if tb else br)
    got = effir.compile(module, precision=precision)(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def numpy_gru_rounded(xs, h0, w, u, bias, precision):
    """The GRU of benchmarks/gru_loop.py with each product's operands rounded."""
    r = lambda a: numpy_operand(a, precision).astype(np.float64)  # noqa: E731
    h = h0.astype(np.float64)
    outs = []
    for x in xs:
        gx = r(x) @ r(w).T + bias
        gh = r(h.astype(np.float32)) @ r(u).T
        xz, xr, xn = np.split(gx, 3, axis=1)
        hz, hr, hn = np.split(gh, 3, axis=1)
        z = 1 / (1 + np.exp(-(xz + hz)))
        rr = 1 / (1 + np.exp(-(xr + hr)))
        n = np.tanh(xn + rr * hn)
        h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs), h


@pytest.mark.parametrize("precision", REDUCED)
def test_a_whole_loop_rounds_its_products_every_step(precision: str) -> None:
    module = effir.check(effir.parse(gru_text(16, 16)))
    xs, h0 = arrays((6, 4, 16), (4, 16), seed=3)
    w, u, bias = weights(16, 16)
    compiled = effir.compile(module, precision=precision)
    outs, h = compiled(xs, h0, w, u, bias)
    assert compiled.report.builds[-1].loops >= 1  # the recurrence is one compiled loop
    want_outs, want_h = numpy_gru_rounded(xs, h0, w, u, bias, precision)
    np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5)


def test_an_unknown_precision_is_refused_naming_the_choices() -> None:
    module = effir.check(effir.parse(DENSE))
    with pytest.raises(effir.CompileError) as err:
        effir.compile(module, precision="float16")
    assert str(err.value) == (
        "compile error: precision must be one of float32, tf32, bfloat16, not 'float16'"
    )


def test_the_precision_is_reported_exported_and_part_of_the_cache_key(tmp_path) -> None:
    module = effir.check(effir.parse(DENSE))
    compiled = effir.compile(module, precision="tf32")
    assert re.search(r"^matrix products +tf32$", compiled.report.table(), re.M)
    compiled.export(tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "effir-artifact.json").read_text())
    assert manifest["precision"] == "tf32"
    target = make_target("llvm")
    keys = {program_digest("text", "", str(target), p) for p in PRECISIONS}
    assert len(keys) == len(PRECISIONS)


# ------------------------------------------------------------ for CUDA
NVCC = shutil.which("nvcc") is not None
WMMA = {"tf32": ".f32.tf32.tf32.f32", "bfloat16": ".f32.bf16.bf16.f32"}


GRU_CELL = (
    H
    + f"""
def @main(%x: Tensor[(32, 64), float32], %h: Tensor[(32, 64), float32],
          %w: Tensor[(192, 64), float32], %u: Tensor[(192, 64), float32],
          %bias: Tensor[(192), float32]) {{
{gates(2)}
  {NEW_STATE}
}}
"""
)


@pytest.mark.skipif(not NVCC, reason="needs nvcc to compile CUDA to PTX")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_gru_step_multiplies_on_the_tensor_cores_only_when_asked(precision: str) -> None:
    """A GRU cell compiled by itself: both products on the tensor cores."""
    compiled = effir.compile(effir.check(effir.parse(GRU_CELL)), target="cuda", precision=precision)
    spec = next(iter(compiled.specialisations.values()))
    ptx = spec.ptx()
    mma = re.findall(r"\bw?mma\.[\w.]+", ptx) + re.findall(r"\bwgmma\.[\w.]+", ptx)
    if precision == "float32":
        assert mma == []
        return
    assert any(WMMA[precision] in instruction for instruction in mma), mma
    # both products of the step (x w^T and h u^T) call the tile
    assert spec.source("cuda").count(f"effir_mma_{'tf32' if precision == 'tf32' else 'bf16'}(") == 2


@pytest.mark.skipif(not NVCC, reason="needs nvcc to compile CUDA to PTX")
def test_a_gru_loop_on_cuda_is_one_persistent_kernel_rounding_its_products() -> None:
    """The GRU's loop is a persistent kernel [RULE LOOP-WHOLE], whose products
    keep the float32 units (its operands are on chip, not tiles of
    parameters) with TF32's rounding, the same numbers as the tiles."""
    module = effir.check(effir.parse(gru_text(64, 64)))
    compiled = effir.compile(module, target="cuda", precision="tf32")
    spec = compiled.specialisation("main", {"b": 32, "t": 4})
    source = spec.source("cuda")
    assert re.search(r"effir_[0-9a-f]{16}_loop_0_kernel", source)
    assert "effir_mma" not in source
    assert "4294959104" in source or "0xffffe000" in source.lower()


@pytest.mark.skipif(not NVCC, reason="needs nvcc to compile CUDA to PTX")
def test_a_product_of_other_shapes_keeps_the_float32_units_with_the_rounding() -> None:
    # 20 rows: not a multiple of the 16 x 16 tile
    module = effir.check(effir.parse(DENSE.replace("(32, 48)", "(20, 48)")))
    spec = next(
        iter(effir.compile(module, target="cuda", precision="tf32").specialisations.values())
    )
    assert "effir_mma" not in spec.source("cuda")
    assert "4294959104" in spec.source("cuda") or "0xffffe000" in spec.source("cuda").lower()
    assert "mma" not in spec.ptx()


@pytest.mark.skipif(not NVCC, reason="needs nvcc to compile CUDA to PTX")
def test_a_transposed_operand_is_read_through_its_strides_on_the_tensor_cores() -> None:
    # the weight gradient's layout: (k, m)^T (k, n), both operands across rows
    text = H + (
        "def @main(%a: Tensor[(64, 48), float32], %b: Tensor[(64, 32), float32]) {\n"
        "  nn.matmul(%a, %b, transpose_a=True)\n}\n"
    )
    compiled = effir.compile(effir.check(effir.parse(text)), target="cuda", precision="bfloat16")
    source = next(iter(compiled.specialisations.values())).source("cuda")
    (call,) = re.findall(r"effir_mma_bf16\((.*)\);", source)
    # A(i, k) at a[i + 48 k]; B(k, j) at b[32 k + j]; 16 x 16 tiles, depth 64
    assert re.search(r", 1, 48, .*, 32, 1, 16, 16, 64$", call), call
