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

from effir.ir.builder import LetBuilder
from effir.ir.expr import (
    Call,
    Expr,
    Function,
    Let,
    Op,
    is_atom,
)
from effir.ir.functor import Mutator, on
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.anf import is_anf_output, simple_operands, to_anf, to_anf_expr


class _Explicate(Mutator):
    """Applies the rules in a function in A-normal form. ``normal`` stays
    True while every expansion is a normal block, spliced in place."""

    def __init__(self) -> None:
        super().__init__()
        self.normal = True

    @on(Call)
    def _call(self, new: Call, old: Call) -> Expr:
        if isinstance(new.callee, Op):
            rule = op_def(new.callee).rules.get("explicate")
            if rule is not None:
                expansion = rule(new)
                if self.normal and not _normal_block(expansion):
                    self.normal = False
                return expansion
        return new

    @on(Let)
    def _let(self, new: Let, old: Let) -> Expr:
        # ``let %v = (let %a = e; ...; tail); body`` becomes ``let %a = e;
        # ...; let %v = tail; body``, each let with its value's span, as
        # ``to_anf`` flattens it. (In A-normal form no let's value is a let,
        # so only an expansion makes one.)
        if not self.normal or not isinstance(new.value, Let) or isinstance(old.value, Let):
            return new
        b = LetBuilder()
        value: Expr = new.value
        while isinstance(value, Let):
            b.bind(value.var, value.value)
            value = value.body
        b.bind(new.var, value)
        return b.finish(new.body)


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
