"""Running a program before and after a transformation and comparing
everything observable: the result, the final state of every cell and what
debug.print printed, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.types import TensorType, TupleType, Type
from effir.runtime.values import ADTValue, PRNGKey


def assert_same_value(a: Any, b: Any, path: str = "result") -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_value(x, y, f"{path}.{i}")
    elif isinstance(a, PRNGKey):
        assert isinstance(b, PRNGKey) and np.array_equal(a.data, b.data), f"{path}: {a} vs {b}"
    elif isinstance(a, ADTValue):
        assert isinstance(b, ADTValue) and a.constructor == b.constructor, f"{path}: {a} vs {b}"
        assert_same_value(tuple(a.fields), tuple(b.fields), f"{path}.{a.constructor}")
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype and x.shape == y.shape, f"{path}: {x!r} vs {y!r}"
        assert np.array_equal(x, y, equal_nan=True), f"{path}: {x!r} vs {y!r}"


def run_observed(module, args, entry: str = "main", seed: int | None = None, a2: bool = False):
    """(result, final cell values, printed values) of one run from a fresh state."""
    state = effir.State(module, seed=seed)
    printed: list[tuple[str, Any]] = []

    def sink(label: str, value: Any) -> None:
        printed.append((label, value))

    run = interpret_a2 if a2 else effir.interpret
    result = run(module, *args, entry=entry, state=state, sink=sink)
    return result, state.values(), printed


def assert_same_run(before, after, args, entry: str = "main", seed: int | None = None) -> None:
    """``after`` (run as a state-passing program when it declares state)
    behaves as ``before`` on ``args``: same result, state and output."""
    r1, s1, p1 = run_observed(before, args, entry, seed)
    r2, s2, p2 = run_observed(after, args, entry, seed, a2=True)
    assert_same_value(r1, r2)
    assert s1.keys() == s2.keys()
    for name in s1:
        assert_same_value(s1[name], s2[name], f"@{name}")
    assert [label for label, _ in p1] == [label for label, _ in p2], "printed labels differ"
    for i, ((_, v1), (_, v2)) in enumerate(zip(p1, p2, strict=True)):
        assert_same_value(v1, v2, f"print {i}")


def arguments_for(fn, rng: np.random.Generator, size: int = 3) -> tuple[Any, ...] | None:
    """Random arguments for ``fn``'s annotated parameters (tensors and
    tuples of them; symbolic dims become ``size``), or None when a
    parameter's type is not one of those."""
    args = []
    for param in fn.params:
        value = _value_of(param.type_annotation, rng, size)
        if value is None:
            return None
        args.append(value)
    return tuple(args)


def _value_of(t: Type | None, rng: np.random.Generator, size: int) -> Any:
    if isinstance(t, TupleType):
        fields = [_value_of(f, rng, size) for f in t.fields]
        return None if any(f is None for f in fields) else tuple(fields)
    if not isinstance(t, TensorType):
        return None
    shape = tuple(d if isinstance(d, int) else size for d in t.shape)
    if t.dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)  # a 0-d array, not a numpy scalar
    if t.dtype.startswith(("int", "uint")):
        return rng.integers(0, 4, shape).astype(t.dtype)
    return rng.standard_normal(shape).astype(t.dtype)
