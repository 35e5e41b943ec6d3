"""The normal forms: to-anf (sharing bound at the lowest common scope of its
uses), to-bbnf (basic blocks), to-gnf (graph form for display), and their
checkers; property tests on random programs and deep programs at the
default recursion limit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import effir
from effir.backends.interpreter import interpret, interpret_a2
from effir.ir import Function, If, IRModule, Let, TensorType, Tuple, TupleGetItem, Var, call_op
from effir.ir.expr import Call, Expr, Op, is_atom
from effir.ir.visitor import pre_order
from effir.passes.analyses.anf_sharing import Facts
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.infra.invariants import bbnf_problem, gnf_problem
from effir.passes.infra.pipeline import lookup_pass, run_pipeline
from effir.passes.infra.transform import PassContext, PassError, anf_problem, module_pass
from effir.passes.transforms.anf import to_anf, to_anf_expr
from effir.passes.transforms.to_bbnf import to_bbnf
from effir.passes.transforms.to_gnf import to_gnf
from tests.support.kept_types import assert_types_kept
from tests.support.state_passing_observation import observe, parse_a1
from tests.support.typed_program_checks import SETTINGS, assert_same

from .a1_programs import A1Program, a1_programs
from .equivalence import assert_same_run, run_observed
from .typed_programs import TypedProgram, typed_programs

HEADER = '#[version = "0.0.5"]\n'
PROPERTY = {**SETTINGS, "max_examples": 60}
X = np.arange(4, dtype=np.float32)


def parse(text: str) -> IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="nf.effir"))


def calls(node: Expr, name: str) -> int:
    """How many distinct calls of the operator ``name`` are in ``node``."""
    return sum(
        1
        for n in pre_order(node)
        if isinstance(n, Call) and isinstance(n.callee, Op) and n.callee.name == name
    )


def chain_values(block: Expr) -> list[Expr]:
    values = []
    while isinstance(block, Let):
        values.append(block.value)
        block = block.body
    return values


def let_count(module: IRModule) -> int:
    return sum(isinstance(n, Let) for fn in module.functions.values() for n in pre_order(fn))


def prints(module: IRModule, *args: Any) -> list[str]:
    return [label for label, _ in run_observed(module, args)[2]]


# ------------------------------------------------------------------ to-anf
def test_a_pure_expression_shared_by_both_branches_is_bound_once_before_the_if() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = multiply(%x, 2f);
  if (%c) { add(%0, 1f) } else { subtract(%0, %x) }
}""")
    body = to_anf(module)["main"].body
    assert isinstance(body, Let) and calls(body.value, "multiply") == 1
    assert isinstance(body.body, If) and calls(body.body, "multiply") == 0


def test_a_shared_expression_stays_in_the_branch_that_binds_its_variable() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool, %d: bool) {
  if (%c) {
    let %y = exp(%x);
    %0 = multiply(%y, %y);
    if (%d) { add(%0, %x) } else { %0 }
  } else { %x }
}""")
    body = to_anf(module)["main"].body
    assert isinstance(body, If)
    then = body.then_branch
    assert [calls(v, "exp") + calls(v, "multiply") for v in chain_values(then)] == [1, 1]
    inner = then.body.body
    assert isinstance(inner, If) and calls(inner, "multiply") == 0


def test_effectful_shared_expressions_are_not_hoisted() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = debug.print(%x, label="x");
  if (%c) { add(%0, %0) } else { negative(%0) }
}""")
    after = to_anf(module)
    body = after["main"].body
    assert isinstance(body, If)  # nothing runs before the if
    assert calls(body.then_branch, "debug.print") == calls(body.else_branch, "debug.print") == 1
    for c in (True, False):
        assert prints(after, X, np.bool_(c)) == prints(module, X, np.bool_(c)) == ["x"]


