"""[KERNEL] The persistent kernel: one launch runs every step of the loop.

``main(xs..., init..., captured..., tables..., hoisted..., outs...,
final..., scratch...)``, as one grid of ``blocks`` blocks::

    stage each block's weights into shared memory        [WEIGHTS]
    S[0] = init  (the state's double buffer)              grid barrier
    for t in range(T):                  (two steps per iteration: [PARITY])
        for each phase:                                    (owners.py)
            for each stage of the phase:
                each block computes the elements it owns   [ITEMS]
                __syncthreads
            grid barrier (one block: the last __syncthreads suffices)
    final = S[T % 2]

[ITEMS] A block's elements of a stage are *items*, ``(unit, rest, lane)``
flattened and dealt to its threads in turn: the unit (one of the block's
units of the stage's unit axis, from its table), the coordinates of the
other axes, and for a reduction the *lane*: ``lanes`` threads share an
element's sum, lane ``l`` summing the reduction indices ``l, l + lanes,
...`` in order, and after a ``__syncthreads`` one thread adds the lanes'
partial sums in lane order. ``lanes`` depends on the reduction's extent
alone (1 in a gradient program: an in-order sum, as every other kernel of
a gradient computes), so an operator's value never depends on the grid.

[WEIGHTS] [CHUNKS] What is staged on chip, and where each value
lives: staging.py [PLACE]."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tvm import s_tir, te, tirx

from ...runtime.errors import BackendError
from ..values import Leaf
from .emit import Elements, combine, decode
from .owners import Plan
from .stages import Read, Stage, StepStages
from .staging import SHARED_BUDGET, Inputs, Placement, param, product, substituted
from .threads import Loop, Sync, Threads

MAX_LANES = 8
"""Most threads sharing one element's sum ([ITEMS])."""


@dataclass
class Built:
    """The kernel and what its parameters after the inputs are."""

    func: Any
    tables: list[np.ndarray]
    scratch: list[Leaf]
    blocks: int
    threads: int
    phases: int
    staged: list[str] = field(default_factory=list)  # "stage:tensor" per staged read


