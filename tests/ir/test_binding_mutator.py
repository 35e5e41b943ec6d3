"""The binding mutator (effir/ir/binding_mutator.py): the identity returns
its input, renaming every binder is alpha-equivalent, and rules that emit
several bindings, or none, in place of one keep a program's meaning
(checked against the interpreter on random typed programs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

import effir
from effir.ir import IRModule
from effir.ir.binding_mutator import BindingMutator
from effir.ir.block import Block
from effir.ir.builder import let_chain
from effir.ir.expr import Call, Expr, Function, If, Let, Op, Var, is_atom
from effir.ir.functor import on, pre_order
from effir.ir.op import get_op
from effir.ir.structural import structural_equal
from effir.ir.trampoline import Computation
from effir.passes.transforms.anf import to_anf
from tests.passes.typed_programs import TypedProgram, typed_programs
from tests.support.typed_program_checks import SETTINGS, assert_same

H = '#[version = "0.0.5"]\n'


def rewrite(module: IRModule, mutator: type[BindingMutator]) -> IRModule:
    functions = {name: mutator().mutate_as(fn, Function) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


class SubtractAsNegation(BindingMutator):
    """``let %v = subtract(%a, %b)`` becomes ``let %n = negative(%b); let %v
    = add(%a, %n)``: two bindings in place of one."""

    @on(Call)
    def _call(self, call: Call, var: Var) -> Computation[None] | None:
        subtract = isinstance(call.callee, Op) and call.callee.name == "subtract"
        if subtract and all(is_atom(arg) for arg in call.args):  # b is evaluated first now
            a, b = (self.var_remap.get(x, x) for x in call.args)
            negated = self.builder.emit(self.builder.call_op("negative", b), "n")
            self.reemit(var, self.builder.call_op("add", a, negated))
            return None
        return self.reemit_binding(call, var)


class DropAliases(BindingMutator):
    """``let %v = %w`` emits nothing; the uses of ``%v`` name ``%w``."""

    @on(Var)
    def _alias(self, value: Var, var: Var) -> None:
        self.var_remap[var] = self.var_remap.get(value, value)


class Fresh(BindingMutator):
    """Every binder (let, parameter, pattern variable) a new variable."""

    def visit_var_def(self, var: Var) -> Var:
        return Var(var.name_hint, var.type_annotation, span=var.span)


def binders(module: IRModule) -> set[Var]:
    found: set[Var] = set()
    for fn in module.functions.values():
        for node in pre_order(fn):
            if isinstance(node, Let):
                found.add(node.var)
            elif isinstance(node, Function):
                found.update(node.params)
    return found


# ------------------------------------------------------------ properties
@settings(**SETTINGS)
@given(typed_programs())
def test_the_identity_returns_every_function_as_it_is(program: TypedProgram) -> None:
    for module in (program.module, to_anf(program.module)):
        for fn in module.functions.values():
            assert BindingMutator().mutate(fn) is fn


@settings(**SETTINGS)
@given(typed_programs())
def test_renaming_every_binder_is_alpha_equivalent(program: TypedProgram) -> None:
    after = rewrite(program.module, Fresh)
    assert structural_equal(after, program.module)
    assert not binders(after) & binders(program.module)
    effir.check(after)
    assert_same(program, after)


@settings(**SETTINGS)
@given(typed_programs())
def test_rules_emitting_several_bindings_or_none_keep_the_meaning(
    program: TypedProgram,
) -> None:
    anf = to_anf(program.module)
    for mutator in (SubtractAsNegation, DropAliases):
        for module in (program.module, anf):
            after = rewrite(module, mutator)
            effir.check(after)
            assert_same(program, after)


# ------------------------------------------------------------ the rules
def test_a_rule_emits_two_bindings_in_place_of_one_in_every_block() -> None:
    module = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32], %c: bool) {
  let %a = subtract(%x, %x);
  let %b = if (%c) { let %d = subtract(%a, %x); %d } else { %a };
  let %f = fn (%y: Tensor[(4), float32]) { let %e = subtract(%y, %b); %e };
  %f(%b)
}"""
    )
    after = rewrite(module, SubtractAsNegation)
    expected = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32], %c: bool) {
  let %n = negative(%x);
  let %a = add(%x, %n);
  let %b = if (%c) { let %n1 = negative(%x); let %d = add(%a, %n1); %d } else { %a };
  let %f = fn (%y: Tensor[(4), float32]) {
    let %n2 = negative(%b); let %e = add(%y, %n2); %e
  };
  %f(%b)
}"""
    )
    effir.assert_structural_equal(after, expected)
    effir.check(after)


def test_a_dropped_binding_is_remapped_at_every_use_even_in_nested_blocks() -> None:
    module = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32], %c: bool) {
  let %a = %x;
  let %b = %a;
  let %g = if (%c) { add(%b, %a) } else { %b };
  let %f = fn () { multiply(%b, %g) };
  (%f(), %b)
}"""
    )
    after = rewrite(module, DropAliases)
    expected = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32], %c: bool) {
  let %g = if (%c) { add(%x, %x) } else { %x };
  let %f = fn () { multiply(%x, %g) };
  (%f(), %x)
}"""
    )
    effir.assert_structural_equal(after, expected)


def test_a_recursive_closure_renamed_calls_its_new_self() -> None:
    module = effir.parse(
        H
        + """def @main(%n: int32) -> int32 {
  let %f = fn (%i: int32) -> int32 {
    if (less(%i, 1)) { %i } else { %f(subtract(%i, 1)) }
  };
  %f(%n)
}"""
    )
    fn = module["main"]
    after = Fresh().mutate(fn)
    assert structural_equal(after, fn)
    let = after.body
    assert isinstance(let, Let) and let.var is not fn.body.var
    inner_calls = [n for n in pre_order(let.value) if isinstance(n, Call) and n.callee is let.var]
    assert len(inner_calls) == 1  # the recursive call names the new variable


def test_a_rule_splices_a_block_into_the_open_builder() -> None:
    """``emit_block`` emits a block's bindings where the rule is (an
    expansion spliced in place, as explicate does)."""

    class Inline(BindingMutator):
        @on(Let)
        def _block_value(self, value: Let, var: Var) -> Computation[None]:
            tail = yield self.emit_block(Block.of(value))
            self.reemit(var, tail)

    module = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32]) {
  let %a = (let %b = add(%x, %x); let %c = negative(%b); %c);
  %a
}"""
    )
    after = Inline().mutate(module["main"])
    expected = effir.parse(
        H
        + """def @main(%x: Tensor[(4), float32]) {
  let %b = add(%x, %x); let %c = negative(%b); let %a = %c; %a
}"""
    )
    effir.assert_structural_equal(after, expected["main"])


