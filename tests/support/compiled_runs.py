"""Helpers first written for tests/backends/tvm/test_compile.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import effir
from effir.backends.tvm.driver.compile import compile as compile_module
from effir.runtime.values import PRNGKey

HEADER = '#[version = "0.0.5"]\n'


EXAMPLES = Path(__file__).parents[2] / "examples"


def parse(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="compile.effir"))


def assert_close(out: Any, ref: Any) -> None:
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert_close(o, r)
    elif isinstance(ref, PRNGKey):
        assert isinstance(out, PRNGKey) and np.array_equal(out.data, ref.data)
    else:
        out, ref = np.asarray(out), np.asarray(ref)
        assert out.dtype == ref.dtype and out.shape == ref.shape
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(out, ref)


def _recorder(into: list[tuple[str, Any]]) -> Any:
    return lambda label, value: into.append((label, value))


def assert_same_run(module: effir.IRModule, *args: Any, steps: int = 1) -> Any:
    """The compiled program and the interpreter, ``steps`` calls each from
    one State: results, final state and prints agree."""
    compiled = compile_module(module)
    state, ref_state = effir.State(module), effir.State(module)
    for _ in range(steps):
        printed: list[tuple[str, Any]] = []
        ref_printed: list[tuple[str, Any]] = []
        out = compiled(*args, state=state, sink=_recorder(printed))
        ref = effir.interpret(module, *args, state=ref_state, sink=_recorder(ref_printed))
        assert_close(out, ref)
        for name in module.cells:
            assert_close(state[name], ref_state[name])
        assert [label for label, _ in printed] == [label for label, _ in ref_printed]
        for (_, got), (_, want) in zip(printed, ref_printed, strict=True):
            assert_close(got, np.asarray(want))
    return compiled


def gru_lm(t: int, b: int) -> tuple[effir.IRModule, list[np.ndarray]]:
    """examples/gru_lm.effir and random arguments for ``t`` steps of a batch
    of ``b`` tokens."""
    module = effir.check(effir.parse((EXAMPLES / "gru_lm.effir").read_text()))
    rng = np.random.default_rng(0)
    args = []
    for param in module["main"].params:
        ty = param.type_annotation
        shape = tuple({"t": t, "b": b}.get(d, d) for d in ty.shape)
        if ty.dtype == "int32":
            args.append(rng.integers(0, 1000, shape).astype(np.int32))
        else:
            args.append((0.1 * rng.standard_normal(shape)).astype(np.float32))
    return module, args
