"""Data-dependent shapes in the Relax lowering [RULE LOWER-DYN].

An operator whose result shape depends on data (``boolean_mask``,
``argwhere``, ``unique``, the ``dyn.*`` operators, ``shape_of``) runs as
the executor's kernels (dynamic_kernels.py): one counts, the VM turns the
count into a shape (``tensor_to_shape``) and allocates, the other fills.
``forget_dims`` (a value whose type forgets sizes) is a ``match_cast``.
The helpers here (rows, dimensions, views, the executor's kernels for the
target) serve the loops too.

[RULE LOWER-SIZE] A tensor whose size the run chooses (``dyn.zeros``' shape,
``dyn.arange``'s length, a padded ``cf.while_loop``'s rows given at run
time) is checked against the size limit (runtime/limits.py) on the host
before it is allocated, with the interpreter's kind of located error
(``check_size``); its dimensions' product is never computed where it could
wrap around 64 bits (``_product_at_most``), as TVM's allocation computes
it. A size bounded by values that already exist (``boolean_mask``'s rows,
a buffer that doubles, a kernel's result of symbolic sizes, products of
its arguments' dimensions: [RULE LOWER-SHAPEPOLY]) is not checked: it
fails, if ever, as an allocation TVM refuses, not as a short buffer.

The rules are ``DynamicRules``, a rule set relax/lower.py's walk holds; they
share relax/state.py's ``LoweringState``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from ....ir.expr import Call, Expr, Var
from ....ir.op import op_def
from ....ir.types import TensorType
from ....runtime.limits import ENV, human, max_bytes
from ..kernel.checks import error_shape
from ..runtime.errors import CHECK_FUNCTION, VALUE_MARK, BackendError, site_message
from . import dynamic_kernels
from .constants import constant
from .state import LoweringState, Walk
from .types import scheduled


class DynamicRules:
    """The executor's kernels and shapes for relax/lower.py's walk."""

    def __init__(self, state: LoweringState, walk: Walk) -> None:
        self.state = state
        self.bb = state.bb
        self.walk = walk

    def _executor(self, kernel: str, *args: Any) -> Any:
        """The executor kernel ``kernel`` (made by ``dynamic_kernels.kernel
        (*args)``: a dtype, a chunk size), added to the module once."""
        key = "_".join([kernel, *map(str, args)])
        gv = self.state.executor_gvs.get(key)
        if gv is None:
            func = self.on_target(getattr(dynamic_kernels, kernel)(*args))
            gv = self.state.executor_gvs[key] = self.bb.add_func(func, key)
        return gv

    def reshape(self, value: Any, shape: list[Any]) -> Any:
        """``value`` with ``shape``: a view of the same memory (the VM's
        builtin), not a copy; Relax's own ``reshape`` outside a dataflow
        block is an unscheduled copy kernel, 20 ms for a 3 MB tensor."""
        dtype = value.ty.dtype
        ty = relax.TensorType(list(shape), dtype)
        return relax.op.call_pure_packed(
            "vm.builtin.reshape", value, relax.ShapeExpr(list(shape)), ty_args=ty
        )

    def on_target(self, func: Any) -> Any:
        """An executor kernel for the target: on a GPU it runs as one
        thread (its steps are sequential: a running count of the rows
        written; the data it moves is small beside the kernels').

        Its buffers never alias, and it says so (``tirx.noalias``): TVM's
        LLVM code generator drops ``noalias`` from *every* function of a
        module in which one function does not declare it, and the loop
        kernels ran 2.3x slower without it."""
        func = func.with_attr("tirx.noalias", True)
        if self.state.target.kind.name == "llvm":
            return func
        return scheduled(dynamic_kernels.single_thread(func))

    def rows(self, value: Any, t: TensorType) -> Any:
        """``value`` as a (rows, row size) tensor: a view for the executor
        kernels, which work on rows."""
        dims = self.dims(value, t)
        row = 1
        for d in dims[1:]:
            row = row * d
        return self.bb.emit(self.reshape(value, [dims[0] if dims else 1, row]))

    def dims(self, value: Any, t: TensorType) -> list[Any]:
        """The dimensions of a tensor value: its static ones, variables
        bound by a cast for the others."""
        if t.is_static:
            return [int(d) for d in t.shape]
        sinfo = value.ty
        if isinstance(sinfo, relax.TensorType) and sinfo.shape is not None:
            return list(sinfo.shape.values)
        names = [tirx.Var(f"d{i}", "int64") for i in range(t.ndim)]
        cast = self.bb.match_cast(value, relax.TensorType(names, t.dtype))
        del cast
        return names

    def size_of(self, count: Any) -> Any:
        """A variable holding the value of the ``int64`` scalar ``count``."""
        flat = self.bb.emit(self.reshape(count, [1]))
        shape = self.bb.emit(relax.op.tensor_to_shape(flat))
        n = tirx.Var("n", "int64")
        self.bb.match_cast(shape, relax.ShapeType([n]))
        return n

    def check_shape(self, call: Call, ok: Any, message: str, values: list[Any]) -> None:
        """Fail as the interpreter does unless ``ok`` (a condition on shape
        variables) holds: ``message``'s ``{}`` show ``values`` (runtime/errors.py
        [RULE RUNTIME-CHECK]; here once per operator call, on shapes, never per
        element)."""
        op = op_def(call.callee).name  # type: ignore[arg-type]
        self.emit_check(ok, site_message(op, message.replace("{}", VALUE_MARK), call.span), values)

    def check_size(self, call: Call, dims: list[Any], dtype: str, what: str) -> None:
        """[RULE LOWER-SIZE] Refuse, before it is allocated, a tensor of ``dims``
        (shape variables of the run: a size read from data, a limit given
        at run time) past the size limit (runtime/limits.py), as the
        interpreter refuses it. TVM's VM multiplies the dimensions and the
        item size in 64 bits, where 2**62 rows of 4 bytes wrap around to 0:
        unchecked, such a tensor got a buffer of a few bytes, which the
        kernel filling it then wrote past, corrupting the heap. A static
        shape was checked when the program was specialised (driver/specialise.py);
        the limit is the one in force when the program is built."""
        if all(isinstance(d, int) for d in dims):
            return
        limit = max_bytes()
        bound = tirx.const(limit // np.dtype(dtype).itemsize, "int64")
        shape = "(" + ", ".join([VALUE_MARK] * len(dims)) + ")"  # as the interpreter's
        message = (
            f"{what} of shape {shape} and dtype {dtype} would take more "
            f"than the limit of {human(limit)} (set {ENV} to allow more)"
        )
        self.check_shape(call, _product_at_most(dims, bound), message, dims)

    def emit_check(self, ok: Any, text: str, values: list[Any]) -> None:
        """[RULE RUNTIME-CHECK] (runtime/errors.py) ``effir.check(ok, text, *values)`` on the
        host, where ``ok`` and ``values`` are expressions of shape
        variables and ``text`` is a ``site_message``."""
        text = text.encode("utf-8", "backslashreplace").decode()
        flag = tirx.Select(ok, tirx.const(1, "int64"), tirx.const(0, "int64"))
        args = [flag, tvm.ir.StringImm(text), *(_int64(v) for v in values)]
        self.bb.emit(
            relax.Call(relax.ExternFunc(CHECK_FUNCTION), args, ty_args=[relax.ObjectType()])
        )

    def test_error_code(self, error: Any, checks: tuple[str, ...]) -> None:
        """A GPU kernel's error output (kernel/checks.py), copied to the host
        and tested: the failing check's message, with its values."""
        shape = self.bb.emit(relax.op.tensor_to_shape(error))
        code = tirx.Var("error_code", "int64")
        values = [tirx.Var(f"error_value{n}", "int64") for n in range(error_shape(checks)[0] - 1)]
        self.bb.match_cast(shape, relax.ShapeType([code, *values]))
        for k, text in enumerate(checks):
            shown = values[: max(1, text.count(VALUE_MARK))]
            self.emit_check(tirx.NE(code, tirx.const(k + 1, "int64")), text, shown)

    # --------------------------------------------------- dynamic shapes
    def _boolean_mask(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``x[mask]``: count, allocate, fill [RULE LOWER-DYN]."""
        x_arg, mask_arg = call.args
        x_type, mask_type = _tensor(x_arg), _tensor(mask_arg)
        x = self.walk.atom(x_arg, env)
        mask = self.walk.atom(mask_arg, env)
        x_dims = self.dims(x, x_type)
        k = mask_type.ndim
        rows = 1
        for d in x_dims[:k]:
            rows = rows * d
        size = 1
        for d in x_dims[k:]:
            size = size * d
        mask_dims = self.dims(mask, mask_type)
        same = tirx.const(True, "bool")
        for m, d in zip(mask_dims, x_dims, strict=False):
            same = tirx.And(same, tirx.EQ(_int64(m), _int64(d)))
        if not (isinstance(same, tirx.IntImm) and int(same)):
            message = (
                f"the mask's shape {_shape_text(k)} does not match the data's shape "
                f"{_shape_text(len(x_dims))}"
            )
            self.check_shape(call, same, message, [*mask_dims, *x_dims])
        emit = self.bb.emit
        flat_mask = emit(self.reshape(mask, [rows]))
        counted = emit(
            relax.call_tir(
                self._executor("count_true"), [flat_mask], relax.TensorType([1], "int64")
            )
        )
        n = self.size_of(emit(self.reshape(counted, [])))
        flat_x = emit(self.reshape(x, [rows, size]))
        picked = emit(
            relax.call_tir(
                self._executor("mask_rows", x_type.dtype),
                [flat_x, flat_mask],
                relax.TensorType([n, size], x_type.dtype),
            )
        )
        return emit(self.reshape(picked, [n, *x_dims[k:]]), name)

    def _argwhere(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        (x_arg,) = call.args
        x_type = _tensor(x_arg)
        x = self.walk.atom(x_arg, env)
        dims = self.dims(x, x_type)
        total = 1
        for d in dims:
            total = total * d
        emit = self.bb.emit
        flat = emit(self.reshape(x, [total]))
        if x_type.dtype == "bool":
            counted = emit(
                relax.call_tir(self._executor("count_true"), [flat], relax.TensorType([1], "int64"))
            )
            flat = emit(relax.op.astype(flat, "int8"))
            dtype = "int8"
        else:
            dtype = x_type.dtype
            counted = emit(
                relax.call_tir(
                    self._executor("count_nonzero", dtype), [flat], relax.TensorType([1], "int64")
                )
            )
        n = self.size_of(emit(self.reshape(counted, [])))
        shape = emit(relax.op.shape_to_tensor(relax.ShapeExpr(dims)))
        return emit(
            relax.call_tir(
                self._executor("argwhere_rows", dtype),
                [flat, shape],
                relax.TensorType([n, len(dims)], "int32"),
            ),
            name,
        )

    def _dyn_shape(self, shape_value: Any, shape_type: TensorType) -> list[Any]:
        """The dimensions a 1-d integer shape tensor holds, as variables."""
        length = shape_type.shape[0]
        if not isinstance(length, int):
            raise BackendError("a shape tensor of data-dependent length is not compiled")
        as_int64 = self.bb.emit(relax.op.astype(shape_value, "int64"))
        shape = self.bb.emit(relax.op.tensor_to_shape(as_int64))
        dims = [tirx.Var(f"s{i}", "int64") for i in range(length)]
        self.bb.match_cast(shape, relax.ShapeType(dims))
        return dims

    def _dyn_fill(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``dyn.zeros``/``dyn.ones``/``dyn.full``: the shape from a tensor."""
        op = op_def(call.callee).name  # type: ignore[arg-type]
        dtype = str(call.attrs["dtype"])
        shape_arg = call.args[-1]
        dims = self._dyn_shape(self.walk.atom(shape_arg, env), _tensor(shape_arg))
        ok = tirx.const(True, "bool")
        for d in dims:
            ok = tirx.And(ok, d >= tirx.const(0, "int64"))
        self.check_shape(call, ok, f"negative size in shape {_shape_text(len(dims))}", dims)
        self.check_size(call, dims, dtype, "the result")
        if op == "dyn.full":
            value = self.bb.emit(relax.op.astype(self.walk.atom(call.args[0], env), dtype))
        else:
            value = constant(np.asarray(0 if op == "dyn.zeros" else 1, dtype=dtype), dtype)
        total = 1
        for d in dims:
            total = total * d
        emit = self.bb.emit
        flat = emit(
            relax.call_tir(self._executor("fill", dtype), [value], relax.TensorType([total], dtype))
        )
        return emit(self.reshape(flat, dims), name)

    def _dyn_reshape(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        x_arg, shape_arg = call.args
        x = self.walk.atom(x_arg, env)
        x_dims = self.dims(x, _tensor(x_arg))
        asked = self._dyn_shape(self.walk.atom(shape_arg, env), _tensor(shape_arg))
        dims, ok, total = _resolved_newshape(x_dims, asked, bool(call.attrs["allowzero"]))
        message = f"cannot reshape {VALUE_MARK} elements into shape {_shape_text(len(asked))}"
        self.check_shape(call, ok, message, [total, *asked])
        return self.bb.emit(self.reshape(x, dims), name)

    def _arange(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``dyn.arange``: its length counted by a kernel, checked (a zero
        step, a float bound that is not finite), then the values filled."""
        start, limit, delta = (self.walk.atom(a, env) for a in call.args)
        dtype = _tensor(call.args[0]).dtype
        emit = self.bb.emit
        counted = emit(
            relax.call_tir(
                self._executor("arange_length", dtype),
                [start, limit, delta],
                relax.TensorType([1], "int64"),
            )
        )
        n = self.size_of(emit(self.reshape(counted, [])))
        zero_step = tirx.const(dynamic_kernels.ARANGE_ZERO_STEP, "int64")
        not_finite = tirx.const(dynamic_kernels.ARANGE_NOT_FINITE, "int64")
        self.check_shape(call, tirx.NE(n, zero_step), "the step (delta) is 0", [])
        if not dtype.startswith(("int", "uint")):
            message = "start, limit and delta must be finite"
            self.check_shape(call, tirx.NE(n, not_finite), message, [])
        self.check_size(call, [n], dtype, "the result")
        return emit(
            relax.call_tir(
                self._executor("arange_fill", dtype),
                [start, delta],
                relax.TensorType([n], dtype),
            ),
            name,
        )

    def _unique(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``unique``: the tensor as rows (its elements, or its slices along
        ``axis``, moved first), the distinct ones counted (and each row's
        first occurrence flagged), then gathered, ordered, indexed and
        counted by a second kernel (dynamic_kernels.py) [RULE LOWER-DYN]."""
        (x_arg,) = call.args
        t = _tensor(x_arg)
        x = self.walk.atom(x_arg, env)
        dims = self.dims(x, t)
        emit = self.bb.emit
        dtype = "int8" if t.dtype == "bool" else t.dtype  # [RULE TE-BOOL]
        if t.dtype == "bool":
            x = emit(relax.op.astype(x, "int8"))
        axis = call.attrs["axis"]
        if axis is None:
            total: Any = 1
            for d in dims:
                total = total * d
            moved, order = [total], None
            rows = emit(self.reshape(x, [total, 1]))
        else:
            axis = axis + t.ndim if axis < 0 else axis
            order = [axis] + [i for i in range(t.ndim) if i != axis]
            if axis:
                x = emit(relax.op.permute_dims(x, order))
            moved = [dims[i] for i in order]
            self.check_shape(
                call,
                _int64(moved[0]) > tirx.const(0, "int64"),
                f"unique of an empty axis (axis {axis} has length 0)",
                [],
            )
            size: Any = 1
            for d in moved[1:]:
                size = size * d
            rows = emit(self.reshape(x, [moved[0], size]))
        r = moved[0]
        row_size = 1 if axis is None else size
        i64 = lambda *shape: relax.TensorType(list(shape), "int64")  # noqa: E731
        counted = emit(
            relax.call_tir(self._executor("unique_count", dtype), [rows], [i64(1), i64(r)])
        )
        count, flags = emit(relax.TupleGetItem(counted, 0)), emit(relax.TupleGetItem(counted, 1))
        n = self.size_of(emit(self.reshape(count, [])))
        filled = emit(
            relax.call_tir(
                self._executor("unique_fill", dtype, int(call.attrs["sorted"])),
                [rows, flags],
                [relax.TensorType([n, row_size], dtype), i64(n), i64(r), i64(n)],
            )
        )
        values, first, inverse, counts = (emit(relax.TupleGetItem(filled, k)) for k in range(4))
        if order is None:
            values = emit(self.reshape(values, [n]))
        else:
            values = emit(self.reshape(values, [n, *moved[1:]]))
            if order[0]:
                back = sorted(range(len(order)), key=order.__getitem__)
                values = emit(relax.op.permute_dims(values, back))
        if t.dtype == "bool":
            values = emit(relax.op.astype(values, "bool"))
        return emit(relax.Tuple([values, first, inverse, counts]), name)

    def _forget_dims(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``forget_dims``: the value itself, its forgotten sizes new shape
        variables (a ``match_cast``, no copy), so that its Relax type is as
        loose as its effir type: a kernel of symbolic sizes taking it and
        a value of those sizes from elsewhere relates them as the same
        kind of size (kept static, the kernels were built for sizes the
        other value does not have)."""
        (x_arg,) = call.args
        x = self.walk.atom(x_arg, env)
        dims = self.dims(x, _tensor(x_arg))
        result = _tensor(call)
        loose = [
            tirx.Var(f"f{i}", "int64") if d == "?" else dims[i] for i, d in enumerate(result.shape)
        ]
        return self.bb.match_cast(x, relax.TensorType(loose, result.dtype))

    def _shape_of(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        (x_arg,) = call.args
        x = self.walk.atom(x_arg, env)
        dims = self.dims(x, _tensor(x_arg))
        shape = self.bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr(dims)))
        return self.bb.emit(relax.op.astype(shape, str(call.attrs["dtype"])), name)

    def zeros(self, shape: list[Any], dtype: str) -> Any:
        return self.executor_call("zeros", dtype, [], shape)

    def executor_call(
        self, kernel: str, dtype: str, args: list[Any], shape: list[Any], out: str = "", *extra: Any
    ) -> Any:
        """The executor's ``kernel`` for ``dtype`` (relax/dynamic_kernels.py;
        ``extra``: its other parameters) called on ``args``: a new tensor of
        ``shape`` and of dtype ``out`` (``dtype`` when empty)."""
        ty = relax.TensorType(shape, out or dtype)
        return self.bb.emit(relax.call_tir(self._executor(kernel, dtype, *extra), args, ty))

    def write_into(self, kernel: str, buf: Any, value: Any, at: Any, dtype: str) -> Any:
        """``buf`` with ``value`` written at row ``at`` in place, by the
        executor's ``kernel`` (``write_row``, ``write_rows``)."""
        call = relax.op.call_tir_inplace(self._executor(kernel, dtype), [buf, value, at], 0, buf.ty)
        return self.bb.emit(call)


def _shape_text(rank: int) -> str:
    """A shape as Python prints a tuple, with a VALUE_MARK per dimension."""
    if rank == 1:
        return f"({VALUE_MARK},)"
    return "(" + ", ".join([VALUE_MARK] * rank) + ")"


def _int64(d: Any) -> Any:
    return tirx.const(d, "int64") if isinstance(d, int) else d


def _resolved_newshape(
    x_dims: list[Any], asked: list[Any], allowzero: bool
) -> tuple[list[Any], Any, Any]:
    """``dyn.reshape``'s shape as the interpreter reads it (Relay's special
    values: 0 copies the input's dimension unless ``allowzero``, one -1 is
    inferred), whether it is valid, and the input's size: shape arithmetic
    the VM evaluates."""
    one, zero = tirx.const(1, "int64"), tirx.const(0, "int64")
    total: Any = one
    for d in x_dims:
        total = total * _int64(d)
    copied = []
    ok: Any = tirx.const(True, "bool")
    minus_ones: Any = zero
    for i, s in enumerate(asked):
        ok = tirx.And(ok, s >= tirx.const(-1, "int64"))
        minus_ones = minus_ones + tirx.Select(s == -1, one, zero)
        if allowzero:
            copied.append(s)
        elif i < len(x_dims):
            copied.append(tirx.Select(s == 0, _int64(x_dims[i]), s))
        else:
            ok = tirx.And(ok, s != 0)
            copied.append(s)
    known: Any = one
    for c in copied:
        known = known * tirx.Select(c == -1, one, c)
    inferred = tirx.floordiv(total, tirx.max(known, one))
    dims = [tirx.Select(c == -1, inferred, c) for c in copied]
    size: Any = one
    for d in dims:
        size = size * d
    ok = tirx.And(ok, minus_ones <= one)
    ok = tirx.And(ok, tirx.Or(minus_ones == zero, known > zero))
    # the product of ``dims`` is computed in 64 bits, where a wrapped one
    # could equal ``total``: equal only when it does not pass it
    ok = tirx.And(ok, tirx.And(size == total, _product_at_most(dims, total)))
    return dims, ok, total


def _product_at_most(dims: list[Any], bound: Any) -> Any:
    """Whether the product of ``dims`` (non-negative) is at most ``bound``,
    without computing it: each dimension against ``bound`` divided by the
    ones before it, so that no 64-bit product wraps around."""
    one, zero = tirx.const(1, "int64"), tirx.const(0, "int64")
    fits: Any = tirx.const(True, "bool")
    empty: Any = tirx.const(False, "bool")
    left = _int64(bound)
    for d in dims:
        d = _int64(d)
        fits = tirx.And(fits, d <= left)
        empty = tirx.Or(empty, d == zero)
        left = tirx.floordiv(left, tirx.max(d, one))
    return tirx.Or(empty, fits)


DYNAMIC: dict[str, Callable[..., Any]] = {
    "boolean_mask": DynamicRules._boolean_mask,
    "argwhere": DynamicRules._argwhere,
    "dyn.zeros": DynamicRules._dyn_fill,
    "dyn.ones": DynamicRules._dyn_fill,
    "dyn.full": DynamicRules._dyn_fill,
    "dyn.reshape": DynamicRules._dyn_reshape,
    "shape_of": DynamicRules._shape_of,
    "dyn.arange": DynamicRules._arange,
    "forget_dims": DynamicRules._forget_dims,
    "unique": DynamicRules._unique,
}
"""The lowering of each operator of data-dependent shape."""


def _tensor(expr: Expr) -> TensorType:
    """The checked type of an operand or result these rules read as a
    tensor's (the operator's type relation made it one)."""
    t = expr.checked_type
    if not isinstance(t, TensorType):
        raise BackendError(f"expected a tensor, got a value of type {t}", expr.span)
    return t