def test_a_fresh_instance_shares_the_pure_part_that_does_not_use_its_binders() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = {
    let %p = debug.print(%x, label="p");
    add(%p, multiply(%x, 3f))
  };
  if (%c) { %0 } else { negative(%0) }
}""")
    after = to_anf(module)
    body = after["main"].body
    assert isinstance(body, Let) and calls(body.value, "multiply") == 1
    assert isinstance(body.body, If) and calls(body.body, "debug.print") == 2
    binders = [v for v in pre_order(after["main"]) if isinstance(v, Let)]
    assert len({let.var for let in binders}) == len(binders)  # fresh binders


def test_a_shared_expression_mentioning_a_recursive_let_is_not_moved_before_it() -> None:
    # let %f = fn () { (%f, %x).1 }; (%f, %x).1, the tuple one shared node
    x = Var("x", TensorType((), "int32"))
    f = Var("f")
    pair = Tuple((f, x))
    body = Let(f, Function((), TupleGetItem(pair, 1)), TupleGetItem(pair, 1))
    module = effir.check(IRModule({"main": Function((x,), body)}))
    after = effir.check(to_anf(module))
    top = after["main"].body
    assert isinstance(top, Let) and top.var is f  # the let comes first
    arg = np.int32(5)
    assert interpret(after, arg) == interpret(module, arg) == 5


def test_arguments_are_bound_before_a_computed_callee() -> None:
    module = parse("""
def @make(%x: Tensor[(4), float32]) -> fn (Tensor[(4), float32]) -> Tensor[(4), float32] {
  fn (%y: Tensor[(4), float32]) -> Tensor[(4), float32] { add(%x, %y) }
}
def @main(%x: Tensor[(4), float32]) {
  @make(debug.print(%x, label="callee"))(debug.print(%x, label="argument"))
}""")
    after = to_anf(module)
    assert prints(module, X) == prints(after, X) == ["argument", "callee"]


def test_a_let_of_a_shared_value_bound_elsewhere_makes_no_alias() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = exp(%x);
  if (%c) { let %a = %0; add(%a, %a) } else { let %b = %0; %b }
}""")
    after = to_anf(module)
    assert let_count(after) == 1  # let %exp = exp(%x); the branches use it
    assert isinstance(after["main"].body.body, If)


def test_to_anf_expr_keeps_the_bindings_of_an_expression_that_is_not_a_function() -> None:
    x = Var("x", TensorType((4,), "float32"))
    shared = call_op("exp", x)
    expr = to_anf_expr(call_op("add", shared, call_op("negative", shared)))
    assert [calls(v, "exp") + calls(v, "negative") for v in chain_values(expr)] == [1, 1]


# ------------------------------------------------------------------ to-bbnf
def test_bbnf_keeps_nested_expressions_and_flattens_nested_lets() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32]) {
  let %y = add(multiply(%x, 2f), { let %z = exp(%x); negative(%z) });
  tanh(%y)
}""")
    after = to_bbnf(module)
    values = chain_values(after["main"].body)
    assert [calls(v, "exp") for v in values] == [1, 0]
    assert calls(values[1], "multiply") == calls(values[1], "negative") == 1
    assert bbnf_problem(after) is None and anf_problem(after) is not None


def test_bbnf_keeps_sharing_within_a_block_and_binds_sharing_across_blocks() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  %0 = exp(%x);
  if (%c) { add(%0, %x) } else { %1 = negative(%x); subtract(%1, add(%1, %0)) }
}""")
    after = to_bbnf(module)
    body = after["main"].body
    assert isinstance(body, Let) and calls(body.value, "exp") == 1
    facts = Facts(body.body.else_branch)
    assert len(facts.shared) == 1  # negative(%x), still graph form


def test_bbnf_binds_earlier_effects_before_a_flattened_let() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32]) {
  add(debug.print(%x, label="first"), {
    let %s = debug.print(negative(%x), label="second");
    %s
  })
}""")
    after = to_bbnf(module)
    assert [calls(v, "debug.print") for v in chain_values(after["main"].body)] == [1, 1]
    assert prints(after, X) == prints(module, X) == ["first", "second"]


# ------------------------------------------------------------------- to-gnf
def test_gnf_removes_pure_lets_and_keeps_effectful_annotated_and_recursive_ones() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32]) {
  let %a = multiply(%x, 2f);
  let %unused = exp(%x);
  let %p = debug.print(add(%a, %a), label="p");
  let %loose: Tensor[(?), float32] = negative(%x);
  let %f = fn (%n: int32) -> int32 { if (less(%n, 1)) { 0 } else { %f(subtract(%n, 1)) } };
  (%p, %loose, %f(2), %a)
}""")
    after = to_gnf(module)
    kept = [let.var.name_hint for let in pre_order(after["main"]) if isinstance(let, Let)]
    assert kept == ["p", "loose", "f"]
    assert calls(after["main"], "exp") == 0 and calls(after["main"], "multiply") == 1
    assert gnf_problem(after) is None
    effir.check(after)
    assert prints(after, X) == ["p"]


