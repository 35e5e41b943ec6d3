"""What a compiled entry takes and gives, without the IR.

A compiled program is called from Python (``CompiledModule``), reloaded
from an exported artifact (``effir.load``, which must not parse effir text)
and run from C++. All three need the same facts about the entry: its
parameters' shapes and dtypes (to check arguments and bind symbolic
dimensions), which cells it passes (state passing's ``state_in`` and
``state_out``) and the structure of its result. ``Signature`` holds them
in plain data that round-trips through JSON, and this module converts
values between numpy (as the interpreter gives them) and the VM's tensors.

ADT values cross the boundary too [RULE RUNTIME-ADTARG]: the VM holds
``Cons(%h, %t)`` as the tuple of its tag and fields (relax/adts.py
[RULE LOWER-ADT]), so an argument is converted to that tuple and a result back to the
value (an instance of the class ``@effir.adt`` declared for it, as the
interpreter gives it: runtime/values.py ``adt_value``). The signature
carries the definitions of the types it names (``Signature.adts``, in the
JSON too), so a loaded artifact converts them without the program. The
conversions walk a value with a stack: a list is as deep as it is long.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm_ffi

from ....ir.expr import Constructor, TypeData
from ....ir.printer import astext
from ....ir.types import (
    ANY,
    DTYPES,
    GlobalTypeVar,
    KeyType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from ....runtime.arguments import (
    OnDevice,
    bind_arguments,
    check_argument,
    convert_argument,
    instantiate,
)
from ....runtime.values import PRNGKey, adt_value
from .errors import BackendError
from .tvm_runtime import tensor

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


@dataclass(frozen=True)
class AdtSpec:
    """A value of the algebraic data type ``name`` applied to ``args``."""

    name: str
    args: tuple[Spec, ...] = ()

    def text(self) -> str:
        shown = ", ".join(a.text() for a in self.args)
        return f"{self.name}[{shown}]" if self.args else self.name


@dataclass(frozen=True)
class ParamSpec:
    """A type parameter, in a field of a generic type's definition."""

    name: str

    def text(self) -> str:
        return self.name


Spec = TensorSpec | KeySpec | TupleSpec | AdtSpec | ParamSpec


def type_of(spec: Spec) -> Type:
    """The effir type of values of ``spec`` (the input contract,
    effir/runtime/arguments.py, checks values against types)."""
    if isinstance(spec, TensorSpec):
        return TensorType(spec.shape, spec.dtype)
    if isinstance(spec, KeySpec):
        return KeyType()
    if isinstance(spec, AdtSpec):
        return TypeCall(GlobalTypeVar(spec.name), tuple(type_of(a) for a in spec.args))
    if isinstance(spec, ParamSpec):
        return TypeVar(spec.name)
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
    if isinstance(t, TypeCall):
        return AdtSpec(t.func.name, tuple(spec_of(a) for a in t.args))
    if isinstance(t, TypeVar):
        return ParamSpec(t.name)
    raise BackendError(
        f"compiled code takes and gives tensors, keys, tuples and ADT values of these, "
        f"not {astext(t)}"
    )


def adt_defs(type_defs: Mapping[str, TypeData], specs: list[Spec]) -> tuple[TypeData, ...]:
    """The definitions of the types ``specs`` name, and of those their
    fields name; BackendError for a field a caller could not give (a
    function, a reference)."""
    found: dict[str, TypeData] = {}
    pending = list(specs)
    while pending:
        spec = pending.pop()
        if isinstance(spec, TupleSpec):
            pending += spec.fields
        elif isinstance(spec, AdtSpec):
            pending += spec.args
            if spec.name in found:
                continue
            data = type_defs.get(spec.name)
            if data is None:
                raise BackendError(f"the program does not define the type {spec.name}")
            found[spec.name] = data
            for ctor in data.constructors:
                for k, field in enumerate(ctor.inputs):
                    try:
                        pending.append(spec_of(field))
                    except BackendError:
                        raise BackendError(
                            f"compiled code takes and gives tensors, keys, tuples and ADT "
                            f"values of these: field {k} of {ctor.name} is {astext(field)}"
                        ) from None
    return tuple(found.values())


# -------------------------------------------------------------------- JSON
def spec_to_json(spec: Spec) -> Any:
    if isinstance(spec, TensorSpec):
        return {"tensor": list(spec.shape), "dtype": spec.dtype}
    if isinstance(spec, KeySpec):
        return {"key": True}
    if isinstance(spec, AdtSpec):
        return {"adt": spec.name, "args": [spec_to_json(a) for a in spec.args]}
    if isinstance(spec, ParamSpec):
        return {"param": spec.name}
    return {"tuple": [spec_to_json(f) for f in spec.fields]}


def adt_to_json(data: TypeData) -> Any:
    return {
        "name": data.name,
        "params": [p.name for p in data.type_params],
        "constructors": [
            {"name": c.name, "fields": [spec_to_json(spec_of(f)) for f in c.inputs]}
            for c in data.constructors
        ],
    }


