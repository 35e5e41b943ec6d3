"""Kernels: a primitive function compiled by TVM, callable on numpy arrays.

``build_kernel(fn, target)`` compiles a closed function whose body computes
operator calls on its parameters and constants (what ``fuse`` and
``lower-tvm`` make: ``fn (%p0: Tensor[...], ..., Primitive=1) { let ...; }``):

1. Parameters become TE placeholders, one per tensor of their (flattened)
   type: a tuple parameter is several tensors, a ``Key`` is ``uint32[2]``.
   Shapes must be static; symbolic dimensions are bound by ``dims``.
2. The body is evaluated binding by binding (a loop over the let chain, a
   post-order walk of each value: no recursion), each operator call through
   its ``te`` rule with the call's checked type as the result type. Scalar
   constants become 0-d computes of an immediate (inlined into their users);
   other constants become extra kernel inputs, bound once at build time.
3. The result's tensors are the outputs (a result that is a parameter, a
   constant input or another output is copied, so outputs never alias).
   ``te.create_prim_func`` makes the TIR function, ``schedule/`` schedules
   it for the target, ``tvm.compile`` builds it.

Calling: arguments are checked against the parameter types and passed
zero-copy through DLPack when C-contiguous and writable, copied otherwise
(the kernel's parameters are declared aligned to their element size only,
see ``relax_alignment``); outputs are fresh arrays, or the caller's
(``call_into``, for an executor that reuses buffers). Compiled kernels are
cached by the function's text and parameter types, the bound dimensions,
the target and whether the kernel is scheduled.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import te, tirx

from effir.passes.analyses.infer_type import infer_expr

from ....ir import type_tree
from ....ir.diagnostics import Error
from ....ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from ....ir.op import op_def
from ....ir.printer import astext
from ....ir.types import ANY, KeyType, TensorType, TupleType, Type
from ....ir.visitor import post_order
from ....runtime.values import PRNGKey
from .. import precision
from ..runtime.errors import BackendError, check_failure, run_time_error
from ..schedule import schedule_prim_func
from ..target import building, cuda_source_to_ptx, make_target
from . import (
    rounding,
    te_ops,  # noqa: F401  (registers the te rules)
)
from .checks import check_site, collecting_checks, error_output, error_shape
from .constant_calls import folded_call
from .lets import normalised_lets
from .rounding import rounded
from .rules import TEValue, dim_value, symbolic_dims
from .te_ops.common import scalar_constant

KEY = TensorType((2,), "uint32")
"""A PRNG key's tensor: the two threefry words."""


# ================================================================== types
def concrete_type(t: Type, dims: Mapping[str, Any], what: str = "a type") -> Type:
    """``t`` with every symbolic dimension replaced by its value in ``dims``
    (a TIR variable or expression, kept as its name: symbolic, kernel/rules.py); BackendError for
    a dimension left unknown."""

    def concrete(leaf: Type) -> Type:
        if isinstance(leaf, KeyType):
            return leaf
        if not isinstance(leaf, TensorType):
            raise BackendError(
                f"a kernel computes tensors, tuples and keys, not {astext(leaf)} ({what})"
            )
        shape: list[int | str] = []
        for d in leaf.shape:
            if isinstance(d, int):
                shape.append(d)
            elif d != ANY and d in dims:
                shape.append(d if _symbolic(dims[d]) else int(dims[d]))
            elif d == ANY:
                raise BackendError(
                    f"a kernel needs static shapes: {what} ({astext(leaf)}) has a "
                    "data-dependent size (?) that no rule relates to its inputs' sizes"
                )
            else:
                raise BackendError(
                    f"a kernel needs static shapes: {what} ({astext(leaf)}) has the "
                    f"symbolic dimension {d}, which nothing binds here"
                )
        return TensorType(tuple(shape), leaf.dtype)

    return type_tree.map_leaves(t, concrete)


def leaves(t: Type) -> list[TensorType]:
    """The tensors a value of type ``t`` is made of, in order (a key is
    ``KEY``)."""
    out: list[TensorType] = []
    for leaf in type_tree.leaves(t):
        if isinstance(leaf, KeyType):
            out.append(KEY)
        else:
            assert isinstance(leaf, TensorType)
            out.append(leaf)
    return out


