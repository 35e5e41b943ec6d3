"""A whole ``cf.foreach`` loop as one TVM function.

Purpose
-------
``cf.foreach(body, xs, init)`` runs ``body(x_t, state) -> (out_t, state')``
once per step. Dispatching each step from Python costs about a microsecond
a call, and a kernel per step re-reads loop-invariant data (the weights)
every time. When the body is static (every shape known once the symbolic
dimensions of its parameters are) and pure, ``build_loop`` compiles the
whole loop into one TIR PrimFunc: a serial loop over ``t`` whose body is the
scheduled step. The sequence length ``T`` is a symbolic dimension of that
function, so a new length needs no new build.

What the body may contain: a let chain of pure operator calls that have a
``te`` rule (rules.py), calls of functions bound in the chain, captured
(given in ``functions``) or global (in ``module``) -- primitive functions
from ``fuse`` and ``lower-tvm`` above all; their bodies are evaluated in
place -- tuples, projections, constants. Anything else (``if``, ``match``,
references, effects, a recursive function) is a ``BackendError`` naming the
construct. Free variables of the body (weights, say) become extra arguments
of the kernel, in order of first occurrence (``LoopKernel.captured``).

The algorithm
-------------
1. [EVAL] Evaluate the body symbolically into TE tensors: one placeholder
   per leaf of ``x_t``, of the state and of each captured value (a key is a
   ``uint32[2]`` tensor); non-scalar constants become placeholders fed their
   data at each call. Each operator's ``te`` rule gives its result.
2. [CLASS] Class each TE operation by what it depends on: CONST (captured
   values only), SEQ (``x_t`` and captured values, not the state) or STEP
   (the state). Only STEP operations must run inside the loop.
3. [PACK] A contraction ``C[..., n] = sum_k A[..., k] * B[n, k]`` whose
   ``B`` is CONST (``nn.dense`` with a weight) reads ``B`` across rows,
   which does not vectorise along ``n``. ``B`` is repacked once per call
   into panels ``Bp[n / w, k, n % w]`` (``w`` two vectors, when they divide
   ``n``), so that the contraction reads contiguous vectors of ``Bp``.
4. [HOIST] Every CONST or SEQ operation that is a reduction or a packing
   runs before the loop, in a *prologue*: CONST ones once, SEQ ones for all
   steps at once (the tensor gains a leading ``T`` axis: the input-to-hidden
   products of an RNN become one large matrix product, which runs near the
   machine's peak, instead of ``T`` matrix-vector products that each read
   the weights). The step reads row ``t`` of a SEQ result. Cheap SEQ
   operations (elementwise) stay in the step, where they fuse into their
   consumers. When a step has too few rows for a register tile (batch 1),
   the ``T`` axis is padded to a multiple of the tile (``padded_length``).
5. [SCHED] The prologue and the step are each a PrimFunc
   (``te.create_prim_func``) scheduled by ``_schedule``: spatial blocks are
   inlined into their consumers (within schedule.py's budget on the
   expression's size, and neither into a reduction nor at several reading
   sites when expensive); contractions get a register tile (up to 8 rows x
   two vectors accumulated in registers over ``k``, vectorised along
   ``n``); packings copy tile by tile; other blocks vectorise their
   innermost axis when it is contiguous. Large contractions and heavy
   elementwise blocks spread over TVM's thread pool (``parallel``).
6. [LOOP] The loop PrimFunc: the prologue; the state copied into a double
   buffer ``S[2, ...]``; ``for t in range(T)`` one block whose
   ``match_buffer`` views bind the step's buffers to ``xs[t]``, to row
   ``t`` of the prologue's results, to ``S[t % 2]`` (state in), to
   ``S[(t + 1) % 2]`` (state out) and to ``outs[t]``; then ``S[T % 2]``
   copied out as the final state. The step's intermediate buffers are
   allocated once, outside the loop; the prologue's results are buffers
   the kernel keeps between calls (one set per thread: fresh pages cost a
   page fault per 4 KiB, more than filling them).

[RULE ALIGN] Buffers of the loop function are declared aligned to their
element size only: numpy arrays, passed zero-copy through DLPack, are
16-byte aligned at best (a slice, less), and a buffer declared 64-byte
aligned makes LLVM emit aligned vector moves that fault on them.

Known limitations: ``T`` is an int32 (at most 2**31 - 1 elements per
buffer); a ``?`` dimension in the body cannot be compiled (symbolic names
are bound from the arguments at each call, one build per binding); CPU
(llvm) only; reductions other than contractions get no schedule of their
own beyond inlining and vectorisation; the prologue repacks the weights
at every call (about 36 us for 768 x 256 float32), which matters only for
short sequences; TVM 0.27's vectoriser fails on a let-bound vector of
booleans, so blocks that bind one stay scalar.
"""

from __future__ import annotations

import math
import os
import threading
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.ir import Range

from ...ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from ...ir.module import IRModule
from ...ir.op import op_def
from ...ir.trampoline import run
from ...ir.types import FuncType, KeyType, TensorType, TupleType, Type
from ...ir.visitor import free_vars
from ...runtime.values import PRNGKey
from . import random_ops, te_ops  # noqa: F401  (the te rules)
from .errors import BackendError
from .schedule import INLINE_BUDGET, expression_cost
from .target import building, make_target

VECTOR_BYTES = 64
"""Width of the host's vector registers (AVX-512); a narrower machine splits
each vector, which costs little."""
MATERIALIZE = "effir_materialize"
"""Annotation of a packing block: computed into its own buffer, never inlined."""

ROW_TILE = 8
"""Rows of a contraction's register tile (with two vectors of columns: 16
accumulators of the 32 vector registers)."""

PARALLEL_MIN_WORK = 1 << 17
"""Multiply-adds (or elements times expression size) from which a block
runs on TVM's thread pool (``build_loop(parallel=True)``); below, starting
the pool's tasks costs more than the work saves. Measured on 2 cores: a
768 x 256 matrix-vector product per step (2**17.6) gains, as the two halves
of the weight then stay in the two cores' L2 caches; 2**16 loses."""
SYMBOLIC_EXTENT = 64
"""What a symbolic extent (the sequence length) counts for in work estimates."""

INLINE_MAX_COPIED = 100
"""Largest expression (IR nodes) inlined into more than one reading site;
larger ones (a sigmoid read twice) are computed once into a buffer."""

CONST, SEQ, STEP = 0, 1, 2


def _size_thread_pool() -> None:
    """TVM sizes its thread pool once, when first used, from TVM_NUM_THREADS,
    else from half the hardware threads (it assumes two per core): one
    thread on the 2-core development machines, where ``parallel`` loops
    then run serially (25 ms instead of 15 ms for the batch-32 GRU of
    benchmarks/gru_loop.py). Unless the user chose, use every core this
    process may run on. Done at import, before any kernel starts the pool."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cores))


_size_thread_pool()


# ======================================================== types and values
def _leaves(t: Type) -> list[Type]:
    """The tensor and key leaves of a (nested) tuple type, in order."""
    out: list[Type] = []
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TupleType):
            stack.extend(reversed(node.fields))
        else:
            out.append(node)
    return out


def _rebuild(t: Type, leaves: Iterator[Any]) -> Any:
    """Values of ``leaves`` nested as the tuple type ``t`` nests them."""
    if isinstance(t, TupleType):
        return tuple(_rebuild(f, leaves) for f in t.fields)
    return next(leaves)


def _flatten(t: Type, value: Any, what: str) -> list[Any]:
    """The leaves of ``value``, checked to nest as ``t`` does."""
    out: list[Any] = []
    stack: list[tuple[Type, Any]] = [(t, value)]
    while stack:
        ty, v = stack.pop()
        if isinstance(ty, TupleType):
            if not isinstance(v, tuple) or len(v) != len(ty.fields):
                raise BackendError(
                    f"{what}: expected a tuple of {len(ty.fields)}, got {_describe(v)}"
                )
            stack.extend(reversed(list(zip(ty.fields, v, strict=True))))
        else:
            out.append(v)
    return out


def _describe(v: Any) -> str:
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    if isinstance(v, np.ndarray):
        return f"an array {v.dtype}{list(v.shape)}"
    return type(v).__name__


@dataclass(frozen=True)
class _Leaf:
    """A tensor the kernel reads or writes: static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str


