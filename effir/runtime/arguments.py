"""The input contract: what a program accepts as arguments, the same for
``effir.interpret``, a compiled module and a loaded artifact
(docs/semantics.md, "Calling a program").

One module so that the three agree by construction: a value one of them
accepts, the others accept and convert the same way; a value one refuses,
the others refuse with the same ``ArgumentError`` and message.

- Arguments bind positionally, then by parameter name (``x=...``), as a
  Python call binds them.
- A tensor parameter takes a numpy array or scalar of its dtype; anything
  that exports ``__dlpack__`` or ``__array__`` (JAX and PyTorch arrays on
  the CPU), read without a copy where possible and then held to the same
  dtype rule; Python scalars and (nested) lists, converted to the declared
  dtype when no value changes kind (a float is never truncated to an int).
  A compiled module for a GPU also takes arrays in that GPU's memory as
  they are (``on_device``: the backend's ``DeviceArray``, checked by shape
  and dtype, effir/runtime/device_array.py).
- A key parameter takes a ``PRNGKey`` or two ``uint32`` words.
- A tuple parameter takes a tuple or a list of the right length.
- An ADT parameter takes a value of one of its type's constructors (an
  ``ADTValue``: ``Tree.Leaf(x)`` built in Python), its fields converted and
  checked as parameters of their types are, when the caller knows the
  type's definition (``adts``: the module's, a compiled signature's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ir.diagnostics import ArgumentError, Span
from ..ir.expr import TypeData
from ..ir.printer import astext
from ..ir.program import missing_entry
from ..ir.types import ANY, KeyType, TensorType, TupleType, Type, TypeCall, TypeVar
from .device_array import DeviceArray
from .values import ADTValue, PRNGKey, adt_value, describe_value, type_text

_PYTHON_VALUES = (bool, int, float, list, tuple)

OnDevice = Callable[[Any, str], DeviceArray | None]
"""How a compiled module takes an argument on its device: the argument and
where it is given (for messages) to a ``DeviceArray`` holding its memory,
None for a value on the host (the numpy route), ArgumentError for one on
another device."""


def bind_arguments(
    fn: str, names: Sequence[str], args: Sequence[Any], named: Mapping[str, Any]
) -> tuple[Any, ...]:
    """``args`` then ``named`` bound to the parameters ``names`` of ``fn``,
    in parameter order; ArgumentError as Python's call binding would raise."""
    if not named:
        if len(args) != len(names):
            raise ArgumentError(f"{fn} takes {len(names)} argument(s), got {len(args)}")
        return tuple(args)
    if len(args) > len(names):
        raise ArgumentError(f"{fn} takes {len(names)} argument(s), got {len(args)}")
    bound: dict[str, Any] = dict(zip(names, args, strict=False))
    for name, value in named.items():
        if name not in names:
            known = ", ".join(names) or "none"
            raise ArgumentError(f"{fn} has no parameter named {name!r} (parameters: {known})")
        if name in bound:
            raise ArgumentError(f"{fn} got two values for parameter {name!r}")
        bound[name] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise ArgumentError(f"{fn} is missing the argument(s) {', '.join(missing)}")
    return tuple(bound[n] for n in names)


def unknown_entry(name: str, known: Iterable[str]) -> ArgumentError:
    """The error of a call of an entry the program does not have: one
    class and wording for the interpreter, a compiled module and a loaded
    artifact, each naming the entries it can run and how to pick one."""
    return ArgumentError(missing_entry(known, name))


def convert_argument(
    value: Any,
    t: Type | None,
    where: str,
    adts: Mapping[str, TypeData] | None = None,
    on_device: OnDevice | None = None,
) -> Any:
    """``value`` as the program holds a value of type ``t``: numpy arrays
    for tensors (from foreign arrays and Python values; ``DeviceArray``\\ s
    for arrays ``on_device`` takes where they are), ``PRNGKey`` for keys,
    tuples for tuples, ADT values with their fields converted (types in
    ``adts``). Types it does not constrain (functions, references, ADTs of
    unknown definition) pass through; ``check_argument`` checks the rest."""
    if t is None:
        return value
    # Iterative over nested tuple and ADT types (a list is as deep as it
    # is long): a post-order rebuild.
    results: list[Any] = []
    work: list[tuple[Any, Any, str, Any]] = [(value, t, where, None)]
    while work:
        v, ty, at, rebuilt = work.pop()
        if rebuilt is not None:  # every field of this value is converted: pop them
            n = len(rebuilt[1])
            fields = tuple(results[len(results) - n :]) if n else ()
            del results[len(results) - n :]
            results.append(fields if rebuilt[0] is None else adt_value(*rebuilt[0], fields))
        elif isinstance(ty, TypeCall) and adts and ty.func.name in adts:
            inputs = _constructor_fields(v, ty, adts, at)
            work.append((v, ty, at, ((ty.func.name, v.constructor), inputs)))
            work.extend(
                (x, f, f"{at}, field {i} of {v.constructor}", None)
                for i, (x, f) in reversed(list(enumerate(zip(v.fields, inputs, strict=True))))
            )
        elif isinstance(ty, TupleType):
            if not isinstance(v, tuple | list) or len(v) != len(ty.fields):
                raise ArgumentError(f"{at} expects {astext(ty)}, got {_describe(v)}")
            work.append((v, ty, at, (None, ty.fields)))
            work.extend(
                (x, f, f"{at}.{i}", None)
                for i, (x, f) in reversed(list(enumerate(zip(v, ty.fields, strict=True))))
            )
        elif isinstance(ty, TensorType):
            kept = on_device(v, at) if on_device is not None else None
            results.append(kept if kept is not None else as_array(v, ty.dtype, at))
        elif isinstance(ty, KeyType):
            results.append(as_key(v, at))
        else:
            results.append(v)
    return results[0]


