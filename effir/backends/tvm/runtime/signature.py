"""What a compiled entry takes and gives, without the IR.

A compiled program is called from Python (``CompiledModule``), reloaded
from an exported artifact (``effir.load``, which must not parse effir text)
and run from C++. All three need the same facts about the entry: its
parameters' shapes and dtypes (to check arguments and bind symbolic
dimensions), which cells it passes (state passing's ``state_in`` and
``state_out``) and the structure of its result. ``Signature`` holds them
in plain data that round-trips through JSON, and this module converts
values between numpy (as the interpreter gives them) and the VM's tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from ....ir.diagnostics import Span
from ....ir.printer import astext
from ....ir.types import ANY, DTYPES, KeyType, TensorType, TupleType, Type
from ....ops.effects import WORLD
from ....runtime.arguments import bind_arguments, check_argument, convert_argument
from ....runtime.values import PRNGKey
from ...state import check_cells
from .errors import BackendError

Dims = dict[str, int]


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int | str, ...]  # an int, a symbolic name, or "?"
    dtype: str

    def text(self) -> str:
        return f"Tensor[({', '.join(str(d) for d in self.shape)}), {self.dtype}]"


@dataclass(frozen=True)
class KeySpec:
    def text(self) -> str:
        return "Key"


@dataclass(frozen=True)
class TupleSpec:
    fields: tuple[Spec, ...]

    def text(self) -> str:
        return "(" + ", ".join(f.text() for f in self.fields) + ")"


Spec = TensorSpec | KeySpec | TupleSpec


def type_of(spec: Spec) -> Type:
    """The effir type of values of ``spec`` (the input contract,
    effir/runtime/arguments.py, checks values against types)."""
    if isinstance(spec, TensorSpec):
        return TensorType(spec.shape, spec.dtype)
    if isinstance(spec, KeySpec):
        return KeyType()
    return TupleType(tuple(type_of(f) for f in spec.fields))


@functools.lru_cache(maxsize=4096)
def _type_of_spec(spec: Spec) -> Type:
    """``type_of``, made once per spec (specs are frozen): every call checks
    its arguments against these types."""
    return type_of(spec)


def spec_of(t: Type) -> Spec:
    """The spec of values of effir type ``t``."""
    if isinstance(t, TensorType):
        return TensorSpec(tuple(t.shape), t.dtype)
    if isinstance(t, KeyType):
        return KeySpec()
    if isinstance(t, TupleType):
        return TupleSpec(tuple(spec_of(f) for f in t.fields))
    raise BackendError(f"compiled code takes and gives tensors, keys and tuples, not {astext(t)}")


# -------------------------------------------------------------------- JSON
def spec_to_json(spec: Spec) -> Any:
    if isinstance(spec, TensorSpec):
        return {"tensor": list(spec.shape), "dtype": spec.dtype}
    if isinstance(spec, KeySpec):
        return {"key": True}
    return {"tuple": [spec_to_json(f) for f in spec.fields]}


def spec_from_json(data: Any, where: str) -> Spec:
    """A spec read back, or ValueError saying what is malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a type must be an object")
    if "tensor" in data:
        shape, dtype = data["tensor"], data.get("dtype")
        if not isinstance(shape, list) or not isinstance(dtype, str):
            raise ValueError(f"{where}: a tensor needs a shape list and a dtype")
        for d in shape:
            size = type(d) is int and 0 <= d < 1 << 63
            if not (size or isinstance(d, str) and d.isidentifier() or d == ANY):
                raise ValueError(f"{where}: bad dimension {d!r}")
        if dtype not in DTYPES:
            raise ValueError(f"{where}: unknown dtype {dtype!r}")
        return TensorSpec(tuple(shape), dtype)
    if data.get("key") is True:
        return KeySpec()
    if isinstance(data.get("tuple"), list):
        return TupleSpec(tuple(spec_from_json(f, where) for f in data["tuple"]))
    raise ValueError(f"{where}: unknown type {data!r}")