def _leaf(t: Type, dims: Mapping[str, int], what: str) -> _Leaf:
    if isinstance(t, KeyType):
        return _Leaf((2,), "uint32")
    if not isinstance(t, TensorType):
        raise BackendError(f"{what} has type {t!r}: a loop kernel takes tensors and keys")
    shape = []
    for d in t.shape:
        if isinstance(d, int):
            shape.append(d)
        elif d in dims:
            shape.append(dims[d])
        else:
            raise BackendError(f"{what} has a dimension {d!r} that is not known when compiling")
    return _Leaf(tuple(shape), t.dtype)


def _concrete(t: Type, dims: Mapping[str, int]) -> Type:
    """``t`` with its symbolic dimensions bound (the te rules want static types)."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_concrete(f, dims) for f in t.fields))
    if isinstance(t, TensorType) and not t.is_static:
        return TensorType(
            tuple(dims.get(d, d) if isinstance(d, str) else d for d in t.shape), t.dtype
        )
    return t


def _bind_dims(t: Type, shape: tuple[int, ...], dims: dict[str, int], what: str) -> None:
    """Bind the symbolic dimensions of ``t`` from an argument's ``shape``."""
    if isinstance(t, KeyType):
        expect: tuple[Any, ...] = (2,)
    elif isinstance(t, TensorType):
        expect = t.shape
    else:
        raise BackendError(f"{what} has type {t!r}: a loop kernel takes tensors and keys")
    if len(expect) != len(shape):
        raise BackendError(f"{what}: expected {len(expect)} dimensions, got shape {list(shape)}")
    for d, n in zip(expect, shape, strict=True):
        if isinstance(d, int):
            if d != n:
                raise BackendError(f"{what}: expected shape {list(expect)}, got {list(shape)}")
        elif dims.setdefault(d, n) != n:
            raise BackendError(f"{what}: dimension {d} is {dims[d]} elsewhere, {n} here")


# ==================================================== [EVAL] body -> TE
@dataclass
class _Closure:
    function: Function
    env: Mapping[Var, Any]


class _StepTE:
    """[EVAL] The body's step as TE tensors, for one binding of the symbolic
    dimensions. Free variables and non-scalar constants become placeholders."""

    def __init__(
        self,
        dims: Mapping[str, int],
        captured: Sequence[Var],
        functions: Mapping[Var, Function],
        module: IRModule | None,
    ) -> None:
        self.dims = dims
        self.functions = functions
        self.module = module
        self.captured = {
            v: self._placeholder(v.checked_type, v.name_hint, "captured") for v in captured
        }
        self.constants: list[tuple[te.Tensor, np.ndarray]] = []
        self.active: list[Function] = []

    def _placeholder(self, t: Type, name: str, what: str) -> Any:
        t = _concrete(t, self.dims)
        if isinstance(t, TupleType):
            return tuple(self._placeholder(f, f"{name}_{i}", what) for i, f in enumerate(t.fields))
        leaf = _leaf(t, self.dims, f"the {what} value %{name}")
        return te.placeholder(leaf.shape, leaf.dtype, name=name)

    def evaluate(self, body: Function) -> tuple[Any, Any, Any]:
        """Placeholders of ``x_t`` and of the state, and the body's result."""
        if len(body.params) != 2:
            raise BackendError(
                f"a loop body takes (x_t, state), this one {len(body.params)} parameter(s)",
                body.span,
            )
        x, state = body.params
        x_ph = self._placeholder(x.checked_type, x.name_hint, "step input")
        s_ph = self._placeholder(state.checked_type, state.name_hint, "state")
        env = ChainMap({x: x_ph, state: s_ph})
        result = run(self._block(body.body, env))
        return x_ph, s_ph, result

    def _block(self, expr: Expr, env: ChainMap):
        """Generator (for trampoline.run): the value of a let chain."""
        while isinstance(expr, Let):
            if isinstance(expr.value, Function):
                env[expr.var] = _Closure(expr.value, env)
            else:
                env[expr.var] = yield self._value(expr.value, env)
            expr = expr.body
        return (yield self._value(expr, env))

    def _value(self, expr: Expr, env: ChainMap):
        """Generator: the value of a binding or an argument. Nested
        expressions (before to-anf) go through the trampoline too."""
        if isinstance(expr, Var | Constant | GlobalVar):
            return self._atom(expr, env)
        if isinstance(expr, Tuple):
            fields = []
            for f in expr.fields:
                fields.append((yield self._value(f, env)))
            return tuple(fields)
        if isinstance(expr, TupleGetItem):
            value = yield self._value(expr.tuple_value, env)
            if not isinstance(value, tuple):
                raise BackendError("projection of a value that is not a tuple", expr.span)
            return value[expr.index]
        if isinstance(expr, Function):
            return _Closure(expr, env)
        if isinstance(expr, Call):
            return (yield from self._call(expr, env))
        if isinstance(expr, Let):
            return (yield self._block(expr, env.new_child()))
        raise BackendError(
            f"a loop compiled by TVM cannot contain {type(expr).__name__} "
            "(only operator calls, calls of functions, tuples and constants)",
            getattr(expr, "span", None),
        )

    def _atom(self, expr: Expr, env: ChainMap) -> Any:
        if isinstance(expr, Var):
            if expr in env:
                return env[expr]
            if expr in self.captured:
                return self.captured[expr]
            if expr in self.functions:
                return _Closure(self.functions[expr], {})
            raise BackendError(f"%{expr.name_hint} is not known in the loop body", expr.span)
        if isinstance(expr, GlobalVar):
            if self.module is None or expr.name not in self.module.functions:
                raise BackendError(f"@{expr.name} is not a function of the module given", expr.span)
            return _Closure(self.module.functions[expr.name], {})
        assert isinstance(expr, Constant)
        return self._constant(expr)

    def _constant(self, c: Constant) -> te.Tensor:
        data = c.data
        if data.ndim == 0:
            value = tirx.const(data.item(), str(data.dtype))
            return te.compute((), lambda: value, name="constant")
        ph = te.placeholder(data.shape, str(data.dtype), name="constant")
        self.constants.append((ph, data.copy(order="C")))
        return ph

    def _call(self, call: Call, env: ChainMap):
        args = []
        for a in call.args:
            args.append((yield self._value(a, env)))
        callee = call.callee
        if isinstance(callee, Op):
            return self._operator(call, callee, args)
        target = None
        if isinstance(callee, Var | GlobalVar | Function):
            target = yield self._value(callee, env)
        if not isinstance(target, _Closure):
            raise BackendError(
                "a loop compiled by TVM can only call operators and functions", call.span
            )
        fn = target.function
        if any(fn is active for active in self.active):
            raise BackendError("a recursive function cannot be compiled into a loop", call.span)
        if len(fn.params) != len(args):
            raise BackendError(
                f"a call with {len(args)} argument(s) of a function of {len(fn.params)}", call.span
            )
        inner = ChainMap(dict(zip(fn.params, args, strict=True)), target.env)
        self.active.append(fn)
        try:
            return (yield self._block(fn.body, inner))
        finally:
            self.active.pop()

    def _operator(self, call: Call, op: Op, args: list[Any]) -> Any:
        definition = op_def(op)
        if definition.effect != "pure" or "control_flow" in definition.traits:
            raise BackendError(
                f"{op.name} ({definition.effect}, {', '.join(sorted(definition.traits)) or 'no traits'}) "
                "cannot be compiled into a loop: only pure operators can",
                call.span,
            )
        rule = definition.rules.get("te")
        if rule is None:
            raise BackendError(f"{op.name} has no te rule: TVM cannot compute it", call.span)
        if not call.has_type:
            raise BackendError("the loop body has no types: run effir.check first", call.span)
        return rule(tuple(args), call.attrs, _concrete(call.checked_type, self.dims))


