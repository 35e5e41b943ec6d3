"""[RULE SCHED-BUDGET] (schedule/inline.py, schedule/cost.py): the inliner's
footprints are what a fresh walk of each block gives, it inlines what it
inlined when it walked every consumer again after each inlining and
re-scanned the blocks, and its work is linear in a kernel's blocks.

The differential fuzzer's ``nesting`` group timed out on a 500-let chain:
each inlining re-walked the growing consumer (10 of the build's 14 s).
``_reference_cost`` and ``_reference_inline`` below are that inliner, kept
as the oracle of the decisions: the same name-keyed read counts, the same
first-inlinable-block order."""

from __future__ import annotations

import os
from typing import Any

import pytest
import tvm_ffi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import s_tir, tirx

import effir
from effir.backends.tvm.kernel.primitive import lower_kernel
from effir.backends.tvm.runtime.errors import BackendError
from effir.backends.tvm.schedule import cost
from effir.backends.tvm.schedule.common import KEEP, Blocks, Load, attempt, matmul_operands
from effir.backends.tvm.schedule.cost import expression_cost, inlined
from effir.backends.tvm.schedule.inline import INLINE_BUDGET, inline_within_budget
from effir.ir.expr import Function
from effir.ir.visitor import pre_order
from effir.passes.infra.pipeline import run_pipeline
from effir.passes.transforms.fuse import is_primitive

HEADER = '#[version = "0.0.5"]\n'
PARAMS = (
    "%x: Tensor[(6, 6), float32], %b: Tensor[(6), float32], "
    "%w: Tensor[(6, 6), float32], %idx: Tensor[(6), int32]"
)
LINEAR = 2.1  # twice the blocks, at most about twice the nodes walked (as test_linear_work.py)


# ============================================================ the reference
def _reference_cost(expr: Any) -> tuple[int, dict[str, int]]:
    """The let-substituted size and reads by buffer name, walked whole
    (the walk each inlining once repeated)."""
    bound: dict[Any, tuple[int, dict[str, int]]] = {}
    results: list[tuple[int, dict[str, int]]] = []
    work: list[tuple[str, Any, int]] = [("visit", expr, 0)]
    while work:
        action, node, count = work.pop()
        if action == "visit":
            if isinstance(node, tirx.Let):
                work.append(("let", node, 0))
                work.append(("visit", node.body, 0))
                work.append(("bind", node.var, 0))
                work.append(("visit", node.value, 0))
            elif isinstance(node, tirx.Var) and node in bound:
                results.append(bound[node])
            else:
                kids = cost._children(node)  # the operands walked are the same
                work.append(("combine", node, len(kids)))
                work.extend(("visit", k, 0) for k in reversed(kids))
        elif action == "bind":
            bound[node] = results.pop()
        elif action == "combine":
            parts = [results.pop() for _ in range(count)]
            reads: dict[str, int] = {}
            for _, part in parts:
                for name, n in part.items():
                    reads[name] = reads.get(name, 0) + n
            if isinstance(node, Load):
                name = str(node.source.name)
                reads[name] = reads.get(name, 0) + 1
            results.append((1 + sum(size for size, _ in parts), reads))
    return results.pop()


def _reference_inline(sch: Any) -> None:
    """Inline the first block that may be, walking every cost again, until
    none may."""
    blocks = Blocks(sch)
    progress = True
    while progress:
        progress = False
        outputs = blocks.outputs()
        for block in blocks.all():
            if blocks.name(block) in outputs or blocks.is_reduction(block):
                continue
            if _reference_may_inline(blocks, block) and attempt(
                lambda b=block: sch.compute_inline(b)
            ):
                progress = True
                break


def _reference_may_inline(blocks: Blocks, block: Any) -> bool:
    store = blocks.store(block)
    if store is None or KEEP in blocks.sch.get(block).annotations:
        return False
    mine, _ = _reference_cost(store.value)
    buffer = str(store.buffer.name)
    for consumer in blocks.consumers(block):
        if blocks.is_reduction(consumer) and matmul_operands(blocks.sch, consumer):
            return False
        theirs = blocks.store(consumer)
        if theirs is None:
            return False
        size, reads = _reference_cost(theirs.value)
        if size + reads.get(buffer, 0) * mine > INLINE_BUDGET:
            return False
    return True


# ================================================================ helpers
def _kernels(body: str, params: str = PARAMS) -> list[Any]:
    """The unscheduled PrimFuncs of the kernels ``body`` fuses into."""
    text = f"{HEADER}def @main({params}) {{\n{body}\n}}\n"
    mod = effir.check(effir.parse(text, source_name="inline.effir"))
    mod = effir.check(run_pipeline(mod, "to-anf,fuse"))
    funcs = []
    for fn in mod.functions.values():
        for node in pre_order(fn):
            if isinstance(node, Function) and is_primitive(node):
                try:
                    funcs.append(lower_kernel(node, "llvm", schedule=False).module["main"])
                except BackendError:  # a kernel for sizes known only at run time
                    continue
    return funcs