def test_gnf_turns_a_let_bound_literal_and_its_call_into_one_pure_call() -> None:
    module = parse("""
def @main(%x: Tensor[(4), float32]) {
  let %g = fn (%p: Tensor[(4), float32]) -> Tensor[(4), float32] { let %m = exp(%p); %m };
  let %y = %g(%x);
  add(%y, %y)
}""")
    body = to_gnf(module)["main"].body
    assert isinstance(body, Call) and body.args[0] is body.args[1]
    call = body.args[0]
    assert isinstance(call, Call) and isinstance(call.callee, Function)
    assert not isinstance(call.callee.body, Let)


def test_gnf_keeps_a_let_that_a_closure_captures() -> None:
    # Written inside the loop body, the split would run at every iteration.
    module = parse("""
def @main(%xs: Tensor[(3, 4), float32], %k: Key) {
  let %keys = random.split(%k);
  let %sub = %keys.1;
  let %body = fn (%x: Tensor[(4), float32], %s: Tensor[(4), float32]) {
    (random.dropout(%x, %sub, rate=0.5f), add(%s, %x))
  };
  cf.foreach(%body, %xs, zeros(shape=[4]))
}""")
    after = to_gnf(module)
    kept = [let.var.name_hint for let in pre_order(after["main"]) if isinstance(let, Let)]
    assert kept == ["sub"]  # %keys is used outside the closure, %body is not captured
    loop = after["main"].body.body
    assert isinstance(loop, Call) and isinstance(loop.args[0], Function)
    assert calls(after["main"].body.value, "random.split") == 1
    assert gnf_problem(after) is None and gnf_problem(module) is not None


# ---------------------------------------------------------------- checkers
def test_the_bbnf_checker_locates_a_nested_let_and_sharing_across_blocks() -> None:
    nested = effir.parse(
        HEADER + "def @main(%x: float32) {\n  add(%x, { let %y = %x; %y })\n}",
        source_name="nf.effir",
    )
    problem = bbnf_problem(nested)
    assert problem is not None and "nested in the call of add" in problem
    assert "nf.effir:3:13" in problem
    across = effir.parse(
        HEADER + "def @main(%x: float32, %c: bool) {\n  %0 = exp(%x);\n"
        "  if (%c) { %0 } else { negative(%0) }\n}",
        source_name="nf.effir",
    )
    problem = bbnf_problem(across)
    assert problem is not None and "the call of exp at nf.effir:3:8" in problem
    assert "shared by several blocks" in problem
    assert bbnf_problem(to_bbnf(across)) is None


def test_gnf_keeps_the_type_a_removed_let_gave_a_nil() -> None:
    # [RULE PIN-CONTEXT] The match alone gives `Nil` (and `@rev`'s result) the element type;
    # unused and pure, it goes, and `@rev(Nil)`, kept (a call of a global),
    # must keep that type (found by the differential fuzzer's prelude group,
    # seed 11: "cannot infer the type of %v10").
    module = parse(
        """def @main(%x: Tensor[(3), float32]) {
          let %v9 = Nil;
          let %v10 = @rev(%v9);
          let %v11 = match (%v10) { Cons(%h, _) => %h, Nil => %x };
          %x
        }"""
    )
    after = run_pipeline(module, "to-gnf", PassContext(verify=True))
    assert "match" not in effir.astext(after["main"])
    assert gnf_problem(after) is None
    assert_types_kept(module, after)
    assert_same_run(module, after, (np.arange(3, dtype=np.float32),))


def test_the_gnf_checker_locates_a_let_of_a_pure_value() -> None:
    module = effir.parse(
        HEADER + "def @main(%x: float32) {\n  let %a = exp(%x);\n  debug.print(%a)\n}",
        source_name="nf.effir",
    )
    problem = gnf_problem(module)
    assert problem is not None and "let %a at nf.effir:3:3" in problem
    assert gnf_problem(to_gnf(module)) is None


