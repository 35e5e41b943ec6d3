"""The executor's own kernels: hand-written TIR for what is not an operator
of the program but the executor's work around data-dependent shapes.

Operators whose result shape depends on data (``boolean_mask``,
``argwhere``, ``unique``, ``dyn.arange``) run in two kernels with the
allocation between them, as the
dynamic-shape proposal planned: one counts (``count_true``,
``count_nonzero``), the VM turns the count into a shape
(``tensor_to_shape``) and allocates, the other fills (``mask_rows``,
``argwhere_rows``). Loops whose number of steps is known only at run time
collect their per-step outputs in a buffer that doubles when full
(``grow``), written in place one row per step (``write_row``) and cut to
the steps actually run at the end (``prefix``): amortised O(1) per step,
and the buffer is reused across steps, not reallocated.

Every kernel works on tensors flattened to rows (``(rows, row size)``), so
one kernel serves every rank: the lowering reshapes around them. The
dimensions are symbolic, bound by the arguments' shapes at each call; the
sizes are ``int64``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as T


def single_thread(func: Any) -> Any:
    """``func`` run by one GPU thread of one block."""
    body = func.body
    for tag in ("threadIdx.x", "blockIdx.x"):
        axis = tirx.IterVar(
            tvm.ir.Range(0, 1), tirx.Var(tag, "int32"), tirx.IterVar.ThreadIndex, tag
        )
        body = tirx.AttrStmt(axis, "thread_extent", tirx.const(1, "int32"), body)
    return func.with_body(body)


@cache
def count_true() -> Any:
    """``count[0]`` = the number of true elements of ``mask``."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_mask: T.handle, count: T.Buffer((1,), "int64")):
        r = T.int64()
        mask = T.match_buffer(var_mask, (r,), "bool")
        count[0] = T.int64(0)
        for i in range(r):
            if mask[i]:
                count[0] = count[0] + T.int64(1)

    return kernel


@cache
def count_nonzero(dtype: str) -> Any:
    """``count[0]`` = the number of nonzero elements of ``x``."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_x: T.handle, count: T.Buffer((1,), "int64")):
        r = T.int64()
        x = T.match_buffer(var_x, (r,), dtype)
        count[0] = T.int64(0)
        for i in range(r):
            if x[i] != T.Cast(dtype, 0):
                count[0] = count[0] + T.int64(1)

    return kernel


@cache
def mask_rows(dtype: str) -> Any:
    """``out`` = the rows ``i`` of ``x`` where ``mask[i]``, in order."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_x: T.handle, var_mask: T.handle, var_out: T.handle):
        r = T.int64()
        c = T.int64()
        n = T.int64()
        x = T.match_buffer(var_x, (r, c), dtype)
        mask = T.match_buffer(var_mask, (r,), "bool")
        out = T.match_buffer(var_out, (n, c), dtype)
        j = T.alloc_buffer((1,), "int64", scope="local")
        j[0] = T.int64(0)
        for i in range(r):
            if mask[i]:
                for k in range(c):
                    out[j[0], k] = x[i, k]
                j[0] = j[0] + T.int64(1)

    return kernel


@cache
def argwhere_rows(dtype: str) -> Any:
    """``out[j]`` = the index (over ``shape``) of the ``j``-th nonzero
    element of the flattened ``x``, as ``int32``."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_x: T.handle, var_shape: T.handle, var_out: T.handle):
        r = T.int64()
        k = T.int64()
        n = T.int64()
        x = T.match_buffer(var_x, (r,), dtype)
        shape = T.match_buffer(var_shape, (k,), "int64")
        out = T.match_buffer(var_out, (n, k), "int32")
        j = T.alloc_buffer((1,), "int64", scope="local")
        rest = T.alloc_buffer((1,), "int64", scope="local")
        j[0] = T.int64(0)
        for i in range(r):
            if x[i] != T.Cast(dtype, 0):
                rest[0] = i
                for d in range(k):
                    out[j[0], k - 1 - d] = T.Cast("int32", T.floormod(rest[0], shape[k - 1 - d]))
                    rest[0] = T.floordiv(rest[0], shape[k - 1 - d])
                j[0] = j[0] + T.int64(1)

    return kernel


@cache
def grow(dtype: str) -> Any:
    """``out`` = ``buf`` with twice its rows (the new ones zero)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, var_out: T.handle):
        cap = T.int64()
        c = T.int64()
        buf = T.match_buffer(var_buf, (cap, c), dtype)  # binds cap
        out = T.match_buffer(var_out, (cap * T.int64(2), c), dtype)
        for i, k in T.grid(cap * T.int64(2), c):
            out[i, k] = T.if_then_else(
                i < cap, buf[T.min(i, cap - T.int64(1)), k], T.Cast(dtype, 0)
            )

    return kernel


