"""numpy spellings on effir values: which numpy function stands for which
effir operator. One table for both frontends, so that ``np.sum(x)`` gives
the same IR whether ``@effir.script`` reads the call in the AST or
``effir.trace`` meets it at run time, through numpy's own dispatch
protocols (``__array_ufunc__`` for ufuncs such as ``np.tanh`` and
``ndarray + x``, ``__array_function__`` for ``np.sum``, ``np.stack``...,
installed on expressions by operators.py, and registered with eager.py
for the ``EagerArray``s of eager runs).

A numpy function outside the table is refused with a ``FrontendError``
naming the ``effir.op`` function to write instead (the operator of the
same name when there is one); the caller locates it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ir.diagnostics import FrontendError
from ..ir.expr import Expr
from ..ir.op import lookup_op
from . import builder as B
from .eager import register_spellings

UNARY: dict[Any, str] = {
    np.tanh: "tanh",
    np.exp: "exp",
    np.log: "log",
    np.sqrt: "sqrt",
    np.negative: "negative",
    np.logical_not: "logical_not",
}
BINARY: dict[Any, str] = {
    np.add: "add",
    np.subtract: "subtract",
    np.multiply: "multiply",
    np.divide: "divide",
    np.true_divide: "divide",
    np.power: "power",
    np.maximum: "maximum",
    np.minimum: "minimum",
    np.matmul: "nn.matmul",
    np.dot: "nn.matmul",
    np.equal: "equal",
    np.not_equal: "not_equal",
    np.less: "less",
    np.less_equal: "less_equal",
    np.greater: "greater",
    np.greater_equal: "greater_equal",
    np.logical_and: "logical_and",
    np.logical_or: "logical_or",
}
REDUCE: dict[Any, str] = {
    np.sum: "sum",
    np.mean: "mean",
    np.max: "max",
    np.amax: "max",
    np.min: "min",
    np.amin: "min",
    np.prod: "prod",
    np.argmax: "argmax",
}

# numpy names whose effir operator is spelled otherwise, for the hint.
_OTHER_NAMES = {
    "absolute": "effir.op.maximum(x, effir.op.negative(x))",
    "abs": "effir.op.maximum(x, effir.op.negative(x))",
    "clip": "effir.op.minimum(effir.op.maximum(x, lo), hi)",
    "square": "effir.op.multiply(x, x)",
    "astype": "effir.op.cast",
    "zeros_like": 'effir.op.zeros(shape=[...], dtype="...")',
    "ones_like": 'effir.op.ones(shape=[...], dtype="...")',
}


# numpy array attributes and methods, with what to write on an effir value.
ATTRIBUTES = {
    "shape": "effir.op.shape_of(x) (the sizes as an int32 tensor, when the program runs), "
    "or use the sizes of the annotation (effir.Tensor[(n, 8), ...])",
    "T": "np.transpose(x)",
    "transpose": "np.transpose(x, axes)",
    "reshape": "np.reshape(x, shape)",
    "astype": 'np.float32(x) or effir.op.cast(x, dtype="float32")',
    "dtype": 'the dtype is the annotation\'s; effir.op.cast(x, dtype="...") changes it',
    "ndim": "the rank is the annotation's",
    "sum": "np.sum(x, axis=...)",
    "mean": "np.mean(x, axis=...)",
    "max": "np.max(x, axis=...)",
    "min": "np.min(x, axis=...)",
    "prod": "np.prod(x, axis=...)",
    "argmax": "np.argmax(x, axis=...)",
    "clip": "effir.op.minimum(effir.op.maximum(x, lo), hi)",
}


def attribute_error(name: str) -> FrontendError:
    """The error for ``x.<name>`` on an effir value (no location: the caller
    has it), naming what to write instead."""
    hint = ATTRIBUTES.get(name, "write the numpy function or the effir.op function")
    return FrontendError(f"attribute .{name} of an effir value", hint=f"write {hint}")


def is_numpy(fn: Any) -> bool:
    """Whether ``fn`` is a numpy function, ufunc or scalar type."""
    module = getattr(fn, "__module__", None) or ""
    return (
        isinstance(fn, np.ufunc)
        or module.startswith("numpy")
        or (isinstance(fn, type) and issubclass(fn, np.generic))
    )


def convert(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` where an argument is an effir value, as the
    operator it stands for; FrontendError (without a location: the caller
    has it) for a spelling outside the table."""
    rule = _rule(fn, len(args), kwargs)
    if rule is None:
        raise unsupported(fn)
    return rule(list(args), dict(kwargs))