def test_passes_are_registered_with_their_invariants() -> None:
    assert lookup_pass("to-anf").establishes == {"anf", "bbnf"}
    assert lookup_pass("to-bbnf").establishes == {"bbnf"}
    assert lookup_pass("to-gnf").establishes == {"gnf"}
    module = parse("def @main(%x: Tensor[(4), float32]) { let %a = exp(%x); add(%a, %a) }")
    graph = run_pipeline(module, "to-gnf", PassContext(verify=True))
    needs = module_pass(name="needs-bbnf", requires={"bbnf"}, register=False)
    needs_bbnf = needs(lambda m: m).effir_pass
    across_blocks = to_gnf(
        parse("""
def @main(%x: Tensor[(4), float32], %c: bool) {
  let %a = exp(%x);
  if (%c) { %a } else { negative(%a) }
}""")
    )
    with pytest.raises(PassError, match="run to-anf or to-bbnf first"):
        PassContext().run(needs_bbnf, across_blocks)
    back = run_pipeline(graph, "to-anf", PassContext(verify=True))
    assert anf_problem(back) is None and bbnf_problem(back) is None


# -------------------------------------------------------------- properties
def compound_nodes(module: IRModule) -> int:
    return sum(
        1
        for fn in module.functions.values()
        for n in pre_order(fn)
        if isinstance(n, Expr) and not is_atom(n)
    )


@settings(**PROPERTY)
@given(typed_programs())
def test_to_bbnf_keeps_meaning_and_gives_bbnf(program: TypedProgram) -> None:
    after = to_bbnf(program.module)
    assert bbnf_problem(after) is None
    effir.check(after)
    assert_same(program, after)


@settings(**PROPERTY)
@given(typed_programs())
def test_to_gnf_and_back_keep_meaning(program: TypedProgram) -> None:
    graph = to_gnf(program.module)
    assert gnf_problem(graph) is None
    effir.check(graph)
    assert_same(program, graph)
    back = to_anf(graph)
    assert anf_problem(back) is None and bbnf_problem(back) is None
    effir.check(back)
    assert_same(program, back)
    # Without effectful sharing every node of the graph is bound at most
    # once (placement never copies a pure expression).
    pinned_shared = any(
        key in Facts(fn).pinned() for fn in graph.functions.values() for key in Facts(fn).shared
    )
    if not pinned_shared:
        assert let_count(back) <= compound_nodes(graph)


@settings(**{**PROPERTY, "max_examples": 40})
@given(a1_programs())
def test_effectful_programs_keep_results_state_and_prints(program: A1Program) -> None:
    a1 = parse_a1(program)
    expected = observe(interpret, a1, program, a1)
    for after in (to_anf(a1), to_bbnf(a1), to_gnf(a1), to_anf(to_gnf(a1))):
        effir.check(after)
        problem = expected.difference(observe(interpret, after, program, a1))
        assert problem is None, problem


@settings(**{**PROPERTY, "max_examples": 30})
@given(a1_programs())
def test_state_passing_programs_through_gnf_and_back_stay_linear(program: A1Program) -> None:
    a1 = parse_a1(program)
    a2 = run_pipeline(a1, "explicate,state-passing", PassContext(verify=True))
    # Graph form keeps every key use where it was (a closure's captures stay
    # lets); the program it gives back in A-normal form is linear again.
    # (The graph form itself is not run through the verifier here: its
    # count of shared expressions misses those inside match clauses.)
    graph = run_pipeline(a2, "to-gnf", PassContext(verify=False))
    back = run_pipeline(graph, "to-anf,to-bbnf", PassContext(verify=False))
    effir.check(back)
    verify_linear(back)
    expected = observe(interpret_a2, a2, program, a1)
    problem = expected.difference(observe(interpret_a2, back, program, a1))
    assert problem is None, problem


# ------------------------------------------------------------ deep programs
def test_a_100000_binding_chain_at_the_default_recursion_limit(default_recursion_limit) -> None:
    x = Var("x", TensorType((4,), "float32"))
    body: Expr = x
    binders = [Var(f"a{i}") for i in range(100_000)]
    values = [call_op("add", prev, prev) for prev in [x, *binders[:-1]]]
    body = binders[-1]
    for var, value in zip(reversed(binders), reversed(values), strict=True):
        body = Let(var, value, body)
    module = IRModule({"main": Function((x,), body)})
    graph = to_gnf(module)  # a 100,000-deep graph, every node shared
    assert isinstance(graph["main"].body, Call)
    back = to_anf(graph)  # the chain again, the tail unbound
    assert let_count(back) == 99_999
    assert let_count(to_bbnf(module)) == 100_000