def lanes_for(stage: Stage, exact: bool) -> int:
    """[ITEMS] Threads per element of a reduction: by its extent alone."""
    body = stage.op.body[0]
    if exact or not stage.is_reduction or not isinstance(body, tirx.Reduce) or list(body.init):
        return 1
    extent = stage.reduce_extent
    lanes = 1
    while lanes < MAX_LANES and extent >= 16 * lanes:
        lanes *= 2
    return lanes


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class KernelBuilder(Placement):
    """Builds the persistent kernel ([KERNEL]) of one step."""

    def __init__(
        self,
        steps: StepStages,
        plan: Plan,
        inputs: Inputs,
        leaves: dict[str, list[te.Tensor]],
        length: Any,
        model: Threads,
        exact: bool,
    ) -> None:
        self.steps, self.plan, self.inputs, self.model = steps, plan, inputs, model
        self.length = length
        self.t: Any = tirx.Var("t", "int32")
        self.parity = 0
        self.row: Any = None
        self.budget = SHARED_BUDGET
        self.elements = Elements(steps.inlined, model.local)
        self.step_outputs: list[te.Tensor] = leaves["step_outputs"]
        self.scratch: list[tuple[Any, Leaf]] = []
        self.tables: list[tuple[Any, np.ndarray]] = []
        self.staged: dict[Stage, list[tuple[Read, Any, bool, bool, int]]] = {}
        self.staging: list[tuple[Stage, Read, Any, bool, bool, int, int]] = []
        self.units: dict[Stage, tuple[Any, Any, int]] = {}
        self.current: dict[Any, Any] = {}
        x, state, captured, hoisted = (leaves[k] for k in ("x", "state", "captured", "hoisted"))
        self.xs = [param(f"xs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(x)]
        self.init = [param(f"init{i}", t.shape, t.dtype) for i, t in enumerate(state)]
        self.caps = [param(f"captured{i}", t.shape, t.dtype) for i, t in enumerate(captured)]
        self.hoisted = []
        for i, (t, seq) in enumerate(zip(hoisted, inputs.hoisted_seq, strict=True)):
            shape = [length, *t.shape[1:]] if seq else list(t.shape)
            self.hoisted.append(param(f"hoisted{i}", shape, t.dtype))
        self.outs = [
            param(f"outs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(leaves["outputs"])
        ]
        self.final = [param(f"final{i}", t.shape, t.dtype) for i, t in enumerate(state)]
        self.state_shapes = [([int(d) for d in t.shape], str(t.dtype)) for t in state]
        self.lanes = {s: lanes_for(s, exact) for s in steps.stages}

    # ----------------------------------------------------------- placement
    def _dealt(self, w: Any, total: int, body: Any, limit: Any = None, guard: Any = None) -> Any:
        """``body`` for each ``w < total`` this thread is dealt (``tx``,
        ``tx + threads``, ...), where ``w < limit`` and ``guard`` hold."""
        threads, tx = self.model.threads, self.model.tx
        if isinstance(limit, tirx.IntImm | int):  # a bound known now: the tighter one
            total, limit = min(total, int(limit)), None
        if total <= 0:
            return None
        rounds = _ceil(total, threads)
        conds = []
        if total % threads:
            conds.append(w < total)
        if limit is not None:
            conds.append(w < limit)
        if guard is not None:
            conds.append(guard)
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = tirx.And(cond, c)
            body = tirx.IfThenElse(cond, body, None)
        if rounds <= 1:
            return substituted(body, {w: tx})
        it = tirx.Var("it", "int32")
        return tirx.For(
            it, 0, rounds, tirx.ForKind.SERIAL, substituted(body, {w: it * threads + tx})
        )

    def _coordinates(self, s: Stage, item: Any) -> tuple[list[Any], Any, Any]:
        """The coordinates of the block's ``item``-th element of ``s``, the
        position of its unit among the block's, and the bound on ``item``
        (the block's count; None: every block computes every element)."""
        own = self._owner(s)
        if own.axis is None:
            return decode(item, s.shape), None, None
        rest = self._rest(s)
        n_rest = product(rest)
        i = tirx.floordiv(item, n_rest) if n_rest > 1 else item
        r = tirx.floormod(item, n_rest) if n_rest > 1 else tirx.const(0, "int32")
        unit_of, count, _ = self._unit_table(s)
        others = iter(decode(r, rest) if rest else [])
        coords = [unit_of(i) if a == own.axis else next(others) for a in range(len(s.shape))]
        return coords, i, count * n_rest if n_rest > 1 else count

    # ------------------------------------------------------------- loads
    def _loader(self, s: Stage, position: Any, reduce_coords: list[Any] | None) -> Any:
        """The loads of ``s``'s element (``position``: its unit's position
        among the block's; ``reduce_coords``: inside its reduction)."""

        def load(tensor: te.Tensor, index: list[Any]) -> Any:
            kind = self.inputs.kinds.get(tensor.op)
            if kind is None:
                stage = self.steps.stage_of(tensor.op)
                if stage is None:
                    raise BackendError(f"the loop step reads {tensor.op.name}, never computed")
                home = self._home(stage, int(tensor.value_index))
                return self.model.load(home.buffer, [*home.lead, *index])
            what, k = kind
            rows = self.rows.get(kind)
            if rows is not None:  # [CHUNKS]
                return self.model.load(rows, [self.row, *index])
            if what == "x":
                return tirx.BufferLoad(self.xs[k], [self.t, *index])
            if what == "state":
                pair = self.states[k]
                if pair is None:  # invariant: the initial value all along
                    return tirx.BufferLoad(self.init[k], index)
                return self.model.load(pair[self.parity].buffer, [*pair[self.parity].lead, *index])
            if what == "hoisted":
                lead = [self.t] if self.inputs.hoisted_seq[k] else []
                return tirx.BufferLoad(self.hoisted[k], [*lead, *index])
            staged = self._staged_load(s, tensor, index, position, reduce_coords)
            return staged if staged is not None else tirx.BufferLoad(self.caps[k], index)

        return load

    def _stage_pieces(self, s: Stage) -> list[Any]:
        """The pieces computing ``s``'s elements ([ITEMS])."""
        lanes = self.lanes[s]
        w = tirx.Var("w", "int32")
        item = tirx.floordiv(w, lanes) if lanes > 1 else w
        lane = tirx.floormod(w, lanes) if lanes > 1 else tirx.const(0, "int32")
        coords, position, limit = self._coordinates(s, item)
        self.current = dict(zip(s.axes, coords, strict=True))
        total = self._items_max(s) * lanes
        if not s.is_reduction:
            load = self._loader(s, position, None)
            stmts, values = self.elements.expressions(list(s.op.body), self.current, load)
            body = _seq([*stmts, *self._stores(s, coords, values)])
            return [self._dealt(w, total, body, limit), Sync.BLOCK]
        values, stmts = self._reduction(s, position, lane, lanes)
        if lanes == 1:
            body = _seq([*stmts, *self._stores(s, coords, values)])
            return [self._dealt(w, total, body, limit), Sync.BLOCK]
        stores = [
            self.model.store(p, v, [w]) for p, v in zip(self.partials[s], values, strict=True)
        ]
        partial = self._dealt(w, total, _seq([*stmts, *stores]), _times(limit, lanes))
        return [partial, Sync.BLOCK, self._combine(s), Sync.BLOCK]

    def _reduction(
        self, s: Stage, position: Any, lane: Any, lanes: int
    ) -> tuple[list[Any], list[Any]]:
        """A thread's partial (``lanes`` > 1) or whole sum of ``s``'s
        element, in order of the reduction index: the accumulators' values
        and the statements."""
        red = s.op.body[0]
        dtypes = self._dtypes(s)
        accs = [self.model.local(f"{s.name}_acc{i}", d) for i, d in enumerate(dtypes)]
        stmts: list[Any] = []
        if list(red.init):
            load = self._loader(s, position, None)
            init_stmts, inits = self.elements.expressions(list(red.init), self.current, load)
            stmts += init_stmts
        else:
            inits = list(red.combiner.identity_element)
        stmts += [tirx.BufferStore(a, v, [0]) for a, v in zip(accs, inits, strict=True)]
        extents = [int(iv.dom.extent) for iv in s.reduce_axes]
        total = product(extents)
        if lanes == 1:
            loop_vars = [tirx.Var(f"k{j}", "int32") for j in range(len(extents))]
            reduce_coords: list[Any] = list(loop_vars)
        else:
            j = tirx.Var("j", "int32")
            flat = j * lanes + lane
            reduce_coords = decode(flat, extents)
        self.current.update(zip([iv.var for iv in s.reduce_axes], reduce_coords, strict=True))
        load = self._loader(s, position, reduce_coords)
        inner, (cond, *sources) = self.elements.expressions(
            [red.condition, *red.source], self.current, load
        )
        new = combine(red.combiner, [tirx.BufferLoad(a, [0]) for a in accs], sources)
        if len(accs) == 1:
            update = [tirx.BufferStore(accs[0], new[0], [0])]
        else:  # a tuple reduction: every result from the old accumulators
            temps = [self.model.local(f"{s.name}_new{i}", d) for i, d in enumerate(dtypes)]
            update = [tirx.BufferStore(tmp, v, [0]) for tmp, v in zip(temps, new, strict=True)]
            update += [
                tirx.BufferStore(a, tirx.BufferLoad(tmp, [0]), [0])
                for a, tmp in zip(accs, temps, strict=True)
            ]
        body = _seq([*inner, *update])
        if not (isinstance(cond, tirx.IntImm) and int(cond) == 1):
            body = tirx.IfThenElse(cond, body, None)
        if lanes == 1:
            for var, n in reversed(list(zip(loop_vars, extents, strict=True))):
                body = tirx.For(var, 0, n, tirx.ForKind.SERIAL, body)
        else:
            if total % lanes:
                body = tirx.IfThenElse(flat < total, body, None)
            body = tirx.For(j, 0, _ceil(total, lanes), tirx.ForKind.SERIAL, body)
        stmts.append(body)
        return [tirx.BufferLoad(a, [0]) for a in accs], stmts

    def _combine(self, s: Stage) -> Any:
        """[ITEMS] The lanes' partial sums of each element added in lane order."""
        lanes = self.lanes[s]
        w = tirx.Var("w", "int32")
        coords, _, limit = self._coordinates(s, w)
        parts = self.partials[s]
        accs = [self.model.local(f"{s.name}_sum{i}", d) for i, d in enumerate(self._dtypes(s))]
        stmts = [
            tirx.BufferStore(a, self.model.load(p, [w * lanes]), [0])
            for a, p in zip(accs, parts, strict=True)
        ]
        for lane in range(1, lanes):
            new = combine(
                s.op.body[0].combiner,
                [tirx.BufferLoad(a, [0]) for a in accs],
                [self.model.load(p, [w * lanes + lane]) for p in parts],
            )
            stmts += [tirx.BufferStore(a, v, [0]) for a, v in zip(accs, new, strict=True)]
        values = [tirx.BufferLoad(a, [0]) for a in accs]
        body = _seq([*stmts, *self._stores(s, coords, values)])
        return self._dealt(w, self._items_max(s), body, limit)

    def _stores(self, s: Stage, coords: list[Any], values: list[Any]) -> list[Any]:
        """``s``'s element written to its home and to the step outputs it is
        (a replicated stage's outputs by block 0 alone)."""
        stmts = []
        homes = []
        for i, v in enumerate(values):
            home = self._home(s, i)
            stmts.append(self.model.store(home.buffer, v, [*home.lead, *coords]))
            homes.append(home.buffer)
        extra = []
        for k in s.destinations:
            dest = self._destination(k)
            if any(dest.buffer.same_as(b) for b in homes):
                continue
            value = values[self._value_of(s, k)]
            extra.append(self.model.store(dest.buffer, value, [*dest.lead, *coords]))
        if extra and self._owner(s).axis is None and self.plan.blocks > 1:
            extra = [tirx.IfThenElse(self.model.bx == 0, _seq(extra), None)]
        return stmts + extra

    # ------------------------------------------------------------- whole
    def build(self) -> Built:
        """The kernel's PrimFunc ([KERNEL])."""
        self._place()
        model = self.model
        pieces: list[Any] = [self._staging_piece(*entry) for entry in self.staging]
        pieces += self._copies(into_state=True)
        pieces.append(Sync.GRID)
        pieces += self._steps() if not self.chunk else self._chunked_steps()
        pieces += self._copies(into_state=False)
        body = model.assemble([p for p in pieces if p is not None])
        root = s_tir.SBlock([], [], [], "root", body, alloc_buffers=list(model.allocations))
        params = [
            *self.xs,
            *self.init,
            *self.caps,
            *[b for b, _ in self.tables],
            *self.hoisted,
            *self.outs,
            *self.final,
            *[b for b, _ in self.scratch],
        ]
        func = tirx.PrimFunc(params, s_tir.SBlockRealize([], True, root))
        attrs: dict[str, Any] = {"global_symbol": "main", "tirx.noalias": True, "s_tir": True}
        if model.on_gpu and self.plan.blocks > 1:  # a grid barrier needs every block resident
            attrs["tirx.kernel_launch_params"] = ["tirx.use_cooperative_launch"]
        for key, value in attrs.items():
            func = func.with_attr(key, value)
        return Built(
            func,
            [d for _, d in self.tables],
            [leaf for _, leaf in self.scratch],
            self.plan.blocks,
            model.threads,
            len(self.plan.phases),
            [f"{s.name}:{r.tensor.op.name}" for s, r, *_ in self.staging],
        )

    def _steps(self) -> list[Any]:
        """[PARITY] Two steps per iteration, each knowing which buffer of the
        state it reads; an odd count's last step after."""
        pair = tirx.Var("pair", "int32")
        both = self._step(pair * 2, 0) + self._step(pair * 2 + 1, 1)
        odd = tirx.Var("odd", "int32")
        return [
            Loop(pair, tirx.floordiv(self.length, 2), both),
            Loop(odd, tirx.floormod(self.length, 2), self._step(self.length - 1, 0)),
        ]

    def _chunked_steps(self) -> list[Any]:
        """[CHUNKS] [PARITY] The steps ``chunk`` at a time, each chunk's rows
        copied first (an even chunk keeps the parities of [PARITY]); the
        last, shorter chunk after."""
        chunk = self.chunk
        c, pair = tirx.Var("c", "int32"), tirx.Var("pair", "int32")
        start = c * chunk
        both = self._step(start + pair * 2, 0, pair * 2) + self._step(
            start + pair * 2 + 1, 1, pair * 2 + 1
        )
        whole = [*self._row_copies(start, chunk), Sync.BLOCK, Loop(pair, chunk // 2, both)]
        rest = tirx.floormod(self.length, chunk)
        base = self.length - rest
        tail_pair, odd = tirx.Var("pair", "int32"), tirx.Var("odd", "int32")
        tail_both = self._step(base + tail_pair * 2, 0, tail_pair * 2) + self._step(
            base + tail_pair * 2 + 1, 1, tail_pair * 2 + 1
        )
        return [
            Loop(c, tirx.floordiv(self.length, chunk), whole),
            *self._row_copies(base, rest),
            Sync.BLOCK,
            Loop(tail_pair, tirx.floordiv(rest, 2), tail_both),
            Loop(odd, tirx.floormod(rest, 2), self._step(self.length - 1, 0, rest - 1)),
        ]

    def _step(self, t: Any, parity: int, row: Any = None) -> list[Any]:
        """The pieces of step ``t``, which reads the state's buffer ``parity``
        (and the staged sequences' ``row``)."""
        self.t, self.parity, self.row = t, parity, row
        pieces: list[Any] = []
        for phase in self.plan.phases:
            for s in self.steps.stages:
                if self._owner(s).phase == phase:
                    pieces += self._stage_pieces(s)
            if self.plan.blocks > 1:
                pieces.append(Sync.GRID)
        return pieces

    def _copies(self, into_state: bool) -> list[Any]:
        """The state copied into its even buffer (before the loop) or out of
        the buffer of the count's parity (after); a block's shared copy by
        its own threads, a global one each element by one thread of the
        grid."""
        model = self.model
        pieces: list[Any] = []
        for i, (shape, _) in enumerate(self.state_shapes):
            size = product(shape)
            pair = self.states[i]
            if size == 0 or (pair is None and into_state):
                continue
            whole = model.blocks == 1 or (pair is not None and model.is_per_block(pair[0].buffer))
            w = tirx.Var("w", "int32")
            flat = w if whole else w * model.blocks + model.bx
            coords = decode(flat, shape)
            if pair is None:  # invariant: the initial value is the final one
                stmt = tirx.BufferStore(
                    self.final[i], tirx.BufferLoad(self.init[i], coords), coords
                )
            elif into_state:
                even = pair[0]
                value = tirx.BufferLoad(self.init[i], coords)
                stmt = model.store(even.buffer, value, [*even.lead, *coords])
            else:
                even, odd = (model.load(h.buffer, [*h.lead, *coords]) for h in pair)
                value = tirx.Select(tirx.floormod(self.length, 2) == 0, even, odd)
                stmt = tirx.BufferStore(self.final[i], value, coords)
            total = size if whole else _ceil(size, model.blocks)
            pieces.append(self._dealt(w, total, stmt, None, None if whole else flat < size))
        return pieces


def _times(limit: Any, per: int) -> Any:
    return limit if limit is None or per == 1 else limit * per


def _seq(stmts: list[Any]) -> Any:
    stmts = [s for s in stmts if s is not None]
    if not stmts:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)
