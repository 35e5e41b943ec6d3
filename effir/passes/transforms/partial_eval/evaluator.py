"""The partial evaluator proper: blocks, the store of known references,
compounds, references, calls and inlining (see the package docstring).

It is an ``effir.ir.evaluator.Evaluator``: one rule per class of compound
expression, ``(node, var, env, out)``: the variable its value is bound to,
the static values of the variables in scope, and the builder the residual
bindings go to. A rule that evaluates a body (a branch, a closure, an
inlined call, an unrolled step) yields it to the walker's stack, so 500
calls inlined into one another need no Python recursion."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from itertools import islice
from typing import Any

from effir.ir.analysis import free_vars_by_function
from effir.ir.block import Block
from effir.ir.builder import LetBuilder
from effir.ir.context_types import annotated, context_typed_constructor
from effir.ir.dims import bind_dims, own_dims
from effir.ir.evaluator import Computation, Evaluator
from effir.ir.expr import (
    ATOM_TYPES,
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
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from effir.ir.functor import on, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.op import op_def
from effir.ir.types import Dim, Type, TypeVar
from effir.ops.control import LOOP_OPS
from effir.passes.transforms.partial_eval.instances import (
    call_hints,
    instance,
    instantiation,
    mentioned_type_vars,
    signature,
)
from effir.passes.transforms.partial_eval.static import (
    fold,
    static_match,
)
from effir.passes.transforms.partial_eval.touches import (
    ANYTHING,
    NOTHING,
    Touch,
    body_touches,
    global_ids,
    global_touches,
    holds_function,
    union,
)
from effir.passes.transforms.partial_eval.unroll import Unrolling
from effir.passes.transforms.partial_eval.values import MAX_INLINE, PV, Entry, LocalRef, RefId


class PartialEvaluator(Unrolling, Evaluator):
    def __init__(self, module: IRModule, budget: int) -> None:
        self.module = module
        self.budget = budget
        self.inlining: list[Function] = []  # the functions being inlined, innermost last
        self.sizes: dict[Function, int] = {}  # nodes hash by identity
        self.nests: set[Function] = set()  # the sized functions that hold a loop
        self.tails: set[Var] = set()  # variables made for the value of a block's tail
        self.store: dict[RefId, Entry] = {}
        self.escaped: set[LocalRef] = set()
        self.local_refs: dict[Var, LocalRef] = {}  # residual atoms of tracked local refs
        self._global_touch: dict[str, Touch] | None = None
        self.closure_touch: dict[int, tuple[Function, Touch]] = {}
        # The free variables of each function of the code being evaluated,
        # found for a whole global function or inlined copy at once.
        self.free: dict[Function, list[Var]] = {}
        # Every binding made in an environment, with what it replaced: a
        # block undoes its own at its end instead of copying the environment
        # at its start (a copy per block is quadratic in the program).
        self.trail: list[tuple[dict[Var, PV], Var, PV | None]] = []
        # The type parameters of the global function being evaluated: the
        # only type variables its residual may mention.
        self.scope: dict[str, TypeVar] = {}
        self.mentioned: dict[Function, frozenset[str]] = {}
        # Each global function's own symbolic dimensions, found when first
        # inlined (a function not here is local: its dimensions are its
        # caller's).
        self.global_dims: _GlobalDims = _GlobalDims(module)

    def global_function(self, name: str) -> Function:
        fn = self.module.functions[name]
        self.free.update(free_vars_by_function(fn))
        self.inlining = [fn]
        self.store = {}
        self.scope = {tv.name: tv for tv in fn.type_params}
        env = {p: PV(p) for p in fn.params}
        body = self.drive(self.block(fn.body, env))
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    # ----------------------------------------------------------- blocks
    def block(self, expr: Expr, env: dict[Var, PV]) -> Computation[Expr]:
        """A function body as a residual let chain, in a scope of its own; at
        its end the global cells' dirty values are written back (a local
        reference that has not escaped is dead when its function returns)."""
        parts = yield self.block_parts(expr, env)
        self.flush(parts[0], global_ids(self.store))
        return assemble(*parts)

    def block_parts(self, expr: Expr, env: dict[Var, PV]):
        """``expr`` evaluated in a scope of its own: its bindings, the binding
        of its tail computation (if any) and its value's atom."""
        out = LetBuilder()
        tail = Var("result", span=expr.span)
        mark = len(self.trail)
        value = yield self.value(expr, env, out, tail)
        self.undo(mark)
        self.uses([value], out)
        tail_binding = None
        if out.bindings and out.bindings[-1][0] is value.atom and value.atom in self.tails:
            tail_binding = out.pop()
        return out, tail_binding, value.atom

    def value(self, expr: Expr, env: dict[Var, PV], out: LetBuilder, tail: Var | None = None):
        """Evaluate ``expr`` into ``out``; its PV (``tail`` names its last value)."""
        block = Block.of(expr)
        for let in block.lets:
            pv = yield self.eval(let.value, let.var, env, out)
            self.bind_var(env, let.var, pv)
        expr = block.tail
        if tail is None:
            tail = Var("result", span=expr.span)
        self.tails.add(tail)
        return (yield self.eval(expr, tail, env, out))

    def atom(self, expr: Expr, env: dict[Var, PV]) -> PV:
        if isinstance(expr, Var):
            return env.get(expr) or PV(expr)
        if isinstance(expr, Constant):
            return PV(expr, const=expr.data)
        if isinstance(expr, GlobalVar):
            if expr.name in self.module.functions:
                return PV(expr, fn=self.module.functions[expr.name])
            if expr.name in self.module.cells:
                return PV(expr, ref=expr.name)
        return PV(expr)

    def bind_var(self, env: dict[Var, PV], var: Var, pv: PV) -> None:
        self.trail.append((env, var, env.get(var)))
        env[var] = pv

    def undo(self, mark: int) -> None:
        """Take back the bindings made since ``mark``: a block's own."""
        trail = self.trail
        while len(trail) > mark:
            env, var, previous = trail.pop()
            if previous is None:
                env.pop(var, None)
            else:
                env[var] = previous

    def captured(self, fn: Function, env: dict[Var, PV]) -> dict[Var, PV]:
        """What a closure of ``fn`` made in ``env`` knows: its free
        variables' values (a copy of all of ``env`` per closure would be
        quadratic)."""
        return {v: env[v] for v in self.free_vars(fn) if v in env}

    def free_vars(self, fn: Function) -> list[Var]:
        known = self.free.get(fn)
        if known is None:  # made by the pass
            self.free.update(free_vars_by_function(fn))
            known = self.free[fn]
        return known

    def emit(self, var: Var, value: Expr, out: LetBuilder, **known: Any) -> PV:
        out.bind(var, value)
        return PV(var, **known)

    # ------------------------------------------------------------ store
    def tracked(self, pv: PV) -> RefId | None:
        """``pv``'s identity if the store may hold its contents."""
        if pv.ref is None or (isinstance(pv.ref, LocalRef) and pv.ref in self.escaped):
            return None
        return pv.ref

    def flush(self, out: LetBuilder, ids: AbstractSet[RefId] | None = None) -> None:
        """Write back the dirty values (of ``ids``; None: all of them)."""
        for ref_id, entry in list(self.store.items()):
            if entry.dirty and (ids is None or ref_id in ids):
                entry.dirty = False
                self.uses([entry.value], out)
                out.bind(Var("_", span=entry.target.span), RefWrite(entry.target, entry.value.atom))

    def forget(self, ids: AbstractSet[RefId]) -> None:
        for ref_id in ids:
            self.store.pop(ref_id, None)

    def touch(self, touched: Touch, out: LetBuilder) -> None:
        """Before an unknown computation: write back what it may read or write."""
        cells = global_ids(self.store) if touched.cells is None else set(touched.cells)
        self.flush(out, cells)

    def touched(self, touched: Touch) -> None:
        """After an unknown computation: forget what it may have written."""
        self.forget(global_ids(self.store) if touched.writes is None else set(touched.writes))

    def uses(self, values: list[PV], out: LetBuilder) -> None:
        """``values`` are used as values (not read or written through): a
        local reference among them escapes (it is written back and no
        longer tracked), and a global cell among them may be read and written
        by whatever receives it."""
        work = list(values)
        while work:
            pv = work.pop()
            if pv.fields is not None:
                work.extend(pv.fields)
            if isinstance(pv.ref, LocalRef):
                if pv.ref in self.escaped:
                    continue
                self.escaped.add(pv.ref)
                entry = self.store.pop(pv.ref, None)
                if entry is not None and entry.dirty:
                    work.append(entry.value)
                    out.bind(Var("_"), RefWrite(entry.target, entry.value.atom))
            elif isinstance(pv.ref, str):
                entry = self.store.pop(pv.ref, None)
                if entry is not None and entry.dirty:
                    work.append(entry.value)
                    out.bind(Var("_"), RefWrite(entry.target, entry.value.atom))

    def capture(self, fn: Function, env: dict[Var, PV], out: LetBuilder) -> None:
        """A closure is made: the local references it mentions escape."""
        if not any(ref not in self.escaped for ref in self.local_refs.values()):
            return
        free = [env[v] for v in self.free_vars(fn) if v in env]
        self.uses([pv for pv in free if isinstance(pv.ref, LocalRef)], out)

    def snapshot(self) -> dict[RefId, Entry]:
        return {k: dataclasses.replace(e) for k, e in self.store.items()}

    @property
    def global_touch(self) -> dict[str, Touch]:
        """What each global function may touch: effect inference, run the
        first time a call of unknown code is residualised."""
        if self._global_touch is None:
            self._global_touch = global_touches(self.module)
        return self._global_touch

    def closure_touches(self, fn: Function) -> Touch:
        known = self.closure_touch.get(id(fn))
        if known is None:
            known = (fn, body_touches(fn, self.module, self.global_touch))
            self.closure_touch[id(fn)] = known
        return known[1]

    def touches_of(self, pv: PV) -> Touch:
        """What calling ``pv`` may touch."""
        if isinstance(pv.atom, GlobalVar) and pv.atom.name in self.global_touch:
            return self.global_touch[pv.atom.name]
        if pv.fn is not None:
            return self.closure_touches(pv.fn)
        return ANYTHING

    # -------------------------------------------------------- compounds
    @on(*ATOM_TYPES)
    def _atom(self, expr: Expr, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        return self.atom(expr, env)

    @on(Tuple)
    def _tuple(self, expr: Tuple, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        fields = tuple(self.atom(f, env) for f in expr.fields)
        tuple_expr = Tuple(tuple(f.atom for f in fields), span=expr.span)
        return self.emit(var, tuple_expr, out, fields=fields)

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        whole = self.atom(expr.tuple_value, env)
        if whole.fields is not None:
            return whole.fields[expr.index]
        return self.emit(var, TupleGetItem(whole.atom, expr.index, span=expr.span), out)

    @on(Function)
    def _function(self, expr: Function, var: Var, env: dict[Var, PV], out: LetBuilder):
        self.capture(expr, env, out)
        residual = yield self.closure(expr, env)
        return self.emit(var, residual, out, fn=expr, env=self.captured(expr, env))

    @on(If)
    def _if(self, expr: If, var: Var, env: dict[Var, PV], out: LetBuilder):
        cond = self.atom(expr.cond, env)
        if cond.const is not None and cond.const.shape == ():
            taken = expr.then_branch if bool(cond.const) else expr.else_branch
            mark = len(self.trail)
            result = yield self.value(taken, env, out)
            self.undo(mark)
            return result
        branches = yield self.branches(expr, [expr.then_branch, expr.else_branch], env)
        return self.emit(var, If(cond.atom, *branches, span=expr.span), out)

    @on(Let)
    def _let(self, expr: Let, var: Var, env: dict[Var, PV], out: LetBuilder):
        raise TypeError("partial-eval: unexpected Let")  # pragma: no cover

    @on(Node)
    def _other(self, expr: Node, var: Var, env: dict[Var, PV], out: LetBuilder):
        raise TypeError(f"partial-eval: unexpected {type(expr).__name__}")  # pragma: no cover

    # ---------------------------------------------------------- branches
    # The residual blocks of an unknown ``if``/``match``. Every branch
    # starts from the store as it is. A dirty value that every branch
    # leaves as it found it stays pending after the branches; every other
    # dirty value is written back at the end of each branch that has it, so
    # that all paths agree. A value stays known only where no branch
    # changed it.
    def fork(self, node: Node) -> dict[RefId, Entry]:
        return self.snapshot()

    def enter_branch(self, node, index: int, before, env: dict[Var, PV]) -> int:  # type: ignore[override]
        mark = len(self.trail)
        if isinstance(node, Match):
            for p in pre_order(node.clauses[index].pattern):
                if isinstance(p, PatternVar):
                    self.bind_var(env, p.var, PV(p.var))
        self.store = {k: dataclasses.replace(e) for k, e in before.items()}
        return mark

    def body(self, node: Node, index: int, body: Expr, env: dict[Var, PV]) -> Computation:  # type: ignore[override]
        """A branch as a block of its own (its parts), a function's body
        as a whole block."""
        if isinstance(node, Function):
            return self.block(body, env)
        return self.block_parts(body, env)

    def leave_branch(self, node: Node, index: int, mark: int, block):
        self.undo(mark)
        return block, self.store

    def join(self, node: Node, before: dict[RefId, Entry], parts) -> list[Expr]:
        ends = [end for _, end in parts]
        unchanged = {
            k
            for k, e in before.items()
            if all(k in end and end[k].value is e.value for end in ends)
        }
        pending = {k for k in unchanged if before[k].dirty and all(end[k].dirty for end in ends)}
        residual = []
        for block, end in parts:
            self.store = end
            self.flush(block[0], set(end) - pending)
            residual.append(assemble(*block))
        self.store = {k: e for k, e in before.items() if k in unchanged}  # in store order
        for k in unchanged - pending:
            self.store[k].dirty = False
        return residual

    def closure(self, fn: Function, env: dict[Var, PV]) -> Computation[Function]:
        """The residual closure. Its parameters get their inferred types: a
        call that taught inference those types may have been inlined away.
        Its body may run at any time, so it starts from an empty store."""
        mark = len(self.trail)
        params = []
        for p in fn.params:
            typed = annotated(p)
            self.bind_var(env, p, PV(typed))
            params.append(typed)
        try:
            body = yield self.scoped(fn, fn.body, env)
        finally:
            self.undo(mark)
        return Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def enter_scope(self, node: Node) -> dict[RefId, Entry]:
        outer, self.store = self.store, {}
        return outer

    def leave_scope(self, node: Node, outer: dict[RefId, Entry]) -> None:
        self.store = outer

    @on(Match)
    def _match(self, expr: Match, var: Var, env: dict[Var, PV], out: LetBuilder):
        data = self.atom(expr.data, env)
        if data.ctor is not None:
            for clause in expr.clauses:
                bound = static_match(clause.pattern, data)
                if bound is None:
                    break  # undecidable statically: residualise
                if bound is not False:
                    mark = len(self.trail)
                    for v, pv in bound.items():
                        self.bind_var(env, v, pv)
                    result = yield self.value(clause.body, env, out)
                    self.undo(mark)
                    return result
        bodies = [c.body for c in expr.clauses]
        residual_bodies = yield self.branches(expr, bodies, env)
        clauses = tuple(
            Clause(c.pattern, body, span=c.span)
            for c, body in zip(expr.clauses, residual_bodies, strict=True)
        )
        residual = Match(data.atom, clauses, expr.complete, span=expr.span)
        return self.emit(var, residual, out)

    # ------------------------------------------------------- references
    @on(RefCreate)
    def ref_create(self, expr: RefCreate, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        value = self.atom(expr.value, env)
        self.uses([value], out)
        ref = LocalRef(var.name_hint)
        self.local_refs[var] = ref
        self.store[ref] = Entry(value, dirty=False, target=var)
        return self.emit(var, RefCreate(value.atom, span=expr.span), out, ref=ref)

    @on(RefRead)
    def ref_read(self, expr: RefRead, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        ref = self.atom(expr.ref, env)
        ref_id = self.tracked(ref)
        if ref_id is None:
            if ref.ref is None:  # may be any global cell
                self.flush(out, global_ids(self.store))
            return self.emit(var, RefRead(ref.atom, span=expr.span), out)
        entry = self.store.get(ref_id)
        if entry is not None:
            return entry.value
        pv = self.emit(var, RefRead(ref.atom, span=expr.span), out)
        self.store[ref_id] = Entry(pv, dirty=False, target=ref.atom)
        return pv

    @on(RefWrite)
    def ref_write(self, expr: RefWrite, var: Var, env: dict[Var, PV], out: LetBuilder) -> PV:
        ref = self.atom(expr.ref, env)
        value = self.atom(expr.value, env)
        ref_id = self.tracked(ref)
        if ref_id is None:
            self.uses([value], out)
            if ref.ref is None:  # may be any global cell
                self.touch(ANYTHING, out)
                self.touched(ANYTHING)
            return self.emit(var, RefWrite(ref.atom, value.atom, span=expr.span), out)
        self.uses([v for v in [value] if v.ref is not None or v.fields is not None], out)
        self.store[ref_id] = Entry(value, dirty=True, target=ref.atom)
        return self.emit(var, Tuple((), span=expr.span), out, fields=())

    # ------------------------------------------------------------ calls
    @on(Call)
    def call(self, call: Call, var: Var, env: dict[Var, PV], out: LetBuilder):
        callee = call.callee
        args = [self.atom(a, env) for a in call.args]
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" in definition.traits:
                return (yield self.loop(var, call, args, env, out))
            self.uses(args, out)
            rebuilt = Call(callee, tuple(a.atom for a in args), call.attrs, span=call.span)
            folded = fold(definition, rebuilt, args)
            if folded is not None:
                return PV(Constant(folded, span=call.span), const=folded)
            return self.emit(var, rebuilt, out)
        if isinstance(callee, Constructor):
            self.uses(args, out)
            rebuilt = Call(callee, tuple(a.atom for a in args), span=call.span)
            if context_typed_constructor(callee, self.module):
                # Its type arguments came from where the value went (an
                # annotated parameter of a function now inlined): kept.
                var = annotated(var, call.checked_type if call.has_type else None)
            return self.emit(var, rebuilt, out, ctor=callee, fields=tuple(args))
        target = self.atom(callee, env)
        if target.fn is not None and self.inlinable(target.fn, len(args)):
            hints = list(call_hints(target.fn, callee, call.args, var))
            types = self.instantiation(target.fn, hints)
            if types is not None:
                return (yield self.inline(target, args, out, types, hints))
        self.uses(args, out)
        touched = self.touches_of(target)
        self.touch(touched, out)
        rebuilt = Call(target.atom, tuple(a.atom for a in args), call.attrs, span=call.span)
        pv = self.emit(var, rebuilt, out)
        self.touched(touched)
        return pv

    def loop(self, var: Var, call: Call, args: list[PV], env: dict[Var, PV], out: LetBuilder):
        """A control-flow operator: unrolled when short and static, else
        residualised with its bodies partially evaluated."""
        unrolled = yield self.unroll(call, args, env, out)
        if unrolled is not None:
            return unrolled
        touched = NOTHING
        residual_args = []
        for a, pv in zip(call.args, args, strict=True):
            if isinstance(a, Function):
                self.capture(a, env, out)
                residual_args.append((yield self.closure(a, env)))
                touched = union(touched, self.closure_touches(a))
            else:
                self.uses([pv], out)
                residual_args.append(pv.atom)
                if holds_function(a):
                    touched = union(touched, self.touches_of(pv))
        self.touch(touched, out)
        rebuilt = Call(call.callee, tuple(residual_args), call.attrs, span=call.span)
        result = self.emit(var, rebuilt, out)
        self.touched(touched)
        return result

    def size_of(self, fn: Function) -> int:
        """``fn``'s number of nodes, or ``MAX_INLINE + 1`` if larger: what
        decides inlining, without a walk of each of many nested functions'
        whole bodies. The same walk notes whether ``fn`` holds a loop
        (``nests``), so that unrolling a loop-free body walks it once."""
        size = self.sizes.get(fn)
        if size is None:
            size = 0
            for node in islice(pre_order(fn), MAX_INLINE + 1):
                size += 1
                callee = node.callee if isinstance(node, Call) else None
                if isinstance(callee, Op) and callee.name in LOOP_OPS:
                    self.nests.add(fn)
            self.sizes[fn] = size
        return size

    def inlinable(self, fn: Function, arity: int) -> bool:
        if fn in self.inlining or len(fn.params) != arity:
            return False
        size = self.size_of(fn)
        return size <= MAX_INLINE and size <= self.budget

    def instantiation(
        self, fn: Function, hints: Iterable[tuple[Type, Type]]
    ) -> dict[str, Type] | None:
        """The types ``fn``'s type parameters stand for where it is inlined
        ({} for a function without any), or None when its body mentions one
        that ``hints`` leave unknown: then it is not inlined."""
        if not fn.type_params:
            return {}
        mentioned = self.mentioned.get(fn)
        if mentioned is None:
            mentioned = self.mentioned[fn] = mentioned_type_vars(fn)
        return instantiation(fn, hints, self.scope, mentioned)

    def dims_at(
        self, fn: Function, args: list[PV], hints: list[tuple[Type, Type]] | None
    ) -> dict[str, Dim] | None:
        """What ``fn``'s symbolic dimensions are where it is inlined, in the
        sizes of the function being evaluated [RULE DIMS-BIND]: a global
        function's dimensions are its own (a copy of its body must not name
        them), matched against the call site's types and the arguments'
        residual atoms' types; ``?`` where none tells (a global function used
        as a loop body, as the type checker has it). None for a local
        function: its dimensions are already the caller's."""
        own = self.global_dims.get(fn)
        if own is None:
            return None
        if not own:
            return {}
        sig = signature(fn)
        pairs = list(hints or ())
        pairs.extend(
            (param, arg.atom.checked_type)
            for param, arg in zip(sig.arg_types, args, strict=False)
            if arg.atom.has_type
        )
        return bind_dims(own, pairs)

    def inline(
        self,
        target: PV,
        args: list[PV],
        out: LetBuilder,
        types: dict[str, Type] | None = None,
        hints: list[tuple[Type, Type]] | None = None,
    ):
        """``target``'s body on ``args``, as the instance ``types`` (see
        ``instantiation``; None: as known without a call site's types) in
        the function being evaluated, written in its sizes (``dims_at``:
        ``hints`` are the call site's types, None for a loop body)."""
        fn = target.fn
        assert fn is not None
        if types is None:
            types = self.instantiation(fn, ())
            assert types is not None  # the caller asked
        self.budget -= self.size_of(fn)
        copy = instance(fn, types, self.dims_at(fn, args, hints))
        self.free.update(free_vars_by_function(copy))
        env = dict(target.env or ())
        for param, arg in zip(copy.params, args, strict=True):
            env[param] = arg
        self.inlining.append(fn)
        try:
            return (yield self.value(copy.body, env, out))
        finally:
            self.inlining.pop()


class _GlobalDims:
    """``own_dims`` of each global function of ``module``, by identity,
    computed once each; None for any other function."""

    def __init__(self, module: IRModule) -> None:
        self.globals = frozenset(module.functions.values())
        self.known: dict[Function, frozenset[str]] = {}

    def get(self, fn: Function) -> frozenset[str] | None:
        if fn not in self.globals:
            return None
        known = self.known.get(fn)
        if known is None:
            known = self.known[fn] = own_dims(fn)
        return known


def assemble(out: LetBuilder, tail_binding: tuple[Var, Expr] | None, atom: Expr) -> Expr:
    """A let chain of ``out`` ending in the tail computation or atom. The
    write-backs appended after the tail computation was evaluated go before
    it: it touched no dirty value (that would have been written back before
    it), and so a tail call stays a tail call."""
    return out.finish(tail_binding[1] if tail_binding is not None else atom)
