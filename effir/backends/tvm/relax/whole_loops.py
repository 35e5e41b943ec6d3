"""[RULE LOOP-WHOLE] The calls of a whole loop (relax/loops.py [RULE LOOP-TIR]).

On the CPU a whole loop is one TIR function (loop/): its prologue and the
loop over the steps. On CUDA it is two (loop/cuda/): the prologue, an
ordinary kernel computing the hoisted products of every step, then the
persistent kernel running every step, which takes them. The persistent
kernel is launched cooperatively (its grid waits at a grid barrier), so
it cannot also hold the prologue's grid, which is as large as the
sequence. A grid of no blocks cannot be launched: on no steps the
prologue is not called and its results are empty tensors (an ``If`` on
the count when the length is not known statically).

``loop.cuda.emulated()`` builds the CUDA form for the CPU, each kernel
run serially (loop/cuda/threads.py), to test its algorithm where there is
no GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from ....ir.expr import Function, Var
from ..kernel.checks import collecting_checks
from ..loop import LoweredLoop, lower_loop
from ..loop.cuda import CudaLoop, emulation, lower_cuda_loop
from ..runtime.errors import BackendError
from .apart import LOOP_WEIGHT
from .dynamic import DynamicRules
from .kernel_calls import KernelRules
from .state import LoweringState


@dataclass
class WholeLoop:
    """A whole loop compiled apart: its lowering and the symbols called."""

    lowered: LoweredLoop | CudaLoop
    symbol: str
    prologue: str | None = None


class WholeLoopRules:
    """Lowering and calling whole loops, for relax/loops.py."""

    def __init__(self, state: LoweringState, kernel: KernelRules, dynamic: DynamicRules) -> None:
        self.state = state
        self.bb = state.bb
        self.kernel = kernel
        self.dynamic = dynamic

    def whole_loop(
        self, body: Function, captured: Sequence[Var], functions: Mapping[Var, Function]
    ) -> WholeLoop:
        """``body``'s whole loop, compiled apart; a ``BackendError`` when the
        body cannot be one (control flow, effects, run-time checks)."""
        emulated = emulation()
        on_gpu = self.state.target.kind.name == "cuda"
        with collecting_checks() as checks:
            if on_gpu or emulated is not None:
                lowered: Any = lower_cuda_loop(
                    body,
                    {},
                    captured,
                    functions,
                    self.state.module,
                    self.state.target,
                    on_gpu=on_gpu,
                    blocks=None if on_gpu else emulated,
                )
            else:
                lowered = lower_loop(
                    body, {}, captured, functions, self.state.module, parallel=True
                )
        if checks:  # kernel/checks.py: the VM loop's step kernels check, a loop kernel cannot
            raise BackendError("a run-time check in the loop body")
        func = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": lowered.func}))["main"]
        loop = WholeLoop(
            lowered, self.kernel.compiled_apart(func, f"loop_{self.state.loops}", LOOP_WEIGHT)
        )
        if isinstance(lowered, CudaLoop) and lowered.prologue is not None:
            loop.prologue = self.kernel.compiled_apart(
                lowered.prologue, f"loop_{self.state.loops}_prologue"
            )
        self.state.loops += 1
        return loop

    def whole_call(self, loop: WholeLoop, args: list[Any], length: Any) -> tuple[list[Any], Any]:
        """``loop`` called on ``args`` (sequences of ``length`` steps, the
        state, the captured values and constants): its outputs (the
        stacked outputs, the final state, then scratch) and the call's
        value (to release)."""
        lowered = loop.lowered
        if not isinstance(lowered, CudaLoop):
            return self._dps_call(loop.symbol, args, whole_outputs(lowered, length))
        hoisted = []
        if loop.prologue is not None:
            hoisted = self._prologue_call(loop, args, length)
        return self._dps_call(loop.symbol, [*args, *hoisted], whole_outputs(lowered, length))

    def _prologue_call(self, loop: WholeLoop, args: list[Any], length: Any) -> list[Any]:
        """[RULE LOOP-WHOLE] The hoisted products of ``length`` steps, computed
        only when there are steps."""
        lowered = loop.lowered
        assert isinstance(lowered, CudaLoop) and loop.prologue is not None
        n_x, n_state = len(lowered.x), len(lowered.state)
        seqs, rest = args[:n_x], args[n_x + n_state :]
        inputs = [seqs[k] if kind == "x" else rest[k] for kind, k in lowered.prologue_inputs]
        types = [
            relax.TensorType(([length] if seq else []) + list(leaf.shape), leaf.dtype)
            for leaf, seq in lowered.hoisted
        ]
        emit = self.bb.emit

        def computed() -> Any:
            parts, _ = self._dps_call(loop.prologue, inputs, types)
            return relax.Tuple(parts)

        def empty() -> Any:  # (rows, row size) zeros, the executor's kernel, reshaped
            made = []
            for (leaf, seq), t in zip(lowered.hoisted, types, strict=True):
                size = int(np.prod(leaf.shape, dtype=np.int64))
                flat = self.dynamic.zeros([length if seq else 1, size], leaf.dtype)
                made.append(emit(self.dynamic.reshape(flat, list(t.shape.values))))
            return relax.Tuple(made)

        static = length if isinstance(length, int) else None
        if isinstance(length, tirx.IntImm):
            static = int(length)
        if static is not None:
            value = emit(computed() if static > 0 else empty())
        else:
            # on the host, in the VM's shape arithmetic [RULE LOOP-HOSTCOUNT]
            some = relax.prim_value(tirx.GT(length, tirx.const(0, "int64")))
            value = emit(relax.If(some, self.bb.block(computed), self.bb.block(empty)))
        return [emit(relax.TupleGetItem(value, i)) for i in range(len(types))]

    def _dps_call(self, kernel: Any, args: list[Any], outs: list[Any]) -> tuple[list[Any], Any]:
        """``kernel`` (a loop kernel compiled apart) called on ``args``: its
        outputs as a list, and the call's value (to release)."""
        emit = self.bb.emit
        if len(outs) == 1:
            value = emit(relax.call_dps_packed(kernel, args, outs[0]))
            return [value], None
        value = emit(relax.call_dps_packed(kernel, args, outs))
        return [emit(relax.TupleGetItem(value, i)) for i in range(len(outs))], value


def whole_outputs(lowered: LoweredLoop | CudaLoop, length: Any) -> list[Any]:
    """A whole loop's output tensors: the stacked outputs, the final state,
    its scratch (discarded)."""
    outs = [relax.TensorType([length, *leaf.shape], leaf.dtype) for leaf in lowered.outputs]
    outs += [relax.TensorType(list(leaf.shape), leaf.dtype) for leaf in lowered.state]
    if isinstance(lowered, CudaLoop):
        return outs + [relax.TensorType(list(leaf.shape), leaf.dtype) for leaf in lowered.scratch]
    rows = lowered.scratch_rows(length)
    outs += [
        relax.TensorType(([rows] if seq else []) + list(leaf.shape), leaf.dtype)
        for leaf, seq in lowered.scratch
    ]
    return outs