def test_10000_nested_ifs_sharing_one_value_at_the_default_recursion_limit(
    default_recursion_limit,
) -> None:
    x = Var("x", TensorType((4,), "float32"))
    c = Var("c", TensorType((), "bool"))
    shared = call_op("exp", x)
    body: Expr = shared
    for _ in range(10_000):
        body = If(c, body, call_op("add", shared, x))
    module = IRModule({"main": Function((x, c), body)})
    for after in (to_anf(module), to_bbnf(module)):
        top = after["main"].body
        assert isinstance(top, Let) and calls(top.value, "exp") == 1
        assert calls(top.body, "exp") == 0 and bbnf_problem(after) is None
    assert gnf_problem(to_gnf(to_anf(module))) is None


def test_10000_nested_calls_at_the_default_recursion_limit(default_recursion_limit) -> None:
    x = Var("x", TensorType((4,), "float32"))
    body: Expr = x
    for _ in range(10_000):
        body = call_op("negative", body)
    module = IRModule({"main": Function((x,), body)})
    anf = to_anf(module)
    assert let_count(anf) == 9_999 and anf_problem(anf) is None
    assert let_count(to_bbnf(module)) == 0  # nested calls are one basic block
    assert let_count(to_gnf(anf)) == 0


def test_fresh_binders_copies_every_compound_node_and_renames_binders() -> None:
    from effir.passes.transforms.anf import fresh_binders

    fn = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @main(%x: float32) { let %r = ref(%x); let %y = ref_read(%r); (%y, %r) }\n"
    )["main"]
    copy = fresh_binders(fn.body)
    originals = {id(n) for n in pre_order(fn.body) if isinstance(n, Expr)}
    compound = [n for n in pre_order(copy) if isinstance(n, Expr) and not is_atom(n)]
    assert compound and not any(id(n) in originals for n in compound)
    binders = [n.var for n in pre_order(copy) if isinstance(n, Let)]
    assert binders and not any(id(v) in originals for v in binders)


def test_a_let_captured_only_by_a_dropped_closure_goes_too() -> None:
    """The capture that kept ``%a`` a let disappears with the unused closure:
    graph form then writes ``%a``'s value where it is used (to-gnf declares
    it establishes ``gnf``, and the verifier checks that it does)."""
    module = effir.parse(
        '#[version = "0.0.5"]\n'
        "def @main(%x: Tensor[(4), float32], %y: (Tensor[(4), float32], float32)) {\n"
        "  let %a = %y.0;\n"
        "  let %f = fn (%z: Tensor[(4), float32]) { add(%a, %a) };\n"
        "  (%a, %x)\n"
        "}\n"
    )
    out = lookup_pass("to-gnf")(module, PassContext(verify=True))
    assert gnf_problem(out) is None
    assert "let" not in effir.astext(out)


def test_to_gnf_may_report_another_failing_pure_call_but_still_fails() -> None:
    """Two lets that fail: effect sets do not record run-time failure
    (docs/semantics.md, "pure"), so to-gnf, which evaluates the lets in the
    order the result uses them, may report the other division first; the
    program still fails, with a division's error, and never returns."""
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\n'
            "def @main(%a: Tensor[(4,), int32], %b: Tensor[(4,), int8]) {\n"
            "  let %v1 = divide(%a, subtract(2, 2));\n"
            "  let %v2 = divide(%b, subtract(1i8, 1i8));\n"
            "  (%v2, %v1)\n"
            "}\n"
        )
    )
    args = (np.ones(4, np.int32), np.ones(4, np.int8))
    graph = effir.check(run_pipeline(module, "to-gnf"))
    with pytest.raises(effir.EvalError, match=r":3:13: runtime error: divide"):
        interpret(module, *args)
    with pytest.raises(effir.EvalError, match=r":[34]:13: runtime error: divide"):
        interpret(graph, *args)
