"""effir.compile: the whole pipeline, then TVM, run by Relax's virtual machine.

``compile(module, target)`` runs the standard optimisation pipeline (the
effect passes, partial evaluation, the basic-block optimisations), fuses
operator groups and wraps the pure calls TVM can compute that no group took
(``lower-tvm``). The result is a ``CompiledModule``: call it as the
interpreter runs ``@main``, with the same arguments and the same ``State``.

Each call binds the entry's symbolic dimensions from its arguments' shapes
(driver/specialise.py) and runs the specialisation for that binding, lowered to a
Relax module (relax/lower.py) and built by TVM the first time the binding
is met, then kept: a second call with the same shapes compiles nothing. The
VM runs the control (calls, ``if``, recursion, output) without Python and
the kernels TVM generated for the computation. docs/backend.md says why
this executor, and what it costs.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from effir.passes.infra.pipeline import STANDARD_PIPELINES
from effir.passes.infra.pipeline import pipeline as parse_pipeline
from effir.passes.infra.transform import Pass, PassError

from ....ir.diagnostics import Error, EvalError, TypeCheckError
from ....ir.dims import static_shapes
from ....ir.module import IRModule
from ....ir.printer import astext
from ....ir.program import DEFAULT_ENTRY, resolve
from ....ir.visitor import pre_order
from ....runtime.arguments import check_call_options, unknown_entry
from ...interpreter import Sink, State
from ..emulation import emulation
from ..relax.program import RelaxProgram
from ..runtime import tvm_runtime
from ..runtime.entry_call import call_entry
from ..runtime.errors import BackendError, CompileError, build_failure, run_time_error
from ..runtime.importing import import_tvm
from ..runtime.placement import Placement
from ..runtime.printing import printing_to
from ..runtime.signature import (
    Dims,
    Signature,
    adt_defs,
    spec_of,
)
from ..runtime.stack import runner
from ..runtime.thread_vms import ThreadVMs
from . import passes as backend_passes  # noqa: F401  (registers lower-tvm)
from . import program_cache
from .build_cache import Cache, program_digest, spans_digest
from .program_cache import ProgramRecord
from .specialise import specialise
from .verification import pipeline_context, run_pipeline

COMPILE_PIPELINES = {
    0: STANDARD_PIPELINES["O1"] + ",lower-tvm",
    1: STANDARD_PIPELINES["O1"] + ",fuse,lower-tvm",
    2: STANDARD_PIPELINES["O2"] + ",fuse,lower-tvm",
}
"""What ``effir.compile`` runs at each ``opt_level``: the standard pipeline
(the effect passes always: the backend compiles state-passing programs),
then fusion (1 and 2) and the lowering to kernels."""

PIPELINE = COMPILE_PIPELINES[2]


class Build(NamedTuple):
    """One specialisation TVM built: the dimensions it binds (``{}``: a
    static entry, or dimensions left symbolic), how long lowering and the
    build took, how many kernels and whole compiled loops it has, and the
    entry it serves. A tuple too: ``dims, seconds, kernels, loops, entry``."""

    dims: Dims
    seconds: float
    kernels: int
    loops: int
    entry: str = "main"
    cached: bool = False
    """Loaded from the build cache (driver/build_cache.py) instead of built."""
    shared: int = 0
    """Of its kernels and loops, how many an earlier build of this process
    had built already (relax/apart.py [RULE APART-SHARE]): not built again."""


@dataclass
class CompileReport:
    """What compiling did and what it cost (``compiled.report``).

    ``nodes_before``/``nodes_after``: IR nodes before and after the
    pipeline; ``pipeline_seconds``: its time; ``builds``: one ``Build`` per
    specialisation built so far (a call at a new shape adds one);
    ``pipeline``: the passes run, as pipeline text; ``target``: the TVM
    target. ``table()`` shows it all (``effir compile`` prints it)."""

    nodes_before: int
    nodes_after: int
    pipeline_seconds: float
    builds: list[Build] = field(default_factory=list)
    pipeline: str = ""
    target: str = ""
    precision: str = "float32"
    cached: bool = False
    """The pipeline's output came from the build cache (driver/program_cache.py):
    ``pipeline_seconds`` is the time of the process that ran it."""

    @property
    def build_seconds(self) -> float:
        """The time of every TVM build so far."""
        return sum(b.seconds for b in self.builds)

    def table(self) -> str:
        rows = [
            ("IR nodes before", f"{self.nodes_before}"),
            ("IR nodes after", f"{self.nodes_after}"),
            ("pipeline", f"{self.pipeline_seconds:.2f} s" + (" (cached)" if self.cached else "")),
        ]
        if self.precision != "float32":
            rows.append(("matrix products", self.precision))
        for build in self.builds:
            what = "cached build" if build.cached else "TVM build"
            shared = f" ({build.shared} built before)" if build.shared else ""
            rows.append(
                (
                    f"{what} ({_dims_text(build.dims)})",
                    f"{build.seconds:.2f} s, {build.kernels} kernels, {build.loops} loops{shared}",
                )
            )
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def device_of(kind: str) -> Any:
    """The device code built for a target of ``kind`` runs on: the CPU, or the first GPU."""
    return tvm_runtime.device("cpu" if kind == "llvm" else kind, 0)


def _dims_text(dims: Dims) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(dims.items())) or "static"


def in_notebook() -> bool:
    """Whether this is a Jupyter kernel (IPython's ZMQ shell), where
    progress lines are on by default."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # an IPython too old or half imported: not a notebook
        return False
    return type(shell).__name__ == "ZMQInteractiveShell"


class Progress:
    """Progress lines of a build (``effir: ...`` on standard error, or a
    stream): on in the CLI, off in library calls unless ``verbose``."""

    def __init__(self, verbose: bool | TextIO = False) -> None:
        self.stream: TextIO | None = (
            None if verbose is False else sys.stderr if verbose is True else verbose
        )

    def __call__(self, message: str) -> None:
        if self.stream is not None:
            self.stream.write(f"effir: {message}\n")
            self.stream.flush()


# ------------------------------------------------------------ one binding
class Specialisation:
    """One binding of the entry's dimensions: the Relax program, built."""

    def __init__(
        self, program: RelaxProgram, kind: str, target: Any = None, executable: Any = None
    ) -> None:
        """Build ``program`` for ``target`` (TVM's, of kind ``kind``:
        ``"llvm"``, ``"cuda"``), or take the ``executable`` already built
        for it (a library from the build cache, loaded without TVM's
        Python: runtime/tvm_runtime.py)."""
        self.program = program
        self.kind = kind
        self.target = target
        self.executable = executable if executable is not None else self._built()
        self.library: Path | None = None
        """The shared library the executable was loaded from or written to
        (the build cache's), which an export copies."""
        self.writer: threading.Thread | None = None
        """The thread writing this build to the cache, if one is."""
        device = device_of(kind)
        self.device = device
        self._vms = ThreadVMs(self.executable, device)
        self._device_found = False

    def _built(self) -> Any:
        """The Relax program built (``relax.build``) and linked with its
        kernels' modules, built meanwhile (relax/apart.py)."""
        from tvm import relax  # lazy: TVM's compiler, for a build (never a cache hit)

        from ..relax.pipeline import relax_pipeline  # lazy: imports TVM (a build)
        from ..target import building  # lazy: imports TVM (a build)

        program, target = self.program, self.target
        try:
            with building(target):
                executable = relax.build(
                    program.module, target=target, relax_pipeline=relax_pipeline(target)
                )
            if program.libraries is not None:
                for library in program.libraries.modules.result():
                    executable.mod.import_module(library)
        except Exception as err:  # TVM's: never a user's [RULE RUNTIME-CHECK]
            raise build_failure(err, program.entry, program.sites, program.span) from None
        return executable

    def exportable(self) -> Any:
        """An executable to write out: this one built again around the
        same kernels, as no VM has run it (TVM writes an executable whose
        VM was made with a warning per function, and one being written
        must not be run meanwhile: build_cache.py [RULE CACHE-BACKGROUND])."""
        return self._built() if self.program.module is not None else self.executable

    def source(self, kind: str = "cuda") -> str:
        """The generated code of the kernels for a device (``"cuda"``): the
        source TVM generated, which nvcc compiles (compile_cuda_to_ptx)."""
        return "\n".join(self._sources(kind))

    def _sources(self, kind: str) -> list[str]:
        """The source of each module of ``kind``: the kernels built apart
        (relax/apart.py) are in modules of their own, some shared with
        earlier builds: every one is read, once."""
        sources: list[str] = []
        seen: set[str] = set()
        work = [self.executable.mod]
        while work:
            module = work.pop()
            if module.kind == kind:
                text = str(module.inspect_source(""))
                if text not in seen:
                    seen.add(text)
                    sources.append(text)
            work.extend(module.imports)
        if not sources:
            raise BackendError(f"this program was built for {self.kind}: no {kind} code")
        return sources

    def ptx(self) -> str:
        """The CUDA kernels compiled to PTX by nvcc for the target's
        architecture (TVM's default compiler, NVRTC, is not available), one
        module at a time: each carries TVM's preamble of helpers (float16's
        ``max``...), which one source would define twice."""
        from ..target import cuda_source_to_ptx  # lazy: imports TVM (a GPU build)

        return "\n".join(cuda_source_to_ptx(code, self.target) for code in self._sources("cuda"))

    def function(self) -> Any:
        """The entry's function in the calling thread's VM (runtime/thread_vms.py)."""
        if not self._device_found:
            if not tvm_runtime.exists(self.device):
                raise BackendError(
                    f"this program was built for {self.kind}, and this machine has no such device"
                )
            self._device_found = True
        return self._vms.function(self.program.entry)


# ------------------------------------------------------------ the program
class CompiledModule:
    """A compiled program: call it as the interpreter would run ``@main``."""

    def __init__(
        self,
        source: IRModule,
        module: IRModule | Callable[[], IRModule],
        target: Any,
        report: CompileReport,
        entry: str = DEFAULT_ENTRY,
        precision: str = "float32",
        record: ProgramRecord | None = None,
    ) -> None:
        """``module``: the optimised program, or what makes it when first
        needed (a program found in the build cache, with its ``record``:
        driver/program_cache.py [RULE CACHE-LAZY]); ``target``: TVM's
        target, or (with a ``record``) what makes it, when a build first
        needs it (a hit imports no TVM Python: runtime/tvm_runtime.py)."""
        self.source = source
        self._module = module if isinstance(module, IRModule) else None
        self._optimise = None if isinstance(module, IRModule) else module
        self._module_lock = threading.Lock()
        self.record = record
        self._target = None if record is not None else target
        self._make_target = target if record is not None else None
        self.target_text = record.target if record is not None else str(target)
        """TVM's text of the target (what ``str(self.target)`` gives)."""
        self.target_kind = "llvm" if record is not None else str(target.kind.name)
        """The target's kind: only CPU (``llvm``) programs are cached."""
        self.report = report
        self.entry = entry
        """What a call runs when it names no ``entry=`` (``compile``'s)."""
        self.precision = precision
        """How matrix products multiply (precision.py [RULE COMPILE-PRECISION])."""
        self.specialisations: dict[tuple[str, tuple[tuple[str, int], ...]], Specialisation] = {}
        self.static_dims: dict[str, set[str]] = {}  # per entry, learnt (specialisation)
        self._lock = threading.Lock()
        self._program_key: str | None = None  # the build cache's key (_program_digest)
        self._primed: set[str] = set()  # entries whose static dims the cache gave
        self._signatures: dict[str, Signature] = {}  # per entry: made once, read per call
        self.changed_states: weakref.WeakSet[State] = weakref.WeakSet()
        """The callers' States that calls of entries writing cells were
        given: an export without ``state=`` warns when one of them no longer
        holds the initial values (driver/export.py)."""
        self.placement = Placement(device_of(self.target_kind))
        """The device the program runs on, and the moves to and from it."""
        self.verbose: bool | TextIO = False
        """Progress lines for the builds to come (see ``compile``)."""

    def progress(self, message: str) -> None:
        Progress(self.verbose)(message)

    @property
    def target(self) -> Any:
        """TVM's target (a ``tvm.target.Target``), made now for a program
        loaded from the build cache (importing TVM)."""
        if self._target is None:
            with self._module_lock:
                if self._target is None:
                    assert self._make_target is not None
                    self._target = self._make_target()
        return self._target

    @property
    def module(self) -> IRModule:
        """The optimised program (the pipeline's output), made now if it
        came from the build cache and nothing needed it yet
        (driver/program_cache.py [RULE CACHE-LAZY])."""
        if self._module is None:
            with self._module_lock:
                if self._module is None:
                    assert self._optimise is not None
                    self.progress("running the pipeline the cached program skipped")
                    self._module = self._optimise()
        return self._module

    def __call__(
        self,
        *args: Any,
        entry: str | None = None,
        state: State | None = None,
        sink: Sink | None = None,
        **named: Any,
    ) -> Any:
        """``@entry``'s result for ``args`` (and ``named`` arguments, by
        parameter name: the input contract of effir/runtime/arguments.py,
        as ``effir.interpret``); by default the entry ``compile`` was given.
        ``state`` holds the program's global cells (a fresh
        ``effir.State(source)`` when None) and is updated as the source
        program would update it; ``sink(label, value)`` receives prints
        (standard output when None). The result is numpy arrays on the
        host; ``on_device`` leaves it where the program ran."""
        return self._call(args, entry, state, sink, named, keep=False)

    def on_device(
        self,
        *args: Any,
        entry: str | None = None,
        state: State | None = None,
        sink: Sink | None = None,
        **named: Any,
    ) -> Any:
        """As a call, with the result's tensors left in the memory of the
        device the program ran on: ``DeviceArray``\\ s, which PyTorch, JAX
        and CuPy take through DLPack without a copy (``torch.from_dlpack``),
        and which the next call takes as they are (runtime/placement.py)."""
        return self._call(args, entry, state, sink, named, keep=True)

    def _call(
        self,
        args: tuple[Any, ...],
        entry: str | None,
        state: State | None,
        sink: Sink | None,
        named: dict[str, Any],
        keep: bool,
    ) -> Any:
        check_call_options(entry, state, sink, State)
        name = (entry or self.entry).removeprefix("@")
        signature = self.signature(name)
        if state is None:
            state = State(self.source)
        elif signature.state_out:
            self.changed_states.add(state)

        def function(dims: Dims) -> Any:
            spec = self.specialisation(name, dims, at_call=True)
            return runner(spec.function(), spec.program.recursive)

        with printing_to(sink):
            try:
                spans = {c: cell.span for c, cell in self.source.cells.items()}
                return call_entry(
                    function,
                    signature,
                    args,
                    state,
                    self.placement,
                    named,
                    name,
                    keep=keep,
                    cell_spans=spans,
                )
            except Error:
                raise
            except Exception as err:  # inside compiled code (TVM, a packed function)
                raise run_time_error(err, name) from None

    def signature(self, entry: str | None = None) -> Signature:
        """What ``@entry`` takes and gives (made once: every call reads it)."""
        entry = (entry or self.entry).removeprefix("@")
        known = self._signatures.get(entry)
        if known is not None:
            return known
        if self.record is not None and entry in self.record.signatures:
            made = self._signatures[entry] = self.record.signatures[entry]
            return made
        fn = self._entry(entry)
        params = tuple((p.name_hint, spec_of(p.checked_type)) for p in fn.params)
        result = spec_of(fn.body.checked_type)
        made = self._signatures[entry] = Signature(
            params,
            tuple(fn.attrs.get("state_in", ())),
            tuple(fn.attrs.get("state_out", ())),
            result,
            adt_defs(self.module.type_defs, [*(s for _, s in params), result]),
        )
        return made

    def _entry(self, name: str) -> Any:
        if self.record is not None and name not in self.record.entries:
            raise unknown_entry(name, list(self.record.entries))
        if name not in self.module.functions:
            # the source's functions that were compiled: what a call may name
            raise unknown_entry(
                name, [n for n in self.source.functions if n in self.module.functions]
            )
        return self.module.functions[name]

    def specialization(self, entry: str, dims: Dims) -> Specialisation:
        """Deprecated spelling of ``specialisation`` (effir spells it with an s)."""
        warnings.warn(
            "CompiledModule.specialization is deprecated; use specialisation",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.specialisation(entry, dims)

    @property
    def specializations(self) -> dict[tuple[str, tuple[tuple[str, int], ...]], Specialisation]:
        """Deprecated spelling of ``specialisations``."""
        warnings.warn(
            "CompiledModule.specializations is deprecated; use specialisations",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.specialisations

    def specialisation(self, entry: str, dims: Dims, at_call: bool = False) -> Specialisation:
        """The build serving ``dims`` (made now if none does).

        [RULE COMPILE-BINDING] A binding under which the program cannot run (a
        reshape its sizes make impossible, a value over the size limit:
        the specialisation's type check or size check fails) is, when a
        call asks for it (``at_call``), that call's run-time failure: the
        ``EvalError`` the interpreter raises, at the operator, never a
        compile-time class. Asked for by ``compile(dims=...)``, it stays a
        refusal to build.

        A build binds only the dimensions that some kernel needs static;
        the others stay symbolic (a whole loop's length, say), so a call
        that differs only in those reuses the build. Which dimensions must
        be static is learnt by lowering: each attempt that meets a kernel
        of a symbolic dimension's shape (NeedsStatic) adds the dimension
        and lowers again.

        Threads: a build that serves ``dims`` is looked up without the lock
        (the tables only grow, and a set of static dimensions is replaced,
        never changed), so calls at known shapes never wait for a build;
        builds happen under the lock, so two threads meeting a new binding
        at once build it once."""
        known = self.specialisations.get(_key(entry, dims, self.static_dims.get(entry, set())))
        if known is not None:
            return known
        with self._lock:
            static_dims = self.static_dims.setdefault(entry, set())
            while True:
                bound = {d: v for d, v in dims.items() if d in static_dims}
                key = _key(entry, dims, static_dims)
                spec = self.specialisations.get(key)
                if spec is not None:
                    return spec
                start = time.perf_counter()
                symbolic = tuple(sorted(d for d in dims if d not in static_dims))
                cache = self._cache()
                cache_key = cache.key(entry, bound, symbolic) if cache is not None else ""
                if cache is not None and not static_dims and entry not in self._primed:
                    # What an earlier process learnt: the first shape's entry
                    # is found without lowering (driver/build_cache.py).
                    self._primed.add(entry)
                    learnt = cache.static_dims(entry) & set(dims)
                    if learnt:
                        static_dims = self.static_dims[entry] = learnt
                        continue
                hit = cache.load(cache_key) if cache is not None else None
                if hit is not None:
                    program = RelaxProgram(None, entry, hit.kernels, hit.loops, hit.recursive)
                    spec = Specialisation(program, self.target_kind, executable=hit.module)
                    spec.library = hit.library
                    build = Build(
                        bound, time.perf_counter() - start, hit.kernels, hit.loops, entry, True
                    )
                    self.report.builds.append(build)
                    self.progress(
                        f"loaded @{entry} ({_dims_text(bound)}) from the build cache "
                        f"in {build.seconds:.2f} s"
                    )
                    self.specialisations[key] = spec
                    return spec
                self.progress(f"building @{entry} ({_dims_text(bound)}) for {self.target_kind}")
                target = self.target  # TVM's: imported now, for a build (``_tvm_target``)
                from ..precision import products_in  # lazy: imports TVM (a build)
                from ..relax.lower import lower_to_relax  # lazy: imports TVM (a build)
                from ..relax.types import NeedsStatic  # lazy: imports TVM (a build)

                try:
                    with products_in(self.precision):
                        program = lower_to_relax(
                            self._specialise(entry, bound, at_call), entry, target, symbolic
                        )
                except NeedsStatic as need:
                    static_dims = self.static_dims[entry] = static_dims | need.dims
                    self.progress(
                        f"kernels of @{entry} need {', '.join(sorted(need.dims))} known: "
                        "lowering again"
                    )
                    continue
                shared = program.libraries.shared if program.libraries is not None else 0
                self.progress(
                    f"@{entry} ({_dims_text(bound)}): {program.kernels} kernels, "
                    f"{program.loops} compiled loops"
                    + (f" ({shared} built before)" if shared else "")
                    + "; TVM builds them"
                )
                spec = Specialisation(program, self.target_kind, target)
                if cache is not None:
                    self._store_in_background(cache, cache_key, entry, spec)
                build = Build(
                    bound,
                    time.perf_counter() - start,
                    program.kernels,
                    program.loops,
                    entry,
                    shared=shared,
                )
                self.report.builds.append(build)
                self.progress(f"built @{entry} ({_dims_text(bound)}) in {build.seconds:.2f} s")
                self.specialisations[key] = spec
                return spec

    def _specialise(self, entry: str, bound: Dims, at_call: bool) -> IRModule:
        """``specialise`` for a build; [RULE COMPILE-BINDING] its failure under a
        call's binding is that call's EvalError."""
        try:
            return specialise(self.module, entry, bound)
        except (TypeCheckError, BackendError) as err:
            if not (at_call and bound):
                raise
            raise EvalError(err.message, err.span, err.notes) from None

    def _cache(self) -> Cache | None:
        """The build cache for this program and target (None when off, or
        while GPU loops are emulated on the CPU: loop/cuda/, whose builds
        the key does not tell apart); the program's text, its key, is
        printed once."""
        if emulation() is not None:
            return None
        if self.record is not None:
            return Cache.of(self.record.builds, self.target_kind)
        return Cache.of(self._program_digest(), self.target_kind)

    def _program_digest(self) -> str:
        """The optimised program's key in the build cache (its text and
        spans: build_cache.program_digest), made once."""
        if self._program_key is None:
            self._program_key = program_digest(
                astext(self.module), spans_digest(self.module), self.target_text, self.precision
            )
        return self._program_key

    def program_record(self) -> ProgramRecord:
        """What a later process needs of this program before its first call
        (driver/program_cache.py)."""
        report = self.report
        entries = tuple(n for n in self.source.functions if n in self.module.functions)
        signatures = {}
        for name in entries:
            try:
                signatures[name] = self.signature(name)
            except Error:  # an entry no call can run: the pipeline's output tells later
                continue
        return ProgramRecord(
            self._program_digest(),
            report.nodes_before,
            report.nodes_after,
            report.pipeline_seconds,
            report.pipeline,
            entries,
            signatures,
            _static_entry(self.module, self.entry),
            self.target_text,
        )

    def _store_in_background(
        self, cache: Cache, key: str, entry: str, spec: Specialisation
    ) -> None:
        """Write ``spec`` to the cache on a thread of its own, so that the
        first call does not wait for it (driver/build_cache.py
        [RULE CACHE-BACKGROUND]): the build in memory runs meanwhile, its VM made first,
        and the library written is what an export then copies. A cache
        that cannot be written leaves the build in memory [RULE CACHE-NEVER-CRASH]."""
        spec.function()  # LLVM's code for every module now, before the writer reads them
        program = spec.program
        static_dims = set(self.static_dims.get(entry, set()))

        def write() -> None:
            try:
                stored = cache.store(
                    key, spec.exportable(), program.kernels, program.loops, program.recursive
                )
                cache.record_static(entry, static_dims)
            except Exception as err:  # a read-only directory, no linker, a full disk
                self.progress(
                    f"the build cache is not written ({err}); the build is kept in memory"
                )
                return
            spec.library = stored.library

        writer = threading.Thread(target=write, name="effir-build-cache")
        spec.writer = writer
        writer.start()  # not a daemon: the process waits for it before it exits

    def export(
        self, path: Any, key: bytes | str | None = None, state: State | Mapping | None = None
    ) -> Any:
        """Write this program, with every specialisation built so far, to
        the directory ``path`` (runtime/artifact.py); ``effir.load(path)`` runs it.
        ``state`` (an ``effir.State``, or a mapping of cell names to values)
        is what the artifact's cells start from (a trained model's
        statistics); by default the cells' declared initial values, with a
        ``StateNotExportedWarning`` when calls changed a State. With a
        ``key`` the manifest is signed (HMAC-SHA256), and
        ``effir.load(path, key=key)`` refuses a tampered artifact."""
        from .export import export  # lazy: imports TVM (an export writes with it)

        return export(self, path, key=key, state=state)

    def new_state(self, seed: int | None = None) -> State:
        return State(self.source, seed=seed)


def compile(  # effir.compile, as tvm.compile
    module: IRModule | Any,
    target: str | Mapping[str, Any] | Any = "llvm",
    pipeline: str | Pass | None = None,
    *,
    opt_level: int | None = None,
    dims: Mapping[str, int] | Sequence[Mapping[str, int]] | None = None,
    entry: str | None = None,
    verbose: bool | TextIO | None = None,
    precision: str = "float32",
) -> CompiledModule:
    """Compile ``module`` with TVM: a ``CompiledModule`` that is called as
    the interpreter runs ``entry`` (same arguments, same ``State``).

    - ``module``: a module, or a function made by ``@effir.script`` or
      ``effir.trace`` (ir/program.py).
    - ``entry``: the function a call runs (and ``dims`` are for); by
      default a module's ``@main``, a function's own. A call may name
      another (``compiled(x, entry="other")``).

    - ``target``: ``"llvm"`` (this CPU, with its vector extensions),
      ``"cuda"`` (sm_90), or what TVM users write: ``"llvm
      -mcpu=skylake-avx512"``, ``"cuda -arch=sm_80"``, a config dict, a
      ``tvm.target.Target``.
    - ``pipeline``: the passes to run, as pipeline text
      (``"O2,fuse{max-fused-ops=16},lower-tvm"``) or a ``Pass``; by
      default the one of ``opt_level`` (``COMPILE_PIPELINES``). It must
      leave a state-passing program (``state-passing``) for the backend.
    - ``opt_level``: 0 (the effect passes and the lowering only), 1 (and
      fusion) or 2 (and partial evaluation, simplification, cse, dce);
      default: the current ``PassContext``'s (2). Not with ``pipeline``.
    - ``dims``: bindings of ``entry``'s symbolic dimensions to build now
      (``{"n": 8}`` or a list of them); any other shape is built at its
      first call (an entry without symbolic dimensions is built at once).
    - ``verbose``: progress lines (the pipeline, each specialisation, its
      kernels, how long) on standard error, or on the stream given;
      ``compiled.verbose`` turns them on or off later. By default (None)
      they are off in library calls and scripts, on in a Jupyter notebook;
      ``effir compile`` prints them unless ``-q``.
    - ``precision``: how float32 matrix products (``nn.dense``,
      ``nn.matmul``) multiply: ``"float32"`` (the default, as the
      interpreter), ``"tf32"`` or ``"bfloat16"`` (operands rounded to that
      format, products accumulated in float32; on CUDA on the tensor cores
      where the shapes allow: precision.py [RULE COMPILE-PRECISION]).

    The passes run in the current ``PassContext`` (its instruments and
    verification); with none entered, the program is type-checked before
    and after the pipeline, not after every pass, unless
    ``EFFIR_VERIFY_PASSES=1`` (driver/verification.py
    [RULE COMPILE-VERIFY]). ``compiled.report`` (``CompileReport``) says
    what was done and what it cost. Imports TVM on first use."""
    if pipeline is not None and opt_level is not None:
        raise PassError("effir.compile: give a pipeline or an opt_level, not both")
    module, entry = resolve(module, entry, CompileError, "effir.compile")
    context = pipeline_context()  # [RULE COMPILE-VERIFY]
    level = context.opt_level if opt_level is None else opt_level
    if pipeline is None:
        if level not in COMPILE_PIPELINES or isinstance(level, bool):
            raise PassError(f"opt_level must be 0, 1 or 2, not {level!r}")
        pipeline = COMPILE_PIPELINES[level]
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    if not isinstance(passes, Pass):
        raise PassError(f"effir.compile: pipeline must be text or a Pass, not {pipeline!r}")
    if verbose is None:
        verbose = in_notebook()
    progress = Progress(verbose)

    def optimise() -> IRModule:
        import_tvm()  # the checks below import TVM: without PyTorch (runtime/importing.py)
        from .compilable import callable_part, refuse_uncompilable  # lazy: imports TVM

        optimised = run_pipeline(passes, callable_part(module, entry), context)
        refuse_uncompilable(optimised, entry)
        return optimised

    # Looked up before the target and the precision are checked: a record
    # exists only for a compile that checked them (its key holds both), so
    # a hit imports no TVM Python (runtime/tvm_runtime.py), and anything
    # wrong is a miss that the checks below refuse.
    key = None
    if isinstance(pipeline, str) and emulation() is None:  # a Pass object: its code is no key
        key = program_cache.program_key(module, entry, passes.spelled(), context, target, precision)
    record = program_cache.load(key) if key is not None else None
    if record is not None:
        progress("the optimised program is in the build cache: the pipeline is skipped")
        report = CompileReport(
            record.nodes_before,
            record.nodes_after,
            record.pipeline_seconds,
            pipeline=record.pipeline,
            target=record.target,
            precision=precision,
            cached=True,
        )
        compiled = CompiledModule(
            module, optimise, lambda: _tvm_target(target), report, entry, precision, record
        )
    else:
        tvm_target = _tvm_target(target, precision)
        progress(f"optimising: {passes.spelled() or '(no pass)'}")
        start = time.perf_counter()
        optimised = optimise()
        report = CompileReport(
            _size(module),
            _size(optimised),
            time.perf_counter() - start,
            pipeline=passes.spelled(),
            target=str(tvm_target),
            precision=precision,
        )
        progress(
            f"optimised in {report.pipeline_seconds:.2f} s "
            f"({report.nodes_before} -> {report.nodes_after} IR nodes)"
        )
        compiled = CompiledModule(module, optimised, tvm_target, report, entry, precision)
    compiled.verbose = verbose
    if record is not None:
        is_static = record.static_entry
    else:
        is_static = _static_entry(compiled.module, entry)
    if is_static:
        compiled.specialisation(entry, {})
    bindings = [dims] if isinstance(dims, Mapping) else list(dims or ())
    for binding in bindings:
        compiled.specialisation(entry, _binding(compiled, entry, binding))
    if key is not None and record is None:
        try:
            program_cache.store(key, compiled.program_record())
        except OSError as err:  # a read-only directory, a full disk [RULE CACHE-NEVER-CRASH]
            progress(f"the build cache is not written ({err})")
    return compiled


def _binding(compiled: CompiledModule, entry: str, dims: Mapping[str, int]) -> Dims:
    """``dims`` checked against ``entry``'s symbolic dimensions: each one
    bound, to a size, and no other."""
    needed = set(compiled.signature(entry).dimensions)
    shown = ", ".join(sorted(needed)) or "none"
    for name, size in dims.items():
        if name not in needed:
            raise CompileError(f"dims: @{entry} has no dimension {name} (its dimensions: {shown})")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise CompileError(f"dims: {name} must be a size (an int >= 0), not {size!r}")
    missing = sorted(needed - set(dims))
    if missing:
        raise CompileError(f"dims {dict(dims)}: no size for {', '.join(missing)}")
    return dict(dims)


def _key(entry: str, dims: Dims, static_dims: set[str]) -> tuple[str, tuple[tuple[str, int], ...]]:
    """The specialisations' key: the entry and its bound dimensions."""
    return entry, tuple(sorted((d, v) for d, v in dims.items() if d in static_dims))


def _tvm_target(target: Any, precision: str = "float32") -> Any:
    """TVM's target for the ``target`` given to ``compile`` (target.py), the
    ``precision`` checked first: what a build needs, imported with TVM."""
    import_tvm()  # without PyTorch and ml_dtypes (runtime/importing.py)
    from ..precision import PRECISIONS  # lazy: imports TVM (a build)
    from ..target import make_target  # lazy: imports TVM (a build)

    if precision not in PRECISIONS:
        raise CompileError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    return make_target(target)


def _static_entry(module: IRModule, entry: str) -> bool:
    """Whether ``entry`` has one build, made at compile time (every
    parameter's type static)."""
    main = module.functions.get(entry)
    return main is not None and all(static_shapes(p.checked_type) for p in main.params)


def _size(module: IRModule) -> int:
    return sum(1 for fn in module.functions.values() for _ in pre_order(fn))
