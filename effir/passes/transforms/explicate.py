"""explicate: effectful surface operators become explicit reads and writes
of their cells (A1).

``nn.dropout(%x, @rng, rate=r)`` reads the key in ``@rng``, splits it,
writes one half back and gives the other to the pure ``random.dropout``;
``nn.batch_norm(..., @bn, training=True)`` reads the running statistics,
runs the pure ``nn.batch_norm_train`` and writes the new statistics back
(``training=False`` reads only). Each operator's expansion is its
``explicate`` rule, defined beside it in ``effir/ops``; this pass knows no
operator names. The program is first put in A-normal form, so that each
expansion happens where the operator was evaluated, after its arguments.

The result evaluates exactly as the input: same values, same final state,
bit for bit (the surface operators' numpy rules are the same expansions).

Cost: a program that is already explicated and in the A-normal form
``to_anf`` gives (state passing runs this pass on explicate's own output) is
recognised by one walk and returned as it is; otherwise ``to_anf`` runs
once. An expansion that is itself in that form (a let chain of values with
atom operands, as the registered rules build) is spliced into the block
around it, which is what ``to_anf`` would do with it; any other expansion
has its function normalised again.
"""

from __future__ import annotations

from effir.ir.binding_mutator import BindingMutator
from effir.ir.block import Block
from effir.ir.evaluator import Computation
from effir.ir.expr import (
    Call,
    Expr,
    Function,
    Let,
    Op,
    Var,
    is_atom,
)
from effir.ir.functor import on
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.anf import is_anf_output, simple_operands, to_anf, to_anf_expr


class _Explicate(BindingMutator):
    """Applies the rules in a function in A-normal form, binding by
    binding: an expansion that is a normal block (a let chain of simple
    values, as the registered rules build) is spliced into the block around
    it, its bindings in place of the one it expands, as ``to_anf`` would
    flatten it. ``normal`` stays True while every expansion is; any other
    expansion is bound as it is and the function is normalised again."""

    def __init__(self) -> None:
        super().__init__()
        self.normal = True

    def expansion(self, value: Expr) -> Expr | None:
        """``value``'s expansion, if it is an operator call with a rule."""
        if isinstance(value, Call) and isinstance(value.callee, Op):
            rule = op_def(value.callee).rules.get("explicate")
            if rule is not None:
                return rule(value)
        return None

    def splice(self, expansion: Expr) -> Expr:
        """A normal expansion's bindings emitted here (not visited again:
        what a rule builds is already explicit); the expression it ends in."""
        if self.normal and not _normal_block(expansion):
            self.normal = False
        if not self.normal:
            return expansion
        block = Block.of(expansion)
        bind = self.builder.bind
        for let in block.lets:
            bind(let.var, let.value)
        return block.tail

    @on(Call)
    def _call(self, value: Call, var: Var) -> Computation[None] | None:
        expansion = self.expansion(value)
        if expansion is None:
            return self.reemit_binding(value, var)
        self.reemit(var, self.splice(expansion))
        return None

    def visit_tail(self, tail: Expr) -> Expr | Computation[Expr]:
        expansion = self.expansion(tail)
        if expansion is None:
            return super().visit_tail(tail)
        return self.splice(expansion)


@module_pass(
    name="explicate",
    establishes={"anf"},
    preserves={"a2"},  # an A2 input has no surface effect: nothing to rewrite
    doc="effectful surface operators become reads and writes of their cells (A1)",
)
def explicate(module: IRModule) -> IRModule:
    """Every surface effectful operator rewritten into A1 reads and writes;
    ``module`` itself when there is nothing to rewrite or normalise."""
    scans = {name: _scan(fn) for name, fn in module.functions.items()}
    if all(normal and not surface for normal, surface in scans.values()):
        return module
    if not all(normal for normal, _ in scans.values()):
        module = to_anf(module)
        scans = {name: _scan(fn) for name, fn in module.functions.items()}
    functions = {}
    for name, fn in module.functions.items():
        if scans[name][1]:
            rewriter = _Explicate()
            new = rewriter.mutate_as(fn, Function)
            fn = new if rewriter.normal else to_anf_expr(new)
        functions[name] = fn
    return IRModule(functions, module.type_defs, module.cells)


def _normal_block(expr: Expr) -> bool:
    """Whether ``expr`` is a block as ``to_anf`` leaves it, made of simple
    values (no branch, clause or function of its own) and sharing nothing."""
    seen: set[int] = set()
    while isinstance(expr, Let):
        if id(expr) in seen or expr.span is not expr.value.span:
            return False
        seen.add(id(expr))
        if not _simple_value(expr.value, seen):
            return False
        expr = expr.body
    return _simple_value(expr, seen)


def _simple_value(value: Expr, seen: set[int]) -> bool:
    """An atom, or a call, tuple, projection or reference operation with
    atoms for operands, not met before."""
    if is_atom(value):
        return True
    if id(value) in seen:
        return False
    seen.add(id(value))
    operands = simple_operands(value)
    return operands is not None and all(is_atom(operand) for operand in operands)


def _scan(fn: Function) -> tuple[bool, bool]:
    """Whether ``fn`` is what ``to_anf`` makes (``is_anf_output``), and
    whether it calls an operator with an ``explicate`` rule."""
    surface = False

    def call(value: Call) -> None:
        nonlocal surface
        callee = value.callee
        if isinstance(callee, Op) and "explicate" in op_def(callee).rules:
            surface = True

    normal = is_anf_output(fn, call)
    return normal, surface