@cache
def grow_rows(dtype: str) -> Any:
    """``out`` = ``buf``'s rows, widened or not, then zero rows: the buffer
    of a loop's per-step output whose size the steps tell (the first
    step's row widens the empty buffer)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, var_out: T.handle):
        cap = T.int64()
        c = T.int64()
        n = T.int64()
        m = T.int64()
        buf = T.match_buffer(var_buf, (cap, c), dtype)
        out = T.match_buffer(var_out, (n, m), dtype)
        for i, k in T.grid(n, m):
            out[i, k] = T.if_then_else(
                i < cap and k < c,
                buf[T.min(i, cap - T.int64(1)), T.min(k, c - T.int64(1))],
                T.Cast(dtype, 0),
            )

    return kernel


@cache
def write_row(dtype: str) -> Any:
    """``buf[count] = row``, in place (``call_tir_inplace`` on ``buf``)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, var_row: T.handle, at: T.Buffer((), "int64")):
        cap = T.int64()
        c = T.int64()
        buf = T.match_buffer(var_buf, (cap, c), dtype)  # binds cap
        row = T.match_buffer(var_row, (c,), dtype)
        for k in range(c):
            buf[at[()], k] = row[k]

    return kernel


@cache
def prefix(dtype: str) -> Any:
    """``out`` = the first ``n`` rows of ``buf`` (``n`` from ``out``'s shape)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, var_out: T.handle):
        cap = T.int64()
        c = T.int64()
        n = T.int64()
        buf = T.match_buffer(var_buf, (cap, c), dtype)  # binds cap
        out = T.match_buffer(var_out, (n, c), dtype)
        for i, k in T.grid(n, c):
            out[i, k] = buf[i, k]

    return kernel


@cache
def take_row(dtype: str) -> Any:
    """``out`` = ``xs[at]``."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_xs: T.handle, at: T.Buffer((), "int64"), var_out: T.handle):
        t = T.int64()
        c = T.int64()
        xs = T.match_buffer(var_xs, (t, c), dtype)  # binds t
        out = T.match_buffer(var_out, (c,), dtype)
        for k in range(c):
            out[k] = xs[at[()], k]

    return kernel


