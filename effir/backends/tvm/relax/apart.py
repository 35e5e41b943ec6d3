"""The kernels compiled apart ([RULE LOWER-APART], relax/kernel_calls.py): built in
groups, in parallel, and shared by every build of the process.

Why: a gradient program is many small kernels (46 and 5 whole loops for a
16-unit recurrent layer with dropout and batch norm), and each costs TVM's
TIR passes and LLVM's optimisation when built, then LLVM's machine code
when the module is first used: 1.3 s for that program, one kernel after
the other, on one core, while the machines effir runs on have several.
And a program compiled again for another shape, or another program of the
same model (its evaluation beside its training step), builds kernels that
were built already.

Algorithm:

1. [RULE APART-SHARE] A kernel is known by its content: the structural hash of
   its scheduled PrimFunc (TVM's ``structural_hash``, which names do not
   change), and the target. ``symbol`` returns the symbol of a kernel
   already known to the process when one is structurally equal (checked,
   not only hashed), else a new symbol ``effir_<hash>_<name>``: the same
   kernel is the same code wherever it is called from.
2. [RULE APART-GROUPS] ``modules`` builds the kernels not built yet: they are
   dealt into groups of about equal work (a whole loop counts as
   ``LOOP_WEIGHT`` kernels), one group per worker thread, as TVM's
   per-module cost (about 18 ms of LLVM set-up) forbids one module per
   kernel. TVM releases Python's lock while it compiles, so the groups
   compile at once on as many cores. On a CPU target each worker also
   makes LLVM generate the group's machine code (the first look-up of a
   function of an LLVM module does all of it), which the first call would
   otherwise do on one thread.
3. [RULE APART-ONCE] A kernel is built by one build only: a build claims the
   kernels it builds (a future each) under the lock, and a build that
   needs a kernel another one is building waits for it. A build that
   fails gives its claims back, so that a later build tries again.

4. [RULE APART-OVERLAP] A lowering starts its kernels' builds (``start``) and
   returns; its Relax program builds meanwhile (``relax.build``), and
   imports the kernels' modules once both are done
   (driver/compile.py, ``Specialisation``).

The executable of a program imports the modules holding its kernels; an
export or the build cache writes them with it.
Modules are kept for the life of the process (kernels are small; the GRU
language model's are 200 KiB). CUDA builds run in one group: their device
code goes through nvcc, and effir has not measured nvcc runs in parallel.
``EFFIR_BUILD_THREADS`` sets the number of workers (default: the CPUs,
at most 8)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi

from ..kernel.lets import normalised_lets
from ..target import building

LOOP_WEIGHT = 8
"""A whole loop's build, in kernels' (a loop is a kernel per step of its
algorithm, unrolled and tiled: several times a kernel's code)."""


def workers() -> int:
    chosen = os.environ.get("EFFIR_BUILD_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class Pending:
    """Kernels being made available: ``modules`` (a Future of the runtime
    modules holding them), how many this build compiles (``built``) and
    how many an earlier build of the process had (``shared``)."""

    modules: Future
    built: int
    shared: int


@dataclass
class _Kernel:
    func: Any  # the PrimFunc, its global_symbol set
    symbol: str
    weight: int
    target: Any
    built: Future | None = field(default=None)  # -> the runtime module holding it


class KernelLibrary:
    """The kernels of every build in this process, by content and target."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_hash: dict[tuple[str, int], list[_Kernel]] = {}
        self._by_symbol: dict[str, _Kernel] = {}

    def symbol(self, func: Any, name: str, target: Any, weight: int = 1) -> str:
        """[RULE APART-SHARE] The symbol ``func`` (a scheduled PrimFunc) is called
        by: a structurally equal kernel's, or a new one."""
        digest = int(tvm_ffi.structural_hash(func)) & (1 << 64) - 1
        key = (str(target), digest)
        with self._lock:
            same = self._by_hash.setdefault(key, [])
            for kernel in same:
                if tvm_ffi.structural_equal(
                    kernel.func, func.with_attr("global_symbol", kernel.symbol)
                ):
                    return kernel.symbol
            symbol = f"effir_{digest:016x}_{name}" + (f"_{len(same)}" if same else "")
            kernel = _Kernel(func.with_attr("global_symbol", symbol), symbol, weight, target)
            same.append(kernel)
            self._by_symbol[symbol] = kernel
            return symbol

    def modules(self, symbols: Iterable[str]) -> list[Any]:
        """The runtime modules holding the kernels ``symbols`` (each once),
        the kernels not built yet built now [RULE APART-GROUPS] [RULE APART-ONCE]."""
        return self.start(symbols, wait=True).modules.result()

    def start(self, symbols: Iterable[str], wait: bool = False) -> Pending:
        """``modules(symbols)``, the builds on a thread of their own
        [RULE APART-OVERLAP] (this one when ``wait``): the kernels this call
        builds are claimed now, so ``Pending.built`` says how many."""
        wanted = [self._by_symbol[s] for s in dict.fromkeys(symbols)]
        with self._lock:
            mine = [k for k in wanted if k.built is None]
            for kernel in mine:
                kernel.built = Future()
            futures = [k.built for k in wanted]  # as claimed now: a failed build resets them
        result: Future = Future()

        def run() -> None:
            try:
                if mine:
                    self._build(mine)
                found: dict[int, Any] = {}
                for future in futures:
                    assert future is not None
                    module = future.result()  # raises the error of the build that claimed it
                    found.setdefault(id(module), module)
                result.set_result(list(found.values()))
            except BaseException as err:  # the caller's to raise, where it waits
                result.set_exception(err)

        if wait or not mine:
            run()
        else:
            threading.Thread(target=run, name="effir-kernels", daemon=True).start()
        return Pending(result, len(mine), len(wanted) - len(mine))

    def _build(self, kernels: list[_Kernel]) -> None:
        target = kernels[0].target
        on_cpu = target.kind.name == "llvm"
        groups = _groups(kernels, workers() if on_cpu else 1)
        context = tvm.transform.PassContext.current()  # the caller's, in every worker

        def build(group: list[_Kernel]) -> Any:
            with context, building(target):
                kernels = tvm.IRModule({k.symbol: k.func for k in group})
                library = tvm.compile(normalised_lets(kernels), target=target)
            if on_cpu:  # LLVM's machine code, here rather than at the first call
                library.mod.get_function(group[0].symbol)
            return library.mod

        try:
            if len(groups) == 1:
                built = [build(groups[0])]
            else:
                with ThreadPoolExecutor(len(groups), thread_name_prefix="effir-build") as pool:
                    built = list(pool.map(build, groups))
        except BaseException as err:
            with self._lock:
                for kernel in kernels:
                    future, kernel.built = kernel.built, None  # a later build tries again
                    if future is not None:
                        future.set_exception(err)
            raise
        for group, module in zip(groups, built, strict=True):
            for kernel in group:
                assert kernel.built is not None
                kernel.built.set_result(module)


def _groups(kernels: list[_Kernel], count: int) -> list[list[_Kernel]]:
    """``kernels`` dealt into at most ``count`` groups of about equal
    weight (the heaviest first, each to the lightest group)."""
    count = max(1, min(count, len(kernels)))
    groups: list[list[_Kernel]] = [[] for _ in range(count)]
    loads = [0] * count
    for kernel in sorted(kernels, key=lambda k: -k.weight):
        lightest = loads.index(min(loads))
        groups[lightest].append(kernel)
        loads[lightest] += kernel.weight
    return [g for g in groups if g]


LIBRARY = KernelLibrary()
"""The process's kernels."""