def as_array(value: Any, dtype: str, where: str) -> np.ndarray:
    """A tensor argument as a numpy array (``dtype`` is the declared one:
    Python values are converted to it, arrays must already have it)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, _PYTHON_VALUES):
        return _from_python(value, np.dtype(dtype), where)
    # A foreign array: its library's own errors (of any type) are reported
    # as the argument's, never passed on.
    try:
        exports_dlpack = hasattr(value, "__dlpack__")
    except Exception:
        exports_dlpack = False
    if exports_dlpack:
        try:
            return np.from_dlpack(value)
        except Exception:
            pass  # on another device, or not readable as is: try __array__
    try:
        has_array = hasattr(value, "__array__")
    except Exception:
        has_array = False
    if has_array:
        try:
            return np.asarray(value)
        except Exception as err:
            raise ArgumentError(
                f"{where}: a {type(value).__name__} that cannot be read as an array on the "
                f"CPU ({type(err).__name__}); {_unreadable_fix(value)}"
            ) from None
    raise ArgumentError(f"{where} expects a {dtype} tensor, got {_describe(value)}")


def _unreadable_fix(value: Any) -> str:
    """What makes a foreign array readable: one that records gradients
    (PyTorch's ``requires_grad``) needs ``.detach()``, one on a device
    ``.cpu()``."""
    try:
        grad = bool(getattr(value, "requires_grad", False))
        device = str(getattr(value, "device", "cpu"))
    except Exception:
        grad, device = False, "cpu"
    fixes = []
    if grad:
        fixes.append("it records gradients: pass x.detach()")
    if not device.startswith("cpu"):
        fixes.append(f"it is on {device}: move it to the CPU (x.cpu())")
    return "; ".join(fixes) or "convert it to a numpy array first (np.asarray(x))"


def _from_python(value: Any, target: np.dtype, where: str) -> np.ndarray:
    """Python scalars and (nested) lists as an array of the declared dtype,
    refused when a value would change: a float truncated to an int, a
    number made a bool, an int out of the dtype's range, a finite float
    that overflows."""
    try:
        array = np.asarray(value)
    except Exception:  # ragged, or elements that are not numbers
        raise ArgumentError(
            f"{where} expects a {target} tensor, got a ragged list or one of other values"
        ) from None
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise ArgumentError(f"{where} expects a {target} tensor, got {_describe(value)}")
    if (array.dtype.kind == "f" and target.kind != "f") or (
        array.dtype.kind in "iuf" and target.kind == "b"
    ):
        raise ArgumentError(f"{where} expects {target}, got {_describe(value)}")
    with np.errstate(all="ignore"):
        converted = array.astype(target)
        changed = (
            not np.array_equal(converted.astype(array.dtype), array)
            if target.kind in "iu"
            else bool(np.any(np.isinf(converted) & np.isfinite(array)))
        )
    if changed:
        raise ArgumentError(f"{where} expects {target}, got a value out of its range")
    return converted


def as_key(value: Any, where: str) -> PRNGKey:
    """A key argument: a ``PRNGKey``, or its two ``uint32`` words."""
    if isinstance(value, PRNGKey):
        return value
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "__array__"):
        array = as_array(value, "uint32", where)
        if array.shape == (2,) and array.dtype == np.uint32:
            return PRNGKey(array)
    raise ArgumentError(f"{where} expects a Key (random.key(...)), got {_describe(value)}")


_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """``str(dtype)``, remembered: numpy builds the name anew each time, a
    few microseconds of every compiled call's fixed cost."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def check_argument(
    value: Any,
    t: Type,
    dims: dict[str, int],
    where: str,
    span: Span | None = None,
    adts: Mapping[str, TypeData] | None = None,
) -> None:
    """The run-time check of a parameter's type: dtype, rank, static sizes,
    and one size per symbolic dimension across the call (``dims``); an ADT
    value's fields too, when its type's definition is in ``adts``."""
    stack = [(value, t, where)]
    while stack:
        v, ty, at = stack.pop()
        if isinstance(ty, TypeCall) and adts and ty.func.name in adts:
            inputs = _constructor_fields(v, ty, adts, at, span)
            stack.extend(
                (x, f, f"{at}, field {i} of {v.constructor}")
                for i, (x, f) in enumerate(zip(v.fields, inputs, strict=True))
            )
            continue
        if isinstance(ty, TensorType):
            if isinstance(v, DeviceArray):  # on the device: its shape and dtype are read
                dtype = v.dtype
            elif isinstance(v, np.ndarray):
                dtype = _dtype_name(v.dtype)
            else:
                raise ArgumentError(f"{at} expects a tensor, got {_describe(v)}", span)
            if dtype != ty.dtype or v.ndim != len(ty.shape):
                raise ArgumentError(f"{at} expects {astext(ty)}, got {type_text(v)}", span)
            for size, dim in zip(v.shape, ty.shape, strict=True):
                if dim == ANY:
                    continue
                ok = size == dim if isinstance(dim, int) else dims.setdefault(dim, size) == size
                if not ok:
                    raise ArgumentError(
                        f"shape check failed: {at} expects {astext(ty)}, got shape "
                        f"{tuple(v.shape)}"
                        + (f" (with {dim} = {dims[dim]})" if isinstance(dim, str) else ""),
                        span,
                    )
        elif isinstance(ty, TupleType):
            if not isinstance(v, tuple) or len(v) != len(ty.fields):
                raise ArgumentError(f"{at} expects {astext(ty)}, got {_describe(v)}", span)
            stack.extend(
                (x, f, f"{at}.{i}") for i, (x, f) in enumerate(zip(v, ty.fields, strict=True))
            )
        elif isinstance(ty, KeyType) and not isinstance(v, PRNGKey):
            raise ArgumentError(f"{at} expects a Key, got {_describe(v)}", span)