def _inlined_blocks(func: Any, inline: Any) -> tuple[Any, list[str]]:
    """``func``'s module after ``inline``, and the blocks it inlined, in order."""
    sch = s_tir.Schedule(func)
    order: list[str] = []
    compute_inline = s_tir.Schedule.compute_inline

    def logged(self: Any, block: Any) -> None:
        name = str(self.get(block).name_hint)
        compute_inline(self, block)
        order.append(name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s_tir.Schedule, "compute_inline", logged)
        inline(sch)
    return sch.mod, order


def assert_decides_as_the_reference(func: Any) -> list[str]:
    """The blocks inlined, in the reference's order; each footprint left
    is a fresh walk's, and the reference's size and reads."""
    want, want_order = _inlined_blocks(func, _reference_inline)
    kept: list[Any] = []
    got, got_order = _inlined_blocks(func, lambda sch: kept.append(inline_within_budget(sch)))
    assert got_order == want_order
    assert tvm_ffi.structural_equal(got, want)
    (costs,) = kept
    blocks = Blocks(costs.sch)
    for block in blocks.all():
        store = blocks.store(block)
        if store is None:
            continue
        held, fresh = costs.of(block), expression_cost(store.value)
        assert held.key() == fresh.key(), blocks.name(block)
        assert (held.size, held.reads) == _reference_cost(store.value), blocks.name(block)
    return got_order


def _chain(lets: int) -> str:
    """The fuzzer's ``let_chain`` fragment: one kernel of 2 * lets + 1 blocks."""
    lines = [f"let %a{i + 1} = add(multiply(%a{i}, 0.5f), {i % 3}.0f);" for i in range(lets)]
    return "let %a0 = %x;\n" + "\n".join(lines) + f"\ntanh(%a{lets})"