def adt_from_json(data: Any, where: str) -> TypeData:
    """A type's definition read back, or ValueError saying what is malformed."""
    try:
        name, params, constructors = data["name"], data["params"], data["constructors"]
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(f"{where}: bad type name {name!r}")
        if not all(isinstance(p, str) and p.isidentifier() for p in params):
            raise ValueError(f"{where}: bad type parameters of {name}")
        ctors = []
        for c in constructors:
            if not (isinstance(c["name"], str) and c["name"].isidentifier()):
                raise ValueError(f"{where}: bad constructor name {c['name']!r}")
            fields = tuple(type_of(spec_from_json(f, f"{where}, {c['name']}")) for f in c["fields"])
            ctors.append(Constructor(c["name"], fields, name))
    except (KeyError, TypeError) as err:
        raise ValueError(f"{where}: missing or malformed type definition field {err}") from None
    return TypeData(name, tuple(TypeVar(p) for p in params), tuple(ctors))


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
    if isinstance(data.get("adt"), str) and isinstance(data.get("args"), list):
        if not data["adt"].isidentifier():
            raise ValueError(f"{where}: bad type name {data['adt']!r}")
        return AdtSpec(data["adt"], tuple(spec_from_json(a, where) for a in data["args"]))
    if isinstance(data.get("param"), str) and data["param"].isidentifier():
        return ParamSpec(data["param"])
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
    adts: tuple[TypeData, ...] = ()
    """The definitions of the types its parameters and result name."""

    @functools.cached_property
    def types(self) -> dict[str, TypeData]:
        """``adts`` by name (what the conversions read)."""
        return {d.name: d for d in self.adts}

    @property
    def inputs(self) -> int:
        """How many arguments the user gives."""
        return len(self.params) - len(self.state_in)

    def to_json(self) -> Any:
        data = {
            "params": [{"name": n, "type": spec_to_json(s)} for n, s in self.params],
            "state_in": list(self.state_in),
            "state_out": list(self.state_out),
            "result": spec_to_json(self.result),
        }
        if self.adts:  # absent otherwise: the manifests of programs without ADTs are unchanged
            data["adts"] = [adt_to_json(d) for d in self.adts]
        return data

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
            adts = tuple(adt_from_json(d, f"{where}, types") for d in data.get("adts", []))
        except (KeyError, TypeError) as err:
            raise ValueError(f"{where}: missing or malformed field {err}") from None
        return Signature(params, state_in, state_out, result, adts)

    def bind(
        self,
        args: tuple[Any, ...],
        named: dict[str, Any] | None = None,
        entry: str = "main",
        on_device: OnDevice | None = None,
    ) -> tuple[tuple[Any, ...], Dims]:
        """The user's arguments (positional, then by name) converted and
        checked as the interpreter does (effir/runtime/arguments.py), and
        the sizes they give the symbolic dimensions; ArgumentError for an
        argument that does not fit its parameter. ``on_device`` takes the
        arguments already on the program's device (runtime/placement.py)."""
        user = self.params[: self.inputs]
        bound = bind_arguments(f"@{entry}", [n for n, _ in user], args, named or {})
        dims: Dims = {}
        converted = []
        for (name, spec), arg in zip(user, bound, strict=True):
            t = _type_of_spec(spec)
            # The interpreter's words: conversion is of the argument, the
            # type check of the parameter (effir/backends/interpreter.py).
            value = convert_argument(arg, t, f"argument %{name} of @{entry}", self.types, on_device)
            check_argument(value, t, dims, f"parameter %{name} of @{entry}", adts=self.types)
            converted.append(value)
        for d in self.dimensions - dims.keys():
            # Named only inside an ADT value's constructor this call does not
            # use (Option[Tensor[(n)]] given None): no value of the call has
            # that size, so any binding serves; 0 is the one used.
            dims[d] = 0
        return tuple(converted), dims

    @functools.cached_property
    def dimensions(self) -> frozenset[str]:
        """The symbolic dimensions the user's parameters name."""
        found: set[str] = set()
        pending = [spec for _, spec in self.params[: self.inputs]]
        while pending:
            spec = pending.pop()
            if isinstance(spec, TensorSpec):
                found |= {d for d in spec.shape if isinstance(d, str) and d != ANY}
            elif isinstance(spec, TupleSpec):
                pending += spec.fields
            elif isinstance(spec, AdtSpec):
                pending += spec.args
        return frozenset(found)


