"""Loops in the Relax lowering: whole TIR loops, chunks, and VM loops.

- [RULE LOOP-TIR] ``cf.foreach`` whose body is static and pure is one call of
  the loop kernel (loop.lower_loop; on CUDA a prologue and one persistent
  kernel, loop/cuda/, relax/whole_loops.py [RULE LOOP-WHOLE]): no VM
  instruction runs per step.
- [RULE LOOP-CHUNK] A sequence longer than ``LOOP_CHUNK`` steps runs in chunks,
  one call each, the state passed on: the kernel's prologue holds the
  hoisted input projections of its steps, so memory stays bounded whatever
  the length. With a static length the chunks are unrolled; with a
  symbolic or data-dependent (``?``) one the VM chooses at run time between
  one call in a function whose length is declared bounded (its scratch
  then planned once) and a VM loop over chunks [RULE LOOP-LEVELS].
- [RULE LOOP-BOUNDS] Relax plans a bounded function's scratch for its bound,
  whatever the length it is called with; so a loop of symbolic length has
  one bounded function per size class (``LOOP_CHUNK``, a quarter of it,
  ... down to ``MIN_BOUND`` steps: ``scratch_bounds``) and the VM calls
  the smallest that holds the length. A call on T steps then holds
  scratch for at most ``BOUND_FACTOR * max(T, MIN_BOUND)`` steps, not
  ``LOOP_CHUNK`` (the k-step loops of ``checkpoint="sqrt"``'s segments),
  and each class's storage is still one size, which the pooled allocator
  reuses from call to call.
- [RULE LOOP-VM] A loop that cannot be one TIR function (``cf.while_loop``,
  a ``cf.foreach`` with control flow or effects in its body) is a VM loop
  the VM runs step by step [RULE LOOP-LEVELS]; its per-step outputs go to
  buffers written in place (of the sequence's length for ``foreach``;
  doubled when full for ``while_loop``), cut to the steps run at the end.
  Each step releases its result tuple before going on, so memory does not
  grow with the steps.
- [RULE LOOP-VMSIZED] A VM loop's per-step output (``cf.foreach``'s or an
  unpadded ``cf.while_loop``'s) may have one ``?`` dimension: its buffer
  starts with no rows, the first step's row size widens it
  (``grow_rows``), it grows as a ``while_loop``'s, and it is cut to the
  steps run at the end, the ``?`` being the row size over the other
  dimensions (sqrt checkpointing's segments, of a size known at run time;
  ONNX Loop's scan outputs). A padded ``while_loop``'s rows exist before
  any step has told their size: type inference requires them static.
- [RULE LOOP-LEVELS] The VM has no loop instruction a Relax program can reach:
  a loop is a recursive function, and the VM runs each call of a VM
  function as a native C++ recursion (vm.cc: InvokeBytecode -> RunLoop),
  about 3.5 KB of native stack per call. A loop of N steps as one
  recursion overflowed the stack near 2,000-4,000 steps. So a loop is
  ``LEVELS + 1`` functions: level 0 runs at most ``LEVEL_STEPS`` steps (up
  to a count limit it is given) and returns; level ``i`` calls level
  ``i - 1`` again and again, at most ``LEVEL_STEPS`` times, each time with
  the limit ``LEVEL_STEPS ** i`` steps further; the top level calls
  ``LEVELS - 1`` until the loop ends. The native depth is at most
  ``LEVELS * LEVEL_STEPS`` plus one call per ``LEVEL_STEPS ** LEVELS``
  (33 million) steps, whatever the length; each step costs one comparison
  of its count with the limit more than a single recursion would.
  docs/backend.md says why not the VM's own jumps.

Every loop form is one of two builders over the shared levels
(``_levels``): ``_foreach_in_vm`` and ``while_loop``; map (state ``()``),
scan (per-step output ``()``), several sequences and several states, and
static, symbolic or ``?`` lengths all go through the same code.

The rules are ``LoopRules``, a rule set relax/lower.py's walk holds; they
share relax/state.py's ``LoweringState``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import relax, tirx
from tvm.relax.op.vm import kill_object

from ....ir import type_tree
from ....ir.dims import static_shapes
from ....ir.expr import Call, Expr, Function, Var
from ....ir.printer import astext
from ....ir.types import ANY, Dim, TensorType, TupleType, Type
from ....ir.visitor import free_vars
from ....ops.control import pads, while_limit
from ..kernel.primitive import leaves
from ..loop import LoweredLoop
from ..loop.cuda import CudaLoop
from ..runtime.errors import BackendError
from .constants import constant
from .dynamic import DynamicRules
from .kernel_calls import KernelRules
from .state import LoweringState, Walk
from .types import declare, is_const, relax_type, unknown_shape
from .whole_loops import WholeLoop, WholeLoopRules, whole_outputs

LOOP_CHUNK = 1024
"""Steps per call of a whole-loop kernel [RULE LOOP-CHUNK]."""

BOUND_FACTOR = 4
"""Ratio of one size class of a symbolic loop's bounded calls to the next
[RULE LOOP-BOUNDS]."""

MIN_BOUND = 16
"""Steps of the smallest size class of a symbolic loop's bounded calls
[RULE LOOP-BOUNDS]."""

LEVEL_STEPS = 32
"""Calls one level of a VM loop makes before it returns [RULE LOOP-LEVELS]."""

LEVELS = 5
"""Levels below the top one of a VM loop [RULE LOOP-LEVELS]."""

NO_LIMIT = np.int64(2**62)
"""The count limit of a loop that has none (a ``while_loop`` without
``max_iterations``)."""

INT64 = relax.TensorType([], "int64")
BOOL = relax.TensorType([], "bool")


@dataclass
class _Steps:
    """What one VM loop's levels need: the values carried from step to step
    and those every step reads (sequences, captured values), and the two
    parts of a step. ``guard(carried, fixed)`` emits the test that may end
    the loop before a step (``while_loop``'s condition; None for
    ``foreach``); ``advance(count, carried, fixed)`` emits one step and
    gives the next count and carried values."""

    carried: list[Any]
    carried_types: list[Any]
    fixed: list[Any]
    guard: Callable[[list[Any], list[Any]], Any] | None
    advance: Callable[[Any, list[Any], list[Any]], tuple[Any, list[Any]]]
    stride: int = 1
    depth: int | None = None  # which fixed value is the depth of recursion [RULE LOWER-DEPTH]


class LoopRules:
    """The loops of relax/lower.py's walk."""

    def __init__(
        self,
        state: LoweringState,
        walk: Walk,
        kernel: KernelRules,
        dynamic: DynamicRules,
        whole: WholeLoopRules,
    ) -> None:
        self.state = state
        self.bb = state.bb
        self.walk = walk
        self.kernel = kernel
        self.dynamic = dynamic
        self.whole = whole

    # ------------------------------------------------------------ foreach
    def foreach(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE LOOP-TIR] ``cf.foreach(body, xs, init)`` as one TIR loop when
        its body allows, else a VM loop."""
        body_arg, xs_arg, init_arg = call.args
        body = self._literal(body_arg, env, call)
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        captured = [v for v in free_vars(body) if v not in functions]
        xs_type = xs_arg.checked_type
        step_types = [*_step_types(xs_type), init_arg.checked_type, body.checked_type]
        step_types += [v.checked_type for v in captured]
        self.kernel.needs_static(step_types)
        if not all(map(static_shapes, step_types)):
            return self._foreach_in_vm(call, env, name)
        if not list(type_tree.leaves(body.body.checked_type)):
            # No output and no state: a TIR loop would compute nothing (TVM
            # cannot schedule a function without a buffer); the VM runs the
            # body's steps as the interpreter does (a step may still fail).
            return self._foreach_in_vm(call, env, name)
        try:  # [RULE LOOP-WHOLE] (relax/whole_loops.py): one TIR function, or two GPU kernels
            gv = self.whole.whole_loop(body, captured, functions)
        except BackendError:  # control flow, effects or checks in the body: a VM loop
            return self._foreach_in_vm(call, env, name)
        lowered = gv.lowered
        sequences = self.kernel.leaves(self.walk.atom(xs_arg, env), xs_type)
        state = self.kernel.leaves(self.walk.atom(init_arg, env), init_arg.checked_type)
        rest = []
        for v in captured:
            rest += self.kernel.leaves(self.walk.atom(v, env), v.checked_type)
        rest += [self.bb.constant(c) for c in lowered.constants]
        length = _leading_dim(xs_type)
        if isinstance(length, int):
            return self._in_chunks(call, gv, lowered, length, sequences, state, rest, name)
        # A symbolic or ``?`` length: up to LOOP_CHUNK steps, one call on
        # the sequences as they are [RULE LOOP-BOUNDS]; more, the chunked loop
        # (its copies of the chunks' rows cost less than a prologue of the
        # whole length would hold).
        xs_leaves = leaves(xs_type)
        rows = [self.dynamic.rows(x, t) for x, t in zip(sequences, xs_leaves, strict=True)]
        steps = self._length(call, rows, xs_leaves)
        emit = self.bb.emit
        # which call runs is decided in the VM's shape arithmetic, on the
        # host: a tensor condition would wait for the GPU [RULE LOOP-HOSTCOUNT]
        long = relax.prim_value(tirx.GT(steps, tirx.const(LOOP_CHUNK, "int64")))
        chunked = self.bb.block(
            lambda: self._chunked(call, gv, lowered, steps, rows, state, rest, xs_leaves)
        )

        def direct(bounds: list[int]) -> Any:
            """The call of the smallest bound of ``bounds`` (descending)
            that holds ``steps``."""
            if len(bounds) == 1:
                return self._bounded_call(
                    call, gv, lowered, sequences, xs_leaves, state, rest, bounds[0]
                )
            larger = relax.prim_value(tirx.GT(steps, tirx.const(bounds[1], "int64")))
            return emit(
                relax.If(
                    larger,
                    self.bb.block(lambda: direct(bounds[:1])),
                    self.bb.block(lambda: direct(bounds[1:])),
                )
            )

        return emit(relax.If(long, chunked, self.bb.block(lambda: direct(scratch_bounds()))), name)

    def _length(self, call: Call, rows: list[Any], xs_types: list[TensorType]) -> Any:
        """The number of steps of sequences given as (rows, row size)
        views: the rows of the first, which every other must have (checked
        at run time where a ``?`` lets them differ)."""
        lengths = [r.ty.shape.values[0] for r in rows]
        if any(t.shape[0] == ANY for t in xs_types):
            # as the interpreter's message, which sorts the lengths
            shown = " [{}, {}]" if len(lengths) == 2 else ""
            for other in lengths[1:]:
                self.dynamic.check_shape(
                    call,
                    tirx.EQ(lengths[0], other),
                    f"the sequences have different lengths{shown}",
                    [tirx.min(lengths[0], other), tirx.max(lengths[0], other)] if shown else [],
                )
        return lengths[0]

    def _bounded_call(
        self,
        call: Call,
        loop: WholeLoop,
        lowered: LoweredLoop | CudaLoop,
        sequences: list[Any],
        xs_types: list[TensorType],
        state: list[Any],
        rest: list[Any],
        bound: int,
    ) -> Any:
        """One call of the loop kernel on at most ``bound`` steps, in a
        function of its own whose length is declared bounded
        (``tir_var_upper_bound``): Relax then plans the kernel's scratch
        (the hoisted projections) statically, for ``bound`` steps
        [RULE LOOP-BOUNDS], and reuses it from call to call, where a symbolic size
        would make the VM allocate fresh pages at every call (a page fault
        per 4 KiB, slower than the loop)."""
        steps = tirx.Var("steps", "int64")
        seq_params = [
            relax.Var(f"xs{i}", relax.TensorType([steps, *t.shape[1:]], t.dtype))
            for i, t in enumerate(xs_types)
        ]
        carried = [relax.Var(f"state{i}", x.ty) for i, x in enumerate(state)]
        others = [relax.Var(f"c{i}", r.ty) for i, r in enumerate(rest) if not is_const(r)]
        it = iter(others)
        inner_rest = [r if is_const(r) else next(it) for r in rest]
        outs = whole_outputs(lowered, steps)
        n_keep = len(lowered.outputs) + len(lowered.state)

        def kept() -> Any:
            parts, _ = self.whole.whole_call(loop, [*seq_params, *carried, *inner_rest], steps)
            return relax.Tuple(parts[:n_keep])

        params = [*seq_params, *carried, *others]
        ret = relax.TupleType(list(outs[:n_keep]))
        function = relax.Function(params, self.bb.block(kept), ret, False).with_attr(
            "tir_var_upper_bound", {"steps": bound}
        )
        gv = self.bb.add_func(function, f"bounded_{self.state.loops}")
        self.state.loops += 1
        emit = self.bb.emit
        result = emit(relax.Call(gv, [*sequences, *state, *[r for r in rest if not is_const(r)]]))
        parts = [emit(relax.TupleGetItem(result, i)) for i in range(n_keep)]
        return self._loop_result(call, parts[: len(lowered.outputs)], parts[len(lowered.outputs) :])

    def _in_chunks(
        self,
        call: Call,
        gv: WholeLoop,
        lowered: LoweredLoop | CudaLoop,
        length: int,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
        name: str,
    ) -> Any:
        """[RULE LOOP-CHUNK] The loop kernel called on ``LOOP_CHUNK`` steps at a
        time (a static length: the chunks unrolled), the state passed on."""
        emit = self.bb.emit
        n_out, n_state = len(lowered.outputs), len(lowered.state)
        pieces: list[list[Any]] = [[] for _ in range(n_out)]
        for start in range(0, max(length, 1), LOOP_CHUNK):
            steps = min(LOOP_CHUNK, length - start)
            chunk = sequences
            if steps != length:
                chunk = [
                    emit(relax.op.strided_slice(x, [0], [start], [start + steps]))
                    for x in sequences
                ]
            parts, result = self.whole.whole_call(gv, [*chunk, *state, *rest], steps)
            self._release(result)  # in a VM loop's step, its outputs would live until the loop ends
            for i in range(n_out):
                pieces[i].append(parts[i])
            state = parts[n_out : n_out + n_state]
        stacked = [p[0] if len(p) == 1 else emit(relax.op.concat(p, axis=0)) for p in pieces]
        return self._loop_result(call, stacked, state, name)

    def _chunked(
        self,
        call: Call,
        loop: WholeLoop,
        lowered: LoweredLoop | CudaLoop,
        length: Any,
        rows: list[Any],
        state: list[Any],
        rest: list[Any],
        xs_types: list[TensorType],
    ) -> Any:
        """[RULE LOOP-CHUNK] A whole loop of symbolic length as a VM loop over
        chunks [RULE LOOP-LEVELS]: each step calls the loop kernel on the next
        ``LOOP_CHUNK`` rows of the sequences (copied out), passes the state
        on and writes the chunk's outputs into buffers of the whole length."""
        emit = self.bb.emit
        sizes = [_elements(t.shape[1:]) for t in xs_types]
        out_sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in lowered.outputs]
        n_state = len(lowered.state)
        n_fixed = len(rows)

        def advance(start: Any, carried: list[Any], fixed: list[Any]) -> tuple[Any, list[Any]]:
            seqs, inner_rest = fixed[:n_fixed], fixed[n_fixed:]
            # the chunk's steps from the level's count and limit, on the host
            done, limit = self.state.host_level
            left = tirx.min(tirx.const(LOOP_CHUNK, "int64"), limit - done)
            k = tirx.Var("k", "int64")
            self.bb.match_cast(emit(relax.ShapeExpr([left])), relax.ShapeType([k]))
            chunk = []
            for seq, t, c in zip(seqs, xs_types, sizes, strict=True):
                part = self.dynamic.executor_call("chunk_rows", t.dtype, [seq, start], [k, c])
                chunk.append(emit(self.dynamic.reshape(part, [k, *[int(d) for d in t.shape[1:]]])))
            args = [*chunk, *carried[:n_state], *inner_rest]
            parts, result = self.whole.whole_call(loop, args, k)
            written = []
            bufs = carried[n_state:]
            for buf, part, leaf, c in zip(
                bufs, parts[: len(bufs)], lowered.outputs, out_sizes, strict=True
            ):
                flat = emit(self.dynamic.reshape(part, [k, c]))
                written.append(self.dynamic.write_into("write_rows", buf, flat, start, leaf.dtype))
            new_state = parts[len(lowered.outputs) : len(lowered.outputs) + n_state]
            self._release(result)
            return emit(relax.op.add(start, _int64(LOOP_CHUNK))), [*new_state, *written]

        bufs = [
            self.dynamic.zeros([length, c], leaf.dtype)
            for leaf, c in zip(lowered.outputs, out_sizes, strict=True)
        ]
        steps = _Steps(
            carried=[*state, *bufs],
            carried_types=[s.ty for s in state] + _buffer_types(lowered.outputs),
            fixed=[*rows, *rest],
            guard=None,
            advance=advance,
            stride=LOOP_CHUNK,
        )
        _, final = self._levels(steps, length, "chunks")
        stacked = self._stacked(final[n_state:], lowered.outputs, length)
        return self._loop_result(call, stacked, final[:n_state])

    # ------------------------------------------------------------ VM loops
    def _foreach_in_vm(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE LOOP-VM] ``cf.foreach`` step by step in the VM: step
        ``count`` takes row ``count`` of each sequence and writes row
        ``count`` of buffers of the sequences' length."""
        body_arg, xs_arg, init_arg = call.args
        body = self._literal(body_arg, env, call)
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        captured = [v for v in free_vars(body) if v not in functions]
        xs_type = xs_arg.checked_type
        self.kernel.needs_static(_step_types(xs_type) + [init_arg.checked_type, body.checked_type])
        out_type, state_type = self._body_types(body, call, sized=True)
        outs, sizes = _outputs(out_type)
        xs_leaves = leaves(xs_type)
        for leaf in xs_leaves:
            if not all(isinstance(d, int) for d in leaf.shape[1:]):
                raise BackendError(
                    f"a cf.foreach over a sequence whose steps ({astext(leaf)}) have "
                    f"{unknown_shape(leaf.shape[1:])} is not compiled",
                    call.span,
                )
        emit = self.bb.emit
        sequences = self.kernel.leaves(self.walk.atom(xs_arg, env), xs_type)
        rows = [self.dynamic.rows(x, t) for x, t in zip(sequences, xs_leaves, strict=True)]
        length = self._length(call, rows, xs_leaves)
        n_rows = len(rows)
        fixed = [*rows, *[self.walk.atom(v, env) for v in captured]]
        depth = self._depth_into(fixed, [body], functions)

        def advance(count: Any, carried: list[Any], fixed: list[Any]) -> tuple[Any, list[Any]]:
            with self._at_depth(fixed, depth):
                return step(count, carried, fixed)

        def step(count: Any, carried: list[Any], fixed: list[Any]) -> tuple[Any, list[Any]]:
            step_rows = []
            for seq, leaf in zip(fixed[:n_rows], xs_leaves, strict=True):
                row_size = _elements(leaf.shape[1:])
                row = self.dynamic.executor_call("take_row", leaf.dtype, [seq, count], [row_size])
                step_rows.append(emit(self.dynamic.reshape(row, [int(d) for d in leaf.shape[1:]])))
            x_t = self.kernel.rebuild(body.params[0].checked_type, iter(step_rows))
            inner = {**functions, **dict(zip(captured, fixed[n_rows:], strict=False))}
            inner.update({body.params[0]: x_t, body.params[1]: carried[0]})
            return self._step(body, inner, count, carried, out_type, outs, grow=False)

        bufs = [
            self.dynamic.zeros([length, c] if c is not None else [0, 0], leaf.dtype)
            for leaf, c in zip(outs, sizes, strict=True)
        ]
        steps = _Steps(
            carried=[self.walk.atom(init_arg, env), *bufs],
            carried_types=[relax_type(state_type)] + _buffer_types(outs),
            fixed=fixed,
            guard=None,
            advance=advance,
            depth=depth,
        )
        _, final = self._levels(steps, length, "foreach")
        stacked = self._stacked(final[1:], outs, length)
        return emit(relax.Tuple([self.kernel.rebuild(out_type, iter(stacked)), final[0]]), name)

    def while_loop(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE LOOP-VM] ``cf.while_loop(cond, body, init[, limit])`` in the
        VM: the condition before each step, the outputs in buffers that
        double when full, cut to the steps run. [RULE LOOP-PAD] Padded
        (``pad_outputs``), the buffers have ``max_iterations`` rows from
        the start, zeros, never grow and are not cut; the count of steps
        run is the third field. ``max_iterations`` known at run time (the
        fourth argument) is read once, checked ``>= 0`` as the interpreter
        checks it [RULE RUNTIME-CHECK], and is the count limit of the levels."""
        cond_arg, body_arg, init_arg = call.args[:3]
        self.kernel.needs_static([a.checked_type for a in call.args] + [call.checked_type])
        cond = self._literal(cond_arg, env, call)
        body = self._literal(body_arg, env, call)
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        captured: list[Var] = []
        for fn in (cond, body):
            captured += [v for v in free_vars(fn) if v not in functions and v not in captured]
        padded = pads(call)
        out_type, state_type = self._body_types(body, call, sized=True)
        outs, sizes = _outputs(out_type)
        emit = self.bb.emit

        fixed = [self.walk.atom(v, env) for v in captured]
        depth = self._depth_into(fixed, [cond, body], functions)

        def scope(fixed: list[Any]) -> dict[Var, Any]:
            return {**functions, **dict(zip(captured, fixed, strict=False))}

        def guard(carried: list[Any], fixed: list[Any]) -> Any:
            with self._at_depth(fixed, depth):
                start = {**scope(fixed), cond.params[0]: carried[0]}
                return self.walk.drive(self.walk.chain(cond.body, start))

        def advance(count: Any, carried: list[Any], fixed: list[Any]) -> tuple[Any, list[Any]]:
            inner = {**scope(fixed), body.params[0]: carried[0]}
            with self._at_depth(fixed, depth):
                return self._step(body, inner, count, carried, out_type, outs, grow=not padded)

        limit, given = while_limit(call)
        if given is not None:  # a shape variable: the host compares [RULE LOOP-HOSTCOUNT]
            top = rows = self._run_time_limit(call, self.walk.atom(given, env), given.checked_type)
        else:
            top = tirx.const(int(limit) if limit is not None else int(NO_LIMIT), "int64")
            rows = limit
        if padded:  # [RULE LOOP-PAD] every row there is, from the start
            first = rows
            for leaf in outs:  # [RULE LOWER-SIZE] rows given at run time: under the limit
                self.dynamic.check_size(call, [rows, *leaf.shape], leaf.dtype, "a padded output")
        else:
            first = int(limit) if limit is not None and 0 < limit <= 64 else 16
        steps = _Steps(
            carried=[
                self.walk.atom(init_arg, env),
                *[
                    self.dynamic.zeros([first, c] if c is not None else [0, 0], leaf.dtype)
                    for leaf, c in zip(outs, sizes, strict=True)
                ],
            ],
            carried_types=[relax_type(state_type)] + _buffer_types(outs),
            fixed=fixed,
            guard=guard,
            advance=advance,
            depth=depth,
        )
        count, final = self._levels(steps, top, "while")
        n = rows if padded else self.dynamic.size_of(count)
        stacked = []
        for buf, leaf, c in zip(final[1:], outs, sizes, strict=True):
            if c is None:  # [RULE LOOP-VMSIZED] cut to the steps run, its ? from the rows' size
                stacked.extend(self._stacked([buf], [leaf], n))
                continue
            if not padded:
                buf = self.dynamic.executor_call("prefix", leaf.dtype, [buf], [n, c])
            stacked.append(emit(self.dynamic.reshape(buf, [n, *[int(d) for d in leaf.shape]])))
        fields = [self.kernel.rebuild(out_type, iter(stacked)), final[0]]
        return emit(relax.Tuple(fields + ([count] if padded else [])), name)

    def _run_time_limit(self, call: Call, value: Any, t: Type) -> Any:
        """A ``max_iterations`` given at run time (an integer scalar of any
        integer dtype): as a shape variable (the levels' count limit, on
        the host), checked ``>= 0`` [RULE RUNTIME-CHECK]. An
        unsigned 64-bit value is capped at ``NO_LIMIT`` first, so that it
        stays positive as an ``int64``."""
        assert isinstance(t, TensorType)
        emit = self.bb.emit
        if t.dtype == "uint64":
            value = emit(relax.op.minimum(value, constant(np.uint64(NO_LIMIT), "uint64")))
        top = emit(relax.op.astype(value, "int64")) if t.dtype != "int64" else value
        rows = self.dynamic.size_of(top)
        self.dynamic.check_shape(call, rows >= 0, "max_iterations must be >= 0, got {}", [rows])
        return rows

    def _step(
        self,
        body: Function,
        env: dict[Var, Any],
        count: Any,
        carried: list[Any],
        out_type: Type,
        outs: list[TensorType],
        grow: bool,
    ) -> tuple[Any, list[Any]]:
        """One step of a VM loop: the body, its outputs written to row
        ``count`` of the buffers (doubled first when full, if ``grow``: a
        padded while_loop's never are [RULE LOOP-PAD])."""
        emit = self.bb.emit
        step = self.walk.drive(self.walk.chain(body.body, env))
        out = emit(relax.TupleGetItem(step, 0))
        new_state = emit(relax.TupleGetItem(step, 1))
        bufs = carried[1:]
        _, sizes = _outputs(outs)
        static = {i: c for i, c in enumerate(sizes) if c is not None}
        if grow and static:  # the others grow as their rows' size is told (_widened)
            grown = self._grown(
                [bufs[i] for i in static],
                [outs[i] for i in static],
                list(static.values()),
                count,
            )
            bufs = list(bufs)
            for i, buf in zip(static, grown, strict=True):
                bufs[i] = buf
        written = []
        for buf, value, leaf, c in zip(
            bufs, self.kernel.leaves(out, out_type), outs, sizes, strict=True
        ):
            if c is None:  # [RULE LOOP-VMSIZED] a size the step tells
                dims = [d if isinstance(d, int) else tirx.Var("d", "int64") for d in leaf.shape]
                value = self.bb.match_cast(value, relax.TensorType(dims, leaf.dtype))
                c = _product(dims)
                buf = self._widened(buf, leaf.dtype, c, count)
            row = emit(self.dynamic.reshape(value, [c]))
            written.append(self.dynamic.write_into("write_row", buf, row, count, leaf.dtype))
        self._release(step)
        return emit(relax.op.add(count, _int64(1))), [new_state, *written]

    def _grown(
        self, bufs: list[Any], outs: list[TensorType], sizes: list[int], count: Any
    ) -> list[Any]:
        """The output buffers, each with twice its rows when they are full."""
        emit = self.bb.emit
        cap = tirx.Var("cap", "int64")
        shaped = [
            self.bb.match_cast(b, relax.TensorType([cap, c], leaf.dtype))
            for b, leaf, c in zip(bufs, outs, sizes, strict=True)
        ]
        full = self._full(shaped[0], cap, outs[0].dtype, count)

        def doubled() -> Any:
            return relax.Tuple(
                [
                    self.dynamic.executor_call("grow", leaf.dtype, [b], [cap * 2, c])
                    for b, leaf, c in zip(shaped, outs, sizes, strict=True)
                ]
            )

        chosen = emit(
            relax.If(full, self.bb.block(doubled), relax.SeqExpr([], relax.Tuple(shaped)))
        )
        now = tirx.Var("cap", "int64")
        return [
            self.bb.match_cast(
                emit(relax.TupleGetItem(chosen, i)), relax.TensorType([now, c], leaf.dtype)
            )
            for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True))
        ]

    def _widened(self, buf: Any, dtype: str, c: Any, count: Any) -> Any:
        """[RULE LOOP-VMSIZED] The buffer of a per-step output of ``c`` elements
        (known once a step has run), given rows of that width when full."""
        emit = self.bb.emit
        cap, width = tirx.Var("cap", "int64"), tirx.Var("c", "int64")
        shaped = self.bb.match_cast(buf, relax.TensorType([cap, width], dtype))
        full = self._full(shaped, cap, dtype, count)

        def grown() -> Any:
            size = cap * 2 + 8
            return relax.Tuple(
                [self.dynamic.executor_call("grow_rows", dtype, [shaped], [size, c])]
            )

        kept = relax.SeqExpr([], relax.Tuple([shaped]))
        chosen = emit(relax.If(full, self.bb.block(grown), kept))
        now = tirx.Var("cap", "int64")
        return self.bb.match_cast(
            emit(relax.TupleGetItem(chosen, 0)), relax.TensorType([now, c], dtype)
        )

    def _full(self, buf: Any, cap: Any, dtype: str, count: Any) -> Any:
        """Whether the output buffer ``buf`` of ``cap`` rows has no row for
        step ``count``: on the host inside a level's step [RULE LOOP-HOSTCOUNT]
        (its rows are a shape variable, the step's count the level's), else
        by the executor's kernel."""
        host_level = self.state.host_level
        if host_level is not None:
            count, _ = host_level
            return relax.prim_value(tirx.GE(count, cap))
        return self.dynamic.executor_call("at_capacity", dtype, [buf, count], [], "bool")

    # -------------------------------------------------------------- levels
    def _levels(self, steps: _Steps, limit: Any, kind: str) -> tuple[Any, list[Any]]:
        """[RULE LOOP-LEVELS] Run ``steps`` from count 0 until ``guard`` says
        stop or the count reaches ``limit`` (an ``int64`` value the host
        knows: a size or a shape variable); the final count (a tensor, as
        the steps' kernels read it) and carried values.

        [RULE LOOP-HOSTCOUNT] What decides whether a level goes on is on the
        host: each level takes the count and its limit as a shape ``(n,
        limit)`` beside the count tensor, and returns ``(n, stopped)``; the
        VM compares them in its shape arithmetic. A condition the VM reads
        from a tensor in a GPU's memory is copied to the host, which waits
        for every kernel before it: with the count as a tensor, each step
        of a loop on a GPU waited for the GPU twice (``count < limit``,
        then the next step's launches). Now a ``foreach`` step waits for
        nothing and a ``while_loop`` step only for its condition; whether an
        output buffer is full is asked of the host's count too (``_full``)."""
        n_carried = len(steps.carried)
        ret = relax.TupleType([INT64, *steps.carried_types, relax.ShapeType(ndim=2)])
        emit = self.bb.emit

        def declare_level(level: int) -> _Level:
            count = relax.Var("count", INT64)
            n, bound = tirx.Var("n", "int64"), tirx.Var("limit", "int64")
            at = relax.Var("at", relax.ShapeType([n, bound]))
            carried = [
                relax.Var(f"carried{i}", _shaped(t)) for i, t in enumerate(steps.carried_types)
            ]
            passed = [
                relax.Var(f"fixed{i}", _loose(v.ty))
                for i, v in enumerate(steps.fixed)
                if not is_const(v)
            ]
            it = iter(passed)
            fixed = [v if is_const(v) else next(it) for v in steps.fixed]
            params = [count, at, *carried, *passed]
            gv = declare(self.bb, params, ret, f"{kind}_{self.state.loops}_level{level}")
            return _Level(gv, params, count, n, bound, carried, fixed, passed)

        def deeper(f: _Level) -> list[Any]:
            """The fixed values a call from ``f`` passes: the depth of
            recursion, if the loop counts it, one more (each call of a
            level is a native call [RULE LOWER-DEPTH])."""
            if steps.depth is None:
                return f.passed
            at = next(i for i, v in enumerate(f.passed) if v is f.fixed[steps.depth])
            one = emit(relax.op.add(f.passed[at], _int64(1)))
            return [*f.passed[:at], one, *f.passed[at + 1 :]]

        def stopped(f: _Level, flag: bool) -> Any:
            ended = relax.ShapeExpr([f.n, tirx.const(int(flag), "int64")])
            return relax.SeqExpr([], relax.Tuple([f.count, *f.carried, ended]))

        # Level 0: one step while count < limit (and the guard holds), then
        # itself again.
        f = declare_level(0)

        def step() -> Any:
            # the step's count and the level's limit on the host (``_full``,
            # ``_chunked``); a loop in the step's body sets its own, and
            # gives this one back when it is lowered
            outer, self.state.host_level = self.state.host_level, (f.n, f.limit)
            try:
                count, carried = steps.advance(f.count, f.carried, f.fixed)
            finally:
                self.state.host_level = outer
            at = relax.ShapeExpr([f.n + steps.stride, f.limit])
            return emit(relax.Call(f.gv, [count, at, *carried, *deeper(f)]))

        def checked() -> Any:
            if steps.guard is None:
                return step()
            go = steps.guard(f.carried, f.fixed)
            return emit(relax.If(go, self.bb.block(step), stopped(f, True)))

        def level0() -> Any:
            more = relax.prim_value(tirx.LT(f.n, f.limit))
            return emit(relax.If(more, self.bb.block(checked), stopped(f, False)))

        self.bb.update_func(f.gv, relax.Function(f.params, self.bb.block(level0), ret, False))

        # Level i: level i - 1 again and again, each time up to ``span``
        # steps further, until the loop stops or the count reaches the limit.
        inner, span = f.gv, steps.stride * LEVEL_STEPS
        for level in range(1, LEVELS + 1):
            g = declare_level(level)

            def again(g: _Level = g, inner: Any = inner, span: int = span) -> Any:
                sub = relax.ShapeExpr([g.n, tirx.min(g.n + span, g.limit)])
                result = emit(relax.Call(inner, [g.count, sub, *g.carried, *deeper(g)]))
                parts = [emit(relax.TupleGetItem(result, i)) for i in range(n_carried + 2)]
                self._release(result)
                m, ended = tirx.Var("n", "int64"), tirx.Var("stopped", "int64")
                self.bb.match_cast(parts[-1], relax.ShapeType([m, ended]))
                done = relax.prim_value(tirx.Or(ended != 0, tirx.GE(m, g.limit)))

                def more() -> Any:
                    at = relax.ShapeExpr([m, g.limit])
                    return emit(relax.Call(g.gv, [parts[0], at, *parts[1:-1], *deeper(g)]))

                return emit(
                    relax.If(done, relax.SeqExpr([], relax.Tuple(parts)), self.bb.block(more))
                )

            self.bb.update_func(g.gv, relax.Function(g.params, self.bb.block(again), ret, False))
            inner, span = g.gv, span * LEVEL_STEPS
        self.state.loops += 1
        passed = [v for v in steps.fixed if not is_const(v)]
        at = relax.ShapeExpr([tirx.const(0, "int64"), limit])
        result = emit(relax.Call(inner, [_int64(0), at, *steps.carried, *passed]))
        parts = [emit(relax.TupleGetItem(result, i)) for i in range(n_carried + 1)]
        return parts[0], parts[1:]

    # ------------------------------------------------------------- helpers
    def _depth_into(
        self, fixed: list[Any], functions: list[Function], known: dict[Var, Any]
    ) -> int | None:
        """[RULE LOWER-DEPTH] (relax/lower.py) A VM loop whose body calls what may
        recurse takes the depth of recursion, as one of its fixed values
        (its index; None when it takes none). Each call of one of the
        loop's levels counts one more (``_levels``), so that the depth
        counts native calls and a recursion through a loop stops before
        the stack runs out, however deep the loop goes."""
        if self.state.depth is None or not any(self.walk.calls_deeper(f, known) for f in functions):
            return None
        fixed.append(self.bb.emit(relax.op.add(self.state.depth, _int64(1))))
        return len(fixed) - 1

    @contextlib.contextmanager
    def _at_depth(self, fixed: list[Any], index: int | None) -> Iterator[None]:
        """Lower a loop's step inside its level function: the depth of
        recursion there is its parameter (or none)."""
        saved, self.state.depth = self.state.depth, None if index is None else fixed[index]
        try:
            yield
        finally:
            self.state.depth = saved

    def _loop_result(self, call: Call, stacked: list[Any], state: list[Any], name: str = "") -> Any:
        """``(stacked outputs, final state)`` of ``call``'s type, from leaves."""
        ret = call.checked_type
        assert isinstance(ret, TupleType)
        value = relax.Tuple(
            [
                self.kernel.rebuild(ret.fields[0], iter(stacked)),
                self.kernel.rebuild(ret.fields[1], iter(state)),
            ]
        )
        return self.bb.emit(value, name)

    def _stacked(self, bufs: list[Any], outs: Sequence[Any], length: Any) -> list[Any]:
        """The (rows, row size) buffers of a loop's per-step outputs ``outs``
        (tensor types or leaves) viewed as the outputs stacked over
        ``length`` steps; [RULE LOOP-VMSIZED] a buffer of rows of a size the
        steps told is cut to ``length`` rows, its ``?`` from that size."""
        out = []
        for buf, leaf in zip(bufs, outs, strict=True):
            shape = list(getattr(leaf, "shape", ()))
            if any(d == ANY for d in shape):
                cap, c = tirx.Var("cap", "int64"), tirx.Var("c", "int64")
                shaped = self.bb.match_cast(buf, relax.TensorType([cap, c], leaf.dtype))
                buf = self.dynamic.executor_call("prefix", leaf.dtype, [shaped], [length, c])
                known = int(np.prod([d for d in shape if d != ANY], dtype=np.int64))
                shape = [tirx.floordiv(c, known) if d == ANY else d for d in shape]
            out.append(self.bb.emit(self.dynamic.reshape(buf, [length, *shape])))
        return out

    def _body_types(self, body: Function, call: Call, sized: bool = False) -> tuple[Type, Type]:
        """A loop body's per-step output and state types; ``sized`` (a VM
        loop): an output may have one ``?`` [RULE LOOP-VMSIZED]. (A padded
        while_loop's output, whose zero rows are allocated before any step,
        is static: type inference refuses a ``?`` there.)"""
        step_type = body.body.checked_type
        assert isinstance(step_type, TupleType)
        out_type, state_type = step_type.fields
        for leaf in leaves(out_type):
            told = sized and [d for d in leaf.shape if not isinstance(d, int)] == [ANY]
            if not leaf.is_static and not told:
                raise BackendError(
                    f"a loop whose per-step output ({astext(leaf)}) has "
                    f"{unknown_shape(leaf.shape)} is not compiled",
                    call.span,
                )
        return out_type, state_type

    def _release(self, value: Any) -> None:
        """Drop the VM's reference to the tuple ``value`` before a loop goes
        on: Relax frees a tensor after its last use but keeps a tuple whose
        fields were taken, so every step's tuple (a chunk's scratch, say)
        would live until the loop ends, memory growing with its steps."""
        if value is not None:
            self.bb.emit(kill_object(value))

    def _literal(self, arg: Expr, env: dict[Var, Any], call: Call) -> Function:
        fn = env.get(arg) if isinstance(arg, Var) else arg
        if not isinstance(fn, Function):
            raise BackendError("a loop's body and condition must be function literals", call.span)
        return fn


