"""The types of a kernel of symbolic sizes, and the run-time checks that
make them hold [RULE LOWER-SHAPEPOLY] (relax/symbolic.py, step 2).

A kernel after a data-dependent shape has parameters whose sizes are
named (``dyn0``, ``dyn1``, ...: the sizes the VM knows). Its body is typed
here operator by operator, each size an ``int64`` expression of those
names, so that every size in it is named too:

1. [RULE SHAPE-NAMED] An operator whose type relation relates the names (``tanh``
   of ``(dyn0, 3)`` is ``(dyn0, 3)``) keeps the relation's type.
2. [RULE SHAPE-SIZEEXPR] An operator whose result size is arithmetic on the
   names (a concatenation, ``reshape(-1)``, a slice, ``split``) gets a new
   name for that expression (``dyn2 = dyn0 + dyn1``), or the name of an
   equal one, or an int where it simplifies to one. The kernel's ``te``
   rules see each name as its expression (kernel/rules.py ``symbolic_dims``), so
   the output shapes of the lowered TIR are these expressions, and the
   Relax call's output types are the same expressions of the VM's sizes.
3. [RULE SHAPE-SIZECHECK] Sizes the types cannot relate but the interpreter
   checks at run time (two different names that must agree, or broadcast
   as numpy does: equal or one of them 1) are checked where the kernel is
   called, before it runs: a failed check is the interpreter's
   ``EvalError`` for the operator and its source location (relax/dynamic.py's
   ``_check_shape``). Broadcasting keeps numpy's semantics: the size of
   ``(dyn0, 3) + (dyn1, 3)`` is ``dyn1 == 1 ? dyn0 : dyn1`` and an input
   whose size may be 1 at run time is read at index 0 there (te_ops/common.py
   ``_load_broadcast``).

An operator whose relation fails on the names, or leaves a size unknown,
and that has no rule here, is not compiled: ``BackendError`` (the lowering
makes it a located ``CompileError`` naming the operator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ....ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from ....ir.op import op_def
from ....ir.type_tree import leaves
from ....ir.types import ANY, TensorType, TupleType, Type
from ....ir.visitor import post_order
from ....ops.indexing import _slices
from ....ops.relations import RelationError, merging_sizes
from ..runtime.errors import VALUE_MARK, BackendError

PrimExpr = Any  # a tvm.tirx expression
Dim = int | str


@dataclass(frozen=True)
class SizeCheck:
    """[RULE SHAPE-SIZECHECK] ``ok`` must hold when ``call`` runs; otherwise the
    interpreter's ``message``, each VALUE_MARK showing one of ``values``."""

    call: Call
    ok: PrimExpr
    message: str
    values: tuple[PrimExpr, ...]


class KernelSizes:
    """The named sizes of one kernel: each name's expression over the
    kernel's size variables (one per input size), and the checks."""

    def __init__(self, inputs: Sequence[str]) -> None:
        self.variables = {name: tirx.Var(name, "int64") for name in inputs}
        self.exprs: dict[str, PrimExpr] = dict(self.variables)
        self.checks: list[SizeCheck] = []
        self._analyzer = tvm.sym.Analyzer()

    def expr(self, d: Dim) -> PrimExpr:
        """A dimension as an ``int64`` expression."""
        if isinstance(d, int):
            return tirx.const(d, "int64")
        if d not in self.exprs:
            raise BackendError(f"the size {d} is not known to the kernel")
        return self.exprs[d]

    def dim(self, expr: PrimExpr) -> Dim:
        """[RULE SHAPE-SIZEEXPR] The dimension of ``expr``: an int, the name of an
        equal expression, or a new name."""
        expr = self._analyzer.simplify(expr)
        if isinstance(expr, tirx.IntImm):
            return int(expr)
        for name, known in self.exprs.items():
            if tvm_ffi.structural_equal(known, expr, map_free_vars=False):
                return name
        name = f"dyn{len(self.exprs)}"
        self.exprs[name] = expr
        return name

    def check(self, call: Call, ok: PrimExpr, message: str, values: Sequence[PrimExpr]) -> None:
        """[RULE SHAPE-SIZECHECK] ``ok`` is checked when the kernel is called."""
        ok = self._analyzer.simplify(ok)
        if isinstance(ok, tirx.IntImm) and int(ok):
            return
        self.checks.append(SizeCheck(call, ok, message, tuple(values)))

    def same(self, a: PrimExpr, b: PrimExpr) -> bool:
        return bool(tvm_ffi.structural_equal(a, b, map_free_vars=False)) or bool(
            self._analyzer.can_prove_equal(a, b)
        )

    def substituted(self, expr: PrimExpr, values: dict[str, PrimExpr]) -> PrimExpr:
        """``expr`` with each size variable replaced by its value in
        ``values`` (the VM's expression of that size)."""
        by_var = {self.variables[name]: value for name, value in values.items()}
        return tvm_ffi.structural_map(expr, (tirx.Var, lambda v: by_var.get(v, v)))


