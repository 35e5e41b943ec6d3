"""State passing, step 5: the translation. Each function is rewritten
binding by binding with ``sigma``, each cell's current value: a read is that
value, a write replaces it, a call passes the values and rebinds the new
ones, both branches of an ``if``/``match`` return the same new values, and a
local ``ref(...)`` becomes a plain value from its creation on. Loops are
``loops.LoopTranslation``'s.

The translator is an ``effir.ir.evaluator.Evaluator``: one rule per class
of bound value, ``(value, var, sigma, b)``: the variable it is bound to,
the cells' current values, and the builder of the block it goes to. A
rule that translates a body (a closure, a branch, a nested block) yields it
to the walker's stack, so nesting needs no Python recursion.

Code is generated through ``LetBuilder``s: a node rebuilt from one of the
input keeps that node's span; a generated node takes the span of what it
translates (the builder's span scope)."""

from __future__ import annotations

import dataclasses

from effir.ir.block import Block
from effir.ir.builder import LetBuilder, TupleLayout
from effir.ir.diagnostics import EffectError
from effir.ir.evaluator import Computation, Evaluator
from effir.ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
)
from effir.ir.functor import Mutator, on, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Attrs, Node
from effir.ir.op import op_def
from effir.ir.types import FuncType, TupleType, Type
from effir.ops.effects import WORLD, needs_world
from effir.passes.transforms.state_passing.analyse import Analysis
from effir.passes.transforms.state_passing.loops import LoopTranslation
from effir.passes.transforms.state_passing.signature import (
    Signature,
    cell_hint,
    out_name,
    returns,
    state_attrs,
)

# What the state-passing form of an output operator (its ``world_form``)
# returns: the new world token, then the operator's own result.
_WORLD_FORM = TupleLayout("world", "value")