@dataclass
class _Level:
    """One level's function while it is built: its parameters (``n`` and
    ``limit``: the host's count and limit [RULE LOOP-HOSTCOUNT])."""

    gv: Any
    params: list[Any]
    count: Any
    n: Any
    limit: Any
    carried: list[Any]
    fixed: list[Any]  # the fixed values as the level sees them (constants kept)
    passed: list[Any]  # the fixed values it takes as parameters


def _int64(value: int) -> Any:
    return constant(np.int64(value), "int64")


def _outputs(out_type: Type | list[TensorType]) -> tuple[list[TensorType], list[int | None]]:
    """A loop's per-step output leaves and their sizes (None: known once
    a step has run, [RULE LOOP-VMSIZED])."""
    outs = out_type if isinstance(out_type, list) else leaves(out_type)
    sizes = [_elements(leaf.shape) if leaf.is_static else None for leaf in outs]
    return outs, sizes


def _elements(dims: Sequence[Dim]) -> int:
    """The number of elements of a static shape (a loop's row, a step's
    output: what the type relation made static)."""
    sizes = [d for d in dims if isinstance(d, int)]
    if len(sizes) != len(dims):
        raise BackendError(f"a static shape was expected, got {tuple(dims)}")
    return math.prod(sizes)


def _product(dims: list[Any]) -> Any:
    size: Any = 1
    for d in dims:
        size = size * d
    return size