# =================================================================== typing
def type_kernel(fn: Function, sizes: KernelSizes) -> Type:
    """Type ``fn``'s body (its parameters typed with named sizes): every
    size of it an int or a name of ``sizes``; its checks in ``sizes``."""
    body: Expr = fn.body
    while isinstance(body, Let):
        body.var.set_checked_type(_typed(body.value, sizes))
        body = body.body
    return _typed(body, sizes)


def _typed(expr: Expr, sizes: KernelSizes) -> Type:
    for node in post_order(expr):
        if not isinstance(node, Expr) or isinstance(node, Op | Var):
            continue
        if isinstance(node, Constant):
            node.set_checked_type(TensorType(tuple(node.data.shape), str(node.data.dtype)))
        elif isinstance(node, Tuple):
            node.set_checked_type(TupleType(tuple(f.checked_type for f in node.fields)))
        elif isinstance(node, TupleGetItem):
            t = node.tuple_value.checked_type
            assert isinstance(t, TupleType)
            node.set_checked_type(t.fields[node.index])
        elif isinstance(node, Call) and isinstance(node.callee, Op):
            node.set_checked_type(_call_type(node, sizes))
        else:  # the kernel builder refuses it, naming it
            return expr.checked_type if expr.has_type else TupleType(())
    return expr.checked_type


def _call_type(call: Call, sizes: KernelSizes) -> Type:
    definition = op_def(call.callee)  # type: ignore[arg-type]
    name = definition.name
    args = tuple(a.checked_type for a in call.args)
    rule = SIZE_RULES.get(name)
    if rule is None and "broadcast" in definition.traits:
        rule = _broadcast
    if rule is not None and any(_names(t) for t in args):
        return rule(call, args, sizes)
    result = _relation(call, args, sizes)
    if any(d == ANY for leaf in _leaves(result) for d in leaf.shape):
        raise BackendError(
            f"{name}: a result size that depends on sizes known only at run time "
            f"({_shown(args)}) is not compiled",
            call.span,
        )
    return result


def _relation(call: Call, args: tuple[Type, ...], sizes: KernelSizes | None = None) -> Type:
    """The operator's type relation on ``args``; with ``sizes``, two sizes
    it needs equal are checked equal at run time [RULE SHAPE-SIZECHECK]."""
    definition = op_def(call.callee)  # type: ignore[arg-type]

    def merge(a: Dim, b: Dim, what: str) -> Dim:
        assert sizes is not None
        x, y = sizes.expr(a), sizes.expr(b)
        message = f"{what} do not match: {VALUE_MARK} vs {VALUE_MARK}"
        sizes.check(call, x == y, message, [x, y])
        return b if isinstance(b, int) else a

    try:
        if sizes is None:
            return definition.rules["type"](args, call.attrs)  # type: ignore[no-any-return]
        with merging_sizes(merge):
            return definition.rules["type"](args, call.attrs)  # type: ignore[no-any-return]
    except RelationError as err:
        raise BackendError(
            f"{err.message} (sizes known only at run time, {_shown(args)}, "
            "that compiled code cannot relate)",
            call.span,
        ) from None


