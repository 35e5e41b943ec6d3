"""Loops in the Relax lowering: whole TIR loops, chunks, and VM loops.

- [RULE LOOP] ``cf.foreach`` whose body is static and pure is one call of
  the loop kernel (loop.lower_loop): no VM instruction runs per step.
- [RULE CHUNK] A sequence longer than ``LOOP_CHUNK`` steps runs in chunks,
  one call each, the state passed on: the kernel's prologue holds the
  hoisted input projections of its steps, so memory stays bounded whatever
  the length. With a static length the chunks are unrolled; with a
  symbolic one the VM chooses at run time between one call in a function
  whose length is declared bounded (its scratch then planned once) and a
  recursive function over chunks.
- [RULE VMLOOP] A loop that cannot be one TIR function (``cf.while_loop``,
  a ``cf.foreach`` with control flow in its body or of data-dependent
  length) is a recursive Relax function the VM runs step by step; its
  per-step outputs go to buffers that double when full, written in place,
  cut to the steps run at the end. Each step releases its result tuple
  before recursing, so memory does not grow with the steps.

The methods are a mixin of relax_lower's ``_Lowering``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax.op.vm import kill_object

from ...ir.expr import Call, Expr, Function, Var
from ...ir.op import op_def
from ...ir.printer import astext
from ...ir.types import TensorType, TupleType, Type
from ...ir.visitor import free_vars
from .errors import BackendError
from .kernel import leaves
from .loop import LoweredLoop, lower_loop
from .relax_types import declare, is_const, relax_type, static

LOOP_CHUNK = 1024
"""Steps per call of a whole-loop kernel [RULE CHUNK]."""


class LoopLowering:
    """The loops of ``_Lowering`` (relax_lower.py)."""

    def _foreach(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE LOOP] ``cf.foreach(body, xs, init)`` as one TIR loop."""
        body_arg, xs_arg, init_arg = call.args
        body = env.get(body_arg) if isinstance(body_arg, Var) else body_arg
        if not isinstance(body, Function):
            raise BackendError("a cf.foreach body must be a function literal", call.span)
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        captured = [v for v in free_vars(body) if v not in functions]
        xs_type = xs_arg.checked_type
        length: Any = _leading_dim(xs_type)
        step_types = [*_step_types(xs_type), init_arg.checked_type, body.checked_type]
        step_types += [v.checked_type for v in captured]
        self._needs_static(step_types)
        if isinstance(length, str) and length in self.symbols and all(map(static, step_types)):
            length = self.symbols[length]  # a whole loop of symbolic length
        elif not static(xs_type) or not static(init_arg.checked_type):
            return self._recursive_loop(call, env, name)
        if self.target.kind.name != "llvm":  # a whole TIR loop is a CPU schedule
            return self._recursive_loop(call, env, name)
        try:
            lowered = lower_loop(body, {}, captured, functions, self.module, parallel=True)
        except BackendError:  # control flow or effects in the body: a VM loop
            return self._recursive_loop(call, env, name)
        func = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": lowered.func}))["main"]
        gv = self._compiled_apart(func, f"loop_{self.loops}")
        self.loops += 1
        sequences = self._leaves(self._atom(xs_arg, env), xs_type)
        state = self._leaves(self._atom(init_arg, env), init_arg.checked_type)
        rest = []
        for v in captured:
            rest += self._leaves(self._atom(v, env), v.checked_type)
        rest += [relax.const(c, str(c.dtype)) for c in lowered.constants]
        emit = self.bb.emit
        if isinstance(length, int):
            return self._in_chunks(call, gv, lowered, length, sequences, state, rest, name)
        # A symbolic length: up to LOOP_CHUNK steps, one call on the sequences
        # as they are; more, the chunked loop (its copies of the chunks'
        # rows cost less than a prologue of the whole length would hold).
        steps = _step_types(xs_type)
        first = [t for t in steps if isinstance(t, TensorType)][0]
        size = int(np.prod(first.shape, dtype=np.int64))
        rows = emit(self._reshape(sequences[0], [length, size]))
        chunk_limit = relax.const(np.int64(LOOP_CHUNK), "int64")
        long = emit(
            relax.call_tir(
                self._executor("before_end", first.dtype),
                [rows, chunk_limit],
                relax.TensorType([], "bool"),
            )
        )
        self.bb._begin_binding_block()
        chunked = self._chunked(call, gv, lowered, length, sequences, state, rest, steps, name)
        chunked_seq = relax.SeqExpr([self.bb._end_block()], chunked)
        self.bb._begin_binding_block()
        direct = self._bounded_call(call, gv, lowered, sequences, state, rest)
        direct_seq = relax.SeqExpr([self.bb._end_block()], direct)
        return emit(relax.If(long, chunked_seq, direct_seq), name)

    def _bounded_call(
        self,
        call: Call,
        loop: Any,
        lowered: LoweredLoop,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
    ) -> Any:
        """One call of the loop kernel on at most ``LOOP_CHUNK`` steps, in a
        function of its own whose length is declared bounded
        (``tir_var_upper_bound``): Relax then plans the kernel's scratch
        (the hoisted projections) statically and reuses it from call to
        call, where a symbolic size would make the VM allocate fresh pages
        at every call (a page fault per 4 KiB, slower than the loop)."""
        steps = tirx.Var("steps", "int64")
        seq_params = [
            relax.Var(f"xs{i}", relax.TensorType([steps, *list(x.ty.shape.values)[1:]], x.ty.dtype))
            for i, x in enumerate(sequences)
        ]
        carried = [relax.Var(f"state{i}", x.ty) for i, x in enumerate(state)]
        others = [relax.Var(f"c{i}", r.ty) for i, r in enumerate(rest) if not is_const(r)]
        it = iter(others)
        inner_rest = [r if is_const(r) else next(it) for r in rest]
        self.bb._begin_binding_block()
        outs = _loop_outputs(lowered, steps)
        result = self.bb.emit(
            relax.call_dps_packed(loop, [*seq_params, *carried, *inner_rest], outs)
        )
        n_keep = len(lowered.outputs) + len(lowered.state)
        kept = relax.Tuple([self.bb.emit(relax.TupleGetItem(result, i)) for i in range(n_keep)])
        body = relax.SeqExpr([self.bb._end_block()], kept)
        params = [*seq_params, *carried, *others]
        ret = relax.TupleType([o for o in outs[:n_keep]])
        function = relax.Function(params, body, ret, False).with_attr(
            "tir_var_upper_bound", {"steps": LOOP_CHUNK}
        )
        gv = self.bb.add_func(function, f"bounded_{self.loops}")
        self.loops += 1
        emit = self.bb.emit
        result = emit(relax.Call(gv, [*sequences, *state, *[r for r in rest if not is_const(r)]]))
        n_out = len(lowered.outputs)
        ret = call.checked_type
        assert isinstance(ret, TupleType)
        stacked = self._rebuild(
            ret.fields[0], iter([emit(relax.TupleGetItem(result, i)) for i in range(n_out)])
        )
        final = self._rebuild(
            ret.fields[1],
            iter([emit(relax.TupleGetItem(result, n_out + i)) for i in range(len(lowered.state))]),
        )
        return emit(relax.Tuple([stacked, final]))

    def _in_chunks(
        self,
        call: Call,
        gv: Any,
        lowered: LoweredLoop,
        length: Any,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
        name: str,
    ) -> Any:
        """The loop kernel called on ``LOOP_CHUNK`` steps at a time, the
        state passed on (one call when the length is symbolic)."""
        emit = self.bb.emit
        n_out, n_state = len(lowered.outputs), len(lowered.state)
        pieces: list[list[Any]] = [[] for _ in range(n_out)]
        starts = range(0, max(length, 1), LOOP_CHUNK) if isinstance(length, int) else [0]
        for start in starts:  # [RULE CHUNK]
            steps = min(LOOP_CHUNK, length - start) if isinstance(length, int) else length
            chunk = sequences
            if isinstance(length, int) and steps != length:
                chunk = [
                    emit(relax.op.strided_slice(x, [0], [start], [start + steps]))
                    for x in sequences
                ]
            outs = _loop_outputs(lowered, steps)
            result = emit(relax.call_dps_packed(gv, [*chunk, *state, *rest], outs))
            parts = [emit(relax.TupleGetItem(result, i)) for i in range(len(outs))]
            for i in range(n_out):
                pieces[i].append(parts[i])
            state = parts[n_out : n_out + n_state]
        stacked_leaves = [p[0] if len(p) == 1 else emit(relax.op.concat(p, axis=0)) for p in pieces]
        ret = call.checked_type
        assert isinstance(ret, TupleType)
        stacked = self._rebuild(ret.fields[0], iter(stacked_leaves))
        final = self._rebuild(ret.fields[1], iter(state))
        return emit(relax.Tuple([stacked, final]), name)

    def _chunked(
        self,
        call: Call,
        loop: Any,
        lowered: LoweredLoop,
        length: Any,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
        steps: list[Type],
        name: str,
    ) -> Any:
        """[RULE CHUNK] A whole loop of symbolic length: a recursive Relax
        function calls the loop kernel on ``LOOP_CHUNK`` steps at a time
        (the chunk's rows copied out of the sequences), passes the state on
        and writes each chunk's outputs into buffers of the whole length."""
        emit = self.bb.emit
        seq_types = [t for t in steps if isinstance(t, TensorType)]
        sizes = [int(np.prod(t.shape, dtype=np.int64)) for t in seq_types]
        out_sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in lowered.outputs]
        rows = tirx.Var("rows", "int64")
        start = relax.Var("start", relax.TensorType([], "int64"))
        seqs = [
            relax.Var(f"xs{i}", relax.TensorType([rows, c], t.dtype))
            for i, (t, c) in enumerate(zip(seq_types, sizes, strict=True))
        ]
        carried = [
            relax.Var(f"state{i}", relax.TensorType(list(leaf.shape), leaf.dtype))
            for i, leaf in enumerate(lowered.state)
        ]
        bufs = [
            relax.Var(f"out{i}", relax.TensorType([rows, c], leaf.dtype))
            for i, (leaf, c) in enumerate(zip(lowered.outputs, out_sizes, strict=True))
        ]
        others = [relax.Var(f"c{i}", r.ty) for i, r in enumerate(rest) if not is_const(r)]
        params = [start, *carried, *bufs, *seqs, *others]
        ret = relax.TupleType(
            [relax.TensorType(dtype=leaf.dtype, ndim=2) for leaf in lowered.outputs]
            + [p.ty for p in carried]
        )
        gv = declare(self.bb, params, ret, f"chunks_{self.loops}")
        inner_rest = []
        it = iter(others)
        for r in rest:
            inner_rest.append(r if is_const(r) else next(it))

        self.bb._begin_binding_block()
        first = seq_types[0]
        more = emit(
            relax.call_tir(
                self._executor("before_end", first.dtype),
                [seqs[0], start],
                relax.TensorType([], "bool"),
            )
        )
        self.bb._begin_binding_block()
        n = emit(
            relax.call_tir(
                self._executor("chunk_length", first.dtype, LOOP_CHUNK),
                [seqs[0], start],
                relax.TensorType([1], "int64"),
            )
        )
        k = tirx.Var("k", "int64")
        self.bb.match_cast(emit(relax.op.tensor_to_shape(n)), relax.ShapeType([k]))
        chunk = []
        for seq, t, c in zip(seqs, seq_types, sizes, strict=True):
            part = emit(
                relax.call_tir(
                    self._executor("chunk_rows", t.dtype),
                    [seq, start],
                    relax.TensorType([k, c], t.dtype),
                )
            )
            chunk.append(emit(self._reshape(part, [k, *[int(d) for d in t.shape]])))
        outs = _loop_outputs(lowered, k)
        result = emit(relax.call_dps_packed(loop, [*chunk, *carried, *inner_rest], outs))
        n_out = len(lowered.outputs)
        written = []
        for i, (buf, leaf, c) in enumerate(zip(bufs, lowered.outputs, out_sizes, strict=True)):
            part = emit(self._reshape(emit(relax.TupleGetItem(result, i)), [k, c]))
            written.append(
                emit(
                    relax.op.call_tir_inplace(
                        self._executor("write_rows", leaf.dtype), [buf, part, start], 0, buf.ty
                    )
                )
            )
        new_state = [emit(relax.TupleGetItem(result, n_out + i)) for i in range(len(carried))]
        following = emit(relax.op.add(start, relax.const(np.int64(LOOP_CHUNK), "int64")))
        self._release(result)
        again = emit(relax.Call(gv, [following, *new_state, *written, *seqs, *others]))
        step = relax.SeqExpr([self.bb._end_block()], again)
        done = relax.SeqExpr([], relax.Tuple([*bufs, *carried]))
        value = emit(relax.If(more, step, done))
        self.bb.update_func(
            gv, relax.Function(params, relax.SeqExpr([self.bb._end_block()], value), ret, False)
        )
        self.loops += 1

        # The call: buffers of the whole length, the sequences as rows.
        rows_in = [
            emit(self._reshape(x, [length, c])) for x, c in zip(sequences, sizes, strict=True)
        ]
        start_bufs = [
            emit(
                relax.call_tir(
                    self._executor("zeros", leaf.dtype),
                    [],
                    relax.TensorType([length, c], leaf.dtype),
                )
            )
            for leaf, c in zip(lowered.outputs, out_sizes, strict=True)
        ]
        args = [relax.const(np.int64(0), "int64"), *state, *start_bufs, *rows_in]
        args += [r for r in rest if not is_const(r)]
        finished = emit(relax.Call(gv, args))
        stacked = []
        for i, leaf in enumerate(lowered.outputs):
            part = emit(relax.TupleGetItem(finished, i))
            stacked.append(emit(self._reshape(part, [length, *leaf.shape])))
        final = [emit(relax.TupleGetItem(finished, n_out + i)) for i in range(len(carried))]
        ret_type = call.checked_type
        assert isinstance(ret_type, TupleType)
        result_value = relax.Tuple(
            [
                self._rebuild(ret_type.fields[0], iter(stacked)),
                self._rebuild(ret_type.fields[1], iter(final)),
            ]
        )
        return emit(result_value, name)

    # ------------------------------------------------------ VM loops
    def _recursive_loop(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE VMLOOP] A loop the VM runs: a private recursive Relax
        function of (steps done, state, output buffers, sequences, captured
        values). ``cf.while_loop`` asks its condition at each step and
        collects its outputs in buffers that double when full
        (executor_kernels.py); ``cf.foreach`` takes row ``count`` of its
        sequences and fills buffers of their length. At the end the
        buffers are cut to the steps run."""
        is_while = op_def(call.callee).name == "cf.while_loop"  # type: ignore[arg-type]
        self._needs_static([a.checked_type for a in call.args] + [call.checked_type])
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        if is_while:
            cond_arg, body_arg, init_arg = call.args
            cond: Function | None = self._literal(cond_arg, env, call)
            xs_arg = None
        else:
            body_arg, xs_arg, init_arg = call.args
            cond = None
        body = self._literal(body_arg, env, call)
        captured = []
        for fn in [f for f in (cond, body) if f is not None]:
            captured += [v for v in free_vars(fn) if v not in functions and v not in captured]
        step_type = body.body.checked_type
        assert isinstance(step_type, TupleType)
        out_type, state_type = step_type.fields
        outs = leaves(out_type)
        for leaf in outs:
            if not leaf.is_static:
                raise BackendError(
                    f"a loop whose per-step output ({astext(leaf)}) has a data-dependent shape "
                    "is not compiled",
                    call.span,
                )
        sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in outs]
        xs_leaves = [] if xs_arg is None else leaves(xs_arg.checked_type)

        # The recursive function.
        cap = tirx.Var("cap", "int64")
        count = relax.Var("count", relax.TensorType([], "int64"))
        state = relax.Var("state", relax_type(state_type))
        bufs = [
            relax.Var(f"buf{i}", relax.TensorType([cap, c], leaf.dtype))
            for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True))
        ]
        seqs = [relax.Var(f"xs{i}", relax_type(t)) for i, t in enumerate(xs_leaves)]
        caps = [relax.Var(v.name_hint, relax_type(v.checked_type)) for v in captured]
        params = [count, state, *bufs, *seqs, *caps]
        ret = relax.TupleType(
            [relax.TensorType(dtype=leaf.dtype, ndim=2) for leaf in outs]
            + [relax.TensorType([], "int64"), relax_type(state_type)]
        )
        gv = declare(self.bb, params, ret, f"vm_loop_{self.loops}")
        self.loops += 1

        inner: dict[Var, Any] = dict(functions)
        inner.update(zip(captured, caps, strict=True))
        emit = self.bb.emit
        self.bb._begin_binding_block()
        if is_while:
            assert cond is not None
            go = self._chain(cond.body, {**inner, cond.params[0]: state})
        else:
            flat = self._rows(seqs[0], xs_leaves[0])
            go = emit(
                relax.call_tir(
                    self._executor("before_end", xs_leaves[0].dtype),
                    [flat, count],
                    relax.TensorType([], "bool"),
                )
            )
        limit = call.attrs.get("max_iterations")
        if limit is not None:
            below = emit(relax.op.less(count, relax.const(np.int64(limit), "int64")))
            go = emit(relax.op.logical_and(go, below))
        # One more step.
        self.bb._begin_binding_block()
        if is_while:
            step_env = {**inner, body.params[0]: state}
        else:
            rows = []
            for seq, leaf in zip(seqs, xs_leaves, strict=True):
                flat = self._rows(seq, leaf)
                row_size = int(np.prod(leaf.shape[1:], dtype=np.int64))
                row = emit(
                    relax.call_tir(
                        self._executor("take_row", leaf.dtype),
                        [flat, count],
                        relax.TensorType([row_size], leaf.dtype),
                    )
                )
                rows.append(emit(self._reshape(row, [int(d) for d in leaf.shape[1:]])))
            x_t = self._rebuild(body.params[0].checked_type, iter(rows))
            step_env = {**inner, body.params[0]: x_t, body.params[1]: state}
        step = self._chain(body.body, step_env)
        out = emit(relax.TupleGetItem(step, 0))
        new_state = emit(relax.TupleGetItem(step, 1))
        current = list(bufs)
        if is_while:  # double the buffers when they are full
            full = emit(
                relax.call_tir(
                    self._executor("at_capacity", outs[0].dtype),
                    [bufs[0], count],
                    relax.TensorType([], "bool"),
                )
            )
            self.bb._begin_binding_block()
            grown = [
                emit(
                    relax.call_tir(
                        self._executor("grow", leaf.dtype),
                        [b],
                        relax.TensorType([cap * 2, c], leaf.dtype),
                    )
                )
                for b, leaf, c in zip(bufs, outs, sizes, strict=True)
            ]
            grown_seq = relax.SeqExpr(
                [self.bb._end_block()], relax.Tuple(grown) if grown else relax.Tuple([])
            )
            same_seq = relax.SeqExpr([], relax.Tuple(list(bufs)))
            chosen = emit(relax.If(full, grown_seq, same_seq))
            new_cap = tirx.Var("cap", "int64")
            current = []
            for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True)):
                part = emit(relax.TupleGetItem(chosen, i))
                current.append(self.bb.match_cast(part, relax.TensorType([new_cap, c], leaf.dtype)))
        written = []
        for b, value, leaf, c in zip(
            current, self._leaves(out, out_type), outs, sizes, strict=True
        ):
            row = emit(self._reshape(value, [c]))
            written.append(
                emit(
                    relax.op.call_tir_inplace(
                        self._executor("write_row", leaf.dtype), [b, row, count], 0, b.ty
                    )
                )
            )
        following = emit(relax.op.add(count, relax.const(np.int64(1), "int64")))
        self._release(step)
        again = emit(relax.Call(gv, [following, new_state, *written, *seqs, *caps]))
        more = relax.SeqExpr([self.bb._end_block()], again)
        done = relax.SeqExpr([], relax.Tuple([*bufs, count, state]))
        result = emit(relax.If(go, more, done))
        body_seq = relax.SeqExpr([self.bb._end_block()], result)
        self.bb.update_func(gv, relax.Function(params, body_seq, ret, False))

        # The call: empty buffers, then the outputs cut to the steps run.
        if is_while:
            first = int(limit) if limit is not None and 0 < limit <= 64 else 16
        else:
            first = int(_leading_dim(xs_arg.checked_type))  # type: ignore[union-attr]
        start_bufs = [
            emit(
                relax.call_tir(
                    self._executor("zeros", leaf.dtype),
                    [],
                    relax.TensorType([first, c], leaf.dtype),
                )
            )
            for leaf, c in zip(outs, sizes, strict=True)
        ]
        args = [relax.const(np.int64(0), "int64"), self._atom(init_arg, env), *start_bufs]
        if xs_arg is not None:
            args += self._leaves(self._atom(xs_arg, env), xs_arg.checked_type)
        args += [self._atom(v, env) for v in captured]
        finished = emit(relax.Call(gv, args))
        steps = emit(relax.TupleGetItem(finished, len(outs)))
        n = self._size_of(steps)
        stacked = []
        for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True)):
            buf = emit(relax.TupleGetItem(finished, i))
            cut = emit(
                relax.call_tir(
                    self._executor("prefix", leaf.dtype),
                    [buf],
                    relax.TensorType([n, c], leaf.dtype),
                )
            )
            stacked.append(emit(self._reshape(cut, [n, *[int(d) for d in leaf.shape]])))
        final_state = emit(relax.TupleGetItem(finished, len(outs) + 1))
        stacked_value = self._rebuild(out_type, iter(stacked))
        return emit(relax.Tuple([stacked_value, final_state]), name)

    def _release(self, value: Any) -> None:
        """Drop the VM's reference to the tuple ``value`` before a loop's
        recursive call: Relax frees a tensor after its last use but keeps a
        tuple whose fields were taken, so every step's tuple (a chunk's
        scratch, say) would live until the recursion unwinds, memory
        growing with the number of steps."""
        self.bb.emit(kill_object(value))

    def _literal(self, arg: Expr, env: dict[Var, Any], call: Call) -> Function:
        fn = env.get(arg) if isinstance(arg, Var) else arg
        if not isinstance(fn, Function):
            raise BackendError("a loop's body and condition must be function literals", call.span)
        return fn


def _leading_dim(t: Type) -> int | str:
    while isinstance(t, TupleType):
        t = t.fields[0]
    assert isinstance(t, TensorType)
    return t.shape[0]


def _step_types(t: Type) -> list[Type]:
    """The types of one step of a sequence of type ``t`` (the leading axis
    dropped)."""
    if isinstance(t, TupleType):
        return [s for f in t.fields for s in _step_types(f)]
    assert isinstance(t, TensorType)
    return [TensorType(t.shape[1:], t.dtype)]


def _loop_outputs(lowered: LoweredLoop, length: int) -> list[Any]:
    """The loop function's output tensors: the stacked outputs, the final
    state, the prologue's scratch (discarded)."""
    rows = lowered.scratch_rows(length)
    outs = [relax.TensorType([length, *leaf.shape], leaf.dtype) for leaf in lowered.outputs]
    outs += [relax.TensorType(list(leaf.shape), leaf.dtype) for leaf in lowered.state]
    outs += [
        relax.TensorType(([rows] if seq else []) + list(leaf.shape), leaf.dtype)
        for leaf, seq in lowered.scratch
    ]
    return outs