def _flatten_value(value: Any, t: Type, out: list[Any], what: str) -> None:
    """Append the arrays of ``value`` (of type ``t``) to ``out``."""

    def mismatch(path: tuple[int, ...], ty: TupleType, _v: Any) -> BackendError:
        name = what + "".join(f".{k}" for k in path)
        return BackendError(f"{name} must be a tuple of {len(ty.fields)} values")

    values = type_tree.flatten(t, value, mismatch=mismatch)
    for ty, v in zip(type_tree.leaves(t), values, strict=True):
        if isinstance(ty, KeyType):
            out.append(v.data if isinstance(v, PRNGKey) else np.asarray(v))
        else:
            out.append(v if isinstance(v, np.ndarray) else np.asarray(v))


def _rebuild(t: Type, arrays: Iterator[np.ndarray]) -> Any:
    """The value of type ``t`` made of the next arrays (keys as ``PRNGKey``)."""
    return type_tree.unflatten(
        t, arrays, lambda ty, a: PRNGKey(a) if isinstance(ty, KeyType) else a
    )


# ================================================================ arrays
def aligned_empty(shape: Sequence[int], dtype: str | np.dtype, alignment: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is ``alignment``-aligned."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start : start + nbytes].view(dt).reshape(tuple(shape))


def _passable(array: np.ndarray) -> bool:
    """Whether TVM may read or write ``array`` in place: DLPack exports only
    writable arrays, and the kernel indexes them as compact (C order)."""
    flags = array.flags
    return flags.c_contiguous and flags.writeable and flags.aligned and array.size > 0


def relax_alignment(func: Any) -> Any:
    """``func`` with its parameters' buffers assumed aligned to their
    element size only. ``create_prim_func`` declares them 64-byte aligned,
    LLVM then emits aligned vector moves, and a numpy array (16-byte
    aligned) makes the kernel fault; unaligned moves cost nothing extra on
    aligned data, so every array can be passed without a copy."""
    replacements = {}
    for b in func.params:
        if not isinstance(b.ty, tirx.BufferType):
            continue  # a scalar parameter (a shape variable)
        replacements[b] = tirx.decl_buffer(
            b.shape,
            b.dtype,
            b.name,
            data=b.data,
            strides=b.strides,
            elem_offset=b.elem_offset,
            data_alignment=max(1, np.dtype(str(b.dtype)).itemsize),
            offset_factor=b.offset_factor,
        )
    return tvm_ffi.structural_map(func, (tirx.Buffer, lambda b: replacements.get(b, b)))


# ================================================================= kernel
@dataclass(frozen=True)
class _Signature:
    params: tuple[Type, ...]  # concrete parameter types
    result: Type  # concrete result type
    inputs: tuple[TensorType, ...]  # flattened parameter tensors
    outputs: tuple[TensorType, ...]  # flattened result tensors


class Kernel:
    """A compiled primitive function: ``kernel(*args)`` returns its result
    (an array, a ``PRNGKey`` for a key, a tuple for a tuple)."""

    def __init__(
        self,
        name: str,
        signature: _Signature,
        module: Any,
        executable: Any,
        target: Any,
        constants: list[np.ndarray],
        checks: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.signature = signature
        self.module = module  # the scheduled TIR (an IRModule)
        self.executable = executable
        self.target = target
        self._constants = constants
        self.checks = checks  # kernel/checks.py: an error output after the outputs
        self._on_cpu = target.kind.name == "llvm"
        self._function: Any = None
        self._constant_handles: list[Any] = []
        self._in_specs = [_spec(t) for t in signature.inputs]
        self._out_specs = [_spec(t) for t in signature.outputs]
        self._all_tensors = all(isinstance(t, TensorType) for t in signature.params)
        self._single_output = isinstance(signature.result, TensorType)
        self._empty_result = all(0 in shape for shape, _ in self._out_specs)

    # ---------------------------------------------------------- calling
    # The call path runs once per kernel call (per loop iteration in an
    # executor), so it compares precomputed numpy dtypes and shapes and
    # skips the generic flattening when every parameter is a tensor.
    def __call__(self, *args: Any) -> Any:
        outs = [np.empty(shape, dtype) for shape, dtype in self._out_specs]
        self._run(self._flatten_args(args), outs)
        if self._single_output:
            return outs[0]
        return _rebuild(self.signature.result, iter(outs))

    def call_into(self, args: Sequence[Any], outs: Sequence[np.ndarray]) -> None:
        """Compute into the caller's arrays ``outs`` (one per result tensor,
        in order), for an executor that reuses its buffers."""
        if len(outs) != len(self._out_specs):
            raise BackendError(
                f"kernel {self.name} has {len(self._out_specs)} outputs, got {len(outs)}"
            )
        for k, (out, spec) in enumerate(zip(outs, self._out_specs, strict=True)):
            if out.dtype != spec[1] or out.shape != spec[0]:
                _mismatch(out, self.signature.outputs[k], f"output {k} of kernel {self.name}")
        self._run(self._flatten_args(tuple(args)), list(outs))

    def _flatten_args(self, args: tuple[Any, ...]) -> list[np.ndarray]:
        params = self.signature.params
        if len(args) != len(params):
            raise BackendError(f"kernel {self.name} takes {len(params)} arguments, got {len(args)}")
        if self._all_tensors:
            arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
        else:
            arrays = []
            for k, (arg, t) in enumerate(zip(args, params, strict=True)):
                _flatten_value(arg, t, arrays, f"argument {k}")
        for k, (array, spec) in enumerate(zip(arrays, self._in_specs, strict=True)):
            if array.dtype != spec[1] or array.shape != spec[0]:
                _mismatch(array, self.signature.inputs[k], f"input {k} of kernel {self.name}")
        return arrays

    def _run(self, inputs: list[np.ndarray], outs: list[np.ndarray]) -> None:
        if self._empty_result:
            return  # nothing to compute (and nothing checked)
        if self.checks:
            outs = [*outs, np.zeros(error_shape(self.checks), np.int64)]
        if not self._on_cpu:
            self._run_on_device(inputs, outs)
            return
        if self._function is None:
            self._function = self.executable["main"]
            self._constant_handles = [tvm_ffi.from_dlpack(c) for c in self._constants]
        handles = [_handle(a) for a in inputs]
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        for out in outs:
            if out.size and not _passable(out):  # compute into a scratch array, then copy
                scratch = np.empty(out.shape, out.dtype)
                copies.append((out, scratch))
                out = scratch
            handles.append(_handle(out))
        try:
            self._function(
                *handles[: len(inputs)], *self._constant_handles, *handles[len(inputs) :]
            )
        except Exception as err:  # a failed check [RULE RUNTIME-CHECK], or TVM's own
            raise run_time_error(err, self.name) from None
        for out, scratch in copies:
            out[...] = scratch

    def _run_on_device(self, inputs: list[np.ndarray], outs: list[np.ndarray]) -> None:
        device = tvm.device(self.target.kind.name, 0)
        if not device.exist:
            raise BackendError(
                f"kernel {self.name} was built for {self.target.kind.name}, "
                "and this machine has no such device"
            )
        if self._function is None:
            self._function = self.executable["main"]
            self._constant_handles = [tvm.runtime.tensor(c, device) for c in self._constants]
        args = [tvm.runtime.tensor(np.array(a, order="C"), device) for a in inputs]
        results = [tvm.runtime.empty(out.shape, str(out.dtype), device) for out in outs]
        self._function(*args, *self._constant_handles, *results)  # type: ignore[misc]
        for out, result in zip(outs, results, strict=True):
            out[...] = result.numpy()
        if self.checks:  # the device's error code, tested here (kernel/checks.py)
            code, *values = (int(v) for v in outs[-1])
            if code:
                raise check_failure(self.checks[code - 1], *values)

    # -------------------------------------------------------- inspecting
    def source(self, kind: str = "") -> str:
        """The generated code: ``"tir"`` (the scheduled TIR), ``"ll"`` (LLVM
        IR), ``"asm"``; for a CUDA kernel ``"cuda"`` (the kernel source).
        The default is the target's natural form (LLVM IR, CUDA source)."""
        if kind == "tir":
            return str(self.module.script())
        if self._on_cpu:
            kind = kind or "ll"
            if kind not in ("ll", "asm"):
                raise BackendError(f'a CPU kernel has "tir", "ll" or "asm" source, not "{kind}"')
            return str(self.executable.mod.inspect_source(kind))
        kind = kind or "cuda"
        if kind == "cuda":
            return str(self.executable.mod.imports[0].inspect_source(""))
        if kind in ("ll", "asm"):  # the host side
            return str(self.executable.mod.inspect_source(kind))
        raise BackendError(f'a CUDA kernel has "tir", "cuda", "ll" or "asm" source, not "{kind}"')

    def __repr__(self) -> str:
        return f"<Kernel {self.name} for {self.target.kind.name}>"


def _spec(t: TensorType) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(int(d) for d in t.shape), np.dtype(t.dtype)


def _mismatch(array: np.ndarray, t: TensorType, what: str) -> None:
    raise BackendError(
        f"{what} must be a {astext(t)}, got an array of shape "
        f"{tuple(array.shape)} and dtype {array.dtype}"
    )


def _handle(array: np.ndarray) -> Any:
    """A TVM tensor viewing ``array`` (or a compact copy of it)."""
    if array.size == 0:  # numpy's strides of an empty array are not compact
        return tvm.runtime.empty(array.shape, str(array.dtype))
    if not _passable(array):
        array = np.array(array, order="C")  # a writable, contiguous copy
    return tvm_ffi.from_dlpack(array)


# =============================================================== building
def build_kernel(
    fn: Function,
    target: str | Any = "llvm",
    dims: Mapping[str, int] | None = None,
    schedule: bool = True,
) -> Kernel:
    """The compiled kernel of ``fn`` (cached: the same function, dimensions
    and target build once). ``dims`` binds symbolic dimensions; ``schedule``
    False builds TVM's unscheduled loops (for comparisons)."""
    tvm_target, dims = _prepared(fn, target, dims)
    # The text shows parameter types only where annotated: add the inferred ones.
    types = tuple(astext(p.checked_type) for p in fn.params)
    key = (
        astext(fn),
        types,
        tuple(sorted(dims.items())),
        str(tvm_target),
        schedule,
        precision.current(),  # [RULE COMPILE-PRECISION]: the products' rounding is in the kernel
    )
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    kernel = _build(fn, tvm_target, dims, schedule)
    with _CACHE_LOCK:
        return _CACHE.setdefault(key, kernel)


def _prepared(
    fn: Function, target: str | Any, dims: Mapping[str, Any] | None
) -> tuple[Any, dict[str, Any]]:
    """The target and the bound dimensions of a build of ``fn``, which is
    typed first where it is not."""
    tvm_target = make_target(target)
    bound = dict(dims or {})
    if any(not p.has_type for p in fn.params) or not _body_typed(fn):
        infer_expr(fn)
    return tvm_target, bound


_CACHE: dict[tuple[Any, ...], Kernel] = {}
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class KernelIR:
    """A primitive function lowered to scheduled TIR, before code
    generation: what ``build_kernel`` compiles on its own, and what the
    Relax lowering (relax/lower.py) puts into a whole program's module.
    The function's parameters are the inputs' tensors, then the
    constants' (``constants`` holds their data), then the outputs', then
    the error output when the kernel checks something."""

    name: str
    signature: _Signature
    module: Any  # IRModule with the scheduled PrimFunc "main"
    constants: tuple[np.ndarray, ...]
    checks: tuple[str, ...] = ()
    """The messages of the kernel's run-time checks (kernel/checks.py): when
    there are any, its last parameter is the error output (``error_shape``)."""


def lower_kernel(
    fn: Function,
    target: str | Any = "llvm",
    dims: Mapping[str, int] | None = None,
    schedule: bool = True,
    inputs: Sequence[str] | None = None,
) -> KernelIR:
    """``fn`` (a typed primitive function) as scheduled TIR for ``target``;
    ``dims`` binds its symbolic dimensions. ``inputs`` names what each
    parameter is where the kernel is called (``%x``, the user's value), for
    messages: a kernel's own parameters (``%p0``) mean nothing to a user."""
    tvm_target, dims = _prepared(fn, target, dims)
    symbolic = {d: v for d, v in dims.items() if _symbolic(v)}
    if symbolic:
        with symbolic_dims(symbolic):
            return _lower(fn, tvm_target, dims, schedule, inputs)
    return _lower(fn, tvm_target, dims, schedule, inputs)


def _lower(
    fn: Function,
    tvm_target: Any,
    dims: dict[str, Any],
    schedule: bool,
    inputs: Sequence[str] | None = None,
) -> KernelIR:
    name = str(fn.attrs.get("global_symbol", "")) or "kernel"
    builder = _Builder(dims, fence=tvm_target.kind.name == "llvm" and rounding.active())
    shown = list(inputs) if inputs else [f"parameter %{p.name_hint}" for p in fn.params]
    params = tuple(
        concrete_type(p.type_annotation or p.checked_type, dims, what)
        for p, what in zip(fn.params, shown, strict=True)
    )
    for p, t in zip(fn.params, params, strict=True):
        builder.bind_param(p, t)
    with collecting_checks() as checks:
        value = builder.evaluate(fn.body)
    result = concrete_type(fn.body.checked_type, dims, "the result")
    outputs = builder.outputs(value, result)
    signature = _Signature(params, result, _flat(params), tuple(leaves(result)))
    if checks:
        outputs = [*outputs, error_output(checks, on_host=tvm_target.kind.name == "llvm")]
    func = relax_alignment(te.create_prim_func(builder.inputs + builder.constant_inputs + outputs))
    # A kernel without outputs (``random.split(k, num=0)``) computes nothing
    # and has no block to schedule.
    if not schedule or not outputs:
        module = tvm.IRModule({"main": func})
    elif any(_symbolic(v) for v in dims.values()):
        try:
            module = _schedule_symbolic(func, tvm_target)
        except RuntimeError as err:  # TVM's ScheduleError: the caller builds it per shape
            raise BackendError(
                f"TVM could not schedule {name} for sizes known only at run time", fn.span
            ) from err
    else:
        module = schedule_prim_func(func, tvm_target)
    # Inlining one producer into two places copies its let variables; give
    # each binding its own variable (TVM's analyzer rejects a rebinding).
    module = tvm.tirx.transform.ConvertSSA()(module)
    return KernelIR(
        name, signature, module, tuple(builder.constants), tuple(c.text for c in checks)
    )


def _build(fn: Function, target: Any, dims: dict[str, int], schedule: bool) -> Kernel:
    lowered = lower_kernel(fn, target, dims, schedule)
    try:
        with building(target):
            executable = tvm.compile(normalised_lets(lowered.module), target=target)
    except RuntimeError as err:  # TVM's InternalError: a schedule or rule bug
        raise BackendError(f"TVM failed to build kernel {lowered.name}: {err}", fn.span) from err
    return Kernel(
        lowered.name,
        lowered.signature,
        lowered.module,
        executable,
        target,
        list(lowered.constants),
        lowered.checks,
    )


def _schedule_symbolic(func: Any, target: Any) -> Any:
    """A kernel of symbolic sizes. A reduction's initial value is written
    inside its loop, on the first step: over an axis that is empty at run
    time it would never be written, so each reduction's initialisation is
    moved before its loop (``decompose_reduction``). effir's schedules read
    static extents (schedule/): on a CPU TVM's loops stay as they are; on
    a GPU each block's spatial loops are fused and bound to threads."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": func}))
    root = sch.get_sblock(sch.mod["main"].body.block.name_hint)
    on_gpu = target.kind.name != "llvm"
    for block in sch.get_child_blocks(root):
        reduce = [int(iv.iter_type) for iv in sch.get(block).iter_vars].count(_REDUCE)
        loops = sch.get_loops(block)
        spatial = len(loops) - reduce  # TE's loops: the spatial ones, then the reduction's
        if on_gpu:
            if spatial:
                fused = sch.fuse(*loops[:spatial])
            else:  # a unit loop above the reduction's (or the block)
                fused = sch.add_unit_loop(loops[0] if loops else block)
            outer, inner = sch.split(fused, [None, _GPU_THREADS])
            sch.bind(outer, "blockIdx.x")
            sch.bind(inner, "threadIdx.x")
        if reduce:
            sch.decompose_reduction(block, sch.get_loops(block)[2 if on_gpu else spatial])
    return sch.mod


_GPU_THREADS = 256
_REDUCE = 2  # tirx.IterVar.CommReduce


def _flat(types: Sequence[Type]) -> tuple[TensorType, ...]:
    return tuple(leaf for t in types for leaf in leaves(t))


def _body_typed(fn: Function) -> bool:
    body: Expr = fn.body
    while isinstance(body, Let):
        if not body.value.has_type:
            return False
        body = body.body
    return body.has_type


class _Builder:
    """Evaluates a kernel body to TE values (step 2)."""

    def __init__(self, dims: Mapping[str, int], fence: bool = True) -> None:
        self.dims = dims
        # [RULE KERNEL-ROUND] (kernel/rounding.py): gradient programs, LLVM targets
        self.fence = fence
        self.env: dict[int, TEValue] = {}
        self.inputs: list[Any] = []  # the parameters' placeholders
        self.constant_inputs: list[Any] = []
        self.constants: list[np.ndarray] = []

    def bind_param(self, param: Var, t: Type) -> None:
        tensors = []
        for k, leaf in enumerate(leaves(t)):
            name = f"{param.name_hint}_{k}" if not isinstance(t, TensorType) else param.name_hint
            shape = [dim_value(d) for d in leaf.shape]
            tensors.append(te.placeholder(shape, leaf.dtype, name=_identifier(name)))
        self.inputs.extend(tensors)
        self.env[id(param)] = type_tree.unflatten(t, tensors)

    def evaluate(self, body: Expr) -> TEValue:
        while isinstance(body, Let):
            self.env[id(body.var)] = self._value(body.value)
            body = body.body
        return self._value(body)

    def _value(self, expr: Expr) -> TEValue:
        """The TE value of a binding's value: a post-order walk, children
        (operands) first, each shared node once."""
        order = [n for n in post_order(expr) if isinstance(n, Expr) and not isinstance(n, Op)]
        calls = [n for n in order if isinstance(n, Call) and not isinstance(n.callee, Op)]
        for node in calls + order:  # first reject what a kernel cannot contain
            if (
                isinstance(node, Call)
                and not isinstance(node.callee, Op)
                or (not isinstance(node, _KERNEL_NODES))
            ):
                raise BackendError(
                    "a kernel body computes operator calls, tuples and constants, "
                    f"not {_describe(node)}",
                    node.span,
                )
        memo: dict[int, TEValue] = {}
        for node in order:
            memo[id(node)] = self._node(node, memo)
        return memo[id(expr)]

    def _node(self, node: Expr, memo: dict[int, TEValue]) -> TEValue:
        if isinstance(node, Var):
            if id(node) not in self.env:
                raise BackendError(f"variable %{node.name_hint} is free in the kernel", node.span)
            return self.env[id(node)]
        if isinstance(node, Constant):
            return self._constant(node)
        if isinstance(node, Tuple):
            return tuple(memo[id(f)] for f in node.fields)
        if isinstance(node, TupleGetItem):
            return memo[id(node.tuple_value)][node.index]  # type: ignore[index]
        assert isinstance(node, Call)
        return self._call(node, tuple(memo[id(a)] for a in node.args))

    def _call(self, call: Call, args: tuple[TEValue, ...]) -> TEValue:
        callee = call.callee
        if not isinstance(callee, Op):
            what = type(callee).__name__
            raise BackendError(f"a kernel calls operators only, not a {what}", call.span)
        name = callee.name
        definition = op_def(callee)
        rule = definition.rules.get("te")
        if rule is None or definition.effect != "pure":
            why = (
                "has no TVM lowering (te rule)"
                if rule is None
                else f"is not pure ({definition.effect})"
            )
            raise BackendError(f"operator {name} {why}: it cannot be part of a kernel", call.span)
        out_type = concrete_type(call.checked_type, self.dims, f"the result of {name}")
        folded = folded_call(definition, args, call.attrs, out_type)  # [RULE TE-FOLD]
        if folded is not None:
            return folded
        try:
            with check_site(name, call.span):
                value = rule(args, call.attrs, out_type)
        except BackendError as err:
            raise BackendError(f"{name}: {err.message}", err.span or call.span) from None
        except Error:
            raise
        except RuntimeError as err:  # TVM's own errors (InternalError...)
            raise BackendError(f"{name}: TVM rejected the lowering: {err}", call.span) from err
        except (TypeError, ValueError) as err:  # a size a rule needs static (kernel/rules.py)
            if not any(_symbolic(v) for v in self.dims.values()):
                raise
            raise BackendError(f"{name} needs static sizes", call.span) from err
        _check_value(value, out_type, name, call)
        return rounded(value) if self.fence else value

    def _constant(self, node: Constant) -> Any:
        data = node.data
        scalar = scalar_constant(data)
        if scalar is not None:
            return scalar
        array = aligned_empty(data.shape, data.dtype)
        array[...] = data
        placeholder = te.placeholder(
            data.shape, str(data.dtype), name=f"constant_{len(self.constants)}"
        )
        self.constants.append(array)
        self.constant_inputs.append(placeholder)
        return placeholder

    def outputs(self, value: TEValue, result: Type) -> list[Any]:
        """The result's tensors as compute outputs, copied where an output
        would alias an input or another output (step 3)."""
        inputs = {t.op for t in self.inputs + self.constant_inputs}
        seen: set[Any] = set()
        outs = []
        for t in type_tree.tuple_leaves(value):
            if t.op in inputs or (t.op, t.value_index) in seen:
                t = _copy(t)
            seen.add((t.op, t.value_index))
            outs.append(t)
        return outs


def _copy(t: Any) -> Any:
    return te.compute(t.shape, lambda *i: t(*i), name="copy")


_KERNEL_NODES = (Var, Constant, Tuple, TupleGetItem, Call)


def _describe(node: Expr) -> str:
    if isinstance(node, Call):
        return f"a call of {astext(node.callee)}" if len(astext(node.callee)) < 40 else "a call"
    article = "an" if type(node).__name__[0] in "AEIOU" else "a"
    return f"{article} {type(node).__name__}"


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"p_{cleaned}"


def _check_value(value: TEValue, t: Type, name: str, call: Call) -> None:
    """A rule's result must have the call's type: a mismatch is a bug in the
    rule, reported here rather than as wrong values later."""
    got = type_tree.tuple_leaves(value)
    want = leaves(t)
    ok = len(got) == len(want) and all(
        len(g.shape) == len(w.shape)
        and all(_same_dim(a, b) for a, b in zip(g.shape, w.shape, strict=True))
        and str(g.dtype) == w.dtype
        for g, w in zip(got, want, strict=True)
    )
    if not ok:
        shown = ", ".join(f"{tuple(str(d) for d in g.shape)} {g.dtype}" for g in got)
        raise BackendError(f"the te rule of {name} gave {shown}, expected {astext(t)}", call.span)


def _same_dim(got: Any, want: int | str) -> bool:
    if isinstance(got, tirx.IntImm):
        return int(got) == want
    return isinstance(want, str) and bool(
        tvm_ffi.structural_equal(got, dim_value(want), map_free_vars=False)
    )


def _symbolic(size: Any) -> bool:
    """Whether a bound dimension is a size known at run time: a TIR
    variable, or an expression of them ([RULE LOWER-SHAPEPOLY])."""
    return isinstance(size, tvm.ir.expr.Expr) and not isinstance(size, tirx.IntImm)


# =================================================================== CUDA
def compile_cuda_to_ptx(kernel: Kernel) -> str:
    """The PTX of a CUDA kernel, compiled by nvcc for the target's
    architecture. TVM's default CUDA compiler (NVRTC) needs the
    cuda-bindings package; nvcc from the CUDA toolkit works without a GPU,
    so this is how tests check that generated CUDA compiles."""
    if kernel.target.kind.name != "cuda":
        raise BackendError(
            f"kernel {kernel.name} was built for {kernel.target.kind.name}, not cuda: "
            "there is no CUDA source to compile"
        )
    return cuda_source_to_ptx(kernel.source("cuda"), kernel.target)