def _names(t: Type) -> list[str]:
    return [d for leaf in _leaves(t) for d in leaf.shape if isinstance(d, str)]


def _leaves(t: Type) -> list[TensorType]:
    """The tensor leaves of ``t``, in field order."""
    return [leaf for leaf in leaves(t) if isinstance(leaf, TensorType)]


def _shown(args: tuple[Type, ...]) -> str:
    return ", ".join(str(tuple(leaf.shape)) for t in args for leaf in _leaves(t))


def _stand_in(t: Type) -> Type:
    """``t`` with each named size 1: what the relation checks of dtypes and
    ranks is checked on it."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_stand_in(f) for f in t.fields))
    if isinstance(t, TensorType):
        return TensorType(tuple(1 if isinstance(d, str) else d for d in t.shape), t.dtype)
    return t


def shape_text(rank: int) -> str:
    """A shape as Python prints a tuple, a VALUE_MARK per dimension."""
    if rank == 1:
        return f"({VALUE_MARK},)"
    return "(" + ", ".join([VALUE_MARK] * rank) + ")"


def _exprs(t: TensorType, sizes: KernelSizes) -> list[PrimExpr]:
    return [sizes.expr(d) for d in t.shape]


def _all(conditions: Sequence[PrimExpr]) -> PrimExpr:
    ok: PrimExpr = tirx.const(True, "bool")
    for c in conditions:
        ok = tirx.And(ok, c)
    return ok


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, tirx.IntImm) and int(e) == 1


# =================================================================== rules
SizeRule = Callable[[Call, tuple[Type, ...], KernelSizes], Type]


def _broadcast(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    """numpy's broadcasting on sizes known at run time [RULE SHAPE-SIZECHECK]:
    equal sizes, or 1, which stretches."""
    dtype = _relation(call, tuple(_stand_in(t) for t in args))
    assert isinstance(dtype, TensorType)
    tensors = [t for t in args if isinstance(t, TensorType)]
    name = op_def(call.callee).name  # type: ignore[arg-type]
    if name == "broadcast_to":
        return _broadcast_to(call, tensors[0], dtype, sizes)
    rank = max(t.ndim for t in tensors)
    padded = [[tirx.const(1, "int64")] * (rank - t.ndim) + _exprs(t, sizes) for t in tensors]
    out, conditions = [], []
    for position in range(rank):
        size = padded[0][position]
        for shape in padded[1:]:
            size, ok = _stretch(size, shape[position], sizes)
            conditions.append(ok)
        out.append(sizes.dim(size))
    values = [e for t in tensors for e in _exprs(t, sizes)]
    message = "shapes " + " and ".join(shape_text(t.ndim) for t in tensors) + " do not broadcast"
    sizes.check(call, _all(conditions), message, values)
    return TensorType(tuple(out), dtype.dtype)


def _stretch(a: PrimExpr, b: PrimExpr, sizes: KernelSizes) -> tuple[PrimExpr, PrimExpr]:
    """The broadcast size of ``a`` and ``b``, and when they broadcast."""
    true = tirx.const(True, "bool")
    if _is_one(a):
        return b, true
    if _is_one(b) or sizes.same(a, b):
        return a, true
    if isinstance(a, tirx.IntImm):  # b is a or 1
        return a, tirx.Or(b == a, b == 1)
    if isinstance(b, tirx.IntImm):
        return b, tirx.Or(a == b, a == 1)
    return tirx.Select(b == 1, a, b), tirx.Or(tirx.Or(a == b, a == 1), b == 1)


def _broadcast_to(call: Call, x: TensorType, out: TensorType, sizes: KernelSizes) -> Type:
    shape = [int(d) for d in call.attrs["shape"]]
    dims = _exprs(x, sizes)
    padded = [tirx.const(1, "int64")] * (len(shape) - len(dims)) + dims
    ok = _all([tirx.Or(d == t, d == 1) for d, t in zip(padded, shape, strict=True)])
    target = "(" + ", ".join(str(t) for t in shape) + ("," if len(shape) == 1 else "") + ")"
    sizes.check(call, ok, f"cannot broadcast {shape_text(x.ndim)} to {target}", dims)
    return TensorType(tuple(shape), out.dtype)


def _fields(call: Call, args: tuple[Type, ...]) -> tuple[list[TensorType], str]:
    stand_in = _relation(call, tuple(_stand_in(t) for t in args))
    assert isinstance(stand_in, TensorType) and isinstance(args[0], TupleType)
    fields = [f for f in args[0].fields if isinstance(f, TensorType)]
    return fields, stand_in.dtype


def _equal_sizes(
    call: Call, fields: list[TensorType], axes: Sequence[int], sizes: KernelSizes, message: str
) -> None:
    """[RULE SHAPE-SIZECHECK] The fields' sizes along ``axes`` agree."""
    first = _exprs(fields[0], sizes)
    conditions = [
        shape[a] == first[a]
        for f in fields[1:]
        for shape in [_exprs(f, sizes)]
        for a in axes
        if not sizes.same(shape[a], first[a])
    ]
    if conditions:
        shown = ", ".join(shape_text(f.ndim) for f in fields)
        values = [e for f in fields for e in _exprs(f, sizes)]
        sizes.check(call, _all(conditions), message.format(shown), values)