# ============================================= [CLASS] [PACK] [HOIST] TE graph
def _te_leaves(value: Any) -> list[te.Tensor]:
    out: list[te.Tensor] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


class _TensorMap(dict):
    """A dict keyed by TE tensors: ``te.Tensor.__eq__`` builds an expression
    (and raises for scalars), so the key is the producing operation and the
    output index."""

    def __getitem__(self, t: te.Tensor) -> Any:
        return super().__getitem__((t.op, t.value_index))

    def __setitem__(self, t: te.Tensor, value: Any) -> None:
        super().__setitem__((t.op, t.value_index), value)

    def __contains__(self, t: object) -> bool:
        return isinstance(t, te.Tensor) and super().__contains__((t.op, t.value_index))

    def get(self, t: te.Tensor, default: Any = None) -> Any:
        return super().get((t.op, t.value_index), default)


def _topological(outputs: Sequence[te.Tensor]) -> list[Any]:
    """The operations ``outputs`` depend on, producers first."""
    order: list[Any] = []
    seen: set[Any] = set()
    stack: list[tuple[Any, bool]] = [(t.op, False) for t in reversed(outputs)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
            continue
        if op in seen:
            continue
        seen.add(op)
        stack.append((op, True))
        stack.extend((t.op, False) for t in reversed(list(op.input_tensors)) if t.op not in seen)
    return order


def _substitute(
    expr: Any, var_map: Mapping[Any, Any], load: Callable[[te.Tensor, list], Any]
) -> Any:
    """``expr`` with variables renamed and every tensor read ``T[idx]``
    replaced by ``load(T, idx)``; the producers of ``T`` are not visited."""

    def on_call(call: Any, mutator: Any) -> Any:
        if call.op.name == "te.tensor_load":
            return load(call.args[0], [mutator.mutate(i) for i in call.args[1:]])
        return mutator.default_mutate(call)

    return tvm_ffi.structural_mutate(
        expr, [(tvm.ir.expr.Call, on_call), (tirx.Var, lambda v, _m: var_map.get(v, v))]
    )


def _recompute(
    op: Any, read: Callable[[te.Tensor, list, list], Any], lead: Any | None = None
) -> list[te.Tensor]:
    """``op`` again, reading its inputs through ``read(T, idx, outer)``;
    with ``lead`` (an extent), the result gains a leading axis of that
    extent whose index is passed as ``outer = [t]``."""
    old = [iv.var for iv in op.axis]
    shape = [iv.dom.extent for iv in op.axis]

    def body(*idx: Any) -> Any:
        outer, inner = (list(idx[:1]), list(idx[1:])) if lead is not None else ([], list(idx))
        var_map = dict(zip(old, inner, strict=True))
        values = [_substitute(b, var_map, lambda t, i: read(t, i, outer)) for b in op.body]
        return values if len(values) > 1 else values[0]

    full = ([lead] if lead is not None else []) + shape
    out = te.compute(full, body, name=op.name, tag=op.tag, attrs=op.attrs)
    return list(out) if isinstance(out, list | tuple) else [out]


def _reduce_vars(op: Any) -> list[Any]:
    return [iv.var for iv in op.reduce_axis]


def _pack_width(extent: Any, dtype: str) -> int | None:
    """Columns per packed panel: two vectors, or one, when they divide ``extent``."""
    lanes = VECTOR_BYTES // (tvm.DataType(dtype).bits // 8)
    if not isinstance(extent, int | tirx.IntImm):
        return None
    n = int(extent)
    for width in (2 * lanes, lanes):
        if n % width == 0:
            return width
    return None


@dataclass
class _Graph:
    """The step's TE graph split into a prologue and the step proper."""

    x: list[te.Tensor]  # step inputs (one per leaf of x_t)
    state: list[te.Tensor]
    captured: list[te.Tensor]  # captured leaves, then constants
    outputs: list[te.Tensor]  # out_t leaves, then new state leaves
    cls: dict[Any, int] = field(default_factory=dict)  # op -> CONST/SEQ/STEP

    def classify(self) -> None:
        """[CLASS] for every operation reachable from the outputs."""
        for ph in self.captured:
            self.cls[ph.op] = CONST
        for ph in self.x:
            self.cls[ph.op] = SEQ
        for ph in self.state:
            self.cls[ph.op] = STEP
        for op in _topological(self.outputs):
            if op not in self.cls:
                self.cls[op] = max((self.cls[t.op] for t in op.input_tensors), default=CONST)

    def pack(self) -> None:
        """[PACK] Repack CONST right-hand sides of contractions; rewrites
        ``outputs`` through the rewritten operations."""
        replaced = _TensorMap()
        for op in _topological(self.outputs):
            if not isinstance(op, te.ComputeOp):
                continue
            inputs_changed = any(t in replaced for t in op.input_tensors)
            contraction = op.reduce_axis and op.axis and self.cls[op] != CONST
            packs = self._packable(op) if contraction else []
            if not packs and not inputs_changed:
                continue
            panels = _TensorMap()
            for b, width in packs:
                panels[b] = (self._panel(b, width), width)

            def read(t: te.Tensor, idx: list, outer: list, panels=panels) -> Any:
                if t in panels:  # read as B[n, k] (_packable)
                    bp, width = panels[t]
                    return bp(tirx.floordiv(idx[0], width), idx[1], tirx.floormod(idx[0], width))
                return replaced.get(t, t)(*idx)

            new = _recompute(op, read)
            cls = self.cls[op]
            for i, t in enumerate(new):
                replaced[op.output(i)] = t
                self.cls[t.op] = cls
        self.outputs = [replaced.get(t, t) for t in self.outputs]

    def _packable(self, op: Any) -> list[tuple[te.Tensor, int]]:
        """CONST 2-d tensors read as ``B[n, k]`` (``n`` the last output
        axis, ``k`` a reduction axis) by the contraction ``op``."""
        n_var = op.axis[-1].var
        reduce_vars = _reduce_vars(op)
        reads = _TensorMap()
        tensors: list[te.Tensor] = []

        def on_call(call: Any) -> None:
            if call.op.name == "te.tensor_load":
                t = call.args[0]
                if t not in reads:
                    reads[t] = []
                    tensors.append(t)
                reads[t].append(list(call.args[1:]))

        for b in op.body:
            tvm_ffi.structural_walk(b, (tvm.ir.expr.Call, on_call))
        found = []
        for t in tensors:
            uses = reads[t]
            if self.cls.get(t.op) != CONST or len(t.shape) != 2:
                continue
            if not all(
                idx[0].same_as(n_var) and any(idx[1].same_as(k) for k in reduce_vars)
                for idx in uses
            ):
                continue
            width = _pack_width(t.shape[0], t.dtype)
            if width is not None and int(t.shape[0]) == int(op.axis[-1].dom.extent):
                found.append((t, width))
        return found

    def _panel(self, b: te.Tensor, width: int) -> te.Tensor:
        n, k = (int(d) for d in b.shape)
        panel = te.compute(
            (n // width, k, width),
            lambda no, kk, ni: b[no * width + ni, kk],
            name=f"{b.op.name}_packed",
            attrs={MATERIALIZE: 1},
        )
        self.cls[panel.op] = CONST
        return panel


@dataclass
class _Stages:
    """[HOIST] The prologue and the step as TE graphs, with their interfaces."""

    prologue_inputs: list[te.Tensor]  # among x-sequence, captured placeholders
    prologue_outputs: list[te.Tensor]  # hoisted tensors; SEQ ones with a leading T
    hoisted_seq: list[bool]  # per prologue output: has a T axis (read row t)
    step_inputs: list[te.Tensor]  # step placeholders (x, state, captured, hoisted views)
    step_outputs: list[te.Tensor]  # out_t leaves then new state leaves (distinct computes)
    hoisted_views: list[te.Tensor]  # step placeholders of the hoisted tensors, per prologue output
    padded: bool  # the T axis of the prologue's tensors is padded_length(T)


def _copy_of(t: te.Tensor) -> te.Tensor:
    return te.compute(t.shape, lambda *i: t(*i), name="copy")


def padded_length(length: Any) -> Any:
    """[HOIST] The leading extent of batched prologue tensors when a
    contraction's row tile must span steps (``_tiles_within_step``):
    ``length`` rounded up to a whole number of tiles, so that the tiling
    needs no bounds test (rows past the end compute from the last step and
    are never read)."""
    return (length + ROW_TILE - 1) // ROW_TILE * ROW_TILE


def _tiles_within_step(rows: int) -> bool:
    """Whether ``rows`` rows per step make whole register tiles of 4 to
    ROW_TILE rows (otherwise a batched contraction's tile spans steps)."""
    return any(rows % d == 0 for d in range(4, ROW_TILE + 1))


def _hoist(graph: _Graph, xs: list[te.Tensor], length: Any) -> _Stages:
    """[HOIST] Split ``graph``: CONST/SEQ reductions and packings move to the
    prologue (SEQ ones batched over the padded ``length``, reading ``xs``)."""
    cls = graph.cls
    ops = _topological(graph.outputs)
    hoisted = [
        op
        for op in ops
        if isinstance(op, te.ComputeOp)
        and cls[op] != STEP
        and op.num_outputs == 1
        and (op.reduce_axis or MATERIALIZE in op.attrs)
    ]
    hoisted_set = set(hoisted)
    padded = any(
        cls[op] == SEQ
        and op.reduce_axis
        and not _tiles_within_step(math.prod(int(d) for d in op.output(0).shape[:-1]))
        for op in hoisted
    )
    lead = padded_length(length) if padded else length
    # Prologue: every operation a hoisted one needs, SEQ ones batched.
    seq_of = _TensorMap(((x.op, x.value_index), xt) for x, xt in zip(graph.x, xs, strict=True))
    pro = _TensorMap()

    def pro_tensor(t: te.Tensor) -> te.Tensor:
        return seq_of.get(t, pro.get(t, t))

    for op in _topological([op.output(0) for op in hoisted]):
        if not isinstance(op, te.ComputeOp):
            continue
        batched = cls[op] == SEQ

        def read(t: te.Tensor, idx: list, outer: list) -> Any:
            source = pro_tensor(t)
            if t in seq_of:
                step = tirx.min(outer[0], length - 1) if padded else outer[0]
                return source(step, *idx)
            if cls[t.op] == SEQ:
                return source(*outer, *idx)
            return source(*idx)

        for i, t in enumerate(_recompute(op, read, lead if batched else None)):
            pro[op.output(i)] = t
    prologue_outputs = [pro[op.output(0)] for op in hoisted]
    # Step: hoisted tensors become placeholders (a view of row t, or the whole).
    views = _TensorMap(
        ((op, 0), te.placeholder(op.output(0).shape, op.output(0).dtype, name=op.name))
        for op in hoisted
    )
    step = _TensorMap(views)
    for op in _topological(graph.outputs):
        if not isinstance(op, te.ComputeOp) or op in hoisted_set:
            continue
        if any(t in step for t in op.input_tensors):
            for i, t in enumerate(_recompute(op, lambda t, idx, _o: step.get(t, t)(*idx))):
                step[op.output(i)] = t
    step_outputs = []
    for t in graph.outputs:
        t = step.get(t, t)
        if isinstance(t.op, te.PlaceholderOp) or any(t.same_as(o) for o in step_outputs):
            t = _copy_of(t)
        step_outputs.append(t)
    used_ops = set(_topological(step_outputs))
    step_inputs = [
        ph for ph in (*graph.x, *graph.state, *graph.captured, *views.values()) if ph.op in used_ops
    ]
    pro_ops = set(_topological(prologue_outputs)) if prologue_outputs else set()
    prologue_inputs = [ph for ph in (*xs, *graph.captured) if ph.op in pro_ops]
    return _Stages(
        prologue_inputs,
        prologue_outputs,
        [cls[op] == SEQ for op in hoisted],
        step_inputs,
        step_outputs,
        [views[op.output(0)] for op in hoisted],
        padded,
    )


# ============================================================== [SCHED]
def _uses(expr: Any, var: Any) -> bool:
    hit = tvm_ffi.structural_walk(
        expr, (tirx.Var, lambda v: tvm_ffi.VisitInterrupt(v) if v.same_as(var) else None)
    )
    return hit is not None


def _accesses(block: Any) -> list[list[Any]]:
    """Index lists of every buffer read and write in ``block``'s body and init."""
    found: list[list[Any]] = []

    def on_access(node: Any) -> None:
        found.append(list(node.indices))

    for stmt in (block.body, block.init):
        if stmt is not None:
            tvm_ffi.structural_walk(stmt, ((tvm.ir.expr.TensorLoad, tirx.BufferStore), on_access))
    return found


def _contiguous(block: Any, var: Any, lanes: int) -> bool:
    """Every access moves by one element (or not at all) as ``var`` steps
    through a vector of ``lanes``: vectorising ``var`` gives vector loads."""

    def const_multiple(e: Any) -> bool:
        return isinstance(e, tirx.IntImm) and int(e.value) % lanes == 0

    for indices in _accesses(block):
        if not indices:
            continue
        *outer, last = indices
        for e in outer:
            if _uses(e, var) and not (
                isinstance(e, tirx.FloorDiv) and e.a.same_as(var) and const_multiple(e.b)
            ):
                return False
        if not _uses(last, var):
            continue
        if last.same_as(var):
            continue
        if isinstance(last, tirx.FloorMod) and last.a.same_as(var) and const_multiple(last.b):
            continue
        if isinstance(last, tirx.Add) and (
            (last.a.same_as(var) and not _uses(last.b, var))
            or (last.b.same_as(var) and not _uses(last.a, var))
        ):
            continue
        return False
    return True


def _static(extent: Any) -> int | None:
    return int(extent) if isinstance(extent, tirx.IntImm | int) else None


def _is_copy(block: Any) -> bool:
    """A block that only moves data (its value is one buffer read)."""
    body = block.body
    if not isinstance(body, tirx.BufferStore):
        return False
    value = body.value
    while isinstance(value, tirx.Cast):
        value = value.value
    return isinstance(value, tvm.ir.expr.TensorLoad)


def _size(stmt: Any) -> int:
    """The number of IR nodes in ``stmt``."""
    count = 0

    def on_node(_node: Any) -> None:
        nonlocal count
        count += 1

    tvm_ffi.structural_walk(stmt, on_node)
    return count


def _binds_bool(block: Any) -> bool:
    found = tvm_ffi.structural_walk(
        block.body,
        (tirx.Let, lambda let: tvm_ffi.VisitInterrupt(let) if str(let.var.ty) == "bool" else None),
    )
    return found is not None


def _is_reduction(block: Any) -> bool:
    return any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars)


def _lanes(dtype: str) -> int:
    return max(1, VECTOR_BYTES // max(1, tvm.DataType(dtype).bits // 8))


def _schedule(func: Any, parallel: bool, unscheduled: list[str]) -> Any:
    """[SCHED] A CPU schedule for a stage created by ``te.create_prim_func``.
    Each block's steps are kept only if TVM accepts them all: a block whose
    schedule TVM finds illegal keeps its plain loops (slower, never wrong)
    and its name goes to ``unscheduled``."""
    sch = s_tir.Schedule(func)
    _inline(sch, sch.get_sblock("root"))
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]:
        saved = sch.copy()
        try:
            b = sch.get_sblock(name)
            node = sch.get(b)
            if _is_reduction(node):
                _tile_contraction(sch, b, node, parallel)
            elif MATERIALIZE in node.annotations:
                _pack_loops(sch, b)
            else:
                _vectorize(sch, b, node, parallel)
        except (s_tir.ScheduleError, tvm.error.InternalError):
            sch = saved
            unscheduled.append(str(name))
    return sch.mod["main"]


def _pack_loops(sch: Any, b: Any) -> None:
    """A packing ``Bp[no, k, ni] = B[no * w + ni, k]`` (``_Graph._panel``)
    copied a (w x 16) tile at a time, a vector of w along ni: the writes are
    contiguous, the strided reads stay within the tile's cache lines (36 us
    for a 768 x 256 float32 weight, against 88 us element by element)."""
    no, k, ni = sch.get_loops(b)
    extent = _static(sch.get(k).extent)
    if extent is not None and extent % 16 == 0:
        ko, ki = sch.split(k, [None, 16])
        sch.reorder(no, ko, ki, ni)
    sch.vectorize(ni)


def _inline(sch: Any, root: Any) -> None:
    """Inline spatial blocks into their consumers, consumers first, except
    outputs, packings, producers of a reduction (which would recompute them
    for every output element) unless they only move data, an expensive
    producer read at several places (each would get a copy), and where the
    consumer would outgrow schedule.py's INLINE_BUDGET (RULE BUDGET there:
    LLVM code generation substitutes every let)."""
    outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root)}
    for b in reversed(sch.get_child_blocks(root)):
        node = sch.get(b)
        if node.name_hint in outputs or MATERIALIZE in node.annotations or _is_reduction(node):
            continue
        if not isinstance(node.body, tirx.BufferStore):
            continue
        consumers = [sch.get(c) for c in sch.get_consumers(b)]
        if any(_is_reduction(c) for c in consumers) and not _is_copy(node):
            continue
        mine = expression_cost(node.body.value)
        name = str(node.body.buffer.name)
        sites = 0
        fits = True
        for c in consumers:
            if not isinstance(c.body, tirx.BufferStore):
                fits = False
                break
            theirs = expression_cost(c.body.value)
            reads = theirs.reads.get(name, 0)
            sites += reads
            fits = fits and theirs.size + reads * mine.size <= INLINE_BUDGET
        if not fits or (sites > 1 and mine.size > INLINE_MAX_COPIED):
            continue
        try:
            sch.compute_inline(b)
        except s_tir.ScheduleError:
            pass


