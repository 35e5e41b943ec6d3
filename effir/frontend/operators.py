"""Python operators on effir expressions: ``x + y``, ``x @ w``, ``-x``,
``x < y``, ``t[0]``, ``f(x)``, unpacking ``a, b = t``.

They are installed on ``Expr`` when the frontend is imported, with
numpy's dispatch protocols: ``np.tanh(x)``, ``np.sum(x, axis=0)``,
``ndarray + x`` on an expression are the operators the shared table says
(numpy_spellings.py, the one ``@effir.script`` converts with), and a numpy
function outside it is refused at the user's line, naming the ``effir.op``
function to write.

``==`` and ``!=`` stay identity (nodes compare by identity, as the IR's
algorithms need), except in user code while a function is being built,
where they are refused naming ``effir.op.equal``: the Python bool would
bake one branch of an ``effir.cond`` into the program. A Python
``if``/``while`` on a value being traced is refused with a located error
naming ``effir.cond``/``effir.while_loop``.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from typing import Any

from ..ir.diagnostics import FrontendError
from ..ir.expr import Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem
from ..ir.types import TensorType, TupleType
from . import numpy_spellings
from .builder import apply_op, building, call, type_hint
from .spans import PACKAGE, caller_span, current_span

_LOCAL = threading.local()


def tracing() -> bool:
    """Whether a Python truth test of an expression must be refused: while
    tracing, and whenever a function is being built (a Python ``if`` in a
    helper called from scripted code or a ``mb.function`` block too)."""
    return getattr(_LOCAL, "tracing", 0) > 0 or building()


class tracing_scope:
    """Inside, a Python truth test of an expression is an error."""

    def __enter__(self) -> None:
        _LOCAL.tracing = getattr(_LOCAL, "tracing", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _LOCAL.tracing -= 1


def _binary(name: str, reflected: bool = False):
    def method(self: Expr, other: Any) -> Any:
        return apply_op(name, (other, self) if reflected else (self, other), {})

    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _neg(self: Expr) -> Any:
    return apply_op("negative", (self,), {})


def _pos(self: Expr) -> Any:
    return self


def _getitem(self: Expr, index: Any) -> Any:
    """``t[i]`` on a tuple (a projection); on a tensor, ``x[i]`` takes
    element ``i`` of the leading axis and ``x[a:b]`` slices it."""
    t = type_hint(self)
    if isinstance(index, int) and not isinstance(t, TensorType):
        if isinstance(self, Tuple):
            return self.fields[index]
        if isinstance(t, TupleType):
            if not -len(t.fields) <= index < len(t.fields):
                raise FrontendError(
                    f"index {index} out of range for a tuple of {len(t.fields)}", current_span()
                )
            index %= len(t.fields)
        elif index < 0:
            raise FrontendError(
                "a negative index into a tuple of unknown length",
                current_span(),
                hint="index from the front",
            )
        return TupleGetItem(self, index, span=current_span())
    if isinstance(index, int) and index < 0:  # Python's count from the end
        n = t.shape[0] if isinstance(t, TensorType) and t.ndim else None
        if not isinstance(n, int):
            return apply_op("take", (self, index), {"axis": 0, "mode": "wrap"})
        if index < -n:
            raise FrontendError(
                f"index {index} is out of range for a leading axis of {n}", current_span()
            )
        index += n
    if isinstance(index, slice):
        if index.step not in (None, 1):
            raise FrontendError("a slice with a step", current_span(), hint="x[a:b]")
        begin = 0 if index.start is None else index.start
        end = 2**31 - 1 if index.stop is None else index.stop
        return apply_op("strided_slice", (self,), {"begin": [begin], "end": [end], "axes": [0]})
    return apply_op("take", (self, index), {"axis": 0})


def _iter(self: Expr):
    t = type_hint(self)
    if isinstance(self, Tuple):
        return iter(self.fields)
    if isinstance(t, TupleType):
        return iter([TupleGetItem(self, i, span=current_span()) for i in range(len(t.fields))])
    raise FrontendError(
        "cannot unpack a value whose tuple length is not known here",
        current_span(),
        hint="index it: t[0], t[1]",
    )


def _bool(self: Expr) -> bool:
    if tracing() and not isinstance(self, Function | GlobalVar | Constant):
        raise FrontendError(
            "a Python `if`/`while`/`and`/`or`/`not` on a traced value: its truth is known "
            "only when the program runs",
            caller_span(),
            hint="write effir.cond(pred, then_fn, else_fn) or effir.while_loop(...), "
            "or convert the function with @effir.script",
        )
    return True


def _no_conversion(kind: str):
    def method(self: Expr) -> Any:
        raise FrontendError(
            f"{kind}() of an effir value: its value is known only when the program runs",
            caller_span(),
            hint="keep it an effir value (effir.op.cast for dtypes)",
        )

    return method


_COMPARISONS = {"__eq__": ("==", "equal"), "__ne__": ("!=", "not_equal")}
_ORIGIN: dict[str, str] = {}  # file name -> "effir", "user" or "generated"


def _origin(filename: str) -> str:
    """Whose code a file is: effir's own package, the user's, or generated
    without a source (a dataclass's ``__eq__``), which compares on its
    caller's behalf."""
    origin = _ORIGIN.get(filename)
    if origin is None:
        if os.path.abspath(filename).startswith(PACKAGE + os.sep):
            origin = "effir"
        elif filename.startswith("<") and not linecache.getlines(filename):
            origin = "generated"
        else:
            origin = "user"
        _ORIGIN[filename] = origin
    return origin


def _compared_by_user(frame: Any) -> bool:
    """Whether the comparison made in ``frame`` is the user's (generated
    code is its caller's)."""
    while frame is not None:
        origin = _origin(frame.f_code.co_filename)
        if origin != "generated":
            return origin == "user"
        frame = frame.f_back
    return False


def _comparison(method: str):
    """``==``/``!=``: identity, as the IR's algorithms compare nodes; in
    user code while a function is built, refused (the bool would bake one
    branch of an ``effir.cond`` into the program)."""
    symbol, op_name = _COMPARISONS[method]
    negate = method == "__ne__"

    def compare(self: Expr, other: Any) -> bool:
        if tracing() and _compared_by_user(sys._getframe(1)):
            raise FrontendError(
                f"`{symbol}` on an effir value being built compares the IR nodes, not the "
                "values: its Python bool would fix one branch of the program",
                caller_span(),
                hint=f"write effir.op.{op_name}(a, b) (or `is` to compare the nodes themselves)",
            )
        return (self is not other) if negate else (self is other)

    compare.__name__ = method
    return compare


def _array_ufunc(self: Expr, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """numpy's ufunc protocol: ``np.tanh(x)``, ``ndarray * x`` on an
    expression are the operators numpy_spellings.py names."""
    if method != "__call__":
        raise FrontendError(
            f"np.{ufunc.__name__}.{method} is not supported on effir values",
            caller_span(),
            hint="write the reduction with effir.op (effir.op.sum, effir.op.max...)",
        )
    return _converted(ufunc, inputs, kwargs)


def _array_function(self: Expr, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """numpy's function protocol: ``np.sum(x, axis=0)``, ``np.stack([a,
    b])`` on expressions are the operators numpy_spellings.py names."""
    return _converted(func, args, kwargs)


def _converted(fn: Any, args: Any, kwargs: Any) -> Any:
    try:
        return numpy_spellings.convert(fn, args, kwargs)
    except FrontendError as err:
        if err.span is not None:
            raise
        raise FrontendError(err.message, caller_span(), hint=err.hint) from None


def _array(self: Expr, dtype: Any = None, copy: Any = None) -> Any:
    raise FrontendError(
        "a numpy array of an effir value: its value is known only when the program runs",
        caller_span(),
        hint="keep it an effir value: numpy functions on it become effir.op calls; "
        'for a cast write effir.op.cast(x, dtype="float32") (np.float32(x) is one only in '
        "@effir.script)",
    )


class AttributeHintError(FrontendError, AttributeError):
    """``x.shape`` and the like on an effir value: a located ``FrontendError``
    with the hint, and still an ``AttributeError`` for ``hasattr``."""


def _getattr(self: Expr, name: str) -> Any:
    """An attribute an expression lacks: numpy's array attributes are refused
    naming what to write (``x.shape``: ``effir.op.shape_of``)."""
    if name not in numpy_spellings.ATTRIBUTES:
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    err = numpy_spellings.attribute_error(name)
    raise AttributeHintError(err.message, caller_span(), hint=err.hint)


def _call(self: Expr, *args: Any) -> Any:
    return call(self, *args)


_METHODS = {
    "__add__": _binary("add"),
    "__radd__": _binary("add", True),
    "__sub__": _binary("subtract"),
    "__rsub__": _binary("subtract", True),
    "__mul__": _binary("multiply"),
    "__rmul__": _binary("multiply", True),
    "__truediv__": _binary("divide"),
    "__rtruediv__": _binary("divide", True),
    "__matmul__": _binary("nn.matmul"),
    "__rmatmul__": _binary("nn.matmul", True),
    "__pow__": _binary("power"),
    "__rpow__": _binary("power", True),
    "__lt__": _binary("less"),
    "__le__": _binary("less_equal"),
    "__gt__": _binary("greater"),
    "__ge__": _binary("greater_equal"),
    "__and__": _binary("logical_and"),
    "__rand__": _binary("logical_and", True),
    "__or__": _binary("logical_or"),
    "__ror__": _binary("logical_or", True),
    "__neg__": _neg,
    "__pos__": _pos,
    "__getitem__": _getitem,
    "__iter__": _iter,
    "__bool__": _bool,
    "__float__": _no_conversion("float"),
    "__int__": _no_conversion("int"),
    "__index__": _no_conversion("index"),
    "__call__": _call,
    "__getattr__": _getattr,
    "__eq__": _comparison("__eq__"),
    "__ne__": _comparison("__ne__"),
    "__array_ufunc__": _array_ufunc,
    "__array_function__": _array_function,
    "__array__": _array,
}


def install() -> None:
    """Put the operators on ``Expr`` (idempotent)."""
    for name, method in _METHODS.items():
        setattr(Expr, name, method)
