"""[PLACE] Where the persistent kernel's values live, and what it stages
on chip (a mixin of kernel.py's ``KernelBuilder``).

- the state: a double buffer, two buffers read and written by turns
  ([PARITY], kernel.py), in global memory (one block: shared memory
  while it fits); a state leaf every step returns unchanged is read from
  the initial state;
- a stage: a step output is computed straight into the output
  (``outs[t]`` or the next state); a replicated one into shared memory,
  each block its copy (its outputs written by block 0 alone); any other
  into global memory (one block: shared memory while it fits);
- the partial sums of a reduction's lanes: shared memory (else one lane).

[WEIGHTS] A read of a captured tensor whose index depends only on the
reading stage's unit and reduction variables (the rows of ``U`` a block's
gate units multiply the state by) is staged once per launch into shared
memory, ``[unit position, reduction index]`` flattened, and read from
there at every step: the recurrent weights stay on chip for the whole
loop, each block holding the rows of its units. Rows are padded so that
the lanes of neighbouring units fall in different memory banks (a flat
buffer: TVM's compaction of buffers would drop the padding of a 2-d
one). Staged largest first while ``SHARED_BUDGET`` allows; the rest is
read from global memory, through the caches.

[CHUNKS] With one block, the rows of the sequences the steps read
(``x_t``, the hoisted products) are copied into shared memory ``chunk``
steps at a time (``MAX_CHUNK``, halved until they fit), so that a step
waits for no global memory: one copy per chunk, its latency shared by
its steps.

Shared memory is spent in this order: partial sums, replicated stages,
the state, staged weights, sequence chunks, other stages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import te, tirx

from ...runtime.errors import BackendError
from ..values import Leaf
from .emit import decode
from .indices import free_vars
from .owners import Ownership, contiguous
from .stages import Read, Stage, same_tensor, tensor_reads

SHARED_BUDGET = 44 * 1024
"""Bytes of shared memory a block's staged weights, replicated stages,
partial sums and (one block) state and stages may take: below the 48 KiB
a block gets without asking (TVM's own barriers need none)."""


MAX_CHUNK, MIN_CHUNK = 32, 4
"""Most and fewest steps of sequence rows one block stages at a time ([CHUNKS])."""


def param(name: str, shape: Sequence[Any], dtype: str) -> Any:
    return tirx.decl_buffer(
        list(shape),
        dtype,
        name,
        data_alignment=max(1, tvm.DataType(dtype).bits // 8),
        offset_factor=1,
    )


def itemsize(dtype: str) -> int:
    return max(1, tvm.DataType(dtype).bits // 8)


def substituted(node: Any, mapping: dict[Any, Any]) -> Any:
    return tvm_ffi.structural_map(node, (tirx.Var, lambda v: mapping.get(v, v)))


def product(values: Sequence[int]) -> int:
    return int(np.prod(values, dtype=np.int64))


def _same_read(a: Read, b: Read) -> bool:
    return same_tensor(a.tensor, b.tensor) and tvm_ffi.structural_equal(
        list(a.index), list(b.index)
    )


@dataclass
class Inputs:
    """What the step's placeholders are: for each, its kind and position
    (``("x", k)``, ``("state", i)``, ``("captured", k)``, ``("hoisted", k)``)."""

    kinds: dict[Any, tuple[str, int]]
    invariant: frozenset[int]  # state leaves the step returns unchanged
    hoisted_seq: list[bool]
    n_outputs: int  # out_t leaves; the step's outputs after them are state leaves
    changed: list[int]  # the state leaf of each step output after the out_t ones


@dataclass
class Home:
    """Where a stage output's elements are: a buffer and its leading index."""

    buffer: Any
    lead: list[Any]


class Placement:
    """[PLACE] [WEIGHTS] [CHUNKS] (the kernel builder's state is its own)."""

    def _scratch(self, name: str, shape: list[int], dtype: str) -> Any:
        buf = param(name, shape, dtype)
        self.scratch.append((buf, Leaf(tuple(shape), dtype)))
        return buf

    def _fits(self, nbytes: int) -> bool:
        if nbytes <= self.budget:
            self.budget -= nbytes
            return True
        return False

    def _dtypes(self, s: Stage) -> list[str]:
        return [str(s.op.output(i).dtype) for i in range(s.op.num_outputs)]

    def _place(self) -> None:
        """Buffers for the partial sums, the replicated stages, the state,
        the staged weights and the other stages, in that priority."""
        model, blocks = self.model, self.plan.blocks
        self.partials: dict[Stage, list[Any]] = {}
        for s in self.steps.stages:
            lanes = self.lanes[s]
            if lanes == 1:
                continue
            items = self._items_max(s) * lanes
            if self._fits(items * sum(itemsize(d) for d in self._dtypes(s))):
                self.partials[s] = [
                    model.shared(f"{s.name}_partial{i}", [items], d)
                    for i, d in enumerate(self._dtypes(s))
                ]
            else:
                self.lanes[s] = 1
        self.homes: dict[tuple[Stage, int], Home] = {}
        for s in self.steps.stages:
            if self._owner(s).axis is not None:
                continue
            for i, d in enumerate(self._dtypes(s)):
                if not self._fits(product(s.shape) * itemsize(d)):
                    raise BackendError("a replicated stage does not fit in shared memory")
                self.homes[(s, i)] = Home(model.shared(f"{s.name}_{i}", s.shape, d), [])
        self.states: list[tuple[Home, Home] | None] = []
        for i, (shape, dtype) in enumerate(self.state_shapes):
            if i in self.inputs.invariant:
                self.states.append(None)
            elif blocks == 1 and self._fits(2 * product(shape) * itemsize(dtype)):
                even = model.shared(f"state{i}_even", shape, dtype)
                odd = model.shared(f"state{i}_odd", shape, dtype)
                self.states.append((Home(even, []), Home(odd, [])))
            else:
                both = self._scratch(f"state{i}", [2, *shape], dtype)
                self.states.append((Home(both, [0]), Home(both, [1])))
        self._stage_weights()
        self._stage_sequences()
        for s in self.steps.stages:
            for i, d in enumerate(self._dtypes(s)):
                if (s, i) in self.homes:
                    continue
                if any(self._value_of(s, k) == i for k in s.destinations):
                    continue  # a step output: its destination ([PARITY])
                if blocks == 1 and self._fits(product(s.shape) * itemsize(d)):
                    self.homes[(s, i)] = Home(model.shared(f"{s.name}_{i}", s.shape, d), [])
                else:
                    self.homes[(s, i)] = Home(self._scratch(f"{s.name}_{i}", s.shape, d), [])

    def _value_of(self, s: Stage, k: int) -> int:
        """Which of ``s``'s outputs step output ``k`` is (a copy: the first)."""
        out = self.step_outputs[k]
        return int(out.value_index) if out.op.same_as(s.op) else 0

    def _destination(self, k: int) -> Home:
        """Where step output ``k`` is written at the step being built:
        ``outs[k][t]`` or the next state (the other parity's buffer)."""
        if k < self.inputs.n_outputs:
            return Home(self.outs[k], [self.t])
        pair = self.states[self.inputs.changed[k - self.inputs.n_outputs]]
        assert pair is not None
        return pair[1 - self.parity]

    def _home(self, s: Stage, i: int) -> Home:
        """Where ``s``'s output ``i`` is, at the step being built."""
        home = self.homes.get((s, i))
        if home is not None:
            return home
        k = next(k for k in s.destinations if self._value_of(s, k) == i)
        return self._destination(k)

    # ---------------------------------------------------------- ownership

    def _owner(self, s: Stage) -> Ownership:
        return self.plan.owners[s]

    def _rest(self, s: Stage) -> list[int]:
        """The extents of the axes other than the unit axis."""
        axis = self._owner(s).axis
        return [n for a, n in enumerate(s.shape) if a != axis]

    def _items_max(self, s: Stage) -> int:
        """Most elements of ``s`` one block computes."""
        own = self._owner(s)
        if own.axis is None:
            return product(s.shape)
        _, counts = own.units(self.plan.blocks)
        return int(counts.max()) * product(self._rest(s))

    def _unit_table(self, s: Stage) -> tuple[Any, Any, int]:
        """``(unit(i), count, most)``: the block's ``i``-th unit of ``s``
        and how many it has, as expressions of ``bx``; tables only when the
        split is not even contiguous runs."""
        if s in self.units:
            return self.units[s]
        own, blocks, bx = self._owner(s), self.plan.blocks, self.model.bx
        assert own.axis is not None and own.owner is not None
        extent = s.shape[own.axis]
        table, counts = own.units(blocks)
        made: tuple[Any, Any, int]
        if blocks == 1:
            made = (lambda i: i, tirx.const(extent, "int32"), extent)
        elif extent % blocks == 0 and np.array_equal(own.owner, contiguous(extent, blocks)):
            per = extent // blocks
            made = (lambda i, per=per: bx * per + i, tirx.const(per, "int32"), per)
        else:
            units = self._table(f"{s.name}_units", table)
            count = self._table(f"{s.name}_count", counts)
            made = (
                lambda i, units=units: tirx.BufferLoad(units, [bx, i]),
                tirx.BufferLoad(count, [bx]),
                int(counts.max()),
            )
        self.units[s] = made
        return made

    def _table(self, name: str, data: np.ndarray) -> Any:
        buf = param(name, list(data.shape), "int32")
        self.tables.append((buf, data.astype(np.int32)))
        return buf

    # ------------------------------------------------------------ weights

    def _stage_weights(self) -> None:
        """[WEIGHTS] Which captured reads are staged in shared memory."""
        candidates = []
        for s in self.steps.stages:
            axis = self._owner(s).axis
            reduce_vars = [iv.var for iv in s.reduce_axes]
            unit_var = s.axes[axis] if axis is not None else None
            allowed = [*reduce_vars, *([unit_var] if unit_var is not None else [])]
            kept: list[Read] = []
            for read in s.reads:
                kind = self.inputs.kinds.get(read.tensor.op)
                if kind is None or kind[0] != "captured" or tensor_reads(read.index):
                    continue
                variables = free_vars(read.index)
                if not variables or not all(any(v.same_as(a) for a in allowed) for v in variables):
                    continue
                if any(_same_read(read, k) for k in kept):
                    continue
                kept.append(read)
                by_unit = unit_var is not None and any(v.same_as(unit_var) for v in variables)
                by_reduce = any(any(v.same_as(r) for r in reduce_vars) for v in variables)
                rows = self._unit_table(s)[2] if by_unit else 1
                width = self._row_width(s) if by_reduce else 1
                nbytes = rows * width * itemsize(str(read.tensor.dtype))
                candidates.append((nbytes, s, read, by_unit, by_reduce, rows, width))
        candidates.sort(key=lambda c: -c[0])
        for nbytes, s, read, by_unit, by_reduce, rows, width in candidates:
            if not self._fits(nbytes):
                continue
            name = f"{s.name}_{read.tensor.op.name}_staged"
            # flat, so that TVM's compaction of buffers keeps the padding
            buf = self.model.shared(name, [rows * width], str(read.tensor.dtype))
            self.staged.setdefault(s, []).append((read, buf, by_unit, by_reduce, width))
            self.staging.append((s, read, buf, by_unit, by_reduce, rows, width))

    def _stage_sequences(self) -> None:
        """[CHUNKS] One block: the rows of the sequences the steps read (``x_t``,
        the hoisted products) are copied into shared memory ``chunk`` steps
        at a time, so that a step waits for no global memory."""
        self.chunk = 0
        self.rows: dict[tuple[str, int], Any] = {}
        if self.model.blocks != 1:
            return
        wanted: list[tuple[str, int]] = []
        for s in self.steps.stages:
            for read in s.reads:
                kind = self.inputs.kinds.get(read.tensor.op)
                seq = kind is not None and (
                    kind[0] == "x" or (kind[0] == "hoisted" and self.inputs.hoisted_seq[kind[1]])
                )
                if seq and kind not in wanted:
                    wanted.append(kind)
        sources = [self.xs[k] if what == "x" else self.hoisted[k] for what, k in wanted]
        row_bytes = sum(
            product([int(d) for d in b.shape[1:]]) * itemsize(str(b.dtype)) for b in sources
        )
        chunk = MAX_CHUNK
        while chunk >= MIN_CHUNK and chunk * row_bytes > self.budget:
            chunk //= 2
        if not wanted or chunk < MIN_CHUNK or not self._fits(chunk * row_bytes):
            return
        self.chunk = chunk
        for kind, b in zip(wanted, sources, strict=True):
            shape = [chunk, *[int(d) for d in b.shape[1:]]]
            self.rows[kind] = self.model.shared(f"{b.name}_rows", shape, str(b.dtype))

    def _row_copies(self, start: Any, count: Any) -> list[Any]:
        """[CHUNKS] Rows ``start .. start + count`` of each staged sequence
        into its shared rows, ``count`` at most ``chunk``."""
        pieces = []
        for (what, k), buf in self.rows.items():
            source = self.xs[k] if what == "x" else self.hoisted[k]
            shape = (
                [int(d) for d in buf.shape[1:]]
                if self.model.on_gpu
                else [int(d) for d in buf.shape[2:]]
            )
            size = product(shape)
            w = tirx.Var("w", "int32")
            row = tirx.floordiv(w, size) if size > 1 else w
            coords = (
                decode(tirx.floormod(w, size), shape)
                if size > 1
                else [tirx.const(0, "int32")] * len(shape)
            )
            value = tirx.BufferLoad(source, [start + row, *coords])
            store = self.model.store(buf, value, [row, *coords])
            pieces.append(self._dealt(w, self.chunk * size, store, count * size))
        return pieces

    def _row_width(self, s: Stage) -> int:
        """A staged row's length: the reduction's extent, padded so that
        neighbouring units' lanes fall in different banks."""
        extent = s.reduce_extent
        if extent < 32:
            return extent
        return extent + (self.lanes[s] - extent) % 32

    def _staging_piece(
        self, s: Stage, read: Read, buf: Any, by_unit: bool, by_reduce: bool, rows: int, width: int
    ) -> Any:
        """One thread's share of copying a staged read's values."""
        extent = s.reduce_extent if by_reduce else 1
        mapping: dict[Any, Any] = {}
        w = tirx.Var("w", "int32")
        i = tirx.floordiv(w, extent) if extent > 1 else w
        r = tirx.floormod(w, extent) if extent > 1 else tirx.const(0, "int32")
        limit = None
        if by_unit:
            unit_of, count, _ = self._unit_table(s)
            mapping[s.axes[self._owner(s).axis]] = unit_of(i)
            limit = count * extent
        if by_reduce:
            coords = decode(r, [int(iv.dom.extent) for iv in s.reduce_axes])
            mapping.update(zip([iv.var for iv in s.reduce_axes], coords, strict=True))
        for v in s.axes:
            mapping.setdefault(v, tirx.const(0, "int32"))
        kind = self.inputs.kinds[read.tensor.op]
        value = tirx.BufferLoad(self.caps[kind[1]], [substituted(e, mapping) for e in read.index])
        store = self.model.store(buf, value, [i * width + r])
        return self._dealt(w, rows * extent, store, limit)

    # -------------------------------------------------------------- items

    def _staged_load(
        self, s: Stage, tensor: te.Tensor, index: list[Any], position: Any, reduce_coords: Any
    ) -> Any:
        """[WEIGHTS] The shared copy's load for this read of ``tensor``,
        when the read (its index over ``s``'s variables, mapped as now) was
        staged; else None."""
        for read, buf, by_unit, by_reduce, width in self.staged.get(s, []):
            if not same_tensor(read.tensor, tensor) or (by_reduce and reduce_coords is None):
                continue
            mapped = [substituted(e, self.current) for e in read.index]
            if not tvm_ffi.structural_equal(mapped, list(index)):
                continue
            row = position if by_unit else tirx.const(0, "int32")
            flat: Any = tirx.const(0, "int32")
            if by_reduce:
                extents = [int(iv.dom.extent) for iv in s.reduce_axes]
                for c, n in zip(reduce_coords, extents, strict=True):
                    flat = flat * n + c
            return self.model.load(buf, [row * width + flat])
        return None

    # ------------------------------------------------------------ stages