# -------------------------------------------------------------- conversion
def to_tvm(
    value: Any,
    spec: Spec,
    any_alignment: bool = True,
    adts: Mapping[str, TypeData] | None = None,
) -> Any:
    """An argument as the VM takes it: tensors (zero-copy when numpy's
    array is contiguous and writable, at any address since the executable's
    functions assume only element alignment, relax/pipeline.py
    [RULE PIPELINE-ANYALIGN]; ``any_alignment=False``, for an artifact exported before
    that, only when 64-byte aligned), keys as their ``uint32[2]`` words,
    tuples as tuples, ADT values (their types in ``adts``) as the tuple of
    their tag and fields [RULE RUNTIME-ADTARG]. The value is one the input
    contract converted and checked (``Signature.bind``)."""
    if isinstance(spec, TensorSpec | KeySpec):
        return _tensor_to_tvm(value, any_alignment)
    # post-order over the value: its parts first, then it (a stack, no recursion)
    done: list[Any] = []
    stack: list[tuple[Any, Type, int]] = [(value, type_of(spec), -1)]
    while stack:
        v, t, parts = stack.pop()
        if parts >= 0:  # its parts are converted: the last ``parts`` of ``done``
            fields = done[len(done) - parts :]
            del done[len(done) - parts :]
            if isinstance(t, TypeCall):
                index = _constructor_index(adts, t, v.constructor)
                fields = [_tag(index), *fields]
            done.append(tvm_ffi.convert(fields))
        elif isinstance(t, TupleType):
            stack.append((v, t, len(t.fields)))
            stack.extend((x, f, -1) for x, f in reversed(list(zip(v, t.fields, strict=True))))
        elif isinstance(t, TypeCall):
            inputs = _field_types(adts, t, v.constructor)
            stack.append((v, t, len(inputs)))
            stack.extend((x, f, -1) for x, f in reversed(list(zip(v.fields, inputs, strict=True))))
        else:
            done.append(_tensor_to_tvm(v, any_alignment))
    return done[0]


def _tensor_to_tvm(value: Any, any_alignment: bool) -> Any:
    array = value.data if isinstance(value, PRNGKey) else np.asarray(value)
    flags = array.flags
    aligned = flags.aligned if any_alignment else array.ctypes.data % 64 == 0
    if flags.c_contiguous and flags.writeable and aligned and array.size:
        return tvm_ffi.from_dlpack(array)
    return tensor(array)


def from_tvm(value: Any, spec: Spec, adts: Mapping[str, TypeData] | None = None) -> Any:
    """A VM result as the interpreter gives it: numpy arrays, keys as
    ``PRNGKey``, tuples as tuples, ADT values as the interpreter makes
    them (``adts``: their types' definitions)."""
    if isinstance(spec, TensorSpec | KeySpec):
        return _tensor_from_tvm(value, spec)
    done: list[Any] = []
    stack: list[tuple[Any, Type, Any]] = [(value, type_of(spec), None)]
    while stack:
        v, t, ctor = stack.pop()
        if ctor is not None:  # its fields are converted
            n = len(ctor) if isinstance(ctor, tuple) else len(ctor.inputs)
            fields = tuple(done[len(done) - n :]) if n else ()
            del done[len(done) - n :]
            if isinstance(ctor, tuple):
                done.append(fields)
            else:
                done.append(adt_value(ctor.adt, ctor.name, fields))
        elif isinstance(t, TupleType):
            stack.append((v, t, t.fields))
            stack.extend((v[i], f, None) for i, f in reversed(list(enumerate(t.fields))))
        elif isinstance(t, TypeCall):
            data = _data(adts, t)
            made = data.constructors[int(np.from_dlpack(v[0]))]
            inputs = _instantiated(data, t, made)
            stack.append((v, t, made))
            stack.extend((v[i + 1], f, None) for i, f in reversed(list(enumerate(inputs))))
        else:
            done.append(_tensor_from_tvm(v, KeySpec() if isinstance(t, KeyType) else None))
    return done[0]


def _tensor_from_tvm(value: Any, spec: Any) -> Any:
    array = np.from_dlpack(value)
    if isinstance(spec, KeySpec):
        return PRNGKey(array.copy())
    return array


def _data(adts: Mapping[str, TypeData] | None, t: TypeCall) -> TypeData:
    data = (adts or {}).get(t.func.name)
    if data is None:
        raise BackendError(f"the signature does not define the type {t.func.name}")
    return data


def _constructor_index(adts: Mapping[str, TypeData] | None, t: TypeCall, name: str) -> int:
    return [c.name for c in _data(adts, t).constructors].index(name)


def _field_types(adts: Mapping[str, TypeData] | None, t: TypeCall, name: str) -> tuple[Type, ...]:
    data = _data(adts, t)
    return _instantiated(data, t, data.constructors[_constructor_index(adts, t, name)])


def _instantiated(data: TypeData, t: TypeCall, ctor: Constructor) -> tuple[Type, ...]:
    """``ctor``'s field types in ``t``, the type applied to its arguments."""
    return tuple(instantiate(f, data, t) for f in ctor.inputs)


def _tag(index: int) -> Any:
    """A constructor's tag as the VM holds it (relax/adts.py ``tag``)."""
    return tensor(np.array(index, dtype=np.int64))
