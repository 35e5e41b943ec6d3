"""Building and running a whole loop: ``build_loop`` gives a ``LoopKernel``,
which checks its arguments, binds the symbolic dimensions from their
shapes, builds the loop function once per binding and calls it on the
arrays, zero-copy through DLPack. The prologue's buffers are kept between
calls, one set per thread."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from ....ir import type_tree
from ....ir.expr import Function, Var
from ....ir.module import IRModule
from ....ir.types import FuncType, KeyType, TensorType, TupleType, Type
from ....ir.visitor import free_vars
from ....runtime.values import PRNGKey
from ..kernel.lets import normalised_lets
from ..runtime.errors import BackendError
from ..target import building, make_target
from .function import LoweredLoop, lower_loop
from .values import bind_dims, flatten


@dataclass
class _Compiled:
    """One build: the compiled function and its lowering."""

    function: Any
    lowered: LoweredLoop


def _compile(lowered: LoweredLoop, target: Any) -> _Compiled:
    with building(target):
        module = normalised_lets(tvm.IRModule({"main": lowered.func}))
        executable = tvm.compile(module, target=target)
    return _Compiled(executable["main"], lowered)


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
            for leaf in type_tree.leaves(t)
        )
        return _Argument(t, what, leaves)

    def arrays(self, value: Any) -> list[np.ndarray]:
        """``value``'s leaves as arrays DLPack can pass: C-contiguous and
        writeable (DLPack cannot export a read-only array), copied only
        when they are not."""
        if isinstance(self.type, TupleType):
            values = flatten(self.type, value, self.what)
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

    def specialise(self, dims: Mapping[str, int] | None = None) -> _Compiled:
        """The build for ``dims`` (the values of the symbolic dimensions)."""
        key = tuple(sorted((dims or {}).items()))
        if key not in self._builds:
            lowered = lower_loop(
                self.body, dict(key), self.captured, self.functions, self.module, self.parallel
            )
            self._builds[key] = _compile(lowered, self.target)
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
        return type_tree.unflatten(self.out_type, outs), type_tree.unflatten(
            self.state_type, finals
        )

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
            bind_dims(t, a.shape[1:], dims, "a sequence element")
        for (t, _), a in zip(self._init.leaves, init, strict=True):
            bind_dims(t, a.shape, dims, "the initial state")
        leaves = [(t, arg.what) for arg in self._captured for t, _ in arg.leaves]
        for (t, what), a in zip(leaves, captured, strict=True):
            bind_dims(t, a.shape, dims, what)
        return self.specialise(dims)

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
        leaves = flatten(self.state_type, final, "the final state")
        final = type_tree.unflatten(
            self.state_type, leaves, lambda t, v: PRNGKey(v) if isinstance(t, KeyType) else v
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
        kernel.specialise(dims)
    return kernel


def _is_static(kernel: LoopKernel) -> bool:
    types = [*type_tree.leaves(kernel.x_type), *type_tree.leaves(kernel.state_type)]
    types += [t for v in kernel.captured for t in type_tree.leaves(v.checked_type)]
    return all(not isinstance(t, TensorType) or t.is_static for t in types)