def _concatenate(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    fields, dtype = _fields(call, args)
    rank = fields[0].ndim
    axis = call.attrs["axis"] % rank
    others = [a for a in range(rank) if a != axis]
    _equal_sizes(
        call,
        fields,
        others,
        sizes,
        "cannot concatenate shapes {}: all the input array dimensions except for the "
        "concatenation axis must match exactly",
    )
    first = _exprs(fields[0], sizes)
    total: PrimExpr = tirx.const(0, "int64")
    for f in fields:
        total = total + sizes.expr(f.shape[axis])
    shape = [sizes.dim(total) if a == axis else sizes.dim(first[a]) for a in range(rank)]
    return TensorType(tuple(shape), dtype)


def _stack(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    fields, dtype = _fields(call, args)
    rank = fields[0].ndim
    _equal_sizes(
        call,
        fields,
        range(rank),
        sizes,
        "cannot stack shapes {}: all input arrays must have the same shape",
    )
    axis = call.attrs["axis"] % (rank + 1)
    shape = list(fields[0].shape)
    return TensorType(tuple(shape[:axis] + [len(fields)] + shape[axis:]), dtype)


def _reshape(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    """Relay's newshape (0 copies the input's size, one -1 is inferred),
    the element counts checked as the interpreter does."""
    x = args[0]
    _relation(call, args)  # the newshape's special values
    assert isinstance(x, TensorType)
    dims = _exprs(x, sizes)
    newshape = [int(d) for d in call.attrs["newshape"]]
    total: PrimExpr = tirx.const(1, "int64")
    for d in dims:
        total = total * d
    out: list[PrimExpr | None] = [
        dims[i] if d == 0 else (None if d == -1 else tirx.const(d, "int64"))
        for i, d in enumerate(newshape)
    ]
    known: PrimExpr = tirx.const(1, "int64")
    for d in out:
        known = known * d if d is not None else known
    if any(d is None for d in out):
        ok = tirx.And(known > 0, tirx.floormod(total, tirx.max(known, 1)) == 0)
        out = [tirx.floordiv(total, tirx.max(known, 1)) if d is None else d for d in out]
    else:
        ok = known == total
    shown = "(" + ", ".join(map(str, newshape)) + ")"
    sizes.check(call, ok, f"cannot reshape {VALUE_MARK} elements into shape {shown}", [total])
    return TensorType(tuple(sizes.dim(d) for d in out), x.dtype)  # type: ignore[arg-type]


def sliced(n: PrimExpr, begin: int | None, end: int | None, step: int) -> tuple[PrimExpr, PrimExpr]:
    """Python's ``range(n)[begin:end:step]`` for a size ``n`` known at run
    time: its start and length, as ``int64`` expressions."""
    n = tirx.Cast("int64", n) if str(n.ty) != "int64" else n
    zero, minus_one = tirx.const(0, "int64"), tirx.const(-1, "int64")

    def bound(value: int | None, default: PrimExpr, low: PrimExpr, high: PrimExpr) -> PrimExpr:
        if value is None:
            return default
        if value < 0:
            return tirx.max(n + value, low)
        return tirx.min(tirx.const(value, "int64"), high)

    if step > 0:
        start, stop = bound(begin, zero, zero, n), bound(end, n, zero, n)
        length = tirx.Select(stop > start, tirx.floordiv(stop - start - 1, step) + 1, zero)
    else:
        start = bound(begin, n - 1, minus_one, n - 1)
        stop = bound(end, minus_one, minus_one, n - 1)
        length = tirx.Select(start > stop, tirx.floordiv(start - stop - 1, -step) + 1, zero)
    return start, length


def _strided_slice(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    """The relation's sizes, each sliced named size computed at run time
    (a static axis is the relation's, sliced too)."""
    x = args[0]
    result = _relation(call, args)
    assert isinstance(x, TensorType) and isinstance(result, TensorType)
    plan = _slices(call.attrs, x.ndim)
    shape: list[Dim] = list(result.shape)
    for axis, (b, e, s) in plan.items():
        if isinstance(x.shape[axis], str):
            shape[axis] = sizes.dim(sliced(sizes.expr(x.shape[axis]), b, e, s)[1])
    return TensorType(tuple(shape), x.dtype)


def _split(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    x = args[0]
    assert isinstance(x, TensorType)
    _relation(call, args)
    axis = call.attrs["axis"] % x.ndim
    spec = call.attrs["indices_or_sections"]
    if isinstance(x.shape[axis], int):
        return _relation(call, args)
    n = sizes.expr(x.shape[axis])
    if isinstance(spec, int):
        message = f"cannot split a dimension of size {VALUE_MARK} into {spec} equal sections"
        sizes.check(call, tirx.floormod(n, spec) == 0, message, [n])
        lengths = [tirx.floordiv(n, spec)] * spec
    else:
        bounds: list[int | None] = [0, *spec, None]
        lengths = [sliced(n, bounds[k], bounds[k + 1], 1)[1] for k in range(len(bounds) - 1)]
    pieces = []
    for length in lengths:
        shape = list(x.shape)
        shape[axis] = sizes.dim(length)
        pieces.append(TensorType(tuple(shape), x.dtype))
    return TupleType(tuple(pieces))


def _squeeze(call: Call, args: tuple[Type, ...], sizes: KernelSizes) -> Type:
    """The named sizes of the squeezed axes are 1 at run time, or it fails."""
    result = _relation(call, args)
    x = args[0]
    assert isinstance(x, TensorType)
    for a in sorted({a % x.ndim for a in call.attrs["axis"] or ()}):
        if isinstance(x.shape[a], str):
            n = sizes.expr(x.shape[a])
            sizes.check(call, n == 1, f"cannot squeeze axis {a} of size {VALUE_MARK}", [n])
    return result


SIZE_RULES: dict[str, SizeRule] = {
    "concatenate": _concatenate,
    "stack": _stack,
    "reshape": _reshape,
    "strided_slice": _strided_slice,
    "split": _split,
    "squeeze": _squeeze,
}
"""[RULE SHAPE-SIZEEXPR] [RULE SHAPE-SIZECHECK] The operators whose sizes need more
than their type relation when an argument's size is named; the
``broadcast`` operators use ``_broadcast``."""