def _vectorize(sch: Any, b: Any, node: Any, parallel: bool) -> None:
    """Vectorise the innermost loop of a spatial block when it is
    contiguous; spread the other loops over the thread pool when the block
    is heavy (elements times expression size reach PARALLEL_MIN_WORK)."""
    loops = sch.get_loops(b)
    if not loops or not node.iter_vars:
        return
    extent = _static(node.iter_vars[-1].dom.extent)
    dtype = node.body.buffer.dtype if isinstance(node.body, tirx.BufferStore) else "float32"
    lanes = _lanes(str(dtype))
    if extent is None or extent < 2 or not _contiguous(node, node.iter_vars[-1].var, lanes):
        return
    if _binds_bool(node):
        return  # TVM 0.27's vectoriser fails on a let-bound vector of booleans
    inner = loops[-1]
    if extent > lanes:
        if extent % lanes:
            return
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)
    outer = sch.get_loops(b)[:-1]
    elements = math.prod(_static(iv.dom.extent) or SYMBOLIC_EXTENT for iv in node.iter_vars)
    if parallel and outer and elements * _size(node.body) >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def _tile_contraction(sch: Any, b: Any, node: Any, parallel: bool) -> None:
    """Register tile: rows x ``width`` output elements accumulate in
    registers over the reduction, ``width`` vectorised (two vectors)."""
    spatial = [iv for iv in node.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
    n_spatial = len(spatial)
    if n_spatial == 0 or len(node.iter_vars) != len(sch.get_loops(b)):
        return
    store = node.body
    dtype = str(store.buffer.dtype) if isinstance(store, tirx.BufferStore) else "float32"
    lanes = _lanes(dtype)
    n_extent = _static(spatial[-1].dom.extent)
    if n_extent is None or n_extent % lanes or not _contiguous(node, spatial[-1].var, lanes):
        return
    width = 2 * lanes if n_extent % (2 * lanes) == 0 else lanes
    loops = sch.get_loops(b)
    rows, n_loop, reduce_loops = loops[: n_spatial - 1], loops[n_spatial - 1], loops[n_spatial:]
    no, ni = sch.split(n_loop, [None, width])
    budget = ROW_TILE if width == 2 * lanes else 12
    outer, tile_rows = _tile_rows(
        sch, rows, [_static(iv.dom.extent) for iv in spatial[:-1]], budget
    )
    sch.reorder(*outer, no, *reduce_loops, *tile_rows, ni)
    local = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(local, no)
    for row in tile_rows:
        sch.unroll(row)
    sch.vectorize(ni)
    write_back = sch.get_loops(local)[-1]
    sch.vectorize(write_back)
    work = math.prod(_static(iv.dom.extent) or SYMBOLIC_EXTENT for iv in node.iter_vars)
    if parallel and work >= PARALLEL_MIN_WORK:
        tiles = [*outer, no]
        sch.parallel(sch.fuse(*tiles) if len(tiles) > 1 else no)
    init = sch.decompose_reduction(b, reduce_loops[0])
    sch.vectorize(sch.get_loops(init)[-1])


def _tile_rows(
    sch: Any, rows: list[Any], extents: list[int | None], budget: int
) -> tuple[list[Any], list[Any]]:
    """Split the row loops of a contraction into loops over tiles and the
    (at most ``budget``) rows of one tile. The step axis of a batched
    prologue is the only symbolic extent (first, a multiple of ROW_TILE)."""
    if not rows:
        return [], []
    step = rows[0] if extents[0] is None else None
    static = rows[1:] if step is not None else rows
    total = math.prod(e for e in extents if e is not None)
    divisor = max(d for d in range(1, budget + 1) if total % d == 0)
    if static and (step is None or _tiles_within_step(total)):
        fused = sch.fuse(*static) if len(static) > 1 else static[0]
        tiles, tile = sch.split(fused, [None, divisor])
        return ([step] if step is not None else []) + [tiles], [tile]
    # Few rows per step: a tile spans steps (the padded length divides).
    per_step = 1 << int(math.log2(max(1, budget // total)))
    tiles, tile = sch.split(step, [None, min(per_step, ROW_TILE)])
    fused = [sch.fuse(*static) if len(static) > 1 else static[0]] if static else []
    return [tiles], [tile, *fused]


# ================================================================ [LOOP]
def _param(name: str, shape: Sequence[Any], dtype: str) -> Any:
    """A loop-function parameter [RULE ALIGN]."""
    return tirx.decl_buffer(
        list(shape),
        dtype,
        name,
        data_alignment=max(1, tvm.DataType(dtype).bits // 8),
        offset_factor=1,
    )


def _view(buf: Any) -> Any:
    """A buffer like ``buf`` whose offset a ``match_buffer`` binds."""
    return tirx.decl_buffer(
        list(buf.shape),
        buf.dtype,
        buf.name,
        elem_offset=tirx.Var(f"{buf.name}_offset", "int32"),
        data_alignment=max(1, tvm.DataType(buf.dtype).bits // 8),
        offset_factor=1,
    )


def _region(buf: Any, lead: Sequence[Any]) -> Any:
    """``buf[lead..., :, ...]``: the sub-tensor at the leading indices ``lead``."""
    ranges = [Range.from_min_extent(i, 1) for i in lead]
    ranges += [Range.from_min_extent(0, d) for d in list(buf.shape)[len(lead) :]]
    return tirx.BufferRegion(buf, ranges)


def _copy(dst: Any, dst_lead: Sequence[Any], src: Any, src_lead: Sequence[Any], name: str) -> Any:
    """A block copying ``src[src_lead]`` to ``dst[dst_lead]``."""
    shape = list(dst.shape)[len(dst_lead) :]
    idx = [tirx.Var(f"i{k}", "int32") for k in range(len(shape))]
    stmt: Any = tirx.BufferStore(dst, tirx.BufferLoad(src, [*src_lead, *idx]), [*dst_lead, *idx])
    for var, extent in reversed(list(zip(idx, shape, strict=True))):
        stmt = tirx.For(var, tirx.const(0, "int32"), extent, tirx.ForKind.SERIAL, stmt)
    block = s_tir.SBlock([], [_region(src, src_lead)], [_region(dst, dst_lead)], name, stmt)
    return s_tir.SBlockRealize([], True, block)


def _stage_body(func: Any, mapping: Mapping[Any, Any]) -> tuple[Any, list[Any]]:
    """A stage's statement with its parameter buffers replaced by
    ``mapping``'s, and the buffers it allocates."""
    for param, buf in list(mapping.items()):
        for old, new in zip(param.shape, buf.shape, strict=True):
            if isinstance(old, tirx.Var) and not old.same_as(new):
                mapping = {**mapping, old: new}  # a renewed symbolic length
    root = func.body.block
    body = tvm_ffi.structural_map(root.body, (tirx.Var, lambda v: mapping.get(v, v)))
    return body, list(root.alloc_buffers)


@dataclass
class _Interface:
    """The step's placeholders, in the loop function's parameter order."""

    x: list[te.Tensor]
    state: list[te.Tensor]
    captured: list[te.Tensor]  # captured leaves, then constants
    outputs: list[te.Tensor]  # out_t leaves
    xs: list[te.Tensor]  # the prologue's placeholders of the whole sequences
    length: Any  # T


def _loop_function(io: _Interface, stages: _Stages, schedule: Callable[[Any], Any]) -> Any:
    """[LOOP] The PrimFunc ``main(xs..., init..., captured..., outs...,
    final..., hoisted...)``: the prologue, the loop over the scheduled step
    with its buffers bound by ``match_buffer``, the final state."""
    length = io.length
    xs = [_param(f"xs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(io.x)]
    init = [_param(f"init{i}", t.shape, t.dtype) for i, t in enumerate(io.state)]
    caps = [_param(f"captured{i}", t.shape, t.dtype) for i, t in enumerate(io.captured)]
    outs = [_param(f"outs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(io.outputs)]
    final = [_param(f"final{i}", t.shape, t.dtype) for i, t in enumerate(io.state)]
    hoisted = [
        _param(f"hoisted{i}", t.shape, t.dtype) for i, t in enumerate(stages.prologue_outputs)
    ]
    doubled = [
        tirx.decl_buffer([2, *t.shape], t.dtype, f"state{i}") for i, t in enumerate(io.state)
    ]
    stmts: list[Any] = []
    allocs: list[Any] = list(doubled)

    if stages.prologue_outputs:
        pro = schedule(te.create_prim_func([*stages.prologue_inputs, *stages.prologue_outputs]))
        sources = _TensorMap()
        for ph, buf in zip([*io.xs, *io.captured], [*xs, *caps], strict=True):
            sources[ph] = buf
        params = list(pro.params)
        mapping = {p: sources[ph] for p, ph in zip(params, stages.prologue_inputs, strict=False)}
        mapping.update(zip(params[len(stages.prologue_inputs) :], hoisted, strict=True))
        stmt, extra = _stage_body(pro, mapping)
        stmts.append(stmt)
        allocs += extra
    stmts += [
        _copy(d, [0], i, [], f"init{k}") for k, (d, i) in enumerate(zip(doubled, init, strict=True))
    ]

    # The step: every parameter buffer bound to where its data lives at step t.
    t = tirx.Var("t", "int32")
    step = schedule(te.create_prim_func([*stages.step_inputs, *stages.step_outputs]))
    sources = _TensorMap()
    for ph, buf in zip(io.x, xs, strict=True):
        sources[ph] = (buf, [t])
    for ph, buf in zip(io.state, doubled, strict=True):
        sources[ph] = (buf, [tirx.floormod(t, 2)])
    for ph, buf in zip(io.captured, caps, strict=True):
        sources[ph] = (buf, [])
    for ph, buf, seq in zip(stages.hoisted_views, hoisted, stages.hoisted_seq, strict=True):
        sources[ph] = (buf, [t] if seq else [])
    params = list(step.params)
    places = [sources[ph] for ph in stages.step_inputs]
    places += [(buf, [t]) for buf in outs] + [(buf, [tirx.floormod(t + 1, 2)]) for buf in doubled]
    mapping = {}
    matches, reads, writes = [], [], []
    for k, (param, (buf, lead)) in enumerate(zip(params, places, strict=True)):
        region = _region(buf, lead)
        (reads if k < len(stages.step_inputs) else writes).append(region)
        if lead:
            mapping[param] = _view(param)
            matches.append(s_tir.MatchBufferRegion(mapping[param], region))
        else:
            mapping[param] = buf
    stmt, extra = _stage_body(step, mapping)
    allocs += extra
    block = s_tir.SBlock([], reads, writes, "step", stmt, match_buffers=matches)
    realize = s_tir.SBlockRealize([], True, block)
    stmts.append(tirx.For(t, tirx.const(0, "int32"), length, tirx.ForKind.SERIAL, realize))
    last = [tirx.floormod(length, 2)]
    stmts += [
        _copy(f, [], d, last, f"final{k}")
        for k, (f, d) in enumerate(zip(final, doubled, strict=True))
    ]

    body = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
    root = s_tir.SBlock([], [], [], "root", body, alloc_buffers=allocs)
    params = [*xs, *init, *caps, *outs, *final, *hoisted]
    func = tirx.PrimFunc(params, s_tir.SBlockRealize([], True, root))
    attrs = {"global_symbol": "main", "tirx.noalias": True, "s_tir": True}
    for key, value in attrs.items():
        func = func.with_attr(key, value)
    return func


@dataclass
class LoweredLoop:
    """A whole loop as TIR, before code generation, and what its parameters
    are: ``func(xs..., init..., captured..., constants..., outs..., final...,
    scratch...)`` (see ``_loop_function``)."""

    func: Any  # the PrimFunc
    x: list[_Leaf]
    state: list[_Leaf]
    captured: list[_Leaf]
    constants: list[np.ndarray]
    outputs: list[_Leaf]
    scratch: list[tuple[_Leaf, bool]]  # prologue results; True: with a leading T
    padded: bool  # that leading axis is padded_length(T)
    unscheduled: list[str]  # blocks left with plain loops (_schedule)

    def scratch_rows(self, length: int) -> int:
        """The rows of the scratch buffers with a leading T, for ``length`` steps."""
        return -(-length // ROW_TILE) * ROW_TILE if self.padded else length


@dataclass
class _Compiled:
    """One build: the compiled function and its lowering."""

    function: Any
    lowered: LoweredLoop


def lower_loop(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
    parallel: bool,
) -> LoweredLoop:
    """[EVAL] to [LOOP]: the loop over ``body`` as one scheduled PrimFunc."""
    builder = _StepTE(dims, captured, functions, module)
    x_ph, s_ph, result = builder.evaluate(body)
    if not isinstance(result, tuple) or len(result) != 2:
        raise BackendError("a loop body returns (out_t, new_state)", body.span)
    out_t, new_state = result
    x_leaves, s_leaves = _te_leaves(x_ph), _te_leaves(s_ph)
    cap_leaves = [t for v in captured for t in _te_leaves(builder.captured[v])]
    cap_leaves += [ph for ph, _ in builder.constants]
    out_leaves, new_leaves = _te_leaves(out_t), _te_leaves(new_state)
    if [(tuple(t.shape), t.dtype) for t in new_leaves] != [
        (tuple(t.shape), t.dtype) for t in s_leaves
    ]:
        raise BackendError("the new state's types differ from the state's", body.span)
    graph = _Graph(x_leaves, s_leaves, cap_leaves, out_leaves + new_leaves)
    graph.classify()
    graph.pack()
    graph.classify()
    length = tirx.Var("T", "int32")
    xs_ph = [te.placeholder([length, *t.shape], t.dtype, name=f"{t.op.name}_seq") for t in x_leaves]
    stages = _hoist(graph, xs_ph, length)

    unscheduled: list[str] = []
    func = _loop_function(
        _Interface(x_leaves, s_leaves, cap_leaves, out_leaves, xs_ph, length),
        stages,
        lambda f: _schedule(f, parallel, unscheduled),
    )

    def leaf(t: te.Tensor) -> _Leaf:
        return _Leaf(tuple(int(d) for d in t.shape), str(t.dtype))

    return LoweredLoop(
        func,
        [leaf(t) for t in x_leaves],
        [leaf(t) for t in s_leaves],
        [leaf(t) for t in cap_leaves[: len(cap_leaves) - len(builder.constants)]],
        [data for _, data in builder.constants],
        [leaf(t) for t in out_leaves],
        [
            (_Leaf(tuple(int(d) for d in t.shape[1 if seq else 0 :]), str(t.dtype)), seq)
            for t, seq in zip(stages.prologue_outputs, stages.hoisted_seq, strict=True)
        ],
        stages.padded,
        unscheduled,
    )


def _compile(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
    target: Any,
    parallel: bool,
) -> _Compiled:
    lowered = lower_loop(body, dims, captured, functions, module, parallel)
    with building(target):
        executable = tvm.compile(tvm.IRModule({"main": lowered.func}), target=target)
    return _Compiled(executable["main"], lowered)


# ================================================================ running
@dataclass(frozen=True)
class _Argument:
    """One argument of a loop kernel: its type and, per leaf, the leaf's
    type and numpy dtype (a key is ``uint32[2]``)."""

    type: Type
    what: str
    leaves: tuple[tuple[Type, np.dtype], ...]

    @staticmethod
    def of(t: Type, what: str) -> _Argument:
        leaves = tuple(
            (leaf, np.dtype("uint32" if isinstance(leaf, KeyType) else leaf.dtype))  # type: ignore[attr-defined]
            for leaf in _leaves(t)
        )
        return _Argument(t, what, leaves)

    def arrays(self, value: Any) -> list[np.ndarray]:
        """``value``'s leaves as arrays DLPack can pass: C-contiguous and
        writeable (DLPack cannot export a read-only array), copied only
        when they are not."""
        if isinstance(self.type, TupleType):
            values = _flatten(self.type, value, self.what)
        else:
            values = [value]
        out = []
        for v, (_, dtype) in zip(values, self.leaves, strict=True):
            array = v.data if isinstance(v, PRNGKey) else np.asarray(v)
            if array.dtype != dtype:
                raise BackendError(
                    f"{self.what}: expected {dtype}, got {array.dtype}{list(array.shape)}"
                )
            if not (array.flags.c_contiguous and array.flags.writeable):
                array = array.copy(order="C")
            out.append(array)
        return out


class LoopKernel:
    """``cf.foreach(body, xs, init)`` compiled whole (see the module's
    docstring). ``kernel(xs, init, *captured)`` returns ``(outputs,
    final_state)`` as the interpreter's foreach does, with numpy arrays
    (keys as ``uint32[2]`` arrays; ``PRNGKey`` values are accepted).
    ``captured`` lists the free variables of the body whose values are the
    extra arguments. One build per binding of the body's symbolic
    dimensions, made at the first call that needs it."""

    def __init__(
        self,
        body: Function,
        target: Any,
        functions: Mapping[Var, Function],
        module: IRModule | None,
        parallel: bool = True,
    ) -> None:
        self.body = body
        self.target = make_target(target)
        if self.target.kind.name != "llvm":
            raise BackendError(
                f"a whole loop compiles for the CPU (llvm), not {self.target.kind.name}", body.span
            )
        self.parallel = parallel
        self.functions = dict(functions)
        self.module = module
        if not body.has_type or not all(p.has_type for p in body.params):
            raise BackendError("the loop body has no types: run effir.check first", body.span)
        self.captured = tuple(v for v in free_vars(body) if v not in self.functions)
        for v in self.captured:
            if not v.has_type or isinstance(v.checked_type, FuncType):
                raise BackendError(
                    f"the loop body calls %{v.name_hint}, a function it captures: "
                    "pass it in `functions`",
                    v.span,
                )
        self.x_type = body.params[0].checked_type
        self.state_type = body.params[1].checked_type
        ret = body.checked_type.ret_type  # type: ignore[attr-defined]
        if not isinstance(ret, TupleType) or len(ret.fields) != 2:
            raise BackendError("a loop body returns (out_t, new_state)", body.span)
        self.out_type = ret.fields[0]
        self._xs = _Argument.of(self.x_type, "the sequence")
        self._init = _Argument.of(self.state_type, "the initial state")
        self._captured = [_Argument.of(v.checked_type, f"%{v.name_hint}") for v in self.captured]
        self._symbolic = not _is_static(self)
        self._builds: dict[tuple[tuple[str, int], ...], _Compiled] = {}
        self._local = threading.local()

    @property
    def builds(self) -> int:
        """How many builds (bindings of the symbolic dimensions) were made."""
        return len(self._builds)

    def specialize(self, dims: Mapping[str, int] | None = None) -> _Compiled:
        """The build for ``dims`` (the values of the symbolic dimensions)."""
        key = tuple(sorted((dims or {}).items()))
        if key not in self._builds:
            self._builds[key] = _compile(
                self.body,
                dict(key),
                self.captured,
                self.functions,
                self.module,
                self.target,
                self.parallel,
            )
        return self._builds[key]

    def __call__(self, xs: Any, init: Any, *captured: Any) -> tuple[Any, Any]:
        if len(captured) != len(self.captured):
            names = ", ".join("%" + v.name_hint for v in self.captured) or "none"
            raise BackendError(
                f"the loop kernel takes {len(self.captured)} captured value(s) ({names}), "
                f"got {len(captured)}"
            )
        xs_arrays = self._xs.arrays(xs)
        s_arrays = self._init.arrays(init)
        c_arrays: list[np.ndarray] = []
        for argument, value in zip(self._captured, captured, strict=True):
            c_arrays += argument.arrays(value)
        if any(a.ndim == 0 for a in xs_arrays) or len({a.shape[0] for a in xs_arrays}) != 1:
            shapes = [list(a.shape) for a in xs_arrays]
            raise BackendError(f"the sequences must share one leading length, got shapes {shapes}")
        length = xs_arrays[0].shape[0]
        build = self._build_for(xs_arrays, s_arrays, c_arrays)
        outs = [np.empty((length, *leaf.shape), leaf.dtype) for leaf in build.lowered.outputs]
        if length == 0:
            finals = [a.copy() for a in s_arrays]
        else:
            if length >= 2**31 or any(a.size >= 2**31 for a in (*xs_arrays, *outs)):
                raise BackendError("a loop kernel indexes with int32: the sequence is too long")
            finals = [np.empty(leaf.shape, leaf.dtype) for leaf in build.lowered.state]
            rows = build.lowered.scratch_rows(length)
            scratch = self._scratch(build, rows)
            args = [
                *xs_arrays,
                *s_arrays,
                *c_arrays,
                *build.lowered.constants,
                *outs,
                *finals,
                *scratch,
            ]
            build.function(*[tvm_ffi.from_dlpack(a) for a in args])
        return _rebuild(self.out_type, iter(outs)), _rebuild(self.state_type, iter(finals))

    def _build_for(
        self, xs: list[np.ndarray], init: list[np.ndarray], captured: list[np.ndarray]
    ) -> _Compiled:
        """The build for the arguments' shapes, which must match the body's types."""
        if not self._symbolic and self._builds:
            build = next(iter(self._builds.values()))
            if (
                all(a.shape[1:] == leaf.shape for a, leaf in zip(xs, build.lowered.x, strict=True))
                and all(
                    a.shape == leaf.shape for a, leaf in zip(init, build.lowered.state, strict=True)
                )
                and all(
                    a.shape == leaf.shape
                    for a, leaf in zip(captured, build.lowered.captured, strict=True)
                )
            ):
                return build  # the fast path: nothing to bind
        dims: dict[str, int] = {}
        for (t, _), a in zip(self._xs.leaves, xs, strict=True):
            _bind_dims(t, a.shape[1:], dims, "a sequence element")
        for (t, _), a in zip(self._init.leaves, init, strict=True):
            _bind_dims(t, a.shape, dims, "the initial state")
        leaves = [(t, arg.what) for arg in self._captured for t, _ in arg.leaves]
        for (t, what), a in zip(leaves, captured, strict=True):
            _bind_dims(t, a.shape, dims, what)
        return self.specialize(dims)

    def _scratch(self, build: _Compiled, rows: int) -> list[np.ndarray]:
        """The prologue's buffers for ``rows`` (padded) steps, kept between
        calls: fresh pages cost more than the prologue fills them (a page
        fault per 4 KiB). One set per thread, so that calls from several
        threads do not share them."""
        cache = self._local.__dict__.setdefault("scratch", {})
        held = cache.get(id(build))
        if held is None or held[0] != rows:
            arrays = [
                np.empty(((rows,) if seq else ()) + leaf.shape, leaf.dtype)
                for leaf, seq in build.lowered.scratch
            ]
            held = cache[id(build)] = (rows, arrays)
        return held[1]

    def run_foreach(self, closure: Any, xs: Any, init: Any) -> tuple[Any, Any]:
        """The interpreter's kernel hook for a ``cf.foreach`` call
        (``interpret(..., kernels={call: kernel.run_foreach})``): the
        captured values are read from the body closure's environment, keys
        come back as ``PRNGKey``."""
        captured = [closure.env.lookup(v) for v in self.captured]
        outputs, final = self(xs, init, *captured)
        keys = [isinstance(t, KeyType) for t in _leaves(self.state_type)]
        leaves = _flatten(self.state_type, final, "the final state")
        final = _rebuild(
            self.state_type, iter(PRNGKey(v) if k else v for v, k in zip(leaves, keys, strict=True))
        )
        return outputs, final


def build_loop(
    body: Function,
    target: Any = "llvm",
    *,
    functions: Mapping[Var, Function] | None = None,
    module: IRModule | None = None,
    dims: Mapping[str, int] | None = None,
    parallel: bool = True,
) -> LoopKernel:
    """Compile ``cf.foreach(body, ...)`` whole for ``target`` (``"llvm"``, the
    host CPU, or an llvm ``tvm.target.Target``).

    ``body`` is the typed loop body (``effir.check``); ``functions`` gives
    the functions it calls through captured variables (a primitive function
    bound outside the loop), ``module`` the global functions it calls. With
    ``dims`` (values of the symbolic dimensions), or when the body's types
    are static, the kernel is built now; otherwise at the first call.
    ``parallel``: large contractions use TVM's thread pool (all cores)."""
    kernel = LoopKernel(body, target, functions or {}, module, parallel)
    if dims is not None or _is_static(kernel):
        kernel.specialize(dims)
    return kernel


def _is_static(kernel: LoopKernel) -> bool:
    types = [*_leaves(kernel.x_type), *_leaves(kernel.state_type)]
    types += [t for v in kernel.captured for t in _leaves(v.checked_type)]
    return all(not isinstance(t, TensorType) or t.is_static for t in types)