def _buffer_types(outs: Sequence[Any]) -> list[Any]:
    """The types of the (rows, row size) buffers of a loop's outputs."""
    return [relax.TensorType(dtype=leaf.dtype, ndim=2) for leaf in outs]


def _loose(ty: Any) -> Any:
    """``ty`` with every dimension that is not a constant forgotten: the
    type of a parameter taking such values in a function of its own (a
    symbolic variable belongs to the function that defines it)."""
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_loose(f) for f in ty.fields])
    if isinstance(ty, relax.TensorType) and ty.shape is not None:
        dims = list(ty.shape.values)
        if not all(isinstance(d, tirx.IntImm) for d in dims):
            return relax.TensorType(dtype=ty.dtype, ndim=len(dims))
    return ty


def _shaped(ty: Any) -> Any:
    """A tensor type of known rank and unknown shape with its dimensions
    named (the parameter of a function of its own, which defines them), so
    that calls taking the parameter know its shape."""
    if isinstance(ty, relax.TensorType) and ty.shape is None and ty.ndim >= 0:
        return relax.TensorType([tirx.Var(f"d{i}", "int64") for i in range(ty.ndim)], ty.dtype)
    return ty


def _leading_dim(t: Type) -> int | str:
    """The length of a sequence of type ``t`` (its first tensor's)."""
    first = type_tree.leaves(t)[0]
    assert isinstance(first, TensorType)
    return first.shape[0]


def _step_types(t: Type) -> list[Type]:
    """The types of one step of a sequence of type ``t`` (the leading axis
    dropped)."""
    steps: list[Type] = []
    for leaf in type_tree.leaves(t):
        assert isinstance(leaf, TensorType)
        steps.append(TensorType(leaf.shape[1:], leaf.dtype))
    return steps


def scratch_bounds() -> list[int]:
    """The size classes of a symbolic loop's bounded calls, largest first:
    ``LOOP_CHUNK``, then each ``BOUND_FACTOR`` times smaller down to
    ``MIN_BOUND`` [RULE LOOP-BOUNDS]."""
    bounds = [LOOP_CHUNK]
    while bounds[-1] // BOUND_FACTOR >= MIN_BOUND:
        bounds.append(bounds[-1] // BOUND_FACTOR)
    return bounds