# ================================================================= linear
def _nodes_walked(func: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """Expression nodes the inliner visits while scheduling ``func``."""
    visits = 0
    children = cost._children

    def counted(node: Any) -> list[Any]:
        nonlocal visits
        visits += 1
        return children(node)

    with monkeypatch.context() as patch:
        patch.setattr(cost, "_children", counted)
        inline_within_budget(s_tir.Schedule(func))
    return visits


def test_inlining_a_chain_walks_each_node_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each inlining walked its consumer again, which held the chain inlined
    so far: 4x the nodes for twice the chain. A footprint is composed
    now; each node is walked once."""
    (small,) = _kernels(_chain(50))
    (large,) = _kernels(_chain(100))  # 201 blocks: one kernel (MAX_FUSED_OPS is 256)
    assert len(Blocks(s_tir.Schedule(large)).all()) == 201
    few, many = _nodes_walked(small, monkeypatch), _nodes_walked(large, monkeypatch)
    assert many <= LINEAR * few, f"{few} nodes at 50 lets, {many} at 100: not linear"


# ============================================================== decisions
FIXED = {
    "let_chain": _chain(60),
    # twelve transcendentals: the budget refuses some (test_kernel.py)
    "transcendentals": "let %t = tanh(sigmoid(exp(tanh(sigmoid(exp(tanh(sigmoid(exp(tanh("
    "sigmoid(exp(%x))))))))))));\nadd(%t, %x)",
    "gather_of_computed_indices": "let %i = subtract(%idx, 0);\n"
    "let %y = take(exp(add(%x, %b)), %i, axis=0);\nadd(%y, take(%y, %i, axis=1))",
    "shapes_and_broadcasts": "let %c = concatenate((strided_slice(tanh(%x), begin=[0, 0], "
    "end=[3, 6]), strided_slice(%x, begin=[3, 0], end=[6, 6])), axis=0);\n"
    "add(transpose(%c), add(%c, sum(%c, axis=[1], keepdims=True)))",
    "matmul_epilogue": "let %d = nn.dense(exp(%x), %w);\nsigmoid(add(%d, %b))",
    "softmax": "nn.softmax(multiply(add(%x, %b), %x))",
}


@pytest.mark.parametrize("name", list(FIXED))
def test_the_budget_decides_as_the_reference_on_fixed_kernels(name: str) -> None:
    funcs = _kernels(FIXED[name])
    assert funcs
    for func in funcs:
        assert_decides_as_the_reference(func)


def test_a_refused_producer_is_asked_again_when_its_consumer_reads_its_name_less() -> None:
    """``add(%big, %small)``: both producers' buffers are named ``add``, and
    the budget counts reads by name, so ``%big`` (about 1,900 nodes) is
    refused while its consumer reads two ``add`` buffers, and inlined once
    ``%small`` is: the reference's re-scan did so, and so does the inliner."""
    squares = "\n".join(f"let %m{i + 1} = multiply(%m{i}, %m{i});" for i in range(9))
    body = f"let %m0 = %x;\n{squares}\nlet %big = add(%m9, %x);\n"
    body += "let %small = add(%x, %b);\nadd(%big, %small)"
    (func,) = _kernels(body)
    order = assert_decides_as_the_reference(func)
    assert order[-2:] == ["add_1", "add"]  # %small, then %big asked again


# ============================================================== property
UNARY = ["tanh", "exp", "sigmoid", "negative", "abs"]
BINARY = ["add", "multiply", "subtract", "divide", "maximum"]


@st.composite
def kernel_bodies(draw: st.DrawFn) -> str:
    """A DAG of operators over the pool of values so far (reads shared,
    repeated and nested in indices), every value summed into the result
    so that every block has a consumer."""
    values = ["%x"]
    lines = []
    for k in range(draw(st.integers(2, 16))):
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        kind = draw(st.integers(0, 8))
        if kind < 2:
            expr = f"{draw(st.sampled_from(UNARY))}({a})"
        elif kind < 4:
            expr = f"{draw(st.sampled_from(BINARY))}({a}, {b})"
        elif kind == 4:
            expr = f"add({a}, %b)"
        elif kind == 5:
            expr = f"transpose({a})"
        elif kind == 6:
            expr = (
                f"concatenate((strided_slice({a}, begin=[0, 0], end=[3, 6]), "
                f"strided_slice({b}, begin=[3, 0], end=[6, 6])), axis=0)"
            )
        elif kind == 7:
            index = draw(st.sampled_from(["%idx", "subtract(%idx, 1)"]))
            expr = f'take({a}, {index}, axis={draw(st.integers(0, 1))}, mode="clip")'
        else:
            expr = draw(
                st.sampled_from(
                    [
                        f"add({a}, sum({b}, axis=[1], keepdims=True))",
                        f"nn.softmax({a})",
                        f"nn.dense({a}, %w)",
                        f"where(greater({a}, {b}), {a}, {b})",
                    ]
                )
            )
        lines.append(f"let %v{k} = {expr};")
        values.append(f"%v{k}")
    total = values[1]
    for v in values[2:]:
        total = f"add({total}, {v})"
    return "\n".join(lines) + "\n" + total


@settings(
    max_examples=int(os.environ.get("EFFIR_INLINE_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kernel_bodies())
def test_the_budget_decides_as_the_reference_on_random_kernels(body: str) -> None:
    for func in _kernels(body):
        assert_decides_as_the_reference(func)


# ============================================================ footprints
def _substitute(expr: Any, var: Any, value: Any) -> Any:
    """``expr`` with ``var`` replaced by ``value``, as TVM's Substitute does."""
    return tvm_ffi.structural_map(expr, (tirx.Var, lambda v: value if v.same_as(var) else v))


def test_a_composed_footprint_is_the_substituted_expressions() -> None:
    """``P[v] + P[v + 1]`` with ``P[w] = let t = x[w] * 2 in t * t``: the
    footprint composed is a walk's of the expression compute_inline makes."""
    x = tirx.decl_buffer((8,), "float32", name="x")
    p = tirx.decl_buffer((8,), "float32", name="p")
    v, w = tirx.Var("v", "int32"), tirx.Var("w", "int32")
    t = tirx.Var("t", "float32")
    value = tirx.Let(t, tirx.BufferLoad(x, [w]) * tirx.const(2.0, "float32"), t * t)
    consumer = tirx.BufferLoad(p, [v]) + tirx.BufferLoad(p, [v + 1])
    composed = inlined(expression_cost(consumer), p, expression_cost(value), [w.__chandle__()])
    substituted = _substitute(value, w, v) + _substitute(value, w, v + 1)
    assert composed is not None
    assert composed.key() == expression_cost(substituted).key()
    assert (composed.size, composed.reads) == _reference_cost(substituted) == (1 + 9 + 13, {"x": 4})


def test_a_read_of_the_producer_in_an_index_is_walked_again() -> None:
    """``x[P[v]]`` (a gather whose index P computes): no composition."""
    x = tirx.decl_buffer((8,), "float32", name="x")
    p = tirx.decl_buffer((8,), "int32", name="p")
    v, w = tirx.Var("v", "int32"), tirx.Var("w", "int32")
    consumer = tirx.BufferLoad(x, [tirx.BufferLoad(p, [v])])
    value = w + tirx.const(1, "int32")
    assert inlined(expression_cost(consumer), p, expression_cost(value), [w.__chandle__()]) is None
