"""fuse: operator fusion (``effir/passes/transforms/fuse.py``).

The golden cases are ``transforms/fuse.effir``; here: the rules one by one
(anchors and their epilogues, prologues of reductions only, one anchor per
group, one output per group, barriers, blocks, dimensions, the size cap),
idempotence, deep programs at the default recursion limit, and the
properties (same results, final state and prints, bit for bit; well typed;
idempotent) on random typed programs and on random A1 programs after
state passing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir import IRModule, astext, pre_order
from effir.ir.expr import Call, Function, Let, Var
from effir.ir.op import OpDef, call_op
from effir.ir.structural import structural_equal
from effir.ir.types import TensorType
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.infra.pipeline import run_pipeline
from effir.passes.infra.transform import PassContext, PassError, lookup_pass
from effir.passes.transforms.anf import to_anf
from effir.passes.transforms.fuse import MAX_FUSED_OPS, fuse, fusion_kind, is_primitive
from tests.deep_programs import work
from tests.support.state_passing_observation import (
    COMMON,
    explicate_then_state_passing,
    observe,
    parse_a1,
)
from tests.support.typed_program_checks import SETTINGS, assert_same

from .a1_programs import A1Program, a1_programs
from .equivalence import arguments_for, assert_same_run
from .typed_programs import TypedProgram, typed_programs

EXAMPLES = 60
V = "Tensor[(4, 8), float32]"


def parse(text: str) -> IRModule:
    module = effir.parse('#[version = "0.0.5"]\n' + text)
    effir.check(module)
    return module


def fused(text: str) -> IRModule:
    """``text`` fused, checked to be well typed and to run as before."""
    module = parse(text)
    after = effir.check(fuse(module))
    args = arguments_for(module["main"], np.random.default_rng(0))
    assert args is not None
    assert_same_run(module, after, args)
    return after


def kernels(module: IRModule) -> list[Function]:
    """The primitive functions of ``module``, in order."""
    found = [n for fn in module.functions.values() for n in pre_order(fn)]
    return [n for n in found if isinstance(n, Function) and is_primitive(n)]


def kernel_ops(fn: Function) -> list[str]:
    """The operators a kernel calls, in order."""
    ops, node = [], fn.body
    while isinstance(node, Let):
        ops.append(node.value.callee.name)
        node = node.body
    return [*ops, node.callee.name]


def body_text(module: IRModule) -> str:
    return astext(module["main"].body).strip()


# ------------------------------------------------------------ the rules
def test_dense_bias_relu_becomes_one_kernel() -> None:
    after = fused(
        f"""def @main(%x: {V}, %w: Tensor[(16, 8), float32], %b: Tensor[(16), float32]) {{
          let %a = nn.dense(%x, %w);
          let %c = add(%a, %b);
          nn.relu(%c)
        }}"""
    )
    assert body_text(after) == (
        "let %fused_nn_dense_add_nn_relu = fn (\n"
        "  %p0: Tensor[(4, 8), float32],\n"
        "  %p1: Tensor[(16, 8), float32],\n"
        "  %p2: Tensor[(16), float32],\n"
        "  Primitive=1,\n"
        ") -> Tensor[(4, 16), float32] {\n"
        "  let %a = nn.dense(%p0, %p1);\n"
        "  let %c = add(%a, %p2);\n"
        "  nn.relu(%c)\n"
        "};\n"
        "%fused_nn_dense_add_nn_relu(%x, %w, %b)"
    )
    (kernel,) = kernels(after)
    assert kernel.attrs["Primitive"] == 1
    assert astext(kernel.ret_type) == "Tensor[(4, 16), float32]"


def test_a_kernel_is_closed_and_takes_its_operands_in_order_of_first_use() -> None:
    after = fused(
        f"""def @main(%x: {V}, %y: {V}) {{
          let %a = multiply(%y, 2f);
          let %b = add(%a, %x);
          let %c = subtract(%b, %y);
          %c
        }}"""
    )
    (kernel,) = kernels(after)
    free = {n for n in pre_order(kernel.body) if isinstance(n, Var)} - set(kernel.params)
    bound = {n.var for n in pre_order(kernel.body) if isinstance(n, Let)}
    assert free <= bound  # every tensor it reads is a parameter; the constant stays inside
    assert body_text(after).endswith("let %c = %fused_multiply_add_subtract(%y, %x);\n%c")


def test_two_reductions_are_two_kernels() -> None:
    after = fused(
        f"""def @main(%x: {V}) {{
          let %s = sum(%x, axis=[1]);
          let %m = multiply(%s, 2f);
          let %t = max(%m);
          %t
        }}"""
    )
    # The first reduction takes the multiply as its epilogue (anchors first);
    # the second, which could have taken it as its prologue, stays alone.
    assert [kernel_ops(k) for k in kernels(after)] == [["sum", "multiply"]]
    assert body_text(after).endswith("let %t = max(%m);\n%t")


def test_a_reduction_takes_a_prologue_and_an_epilogue() -> None:
    after = fused(
        f"""def @main(%x: {V}) {{
          let %e = exp(%x);
          let %r = reshape(%e, newshape=[8, 4]);
          let %s = sum(%r, axis=[1]);
          let %m = multiply(%s, 0.5f);
          sqrt(%m)
        }}"""
    )
    assert [kernel_ops(k) for k in kernels(after)] == [
        ["exp", "reshape", "sum", "multiply", "sqrt"]
    ]


def test_a_matmul_takes_no_prologue_and_no_injective_epilogue() -> None:
    after = fused(
        f"""def @main(%x: {V}, %w: Tensor[(16, 8), float32]) {{
          let %e = exp(%x);
          let %d = nn.dense(%e, %w);
          let %n = negative(%d);
          let %r = reshape(%n, newshape=[64]);
          tanh(%r)
        }}"""
    )
    # exp would be recomputed for each output column; reshape re-indexes the
    # product's output: both go to kernels of their own (reshape and tanh fuse).
    assert [kernel_ops(k) for k in kernels(after)] == [
        ["nn.dense", "negative"],
        ["reshape", "tanh"],
    ]
    assert "let %e = exp(%x);" in body_text(after)


def test_a_matmul_takes_a_prologue_of_re_indexing_only() -> None:
    # autodiff's weight gradient dense(transpose(reshape(ct)), transpose(x)):
    # the re-indexing joins the product (a backend reads through it, or packs
    # the operand once); arithmetic on an operand (exp) still does not.
    after = fused(
        """def @main(%c: Tensor[(2, 4, 8), float32], %x: Tensor[(8, 16), float32]) {
          let %s = reshape(%c, newshape=[8, 8]);
          let %a = transpose(%s);
          let %e = exp(%x);
          let %b = transpose(%e);
          let %d = nn.dense(%a, %b);
          negative(%d)
        }"""
    )
    assert [kernel_ops(k) for k in kernels(after)] == [
        ["reshape", "transpose", "transpose", "nn.dense", "negative"]
    ]
    assert "let %e = exp(%x);" in body_text(after)


def test_an_anchor_joins_a_diamond_of_elementwise_consumers() -> None:
    # silu(dense(x, w)): the product is read twice, both times inside the group.
    after = fused(
        f"""def @main(%x: {V}, %w: Tensor[(16, 8), float32]) {{
          let %d = nn.dense(%x, %w);
          let %s = sigmoid(%d);
          multiply(%d, %s)
        }}"""
    )
    assert [kernel_ops(k) for k in kernels(after)] == [["nn.dense", "sigmoid", "multiply"]]


def test_a_value_feeding_both_sides_of_a_reduction_is_not_fused_into_it() -> None:
    # softmax by hand: exp(%x) is read by the sum and by the divide after it.
    after = fused(
        f"""def @main(%x: {V}) {{
          let %e = exp(%x);
          let %s = sum(%e, axis=[1], keepdims=True);
          divide(%e, %s)
        }}"""
    )
    assert [kernel_ops(k) for k in kernels(after)] == [["sum", "divide"]]
    assert body_text(after).startswith("let %e = exp(%x);")


def test_side_inputs_of_an_epilogue_join_the_kernel() -> None:
    after = fused(
        f"""def @main(%x: {V}, %w: Tensor[(16, 8), float32], %b: Tensor[(16, 1), float32]) {{
          let %d = nn.dense(%x, %w);
          let %r = reshape(%b, newshape=[16]);
          let %e = exp(%r);
          add(%d, %e)
        }}"""
    )
    assert [kernel_ops(k) for k in kernels(after)] == [["nn.dense", "reshape", "exp", "add"]]


def test_a_value_used_outside_its_group_is_that_groups_output() -> None:
    after = fused(
        f"""def @main(%x: {V}) {{
          let %a = exp(%x);
          let %b = add(%a, 1f);
          let %c = multiply(%b, %b);
          let %d = negative(%a);
          let %e = tanh(%d);
          (%c, %e, %a)
        }}"""
    )
    # %a is used by the tail and by two groups: it is its own (single) call;
    # %b is used twice, both times inside its group: computed once there.
    assert [kernel_ops(k) for k in kernels(after)] == [["add", "multiply"], ["negative", "tanh"]]
    assert "let %a = exp(%x);" in body_text(after)


def test_a_single_operator_is_not_wrapped() -> None:
    module = parse(f"def @main(%x: {V}) {{ let %a = exp(%x); (%a, %a) }}")
    assert fuse(module) is module


def test_effects_are_barriers_and_keep_their_order() -> None:
    module = parse(
        f"""global @acc: Ref[{V}] = ref(zeros(shape=[4, 8]));
        global @rng: Ref[Key] = ref(random.key(0));
        def @main(%x: {V}) {{
          let %a = exp(%x);
          let %p = debug.print(%a);
          let %b = add(%a, 1f);
          ref_write(@acc, %x);
          let %c = negative(%b);
          let %d = nn.dropout(%c, @rng, rate=0.5f);
          let %e = sqrt(%d);
          %e
        }}"""
    )
    after = effir.check(fuse(module))
    text = body_text(after)
    # %a is printed: an output of its own; %b and %c fuse across the write,
    # their call placed after it; the dropout is a barrier.
    assert [kernel_ops(k) for k in kernels(after)] == [["add", "negative"]]
    order = [
        text.index(s) for s in ("debug.print", "ref_write", "%fused_add_negative(%a)", "nn.dropout")
    ]
    assert order == sorted(order)
    assert_same_run(module, after, (np.ones((4, 8), np.float32),), seed=3)


def test_nothing_is_fused_across_blocks_but_each_block_is_fused() -> None:
    after = fused(
        f"""def @main(%x: {V}, %c: bool) {{
          let %a = exp(%x);
          let %b = if (%c) {{
            let %t = add(%a, 1f);
            negative(%t)
          }} else {{
            %a
          }};
          let %f = fn (%y: {V}) {{ let %u = tanh(%y); sqrt(%u) }};
          let %z = zeros(shape=[8]);
          let %l = cf.foreach(fn (%r: Tensor[(8), float32], %s: Tensor[(8), float32]) {{
            let %m = multiply(%r, %s);
            let %n = add(%m, %s);
            (%n, %n)
          }}, %b, %z);
          let %g = %f(%b);
          (%g, %l)
        }}"""
    )
    assert "let %a = exp(%x);" in body_text(after)
    assert sorted(kernel_ops(k) for k in kernels(after)) == [
        ["add", "negative"],
        ["multiply", "add"],
        ["tanh", "sqrt"],
    ]


def test_symbolic_dims_fuse_and_unknown_dims_do_not() -> None:
    after = fused(
        """def @main(%x: Tensor[(n, 8), float32]) {
          let %a = exp(%x);
          let %b = add(%a, 1f);
          let %c: Tensor[(?, 8), float32] = negative(%b);
          let %d = sqrt(%c);
          tanh(%d)
        }"""
    )
    # %c's annotation has a `?`: its uses are refused, so it ends a group.
    assert [kernel_ops(k) for k in kernels(after)] == [["exp", "add", "negative"]]
    (kernel,) = kernels(after)
    assert astext(kernel.params[0].type_annotation) == "Tensor[(n, 8), float32]"


def test_tuple_operators_are_barriers() -> None:
    module = parse(
        f"""def @main(%x: {V}) {{
          let %a = exp(%x);
          let %t = (%a, %a);
          let %c = concatenate(%t);
          let %s = split(%c, indices_or_sections=2);
          %s
        }}"""
    )
    assert fuse(module) is module


def test_the_size_of_a_group_is_capped() -> None:
    n = MAX_FUSED_OPS + 10
    body = "".join(f"let %a{i + 1} = add(%a{i}, 1f);\n" for i in range(n))
    module = parse(f"def @main(%a0: {V}) {{\n{body}%a{n}\n}}")
    after = effir.check(fuse(module))
    assert sorted(len(kernel_ops(k)) for k in kernels(after)) == [10, MAX_FUSED_OPS]
    assert structural_equal(fuse(after), after)
    assert_same_run(module, after, (np.ones((4, 8), np.float32),))
    assert len(kernels(fuse(module, max_fused_ops=4))) == -(-n // 4)
    with pytest.raises(ValueError, match="max_fused_ops"):
        fuse(module, max_fused_ops=0)


def test_fusion_kinds_come_from_traits_not_names() -> None:
    def kind(traits: set[str], effect: str = "pure") -> str | None:
        return fusion_kind(OpDef("test.made_up", 1, (), effect, frozenset(traits)))

    assert kind({"broadcast", "commutative"}) == kind({"elementwise"}) == "elementwise"
    assert kind({"injective"}) == "injective"
    assert kind({"reduction"}) == "reduction"
    assert kind({"out_fusable"}) == "out_fusable"
    assert kind({"elementwise"}, effect="random") is None
    assert kind({"elementwise", "opaque"}) is None
    assert kind({"injective", "dynamic_shape"}) is None
    assert kind({"commutative"}) is None
    assert kind(set()) is None


# ------------------------------------------------------------ the pass
def test_fusing_twice_is_fusing_once_and_kernels_are_not_refused() -> None:
    module = parse(
        f"""def @main(%x: {V}, %w: Tensor[(16, 8), float32]) {{
          let %a = exp(%x);
          let %b = add(%a, 1f);
          let %d = nn.dense(%b, %w);
          let %e = nn.relu(%d);
          let %s = sum(%e, axis=[1]);
          negative(%s)
        }}"""
    )
    once = fuse(module)
    assert len(kernels(once)) == 3
    assert fuse(once) is once


def test_registered_requires_anf_and_runs_after_state_passing() -> None:
    assert lookup_pass("fuse").definition is fuse
    nested = parse(f"def @main(%x: {V}) {{ let %a = add(let %y = exp(%x); %y, 1f); %a }}")
    with pytest.raises(PassError, match="requires A-normal form"):
        run_pipeline(nested, "fuse")
    module = parse(
        f"""global @rng: Ref[Key] = ref(random.key(1));
        def @main(%x: {V}) {{
          let %a = exp(%x);
          let %b = nn.dropout(%a, @rng, rate=0.25f);
          let %c = add(%b, 1f);
          let %d = multiply(%c, %c);
          nn.relu(%d)
        }}"""
    )
    with PassContext(verify=True):
        after = run_pipeline(module, "explicate,state-passing,fuse")
    verify_linear(after)
    assert [kernel_ops(k) for k in kernels(after)] == [["add", "multiply", "nn.relu"]]
    assert_same_run(module, after, (np.ones((4, 8), np.float32),), seed=5)


# ------------------------------------------------------------ deep programs
def _add_chain(length: int) -> IRModule:
    x = Var("x", TensorType((4,), "float32"))
    bindings: list[tuple[Var, Call]] = []
    prev: Var = x
    for i in range(length):
        bindings.append((Var(f"a{i}"), call_op("add", prev, x)))
        prev = bindings[-1][0]
    body: Any = prev
    for v, value in reversed(bindings):
        body = Let(v, value, body)
    return IRModule({"main": Function((x,), body)})


def test_fuse_does_work_linear_in_the_chain_length() -> None:
    """Lines of Python executed (tests/deep_programs.work), not seconds: a
    timed bound failed on a loaded machine and proves nothing on a fast one."""
    modules = [_add_chain(n) for n in (2_000, 4_000)]
    small, large = (work(lambda m=m: fuse(m)) for m in modules)
    assert large / small < 2.2, (small, large)


def test_a_100000_binding_chain_at_the_default_recursion_limit(default_recursion_limit) -> None:
    after = fuse(_add_chain(100_000))
    groups, node = [], after["main"].body
    while isinstance(node, Let):  # let %fused = fn ...; let %a_i = %fused(...); ...
        if isinstance(node.value, Function):
            groups.append(len(kernel_ops(node.value)))
        node = node.body
    assert len(groups) == -(-100_000 // MAX_FUSED_OPS) and sum(groups) == 100_000
    result = effir.interpret(after, np.ones(4, np.float32))
    assert np.array_equal(result, np.full(4, 100_001, np.float32))


def test_10000_nested_ifs_at_the_default_recursion_limit(default_recursion_limit) -> None:
    x = Var("x", TensorType((4,), "float32"))
    c = Var("c", TensorType((), "bool"))
    body: Any = x
    for i in reversed(range(10_000)):
        a, b = Var(f"a{i}"), Var(f"b{i}")
        then = Let(a, call_op("exp", x), Let(b, call_op("negative", a), call_op("add", b, x)))
        body = effir.ir.If(c, then, body)
    module = IRModule({"main": Function((x, c), body)})
    node, depth = fuse(module)["main"].body, 0
    while isinstance(node, effir.ir.If):  # let %fused = fn ...; %fused(%x) in each branch
        kernel = node.then_branch.value
        assert kernel_ops(kernel) == ["exp", "negative", "add"]
        assert node.then_branch.body.args == (x,)
        node, depth = node.else_branch, depth + 1
    assert depth == 10_000


# ------------------------------------------------------------ properties
@settings(**{**SETTINGS, "max_examples": EXAMPLES})
@given(typed_programs())
def test_typed_programs_keep_their_meaning(program: TypedProgram) -> None:
    anf = to_anf(program.module)
    after = fuse(anf)
    effir.check(after)
    assert_same(program, after)
    assert structural_equal(fuse(after), after), f"fuse is not idempotent:\n{astext(after)}"


@settings(max_examples=EXAMPLES, derandomize=True, **COMMON)
@given(a1_programs())
def test_state_passing_programs_keep_results_state_and_prints(program: A1Program) -> None:
    a1 = parse_a1(program)
    try:
        a2 = explicate_then_state_passing(a1)
    except effir.EffectError:
        return  # a documented rejection; test_state_passing_property checks those
    after = fuse(a2)
    context = f"\n\nfused:\n{astext(after)}\n\nA2:\n{astext(a2)}"
    effir.check(after)
    verify_linear(after)
    expected = observe(interpret_a2, a2, program, a1)
    problem = expected.difference(observe(interpret_a2, after, program, a1))
    assert problem is None, problem + context
    assert structural_equal(fuse(after), after), f"fuse is not idempotent{context}"
