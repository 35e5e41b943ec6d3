"""effir.compile: the whole pipeline, then TVM.

``compile(module, target)`` runs the standard optimisation pipeline (the
effect passes, partial evaluation, the basic-block optimisations), fuses
operator groups, wraps the pure calls TVM can compute that no group took
(``lower-tvm``), and builds one TVM kernel per primitive function. What is
left (control flow that depends on data, ADTs, closures, calls between
functions, operators of data-dependent shape, I/O) runs in the executor:
effir's interpreter, told to run each compiled function's kernel in place of
its body. docs/backend.md says why this executor, and what it costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...ir.expr import Call, Function
from ...ir.module import IRModule
from ...ir.types import ANY, TensorType, TupleType, Type
from ...ir.visitor import pre_order
from ...passes.fuse import is_primitive
from ...passes.pipeline import STANDARD_PIPELINES, run_pipeline
from ..interpreter import State, interpret, interpret_a2
from . import lower  # noqa: F401  (registers lower-tvm)
from .kernel import build_kernel
from .target import make_target

PIPELINE = STANDARD_PIPELINES["O2"] + ",fuse,lower-tvm"


@dataclass
class CompileReport:
    """What compiling did and what it cost."""

    nodes_before: int
    nodes_after: int
    kernels: int
    pipeline_seconds: float
    build_seconds: float
    passes: list[tuple[str, float]] = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("IR nodes before", f"{self.nodes_before}"),
            ("IR nodes after", f"{self.nodes_after}"),
            ("kernels", f"{self.kernels}"),
            ("pipeline", f"{self.pipeline_seconds:.2f} s"),
            ("TVM build", f"{self.build_seconds:.2f} s"),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


class CompiledModule:
    """A compiled program: call it as the interpreter would run ``@main``."""

    def __init__(
        self,
        source: IRModule,
        module: IRModule,
        kernels: dict[Function | Call, Callable[..., Any]],
        target: Any,
        report: CompileReport,
    ) -> None:
        self.source = source
        self.module = module
        self.kernels = kernels
        self.target = target
        self.report = report

    def __call__(
        self,
        *args: Any,
        entry: str = "main",
        state: State | None = None,
        sink: Callable[[str, Any], None] | None = None,
    ) -> Any:
        """``@entry``'s result. ``state`` holds the program's global cells
        (a fresh ``effir.State(source)`` when None) and is updated as the
        source program would update it; ``sink`` receives prints."""
        if state is None:
            state = State(self.source)
        fn = self.module[entry.removeprefix("@")]
        runner = interpret_a2 if "state_in" in fn.attrs else interpret
        return runner(self.module, *args, entry=entry, state=state, sink=sink, kernels=self.kernels)

    def new_state(self, seed: int | None = None) -> State:
        return State(self.source, seed=seed)


def compile(
    module: IRModule, target: str | Any = "llvm", pipeline: str = PIPELINE
) -> CompiledModule:  # noqa: A001
    """``module`` optimised and compiled for ``target`` ("llvm" or "cuda")."""
    tvm_target = make_target(target)
    start = time.perf_counter()
    optimised = run_pipeline(module, pipeline)
    middle = time.perf_counter()
    kernels: dict[Function | Call, Callable[..., Any]] = {}
    for fn in optimised.functions.values():
        for node in pre_order(fn):
            if isinstance(node, Function) and is_primitive(node) and node not in kernels:
                kernels[node] = _kernel_for(node, tvm_target)
    end = time.perf_counter()
    report = CompileReport(
        nodes_before=_size(module),
        nodes_after=_size(optimised),
        kernels=len(kernels),
        pipeline_seconds=middle - start,
        build_seconds=end - middle,
    )
    return CompiledModule(module, optimised, kernels, tvm_target, report)


def _kernel_for(fn: Function, target: Any) -> Callable[..., Any]:
    """The kernel of ``fn``: built now when its shapes are static, else per
    concrete shape at its first call with that shape (and cached)."""
    symbolic = _symbolic_dims(fn)
    if not symbolic:
        return build_kernel(fn, target)
    return PerShapeKernel(fn, target)


class PerShapeKernel:
    """A kernel with named dimensions, built for each binding of them met at
    run time (``build_kernel`` caches each build)."""

    def __init__(self, fn: Function, target: Any) -> None:
        self.fn = fn
        self.target = target
        self.builds: dict[tuple[tuple[str, int], ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        dims: dict[str, int] = {}
        for param, arg in zip(self.fn.params, args, strict=True):
            _bind_dims(param.type_annotation or param.checked_type, arg, dims)
        key = tuple(sorted(dims.items()))
        kernel = self.builds.get(key)
        if kernel is None:
            kernel = self.builds[key] = build_kernel(self.fn, self.target, dims)
        return kernel(*args)


def _symbolic_dims(fn: Function) -> bool:
    for p in fn.params:
        t = p.type_annotation or p.checked_type
        for node in pre_order(t):
            if isinstance(node, TensorType) and not all(isinstance(d, int) for d in node.shape):
                return True
    return False


def _bind_dims(t: Type, value: Any, dims: dict[str, int]) -> None:
    """Record the sizes ``value`` gives the named dimensions of ``t``."""
    work = [(t, value)]
    while work:
        ty, v = work.pop()
        if isinstance(ty, TupleType) and isinstance(v, tuple):
            work.extend(zip(ty.fields, v, strict=False))
        elif isinstance(ty, TensorType) and hasattr(v, "shape"):
            for d, n in zip(ty.shape, v.shape, strict=False):
                if isinstance(d, str) and d != ANY:
                    dims.setdefault(d, int(n))


def _size(module: IRModule) -> int:
    return sum(1 for fn in module.functions.values() for _ in pre_order(fn))