def test_new_bindings_are_located_at_the_binding_they_replace() -> None:
    module = effir.parse(
        H + "def @main(%x: Tensor[(4), float32]) { let %a = subtract(%x, %x); %a }"
    )
    fn = module["main"]
    after = SubtractAsNegation().mutate(fn)
    negation = after.body
    assert isinstance(negation, Let) and negation.var.name_hint == "n"
    assert negation.var.span is fn.body.span and negation.value.span is fn.body.span


# ------------------------------------------------------------ deep programs
@pytest.mark.usefixtures("default_recursion_limit")
def test_a_100k_binding_chain_is_one_loop() -> None:
    x = Var("x")
    subtract = get_op("subtract")
    bindings = []
    previous: Expr = x
    for i in range(100_000):
        var = Var(f"v{i}")
        bindings.append((var, Call(subtract, (previous, x))))
        previous = var
    fn = Function((x,), let_chain(bindings, previous))
    assert BindingMutator().mutate(fn) is fn
    after = SubtractAsNegation().mutate(fn)
    assert isinstance(after, Function) and len(Block.of(after.body)) == 200_000


@pytest.mark.usefixtures("default_recursion_limit")
def test_10k_nested_blocks_are_no_recursion() -> None:
    x = Var("x")
    c = Var("c")
    body: Expr = Call(get_op("subtract"), (x, x))
    for _ in range(10_000):
        inner = Var("v")
        body = If(c, Let(inner, body, inner), x)
    fn = Function((x, c), body)
    assert BindingMutator().mutate(fn) is fn
    after = SubtractAsNegation().mutate(fn)
    assert isinstance(after, Function) and after is not fn
    assert sum(isinstance(n, Call) and n.callee.name == "negative" for n in pre_order(after)) == 1


def test_mutate_as_reports_a_rewrite_into_another_kind_of_node() -> None:
    """A function rewritten into something else is the pass's bug, named
    where it happens (as ``Mutator.mutate_as``)."""
    body = effir.parse(H + "def @main(%x: Tensor[(2), float32]) { negative(%x) }").functions["main"]
    assert isinstance(body, Function)
    with pytest.raises(effir.PassError, match="Fresh rewrote a Call into a Call, not a Function"):
        Fresh().mutate_as(body.body, Function)
