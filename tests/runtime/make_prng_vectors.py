"""Print the reference vectors of tests/runtime/test_prng.py, computed with JAX.

Not a test (pytest collects test_*.py only) and not run by the suite: effir
does not depend on JAX. To regenerate, outside the repository's venv:

    python3.11 -m venv /tmp/jaxenv
    /tmp/jaxenv/bin/pip install jax jaxlib flax      # jax 0.10.2, flax 0.12.8
    /tmp/jaxenv/bin/python tests/runtime/make_prng_vectors.py

JAX runs in its default configuration (CPU, ``jax_threefry_partitionable``
on, x64 off) for everything except the float64 and 64-bit vectors, which
need ``jax_enable_x64`` (switched on at the end). Floats are printed as
``float.hex`` of their exact value.
"""

from __future__ import annotations

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def u32(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def floats(a) -> list[str]:
    return [float(v).hex() for v in np.asarray(a).reshape(-1)]


def bools(a) -> str:
    return "".join("1" if v else "0" for v in np.asarray(a).reshape(-1))


def dropout_input(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The x that the dropout vectors drop: a fixed, exactly representable ramp."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64).reshape(shape) * 0.375 - 2.0).astype(dtype)


def main() -> None:
    assert jax.config.jax_threefry_partitionable, "expected JAX's default (partitionable) mode"
    assert not jax.config.jax_enable_x64
    out: dict[str, object] = {}
    out["versions"] = {"jax": jax.__version__, "flax": flax.__version__}
    k0, k42 = jax.random.PRNGKey(0), jax.random.PRNGKey(42)

    seeds = [0, 1, 42, -1, -42, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 5, 2**40 + 7, -(2**40)]
    out["key_int"] = {s: u32(jax.random.PRNGKey(s)) for s in seeds}
    out["key_typed"] = {
        (dt, s): u32(jax.random.PRNGKey(np.array(s, dt)))
        for dt, s in [("int32", -1), ("int32", -42), ("uint32", 2**32 - 1), ("int8", -1)]
    }
    out["split"] = {
        ("0", 2): u32(jax.random.split(k0, 2)),
        ("0", 3): u32(jax.random.split(k0, 3)),
        ("42", 2): u32(jax.random.split(k42, 2)),
        ("42", 3): u32(jax.random.split(k42, 3)),
        ("split(0)[1]", 3): u32(jax.random.split(jax.random.split(k0)[1], 3)),
        ("split(42, 3)[2]", 2): u32(jax.random.split(jax.random.split(k42, 3)[2], 2)),
    }
    out["fold_in"] = {
        ("0", d): u32(jax.random.fold_in(k0, np.uint32(d))) for d in [0, 1, 7, 2**31, 2**32 - 1]
    }
    out["fold_in"][("42", 5)] = u32(jax.random.fold_in(k42, 5))
    out["fold_in_int32_minus_1"] = u32(jax.random.fold_in(k0, np.int32(-1)))
    out["bits"] = {
        (32, (8,)): u32(jax.random.bits(k0, (8,), "uint32")),
        (32, (2, 3)): u32(jax.random.bits(k42, (2, 3), "uint32")),
        (16, (5,)): u32(jax.random.bits(k0, (5,), "uint16")),
        (8, (5,)): u32(jax.random.bits(k0, (5,), "uint8")),
    }
    out["uniform"] = {
        ("float32", 0.0, 1.0): floats(jax.random.uniform(k0, (8,), "float32")),
        ("float32", -2.0, 3.0): floats(jax.random.uniform(k42, (2, 3), "float32", -2.0, 3.0)),
        ("float16", 0.0, 1.0): floats(jax.random.uniform(k0, (8,), "float16")),
        ("float16", -2.0, 3.0): floats(jax.random.uniform(k42, (2, 3), "float16", -2.0, 3.0)),
    }
    out["bernoulli"] = {
        p: bools(jax.random.bernoulli(k0, p, (4, 8))) for p in [0.0, 0.1, 0.5, 0.9, 1.0]
    }
    out["normal"] = {
        "float32": floats(jax.random.normal(k0, (16,), "float32")),
        "float32 (3, 5) key 42": floats(jax.random.normal(k42, (3, 5), "float32")),
        "float16": floats(jax.random.normal(k0, (8,), "float16")),
    }
    drop = {}
    for dt, shape, rate in [
        ("float32", (3, 4), 0.1),
        ("float32", (3, 4), 0.5),
        ("float32", (1,), 0.5),
        ("float16", (3, 4), 0.1),
    ]:
        x = dropout_input(shape, dt)
        y = nn.Dropout(rate=rate).apply({}, jnp.asarray(x), deterministic=False, rng=k42)
        drop[(dt, shape, rate)] = floats(y)
    out["dropout_key42"] = drop

    jax.config.update("jax_enable_x64", True)
    out["key_int64"] = {
        s: u32(jax.random.PRNGKey(s)) for s in [-1, 2**32 + 5, 2**40 + 7, -(2**40), 2**63 - 1]
    }
    out["key_uint64_max"] = u32(jax.random.PRNGKey(np.uint64(2**64 - 1)))
    out["bits64"] = [int(v) for v in np.asarray(jax.random.bits(k0, (4,), "uint64"))]
    out["uniform64"] = {
        (0.0, 1.0): floats(jax.random.uniform(k0, (6,), "float64")),
        (-1.5, 0.25): floats(jax.random.uniform(k42, (6,), "float64", -1.5, 0.25)),
    }
    out["normal64"] = floats(jax.random.normal(k0, (6,), "float64"))

    for name, value in out.items():
        print(f"{name.upper()} = {value!r}")


if __name__ == "__main__":
    main()