def converts(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether the table has a rule for this call of ``fn``."""
    return _rule(fn, len(args), kwargs) is not None


def unsupported(fn: Any, detail: str = "") -> FrontendError:
    """The error for ``np.<name>`` on an effir value, naming the effir.op
    function to write instead (or the form of the call that converts)."""
    name = getattr(fn, "__name__", None) or str(fn)
    form = _form(fn)
    if form is not None and not detail:
        return FrontendError(
            f"np.{name} is converted only as {form}",
            hint=f"write {form}, or effir.op.{_operator_of(fn)} with keyword attributes",
        )
    if name in _OTHER_NAMES:
        hint = f"write {_OTHER_NAMES[name]}"
    elif lookup_op(name) is not None:
        hint = f"write effir.op.{name} (its attributes are keyword arguments)"
    else:
        hint = "write it with the effir.op functions (help(effir.op) lists them)"
    return FrontendError(f"np.{name}{detail} is not supported on effir values", hint=hint)


def _form(fn: Any) -> str | None:
    """The call form of a numpy function the table converts."""
    name = getattr(fn, "__name__", "")
    if fn in UNARY:
        return f"np.{name}(x)"
    if fn in BINARY:
        return f"np.{name}(x, y)"
    if fn in REDUCE:
        return f"np.{name}(x, axis=..., keepdims=...)"
    forms = {
        np.where: "np.where(c, x, y)",
        np.stack: "np.stack([x, y, ...], axis=0)",
        np.concatenate: "np.concatenate([x, y, ...], axis=0)",
        np.reshape: "np.reshape(x, shape)",
        np.transpose: "np.transpose(x, axes)",
    }
    return forms.get(fn)


def _operator_of(fn: Any) -> str:
    for table in (UNARY, BINARY, REDUCE):
        if fn in table:
            return table[fn]
    return getattr(fn, "__name__", "")


def _rule(fn: Any, n: int, kwargs: Mapping[str, Any]) -> Callable[[list, dict], Any] | None:
    """How ``fn`` with ``n`` positional arguments and ``kwargs`` converts."""
    if fn in UNARY and n == 1 and not kwargs:
        return lambda a, k: B.apply_op(UNARY[fn], tuple(a), {})
    if fn in BINARY and n == 2 and not kwargs:
        return lambda a, k: B.apply_op(BINARY[fn], tuple(a), {})
    if fn in REDUCE and n == 1 and set(kwargs) <= {"axis", "keepdims"}:
        return lambda a, k: B.apply_op(REDUCE[fn], tuple(a), k)
    if fn is np.where and n == 3 and not kwargs:
        return lambda a, k: B.apply_op("where", tuple(a), {})
    if fn in (np.stack, np.array, np.asarray) and n == 1 and not kwargs:
        return _stack if fn is np.stack else _as_is
    if fn is np.stack and n == 1 and set(kwargs) == {"axis"}:
        return _stack
    if fn is np.concatenate and n == 1 and set(kwargs) <= {"axis"}:
        return lambda a, k: B.apply_op("concatenate", (tuple(a[0]),), {"axis": k.get("axis", 0)})
    if fn is np.reshape and n == 2 and not kwargs:
        return lambda a, k: B.apply_op("reshape", (a[0],), {"newshape": _ints(a[1])})
    if fn is np.transpose and n in (1, 2) and set(kwargs) <= ({"axes"} if n == 1 else set()):
        return lambda a, k: B.apply_op(
            "transpose", (a[0],), {"axes": a[1] if len(a) == 2 else k.get("axes")}
        )
    return None


def _stack(args: list, kwargs: dict) -> Any:
    """``np.stack`` of a list of values; of one tensor (a list a scripted
    loop appended to, already stacked), the tensor itself, as numpy gives."""
    if isinstance(args[0], Expr) and not kwargs.get("axis"):
        return args[0]
    if isinstance(args[0], Expr):
        raise FrontendError("np.stack of one effir tensor with an axis", hint="effir.op.transpose")
    return B.apply_op("stack", (tuple(args[0]),), {"axis": kwargs.get("axis", 0)})


def _as_is(args: list, kwargs: dict) -> Any:
    """``np.array(x)`` of an effir value is the value."""
    if not isinstance(args[0], Expr):
        raise unsupported(np.array, " of a list holding effir values")
    return args[0]


def _ints(shape: Any) -> list[Any]:
    return list(shape) if isinstance(shape, tuple | list) else [shape]


register_spellings(converts, convert)