def _constructor_fields(
    value: Any, t: TypeCall, adts: Mapping[str, TypeData], where: str, span: Span | None = None
) -> tuple[Type, ...]:
    """The field types of ``value``'s constructor in the ADT type ``t``;
    ArgumentError when ``value`` is not a value of ``t``."""
    data = adts[t.func.name]
    if not isinstance(value, ADTValue):
        raise ArgumentError(f"{where} expects {astext(t)}, got {_describe(value)}", span)
    for ctor in data.constructors:
        if ctor.name == value.constructor:
            if len(value.fields) != len(ctor.inputs):
                raise ArgumentError(
                    f"{where} expects {astext(t)}: {ctor.name} has {len(ctor.inputs)} field(s), "
                    f"got {len(value.fields)}",
                    span,
                )
            return tuple(instantiate(f, data, t) for f in ctor.inputs)
    known = ", ".join(c.name for c in data.constructors)
    raise ArgumentError(
        f"{where} expects {astext(t)} (made by {known}), got a value of {value.constructor}",
        span,
    )


def instantiate(field: Type, data: TypeData, t: TypeCall) -> Type:
    """A constructor's field type ``field`` in ``t``: the type's parameters
    (by name) replaced by ``t``'s arguments. Recursive in the nesting of
    the type as written."""
    names = {p.name: a for p, a in zip(data.type_params, t.args, strict=False)}
    if not names:
        return field

    def sub(ty: Type) -> Type:
        if isinstance(ty, TypeVar):
            return names.get(ty.name, ty)
        if isinstance(ty, TupleType):
            return TupleType(tuple(sub(f) for f in ty.fields))
        if isinstance(ty, TypeCall):
            return TypeCall(ty.func, tuple(sub(a) for a in ty.args))
        return ty  # a tensor, a key; functions and references are never given

    return sub(field)


def _describe(value: Any) -> str:
    """A short description: a foreign array by its type, shape and dtype,
    never its whole contents."""
    if isinstance(value, np.ndarray | DeviceArray):
        return type_text(value)
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)} value(s)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    if isinstance(value, bool | int | float | np.generic | PRNGKey):
        return describe_value(value, limit=60)
    try:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is not None and dtype is not None:
            return f"a {type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    except Exception:  # a foreign object whose attributes fail
        pass
    return f"a {type(value).__name__}"


def check_call_options(entry: Any, state: Any, sink: Any, state_type: type) -> None:
    """The keyword options of a call (``entry``, ``state``, ``sink``), which
    a parameter of the same name cannot be given by: it is passed by
    position (a mistake here would otherwise surface deep inside the call)."""
    if entry is not None and not isinstance(entry, str):
        raise ArgumentError(
            f"entry= names the function to run, got {_describe(entry)} (a parameter named "
            "entry is passed by position)"
        )
    if state is not None and not isinstance(state, state_type):
        raise ArgumentError(
            f"state= must be an effir.State, got {_describe(state)} (a parameter named state "
            "is passed by position)"
        )
    if sink is not None and not callable(sink):
        raise ArgumentError(
            f"sink= must be a function (label, value), got {_describe(sink)} (a parameter "
            "named sink is passed by position)"
        )
