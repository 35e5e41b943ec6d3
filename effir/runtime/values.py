"""The values effir programs compute with, as the reference interpreter and
the operators' numpy rules represent them.

- a tensor is a ``numpy.ndarray`` (a scalar is a 0-d array, never a numpy scalar);
- a tuple is a Python ``tuple``;
- a PRNG key is a ``PRNGKey`` (two uint32 words, as JAX's raw threefry keys);
- a reference cell is a ``RefValue``; cells alias by identity;
- an ADT value is an ``ADTValue`` (constructor name and fields);
- functions are the interpreter's closures (``effir.backends.interpreter``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device_array import DeviceArray


class PRNGKey:
    """A threefry2x32 key: two uint32 words, immutable."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        array = np.array(data, dtype=np.uint32).reshape(2)
        array.setflags(write=False)
        self.data = array

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PRNGKey) and bool(np.array_equal(self.data, other.data))

    def __hash__(self) -> int:
        return hash((int(self.data[0]), int(self.data[1])))

    def __repr__(self) -> str:
        return f"PRNGKey([{int(self.data[0])}, {int(self.data[1])}])"


class RefValue:
    """A mutable reference cell (``ref(v)``); two references alias when they
    are the same object."""

    __slots__ = ("value", "name")

    def __init__(self, value: Any, name: str | None = None) -> None:
        self.value = value
        self.name = name  # the global cell's name, for messages

    def __repr__(self) -> str:
        label = f"@{self.name} " if self.name else ""
        return f"RefValue({label}{self.value!r})"


class ADTValue:
    """A value of an algebraic data type: ``Cons(1, Nil)``."""

    __slots__ = ("constructor", "fields")

    def __init__(self, constructor: str, fields: tuple[Any, ...] = ()) -> None:
        self.constructor = constructor
        self.fields = tuple(fields)

    def __repr__(self) -> str:
        if not self.fields:
            return self.constructor
        return f"{self.constructor}({', '.join(repr(f) for f in self.fields)})"


_ADT_CLASSES: dict[tuple[str, str], type[ADTValue]] = {}
"""The Python class of each ``(type, constructor)`` a frontend declared
(``@effir.adt``): the values effir computes are made as instances of it,
so that Python's ``match`` and attribute access work on them."""


def register_adt_class(adt: str, constructor: str, cls: type[ADTValue]) -> None:
    """Make the values of ``adt``'s ``constructor`` instances of ``cls`` (a
    subclass of ``ADTValue`` adding nothing but methods); a later
    declaration of the same names replaces an earlier one."""
    _ADT_CLASSES[(adt, constructor)] = cls


def adt_value(adt: str, constructor: str, fields: tuple[Any, ...]) -> ADTValue:
    """The value ``constructor(*fields)`` of the type ``adt``: an instance of
    the class declared for it, if any, else a plain ``ADTValue``."""
    cls = _ADT_CLASSES.get((adt, constructor))
    if cls is None:
        return ADTValue(constructor, fields)
    value = object.__new__(cls)
    ADTValue.__init__(value, constructor, fields)
    return value


def as_tensor(value: Any) -> np.ndarray:
    """``value`` as an ndarray (numpy scalars become 0-d arrays)."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def type_text(array: Any) -> str:
    """An array's type as effir writes it (a ``DeviceArray``'s with its device)."""
    dims = ", ".join(str(d) for d in array.shape)
    text = f"Tensor[({dims}), {array.dtype}]" if array.shape else str(array.dtype)
    return f"{text} on {array.device}" if isinstance(array, DeviceArray) else text


def describe_value(value: Any, limit: int = 200, depth: int = 6) -> str:
    """A short, readable description of a value for messages and printing
    (nesting deeper than ``depth`` shows as ``...``, so a long list is safe)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return f"{value.dtype} {value[()]!s}"  # shortest text that reads back in its dtype
    if isinstance(value, np.ndarray):
        body = np.array2string(value, threshold=20, edgeitems=3, separator=", ")
        body = " ".join(body.split())
        if len(body) > limit:
            body = body[: limit - 3] + "..."
        return f"{type_text(value)} {body}"
    if depth <= 0 and isinstance(value, tuple | ADTValue):
        return "..."
    if isinstance(value, tuple):
        parts = [describe_value(v, limit, depth - 1) for v in value[:8]]
        if len(value) > 8:
            parts.append("...")
        return "(" + ", ".join(parts) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, ADTValue):
        if not value.fields:
            return value.constructor
        parts = [describe_value(v, limit, depth - 1) for v in value.fields]
        return value.constructor + "(" + ", ".join(parts) + ")"
    return repr(value)