@cache
def zeros(dtype: str) -> Any:
    """``out`` = zeros (``out``'s shape from the call)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_out: T.handle):
        r = T.int64()
        c = T.int64()
        out = T.match_buffer(var_out, (r, c), dtype)
        for i, k in T.grid(r, c):
            out[i, k] = T.Cast(dtype, 0)

    return kernel


@cache
def fill(dtype: str) -> Any:
    """``out`` = ``value`` everywhere (``out``'s size from the call)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(value: T.Buffer((), dtype), var_out: T.handle):
        m = T.int64()
        out = T.match_buffer(var_out, (m,), dtype)
        for i in range(m):
            out[i] = value[()]

    return kernel


@cache
def at_capacity(dtype: str) -> Any:
    """``full[()]`` = whether ``buf`` has no row left after ``count`` rows."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, count: T.Buffer((), "int64"), full: T.Buffer((), "bool")):
        cap = T.int64()
        c = T.int64()
        buf = T.match_buffer(var_buf, (cap, c), dtype)  # noqa: F841  (binds cap)
        full[()] = count[()] >= cap

    return kernel


@cache
def before_end(dtype: str) -> Any:
    """``more[()]`` = whether ``xs`` has a row ``count``."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_xs: T.handle, count: T.Buffer((), "int64"), more: T.Buffer((), "bool")):
        t = T.int64()
        c = T.int64()
        xs = T.match_buffer(var_xs, (t, c), dtype)  # noqa: F841  (binds t)
        more[()] = count[()] < t

    return kernel


@cache
def chunk_rows(dtype: str) -> Any:
    """``out`` = the rows of ``xs`` from ``start`` (as many as ``out`` has)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_xs: T.handle, start: T.Buffer((), "int64"), var_out: T.handle):
        t = T.int64()
        c = T.int64()
        k = T.int64()
        xs = T.match_buffer(var_xs, (t, c), dtype)
        out = T.match_buffer(var_out, (k, c), dtype)
        for i, j in T.grid(k, c):
            out[i, j] = xs[start[()] + i, j]

    return kernel


@cache
def write_rows(dtype: str) -> Any:
    """``buf[start : start + k] = rows``, in place (``call_tir_inplace``)."""

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_buf: T.handle, var_rows: T.handle, start: T.Buffer((), "int64")):
        t = T.int64()
        c = T.int64()
        k = T.int64()
        buf = T.match_buffer(var_buf, (t, c), dtype)
        rows = T.match_buffer(var_rows, (k, c), dtype)
        for i, j in T.grid(k, c):
            buf[start[()] + i, j] = rows[i, j]

    return kernel


ARANGE_ZERO_STEP, ARANGE_NOT_FINITE = -1, -2
"""The lengths ``arange_length`` gives for the bounds ``dyn.arange`` refuses."""


@cache
def arange_length(dtype: str) -> Any:
    """``count[0]`` = the length of ``dyn.arange(start, limit, delta)``:
    ``max(ceil((limit - start) / delta), 0)``, exact for integers (in
    int64), in the dtype for floats (float16 in float32); a zero step
    gives ``ARANGE_ZERO_STEP``, a float bound that is not finite
    ``ARANGE_NOT_FINITE``, which the lowering reports."""
    if dtype.startswith(("int", "uint")):

        @T.prim_func(private=True, s_tir=True)
        def kernel(
            start: T.Buffer((), dtype),
            limit: T.Buffer((), dtype),
            delta: T.Buffer((), dtype),
            count: T.Buffer((1,), "int64"),
        ):
            a = T.Cast("int64", start[()])
            b = T.Cast("int64", limit[()])
            d = T.Cast("int64", delta[()])
            if d == T.int64(0):
                count[0] = T.int64(ARANGE_ZERO_STEP)
            else:
                count[0] = T.max(T.int64(0) - T.floordiv(a - b, d), T.int64(0))

        return kernel
    wide = "float32" if dtype == "float16" else dtype

    @T.prim_func(private=True, s_tir=True)
    def float_kernel(
        start: T.Buffer((), dtype),
        limit: T.Buffer((), dtype),
        delta: T.Buffer((), dtype),
        count: T.Buffer((1,), "int64"),
    ):
        a = T.Cast(wide, start[()])
        b = T.Cast(wide, limit[()])
        d = T.Cast(wide, delta[()])
        if not (T.isfinite(a) and T.isfinite(b) and T.isfinite(d)):
            count[0] = T.int64(ARANGE_NOT_FINITE)
        elif d == T.Cast(wide, 0):
            count[0] = T.int64(ARANGE_ZERO_STEP)
        else:
            count[0] = T.max(T.Cast("int64", T.ceil((b - a) / d)), T.int64(0))

    return float_kernel


@cache
def arange_fill(dtype: str) -> Any:
    """``out[i]`` = ``start + i * delta`` (integers in int64, whose values
    between the bounds cannot overflow; float16 in float32)."""
    wide = "int64" if dtype.startswith(("int", "uint")) and dtype != "uint64" else dtype
    wide = "float32" if dtype == "float16" else wide

    @T.prim_func(private=True, s_tir=True)
    def kernel(
        start: T.Buffer((), dtype),
        delta: T.Buffer((), dtype),
        var_out: T.handle,
    ):
        n = T.int64()
        out = T.match_buffer(var_out, (n,), dtype)
        for i in range(n):
            out[i] = T.Cast(
                dtype, T.Cast(wide, start[()]) + T.Cast(wide, i) * T.Cast(wide, delta[()])
            )

    return kernel


def _row_tests(dtype: str) -> tuple[Any, Any]:
    """Whether two elements differ, and whether one is less, as numpy's
    ``unique`` reads them: NaNs are one value, greater than every number.
    Written without negating a comparison: TVM's simplifier turns
    ``!(a == b)`` into ``a != b``, an ordered compare that is false for NaN
    (te_ops [RULE TE-NAN])."""
    if dtype.startswith("float"):

        def differ(a: Any, b: Any) -> Any:
            one_nan = tirx.Or(
                tirx.And(tirx.isnan(a), tirx.Not(tirx.isnan(b))),
                tirx.And(tirx.Not(tirx.isnan(a)), tirx.isnan(b)),
            )
            return tirx.Or(tirx.Or(tirx.LT(a, b), tirx.LT(b, a)), one_nan)

        def less(a: Any, b: Any) -> Any:
            return tirx.Or(tirx.LT(a, b), tirx.And(tirx.Not(tirx.isnan(a)), tirx.isnan(b)))

        return differ, less
    # (``==`` of two expressions is their structural equality in Python)
    return (lambda a, b: tirx.NE(a, b)), (lambda a, b: tirx.LT(a, b))


@cache
def unique_count(dtype: str) -> Any:
    """``count[0]`` = how many distinct rows ``x`` has; ``first[i]`` = 1
    where row ``i`` occurs for the first time (O(rows^2) comparisons)."""
    differ, _ = _row_tests(dtype)

    @T.prim_func(private=True, s_tir=True)
    def kernel(var_x: T.handle, count: T.Buffer((1,), "int64"), var_first: T.handle):
        r = T.int64()
        c = T.int64()
        x = T.match_buffer(var_x, (r, c), dtype)
        first = T.match_buffer(var_first, (r,), "int64")
        same = T.alloc_buffer((1,), "int64", scope="local")
        count[0] = T.int64(0)
        for i in range(r):
            first[i] = T.int64(1)
            for j in range(i):
                same[0] = T.int64(1)
                for k in range(c):
                    if differ(x[i, k], x[j, k]):
                        same[0] = T.int64(0)
                if same[0] == T.int64(1):
                    first[i] = T.int64(0)
            count[0] = count[0] + first[i]

    return kernel


@cache
def unique_fill(dtype: str, ordered: int) -> Any:
    """The distinct rows of ``x`` (``ordered``: ascending, rows compared
    lexicographically; else in the order they first occur), where each
    first occurs, each row's index among them, and how many times each
    occurs: numpy's ``unique`` with every output."""
    differ, less = _row_tests(dtype)

    @T.prim_func(private=True, s_tir=True)
    def kernel(
        var_x: T.handle,
        var_flags: T.handle,
        var_values: T.handle,
        var_at: T.handle,
        var_inverse: T.handle,
        var_counts: T.handle,
    ):
        r = T.int64()
        c = T.int64()
        n = T.int64()
        x = T.match_buffer(var_x, (r, c), dtype)
        flags = T.match_buffer(var_flags, (r,), "int64")
        values = T.match_buffer(var_values, (n, c), dtype)
        at = T.match_buffer(var_at, (n,), "int64")
        inverse = T.match_buffer(var_inverse, (r,), "int64")
        counts = T.match_buffer(var_counts, (n,), "int64")
        next_slot = T.alloc_buffer((1,), "int64", scope="local")
        slot = T.alloc_buffer((1,), "int64", scope="local")
        decided = T.alloc_buffer((1,), "int64", scope="local")
        same = T.alloc_buffer((1,), "int64", scope="local")
        next_slot[0] = T.int64(0)
        for i in range(r):
            if flags[i] == T.int64(1):
                if ordered == 1:
                    slot[0] = T.int64(0)
                    for j in range(r):
                        if flags[j] == T.int64(1):
                            decided[0] = T.int64(0)
                            for k in range(c):
                                if decided[0] == T.int64(0):
                                    if less(x[j, k], x[i, k]):
                                        slot[0] = slot[0] + T.int64(1)
                                        decided[0] = T.int64(1)
                                    elif less(x[i, k], x[j, k]):
                                        decided[0] = T.int64(1)
                else:
                    slot[0] = next_slot[0]
                    next_slot[0] = next_slot[0] + T.int64(1)
                for k in range(c):
                    values[slot[0], k] = x[i, k]
                at[slot[0]] = i
        for p in range(n):
            counts[p] = T.int64(0)
        for i in range(r):
            inverse[i] = T.int64(0)
            for p in range(n):
                same[0] = T.int64(1)
                for k in range(c):
                    if differ(x[i, k], values[p, k]):
                        same[0] = T.int64(0)
                if same[0] == T.int64(1):
                    inverse[i] = p
            counts[inverse[i]] = counts[inverse[i]] + T.int64(1)

    return kernel