# --------------------------------------------------------------- signature
@dataclass(frozen=True)
class Signature:
    """An entry: its parameters (the user's, then the cells of
    ``state_in``), the cells it passes, and its result (with state passing,
    ``(result, new state...)``)."""

    params: tuple[tuple[str, Spec], ...]
    state_in: tuple[str, ...]
    state_out: tuple[str, ...]
    result: Spec

    @property
    def inputs(self) -> int:
        """How many arguments the user gives."""
        return len(self.params) - len(self.state_in)

    def to_json(self) -> Any:
        return {
            "params": [{"name": n, "type": spec_to_json(s)} for n, s in self.params],
            "state_in": list(self.state_in),
            "state_out": list(self.state_out),
            "result": spec_to_json(self.result),
        }

    @staticmethod
    def from_json(data: Any, where: str) -> Signature:
        try:
            params = tuple(
                (str(p["name"]), spec_from_json(p["type"], f"{where}, parameter {p['name']}"))
                for p in data["params"]
            )
            state_in = tuple(str(c) for c in data["state_in"])
            state_out = tuple(str(c) for c in data["state_out"])
            result = spec_from_json(data["result"], f"{where}, result")
        except (KeyError, TypeError) as err:
            raise ValueError(f"{where}: missing or malformed field {err}") from None
        return Signature(params, state_in, state_out, result)

    def bind(
        self, args: tuple[Any, ...], named: dict[str, Any] | None = None, entry: str = "main"
    ) -> tuple[tuple[Any, ...], Dims]:
        """The user's arguments (positional, then by name) converted and
        checked as the interpreter does (effir/runtime/arguments.py), and
        the sizes they give the symbolic dimensions; ArgumentError for an
        argument that does not fit its parameter."""
        user = self.params[: self.inputs]
        bound = bind_arguments(f"@{entry}", [n for n, _ in user], args, named or {})
        dims: Dims = {}
        converted = []
        for (name, spec), arg in zip(user, bound, strict=True):
            t = _type_of_spec(spec)
            # The interpreter's words: conversion is of the argument, the
            # type check of the parameter (effir/backends/interpreter.py).
            value = convert_argument(arg, t, f"argument %{name} of @{entry}")
            check_argument(value, t, dims, f"parameter %{name} of @{entry}")
            converted.append(value)
        return tuple(converted), dims


# -------------------------------------------------------------- conversion
def to_tvm(value: Any, spec: Spec, any_alignment: bool = True) -> Any:
    """An argument as the VM takes it: tensors (zero-copy when numpy's
    array is contiguous and writable, at any address since the executable's
    functions assume only element alignment, relax/pipeline.py [RULE
    ANYALIGN]; ``any_alignment=False``, for an artifact exported before
    that, only when 64-byte aligned), keys as their ``uint32[2]`` words,
    tuples as tuples."""
    if isinstance(spec, TupleSpec):
        return tvm_ffi.convert(
            [to_tvm(v, f, any_alignment) for v, f in zip(value, spec.fields, strict=True)]
        )
    array = value.data if isinstance(value, PRNGKey) else np.asarray(value)
    flags = array.flags
    aligned = flags.aligned if any_alignment else array.ctypes.data % 64 == 0
    if flags.c_contiguous and flags.writeable and aligned and array.size:
        return tvm_ffi.from_dlpack(array)
    return tvm.runtime.tensor(np.array(array, order="C"))


def from_tvm(value: Any, spec: Spec) -> Any:
    """A VM result as the interpreter gives it: numpy arrays, keys as
    ``PRNGKey``, tuples as tuples."""
    if isinstance(spec, TupleSpec):
        return tuple(from_tvm(v, f) for v, f in zip(value, spec.fields, strict=True))
    array = np.from_dlpack(value)
    if isinstance(spec, KeySpec):
        return PRNGKey(array.copy())
    return array


def call_entry(
    function: Callable[[Dims], Any],
    signature: Signature,
    args: tuple[Any, ...],
    cells: Any,
    named: dict[str, Any] | None = None,
    entry: str = "main",
    any_alignment: bool = True,
    cell_spans: Mapping[str, Span | None] | None = None,
) -> Any:
    """Run an entry as the interpreter runs it: the cells' values (from
    ``cells``, a ``State``) follow the arguments, the new values it returns
    are written back, the user's result is returned. ``function(dims)`` is
    the VM function for the arguments' binding of the dimensions;
    ``any_alignment``: whether it takes arrays at any address (``to_tvm``).
    The cells are checked against the types the entry declares for them
    first (``check_cells``, located at ``cell_spans``)."""
    user, dims = signature.bind(args, named, entry)
    # One call at a time on one state: the lock is held from the read of
    # the cells to the write-back of their new values (effir/backends/state.py).
    with cells.transaction():
        return _run_entry(function, signature, user, dims, cells, any_alignment, cell_spans)


@functools.lru_cache(maxsize=64)
def _cell_types(signature: Signature) -> dict[str, Type]:
    """The type the entry declares for each cell it reads (made once per
    signature: every call checks its State against them)."""
    declared = signature.params[len(signature.params) - len(signature.state_in) :]
    pairs = zip(signature.state_in, declared, strict=True)
    return {cell: type_of(spec) for cell, (_, spec) in pairs if cell != WORLD}


def _run_entry(
    function: Callable[[Dims], Any],
    signature: Signature,
    user: tuple[Any, ...],
    dims: Dims,
    cells: Any,
    any_alignment: bool,
    cell_spans: Mapping[str, Span | None] | None,
) -> Any:
    check_cells(cells, _cell_types(signature), cell_spans)
    values = tuple(np.int64(0) if c == WORLD else cells[c] for c in signature.state_in)
    inputs = (*user, *values)
    run = function(dims)
    tensors = [
        to_tvm(v, spec, any_alignment)
        for v, (_, spec) in zip(inputs, signature.params, strict=True)
    ]
    result = from_tvm(run(*tensors), signature.result)
    if not signature.state_out:
        return result
    for cell, value in zip(signature.state_out, result[1:], strict=True):
        if cell != WORLD:
            cells.cells[cell].value = value
    return result[0]
