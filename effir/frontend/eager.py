"""Eager runs that compute what the program computes: a scripted or traced
function called on numpy arrays runs its Python, and the arrays it sees are
``EagerArray``s, numpy arrays whose numpy functions and operators are the
effir operators the shared table names (numpy_spellings.py), run by the
operators' numpy rules (the interpreter's). So ``np.argmax(x)`` is int32
eagerly as compiled, ``x * n`` of float32 and int32 is refused with the
same hint as when scripted (promotion.py), and ``i * x`` with a Python
counter is float32 in both. numpy outside the table runs as numpy.

The scope is the call: arguments are wrapped on the way in and results
unwrapped on the way out, so the caller never holds an ``EagerArray``;
the bodies of eager ``effir.foreach``/``while_loop``/``cond`` run in it too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

_LOCAL = threading.local()


Converts = Callable[[Any, Any, Any], bool]
Convert = Callable[[Any, Any, Any], Any]
_SPELLINGS: list[tuple[Converts, Convert]] = []
"""The numpy spellings of effir operators: whether a numpy call
``(fn, args, kwargs)`` is one, and that call run as the operator.
Registered by numpy_spellings.py, which builds on the builder that runs
eager code with this module; ``effir.frontend`` imports it, so it is there
before any eager run."""


def register_spellings(converts: Converts, convert: Convert) -> None:
    """Make the numpy calls ``converts`` answers for the effir operators on
    ``EagerArray``s; registering again replaces them."""
    _SPELLINGS[:] = [(converts, convert)]


class EagerArray(np.ndarray):
    """A numpy array inside an eager run (see the module's docstring)."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        converts, convert = _SPELLINGS[0]
        if method == "__call__" and converts(ufunc, inputs, kwargs):
            # numpy hands a scalar operand (``np.float64(0.5) > x``) over as a 0-d
            # array: it is the scalar, weak as when scripted (promotion.py).
            inputs = tuple(i[()] if type(i) is np.ndarray and i.ndim == 0 else i for i in inputs)
            return wrap(convert(ufunc, inputs, kwargs))
        return wrap(getattr(ufunc, method)(*unwrap(inputs), **unwrap(kwargs)))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        converts, convert = _SPELLINGS[0]
        if converts(func, args, kwargs) and func not in (np.array, np.asarray):
            return wrap(convert(func, args, kwargs))
        return wrap(func(*unwrap(args), **unwrap(kwargs)))

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __str__(self) -> str:
        return str(self.view(np.ndarray))


def active() -> bool:
    """Whether an eager run of a scripted or traced function is going on."""
    return getattr(_LOCAL, "depth", 0) > 0


def wrap(value: Any) -> Any:
    """``value`` with its numpy arrays (tuples and lists walked) as ``EagerArray``s."""
    if isinstance(value, EagerArray):
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value.view(EagerArray)
    if isinstance(value, np.generic):
        return np.asarray(value).view(EagerArray)
    if isinstance(value, tuple | list):
        return type(value)(wrap(v) for v in value)
    if isinstance(value, dict):
        return {k: wrap(v) for k, v in value.items()}
    return value


def unwrap(value: Any) -> Any:
    """``value`` with its ``EagerArray``s as plain numpy arrays."""
    if isinstance(value, EagerArray):
        return value.view(np.ndarray)
    if isinstance(value, tuple | list):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


def run(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any] | None = None) -> Any:
    """``fn(*args, **kwargs)`` as an eager run: its arrays ``EagerArray``s,
    the result plain numpy once the outermost run returns."""
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        result = fn(*wrap(tuple(args)), **wrap(kwargs or {}))
    finally:
        _LOCAL.depth -= 1
    return result if active() else unwrap(result)


def scoped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run as an eager run (a loop body, a branch)."""
    return lambda *args: run(fn, args)