class Translator(LoopTranslation, Evaluator):
    """Rewrites each function binding by binding, with ``sigma``: each
    cell's current value. ``subst`` maps variables bound to a read to the
    value read; ``inside`` gives the cells written inside an ``if``/``match``."""

    def __init__(self, module: IRModule, analysis: Analysis) -> None:
        self.module = module
        self.a = analysis
        self.subst: dict[Var, Expr] = {}
        self.inside: dict[int, frozenset[str]] = {}

    def run(self) -> IRModule:
        functions = {}
        for name, fn in self.module.functions.items():
            sig = self.a.own_signature(("def", name))
            functions[name] = self.drive(self.translate_function(fn, sig))
        if not self.a.adt_fields:
            return IRModule(functions, self.module.type_defs, self.module.cells)
        type_defs, constructors = self.type_defs_with_state()
        rename = _Constructors(constructors)
        functions = {name: rename.mutate_as(fn, Function) for name, fn in functions.items()}
        return IRModule(functions, type_defs, self.module.cells)

    def type_defs_with_state(self) -> tuple[dict[str, TypeData], dict[str, Constructor]]:
        type_defs: dict[str, TypeData] = {}
        constructors: dict[str, Constructor] = {}
        for name, data in self.module.type_defs.items():
            new_ctors = []
            for ctor in data.constructors:
                inputs = list(ctor.inputs)
                for i, t in enumerate(inputs):
                    sig = self.a.adt_fields.get((ctor.name, i))
                    if sig is not None and isinstance(t, FuncType):
                        inputs[i] = self.with_state(t, sig)
                new = dataclasses.replace(ctor, inputs=tuple(inputs))
                constructors[ctor.name] = new
                new_ctors.append(new)
            type_defs[name] = dataclasses.replace(data, constructors=tuple(new_ctors))
        return type_defs, constructors

    def with_state(self, t: FuncType, sig: Signature) -> FuncType:
        """The type of a function of type ``t`` after state passing."""
        ret = t.ret_type
        if sig.writes:
            ret = TupleType((ret,) + tuple(self.cell_type(c) for c in sig.writes))
        args = t.arg_types + tuple(self.cell_type(c) for c in sig.reads)
        return FuncType(args, ret, t.type_params, None)

    # ------------------------------------------------------- helpers
    def cell_type(self, cell: str) -> Type:
        """The type of the value a cell holds (the world token's for ``io``)."""
        return self.a.types[cell]

    def current(self, sigma: dict[str, Expr], cell: str, node: Expr) -> Expr:
        if cell not in sigma:
            what = cell if cell.startswith("%") else "@" + cell
            raise EffectError(
                f"the value of {what} is not available here: the reference may be used "
                "outside the function that created it",
                node.span,
            )
        return sigma[cell]

    def atom(self, expr: Expr) -> Expr:
        if isinstance(expr, Var):
            return self.subst.get(expr, expr)
        return expr

    def value_atom(self, expr: Expr, b: LetBuilder) -> Expr:
        """An atom in value position: a global function that a group of
        closures calls with more cells than it takes is wrapped."""
        if isinstance(expr, GlobalVar) and expr.name in self.module.functions:
            src = ("def", expr.name)
            if src in self.a.group:
                need = self.a.group_sig[self.a.group[src]]
                own = self.a.own_signature(src)
                if need != own:
                    with b.span(expr.span):
                        return b.emit(self.adapter(expr, own, need), expr.name + "_adapter")
        return self.atom(expr)

    def adapter(self, g: GlobalVar, own: Signature, need: Signature) -> Function:
        target = self.module.functions[g.name]
        b = LetBuilder(g.span)
        params = tuple(b.var(p.name_hint) for p in target.params)
        states = {c: b.var(cell_hint(c)) for c in need.reads}
        call = b.call(g, params + tuple(states[c] for c in own.reads))
        sigma: dict[str, Expr] = dict(states)
        result = self.bind_call(b.var("r"), call, own, sigma, b)
        body = self.tail_tuple(result, sigma, need.writes, b)
        return b.function(
            params + tuple(states[c] for c in need.reads),
            b.finish(body),
            attrs=state_attrs(Attrs(), need),
        )

    def bind_call(
        self, var: Var, call: Call, sig: Signature, sigma: dict[str, Expr], b: LetBuilder
    ) -> Var:
        """``let var = call`` where call returns ``(result, new...)`` for ``sig.writes``."""
        if not sig.writes:
            return b.bind(var, call)
        with b.span(call.span):
            out = b.emit(call, out_name(var))
            self.unpack(var, out, sig.writes, sigma, b)
        return var

    def unpack(
        self, var: Var, out: Var, writes: tuple[str, ...], sigma: dict[str, Expr], b: LetBuilder
    ) -> None:
        """``var`` and the new values of ``writes`` bound from ``out``, which
        holds ``(result, new...)``; ``sigma`` takes the new values."""
        layout = returns(len(writes))
        if self.a.needed(var):
            b.bind(var, layout.item(b, out, "result"))
        self.rebind(b, out, layout, "cells", writes, sigma)

    def rebind(
        self,
        b: LetBuilder,
        value: Expr,
        layout: TupleLayout,
        group: str,
        cells: tuple[str, ...],
        sigma: dict[str, Expr],
    ) -> None:
        """The cells' new values, read from the group ``group`` of ``value``
        (one binding each, named after its cell), become current."""
        hints = [cell_hint(c) for c in cells]
        for cell, new in zip(cells, layout.get_group(b, value, group, hints), strict=True):
            sigma[cell] = new

    def tail_tuple(
        self, value: Expr, sigma: dict[str, Expr], writes: tuple[str, ...], b: LetBuilder
    ) -> Expr:
        """``value``, or ``(value, new...)`` when the block returns ``writes``."""
        if not writes:
            return value
        return returns(len(writes)).build(b, result=value, cells=[sigma[c] for c in writes])

    def retyped(self, var: Var) -> Var:
        """A binder whose function-type annotation must now mention state."""
        annotation = var.type_annotation
        new_type = self.retyped_annotation(annotation, self.a.functions_of(var))
        if new_type is annotation:
            return var
        new = Var(var.name_hint, new_type, span=var.span)
        self.subst[var] = new
        return new

    def retyped_annotation(self, annotation: Type | None, found) -> Type | None:
        """A function-type annotation of a value that may be ``found``, with
        their state; a type that nests function types needing state is
        dropped (inference recovers it)."""
        if annotation is None or not _mentions_function(annotation):
            return annotation
        sigs = {self.a.signature_of(s) for s in found}
        sigs.discard(Signature())
        if not sigs:
            return annotation
        if isinstance(annotation, FuncType) and len(sigs) == 1:
            return self.with_state(annotation, next(iter(sigs)))
        return None

    # ------------------------------------------------------ functions
    def translate_function(self, fn: Function, sig: Signature) -> Computation[Function]:
        self.inside.update(self.a.writes_inside(fn))
        b = LetBuilder(fn.span)
        typed = {c: b.var(cell_hint(c), self.cell_type(c)) for c in sig.reads}
        sigma: dict[str, Expr] = dict(typed)
        params = tuple(self.retyped(p) for p in fn.params)
        body = yield self.scoped(fn, fn.body, sigma, sig.writes)
        ret_type = self.retyped_annotation(fn.ret_type, self.a.functions_of(fn.body))
        if ret_type is not None and sig.writes:
            ret_type = TupleType((ret_type,) + tuple(self.cell_type(c) for c in sig.writes))
        return dataclasses.replace(
            fn,
            params=params + tuple(typed[c] for c in sig.reads),
            body=body,
            ret_type=ret_type,
            attrs=state_attrs(fn.attrs, sig),
        )

    def body(self, node: Node, index: int, body: Expr, sigma, writes) -> Computation:  # type: ignore[override]
        """A function's body or a branch: a block of its own."""
        return self.block(body, sigma, writes)

    def block(self, expr: Expr, sigma: dict[str, Expr], writes: tuple[str, ...]) -> Computation:
        """``expr`` in state passing: it evaluates to ``(value, new...)`` for
        ``writes`` (to the value alone when there are none)."""
        sigma = dict(sigma)
        b = LetBuilder()
        block = Block.of(expr)
        for let in block.lets:
            yield self.eval(let.value, let.var, sigma, b)
        tail = yield self.tail(block.tail, sigma, writes, b)
        return b.finish(tail)

    def branch_expr(self, expr: If | Match, sigma: dict[str, Expr], writes: tuple[str, ...]):
        """An ``if``/``match`` whose branches each return ``writes``'s new values."""
        if isinstance(expr, If):
            bodies = [expr.then_branch, expr.else_branch]
            then_branch, else_branch = yield self.branches(expr, bodies, sigma, writes)
            return If(self.atom(expr.cond), then_branch, else_branch, span=expr.span)
        bodies = [c.body for c in expr.clauses]
        blocks = yield self.branches(expr, bodies, sigma, writes)
        clauses = tuple(
            Clause(c.pattern, body, span=c.span)
            for c, body in zip(expr.clauses, blocks, strict=True)
        )
        return Match(self.atom(expr.data), clauses, expr.complete, span=expr.span)

    def tail(self, expr: Expr, sigma: dict[str, Expr], writes: tuple[str, ...], b: LetBuilder):
        if isinstance(expr, If | Match):
            return (yield self.branch_expr(expr, sigma, writes))
        if isinstance(expr, Call) and not isinstance(expr.callee, Op | Constructor):
            site = self._site(expr) or Signature()
            if site.writes == writes:  # a tail call stays a tail call
                return self.call_with_state(expr, site, sigma, b)
        if isinstance(expr, Var | Constant | GlobalVar):
            with b.span(expr.span):
                return self.tail_tuple(self.value_atom(expr, b), sigma, writes, b)
        result = Var("result", span=expr.span)
        self.a.used.add(result)
        yield self.eval(expr, result, sigma, b)
        if not writes and b.bindings and b.bindings[-1][0] is result:
            return b.pop()[1]
        with b.span(expr.span):
            return self.tail_tuple(self.atom(result), sigma, writes, b)

    def _site(self, call: Call) -> Signature | None:
        callee = call.callee
        if isinstance(callee, GlobalVar) and callee.name in self.module.functions:
            return self.a.own_signature(("def", callee.name))
        found = self.a.functions_of(callee)
        if not found:
            return None
        return self.a.site_signature("indirect", found)

    def call_with_state(
        self, call: Call, sig: Signature, sigma: dict[str, Expr], b: LetBuilder
    ) -> Call:
        args = tuple(self.value_atom(a, b) for a in call.args)
        extra = tuple(self.current(sigma, c, call) for c in sig.reads)
        return Call(self.atom(call.callee), args + extra, call.attrs, span=call.span)

    # -------------------------------------------------------- bindings
    @on(RefRead)
    def _read(self, value: RefRead, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        self.subst[var] = self.current(sigma, self.a.target[value], value)

    @on(RefWrite)
    def _write(self, value: RefWrite, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        sigma[self.a.target[value]] = self.value_atom(value.value, b)
        if self.a.needed(var):
            b.bind(var, Tuple((), span=value.span))

    @on(RefCreate)
    def _create(self, value: RefCreate, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        sigma[self.a.alloc_name[value]] = self.value_atom(value.value, b)

    @on(Function)
    def _function(self, value: Function, var: Var, sigma: dict[str, Expr], b: LetBuilder):
        var = self.retyped(var)
        sig = self.a.signature_of(("fn", value))
        b.bind(var, (yield self.translate_function(value, sig)))

    @on(If, Match)
    def _branching(self, value: If | Match, var: Var, sigma: dict[str, Expr], b: LetBuilder):
        var = self.retyped(var)
        written = tuple(c for c in self.a.sort(self.inside.get(id(value), ())) if c in sigma)
        branch = yield self.branch_expr(value, sigma, written)
        if not written:
            b.bind(var, branch)
            return
        with b.span(value.span):
            out = b.emit(branch, out_name(var))
            self.unpack(var, out, written, sigma, b)

    @on(Call)
    def _call(self, value: Call, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        self.bind_call_value(self.retyped(var), value, sigma, b)

    @on(Tuple)
    def _tuple(self, value: Tuple, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        fields = tuple(self.value_atom(f, b) for f in value.fields)
        b.bind(self.retyped(var), Tuple(fields, span=value.span))

    @on(TupleGetItem)
    def _get(self, value: TupleGetItem, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        get = TupleGetItem(self.atom(value.tuple_value), value.index, span=value.span)
        b.bind(self.retyped(var), get)

    @on(Let)
    def _let(self, value: Let, var: Var, sigma: dict[str, Expr], b: LetBuilder):
        var = self.retyped(var)  # not produced by to_anf, but harmless
        b.bind(var, (yield self.block(value, sigma, ())))

    @on(Node)
    def _atom(self, value: Expr, var: Var, sigma: dict[str, Expr], b: LetBuilder) -> None:
        b.bind(self.retyped(var), self.value_atom(value, b))

    def bind_call_value(self, var: Var, call: Call, sigma: dict[str, Expr], b: LetBuilder):
        callee = call.callee
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" in definition.traits:
                self.bind_loop(var, call, definition.name, sigma, b)
                return
            args = tuple(self.value_atom(a, b) for a in call.args)
            world_form = definition.rules.get("world_form")
            if world_form is not None:
                world = self.current(sigma, WORLD, call)
                with b.span(call.span):
                    threaded = b.call(op_def(world_form).op, (world,) + args, call.attrs)
                    out = b.emit(threaded, world_form.rsplit(".", 1)[-1])
                    sigma[WORLD] = _WORLD_FORM.get(b, out, "world", cell_hint(WORLD))
                    if self.a.needed(var):
                        b.bind(var, _WORLD_FORM.item(b, out, "value"))
                return
            if needs_world(definition):
                raise EffectError(
                    f"{definition.name} is an output operator without a state-passing form "
                    "(a 'world_form' rule), so its order could not be kept",
                    call.span,
                )
            if definition.effect in ("random", "state"):
                raise EffectError(
                    f"{definition.name} is an effectful operator without an explicate rule",
                    call.span,
                )
            b.bind(var, Call(callee, args, call.attrs, span=call.span))
            return
        if isinstance(callee, Constructor):
            args = tuple(self.value_atom(a, b) for a in call.args)
            b.bind(var, Call(callee, args, call.attrs, span=call.span))
            return
        sig = self._site(call) or Signature()
        new_call = self.call_with_state(call, sig, sigma, b)
        self.bind_call(var, new_call, sig, sigma, b)


class _Constructors(Mutator):
    """Constructor nodes replaced by those of the rewritten ADT definitions."""

    def __init__(self, constructors: dict[str, Constructor]) -> None:
        super().__init__()
        self.constructors = constructors

    @on(Constructor)
    def _constructor(self, new: Constructor, old: Constructor) -> Expr:
        return self.constructors.get(new.name, new)


def _mentions_function(t: Type) -> bool:
    return any(isinstance(node, FuncType) for node in pre_order(t))
