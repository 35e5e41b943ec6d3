"""partial-eval: evaluate what is known at compile time, keep the rest.

An online partial evaluator over A-normal form, in the spirit of Relay's
PartialEvaluate, kept deliberately simple so that it always terminates and
never blows up. Every variable gets a *partially static value* (``PV``): the
residual atom that holds it at run time, plus what is known about it: a
constant tensor, the fields of a tuple, the constructor and fields of an ADT
value, the function (and the static values of its free variables) of a
closure or a global function, or the identity of the reference it is.

Values
- A pure operator whose arguments are all constants is evaluated with its
  own numpy rule (bit-identical to the interpreter), up to ``MAX_ELEMENTS``
  elements; operators with effects never are.
- A projection of a known tuple, an ``if`` on a constant, a ``match`` on a
  known constructor resolve statically; the taken branch is evaluated in
  place.

Calls and loops (the fuel rules that guarantee termination)
- A call of a known function (a closure or a global) is inlined when it is
  not recursive (the function is not already being inlined: recursion is
  residualised after one unfolding), its body is at most ``MAX_INLINE``
  nodes, and the pass's total budget (ten times the input's size) is not
  spent: the output is at most linearly larger than the input.
- A ``cf.foreach`` whose sequence length is static, at most
  ``MAX_UNROLL`` steps, unrolls when its body is a known function that could
  be inlined that many times within the budget: each step is the body
  inlined on ``take(xs, t, axis=0)`` and the state, and the outputs are
  stacked, exactly as the operator's own rule does. A ``cf.while_loop``
  unrolls the same way when its condition folds to a constant at every step
  and turns false within ``MAX_UNROLL`` steps (or ``max_iterations`` stops
  it); the steps are evaluated on trial, and a condition that is not a
  constant throws the trial away. Longer loops stay loops (a backend
  compiles a loop as a whole), their bodies partially evaluated.

The store (references whose identity is known)
- A global cell (``@rng``) and a ``ref(...)`` made in the function being
  evaluated have a known identity. The pass keeps each one's current
  contents as a PV in a store: a read of a known value is that value (no
  read is emitted), a write only updates the store and marks it *dirty*. So
  a block that reads and writes a cell many times (explicate's expansion of
  a dropout per layer, once inlined) keeps one read at the start and one
  write at the end, as the effects RFC promised.
- Dirty values are written back (*flushed*) before anything that may observe
  the cell, and forgotten after anything that may change it. Unknown effects
  invalidate only what they may touch: a call of a global function touches
  the cells its inferred effects name (``infer_effects``); a closure or loop
  body touches the cells its body names (directly or through the globals it
  calls), or every cell when it calls an unknown function or uses a
  reference it did not make; a read or write through a reference of unknown
  identity may touch every cell. Operators with ``random``/``state`` effects
  name the cell they touch as an argument.
- A local reference *escapes* when it is used other than by
  ``ref_read``/``ref_write``: passed to a call, stored in a tuple or ADT or
  another reference, captured by a closure, returned. Until then no other
  code can reach it, so only this function's own reads and writes touch it;
  from then on it is flushed and no longer tracked. A local reference that
  never escapes is never written back: its last write is dead.
- An ``if`` or ``match`` whose branch is not known flushes every dirty value
  first; each branch starts from the same known values and flushes its own
  writes at its end; afterwards a value stays known only if no branch
  changed it. A closure's body starts from an empty store (it may run at any
  time) and flushes its global writes at its end, as a function body does.

Everything else is residualised in evaluation order, so effects (outputs,
reads and writes of references that stay) keep their order.

The pass ends with ``dce``: the bindings of values it resolved statically
(a tuple whose fields were used one by one, a reference nobody reads any
more) are dead, and a dead tuple that mentions a key or the world token
would make the program read as non-linear. A folded failure stays a run-time
failure (the call is kept), unless its result is unused and dce removes it,
as dce's own rules say.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from ..ir.expr import (
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
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.module import IRModule
from ..ir.op import get_op, op_def
from ..ir.trampoline import Computation, run
from ..ir.types import IncompleteType, TensorType, TupleType, Type, TypeVar
from ..ir.visitor import free_vars_by_function, pre_order
from .anf import fresh_binders, to_anf
from .dce import dce
from .infer_effects import infer_effects
from .infer_type import check
from .infra import module_pass

MAX_ELEMENTS = 1024
MAX_INLINE = 200
MAX_UNROLL = 8


class LocalRef:
    """The identity of one ``ref(...)`` evaluated by the pass."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"LocalRef({self.name})"


RefId = str | LocalRef  # a global cell's name, or a local reference


@dataclass
class PV:
    """A partially static value: its residual atom and what is known."""

    atom: Expr
    const: np.ndarray | None = None
    fields: tuple[PV, ...] | None = None
    ctor: Constructor | None = None
    fn: Function | None = None
    env: dict[Var, PV] | None = None  # a closure's free variables
    ref: RefId | None = None


@dataclass
class _Entry:
    """What the store knows of one reference: its contents, whether they
    still have to be written back, and the atom to write them through."""

    value: PV
    dirty: bool
    target: Expr


@dataclass(frozen=True)
class _Touch:
    """The global cells an unknown computation may read or write (``None``:
    any cell), and those it may write."""

    cells: frozenset[str] | None
    writes: frozenset[str] | None


_NOTHING = _Touch(frozenset(), frozenset())
_ANYTHING = _Touch(None, None)


@module_pass(
    name="partial-eval",
    establishes={"anf"},
    doc="fold constants, resolve static ifs, matches and projections, inline known calls",
)
def partial_eval(module: IRModule) -> IRModule:
    """Every global function partially evaluated (see the module docstring)."""
    module = check(to_anf(module))  # residual closures need their parameters' types
    size = sum(1 for fn in module.functions.values() for _ in pre_order(fn))
    evaluator = _Evaluator(module, budget=10 * size)
    functions = {name: evaluator.global_function(name) for name in module.functions}
    # The bindings of values resolved statically (a tuple whose fields were
    # used one by one) are dead now; left in place, a dead tuple would still
    # mention a key or the world token, and the program would no longer read
    # as linear.
    return dce(IRModule(functions, module.type_defs, module.cells))


_Bindings = list[tuple[Var, Expr]]


class _Evaluator:
    def __init__(self, module: IRModule, budget: int) -> None:
        self.module = module
        self.budget = budget
        self.inlining: list[Function] = []  # the functions being inlined, innermost last
        self.sizes: dict[Function, int] = {}  # nodes hash by identity
        self.tails: set[Var] = set()  # variables made for the value of a block's tail
        self.store: dict[RefId, _Entry] = {}
        self.escaped: set[LocalRef] = set()
        self.local_refs: dict[Var, LocalRef] = {}  # residual atoms of tracked local refs
        self._global_touch: dict[str, _Touch] | None = None
        self.closure_touch: dict[int, tuple[Function, _Touch]] = {}
        # The free variables of each function of the code being evaluated,
        # found for a whole global function or inlined copy at once.
        self.free: dict[Function, list[Var]] = {}
        # Every binding made in an environment, with what it replaced: a
        # block undoes its own at its end instead of copying the environment
        # at its start (a copy per block is quadratic in the program).
        self.trail: list[tuple[dict[Var, PV], Var, PV | None]] = []

    def global_function(self, name: str) -> Function:
        fn = self.module.functions[name]
        self.free.update(free_vars_by_function(fn))
        self.inlining = [fn]
        self.store = {}
        env = {p: PV(p) for p in fn.params}
        body = run(self.block(fn.body, env))
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    # ----------------------------------------------------------- blocks
    def block(self, expr: Expr, env: dict[Var, PV]) -> Computation[Expr]:
        """A function body as a residual let chain, in a scope of its own; at
        its end the global cells' dirty values are written back (a local
        reference that has not escaped is dead when its function returns)."""
        parts = yield from self.block_parts(expr, env)
        self.flush(parts[0], _global_ids(self.store))
        return _assemble(*parts)

    def block_parts(self, expr: Expr, env: dict[Var, PV]):
        """``expr`` evaluated in a scope of its own: its bindings, the binding
        of its tail computation (if any) and its value's atom."""
        out: _Bindings = []
        tail = Var("result", span=expr.span)
        mark = len(self.trail)
        value = yield from self.value(expr, env, out, tail)
        self.undo(mark)
        self.uses([value], out)
        tail_binding = None
        if out and out[-1][0] is value.atom and value.atom in self.tails:
            tail_binding = out.pop()
        return out, tail_binding, value.atom

    def value(self, expr: Expr, env: dict[Var, PV], out: _Bindings, tail: Var | None = None):
        """Evaluate ``expr`` into ``out``; its PV (``tail`` names its last value)."""
        while isinstance(expr, Let):
            pv = yield from self.compound(expr.var, expr.value, env, out)
            self.bind(env, expr.var, pv)
            expr = expr.body
        if tail is None:
            tail = Var("result", span=expr.span)
        self.tails.add(tail)
        return (yield from self.compound(tail, expr, env, out))

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

    def bind(self, env: dict[Var, PV], var: Var, pv: PV) -> None:
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

    def emit(self, var: Var, value: Expr, out: _Bindings, **known: Any) -> PV:
        out.append((var, value))
        return PV(var, **known)

    # ------------------------------------------------------------ store
    def tracked(self, pv: PV) -> RefId | None:
        """``pv``'s identity if the store may hold its contents."""
        if pv.ref is None or (isinstance(pv.ref, LocalRef) and pv.ref in self.escaped):
            return None
        return pv.ref

    def flush(self, out: _Bindings, ids: set[RefId] | None = None) -> None:
        """Write back the dirty values (of ``ids``; None: all of them)."""
        for ref_id, entry in list(self.store.items()):
            if entry.dirty and (ids is None or ref_id in ids):
                entry.dirty = False
                self.uses([entry.value], out)
                out.append(
                    (Var("_", span=entry.target.span), RefWrite(entry.target, entry.value.atom))
                )

    def forget(self, ids: set[RefId]) -> None:
        for ref_id in ids:
            self.store.pop(ref_id, None)

    def touch(self, touched: _Touch, out: _Bindings) -> None:
        """Before an unknown computation: write back what it may read or write."""
        cells = _global_ids(self.store) if touched.cells is None else set(touched.cells)
        self.flush(out, cells)

    def touched(self, touched: _Touch) -> None:
        """After an unknown computation: forget what it may have written."""
        self.forget(_global_ids(self.store) if touched.writes is None else set(touched.writes))

    def uses(self, values: list[PV], out: _Bindings) -> None:
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
                    out.append((Var("_"), RefWrite(entry.target, entry.value.atom)))
            elif isinstance(pv.ref, str):
                entry = self.store.pop(pv.ref, None)
                if entry is not None and entry.dirty:
                    work.append(entry.value)
                    out.append((Var("_"), RefWrite(entry.target, entry.value.atom)))

    def capture(self, fn: Function, env: dict[Var, PV], out: _Bindings) -> None:
        """A closure is made: the local references it mentions escape."""
        if not any(ref not in self.escaped for ref in self.local_refs.values()):
            return
        free = [env[v] for v in self.free_vars(fn) if v in env]
        self.uses([pv for pv in free if isinstance(pv.ref, LocalRef)], out)

    def snapshot(self) -> dict[RefId, _Entry]:
        return {k: dataclasses.replace(e) for k, e in self.store.items()}

    @property
    def global_touch(self) -> dict[str, _Touch]:
        """What each global function may touch: effect inference, run the
        first time a call of unknown code is residualised."""
        if self._global_touch is None:
            self._global_touch = _global_touches(self.module)
        return self._global_touch

    def closure_touches(self, fn: Function) -> _Touch:
        known = self.closure_touch.get(id(fn))
        if known is None:
            known = (fn, _body_touches(fn, self.module, self.global_touch))
            self.closure_touch[id(fn)] = known
        return known[1]

    def touches_of(self, pv: PV) -> _Touch:
        """What calling ``pv`` may touch."""
        if isinstance(pv.atom, GlobalVar) and pv.atom.name in self.global_touch:
            return self.global_touch[pv.atom.name]
        if pv.fn is not None:
            return self.closure_touches(pv.fn)
        return _ANYTHING

    # -------------------------------------------------------- compounds
    def compound(self, var: Var, expr: Expr, env: dict[Var, PV], out: _Bindings):
        if is_atom(expr):
            return self.atom(expr, env)
        if isinstance(expr, Tuple):
            fields = tuple(self.atom(f, env) for f in expr.fields)
            tuple_expr = Tuple(tuple(f.atom for f in fields), span=expr.span)
            return self.emit(var, tuple_expr, out, fields=fields)
        if isinstance(expr, TupleGetItem):
            whole = self.atom(expr.tuple_value, env)
            if whole.fields is not None:
                return whole.fields[expr.index]
            return self.emit(var, TupleGetItem(whole.atom, expr.index, span=expr.span), out)
        if isinstance(expr, Function):
            self.capture(expr, env, out)
            residual = yield from self.closure(expr, env)
            return self.emit(var, residual, out, fn=expr, env=self.captured(expr, env))
        if isinstance(expr, If):
            cond = self.atom(expr.cond, env)
            if cond.const is not None and cond.const.shape == ():
                taken = expr.then_branch if bool(cond.const) else expr.else_branch
                mark = len(self.trail)
                result = yield from self.value(taken, env, out)
                self.undo(mark)
                return result
            branches = yield from self.branches([expr.then_branch, expr.else_branch], env)
            return self.emit(var, If(cond.atom, *branches, span=expr.span), out)
        if isinstance(expr, Match):
            return (yield from self.match(var, expr, env, out))
        if isinstance(expr, Call):
            return (yield from self.call(var, expr, env, out))
        if isinstance(expr, RefCreate):
            return self.ref_create(var, expr, env, out)
        if isinstance(expr, RefRead):
            return self.ref_read(var, expr, env, out)
        if isinstance(expr, RefWrite):
            return self.ref_write(var, expr, env, out)
        raise TypeError(f"partial-eval: unexpected {type(expr).__name__}")  # pragma: no cover

    def branches(self, bodies: list[Expr], env: dict[Var, PV], patterns=None):
        """Residual blocks for the branches of an unknown ``if``/``match``.

        Every branch starts from the store as it is. A dirty value that every
        branch leaves as it found it stays pending after the branches; every
        other dirty value is written back at the end of each branch that has
        it, so that all paths agree. A value stays known only where no branch
        changed it."""
        before = self.snapshot()
        parts = []
        for i, body in enumerate(bodies):
            mark = len(self.trail)
            if patterns is not None:
                for node in pre_order(patterns[i]):
                    if isinstance(node, PatternVar):
                        self.bind(env, node.var, PV(node.var))
            self.store = {k: dataclasses.replace(e) for k, e in before.items()}
            block = yield self.block_parts(body, env)
            self.undo(mark)
            parts.append((block, self.store))
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
            residual.append(_assemble(*block))
        self.store = {k: before[k] for k in unchanged}
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
            typed = _annotated(p)
            self.bind(env, p, PV(typed))
            params.append(typed)
        outer, self.store = self.store, {}
        try:
            body = yield self.block(fn.body, env)
        finally:
            self.store = outer
            self.undo(mark)
        return Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def match(self, var: Var, expr: Match, env: dict[Var, PV], out: _Bindings):
        data = self.atom(expr.data, env)
        if data.ctor is not None:
            for clause in expr.clauses:
                bound = _static_match(clause.pattern, data)
                if bound is None:
                    break  # undecidable statically: residualise
                if bound is not False:
                    mark = len(self.trail)
                    for v, pv in bound.items():
                        self.bind(env, v, pv)
                    result = yield from self.value(clause.body, env, out)
                    self.undo(mark)
                    return result
        bodies = [c.body for c in expr.clauses]
        patterns = [c.pattern for c in expr.clauses]
        residual_bodies = yield from self.branches(bodies, env, patterns)
        clauses = tuple(
            Clause(c.pattern, body, span=c.span)
            for c, body in zip(expr.clauses, residual_bodies, strict=True)
        )
        residual = Match(data.atom, clauses, expr.complete, span=expr.span)
        return self.emit(var, residual, out)

    # ------------------------------------------------------- references
    def ref_create(self, var: Var, expr: RefCreate, env: dict[Var, PV], out: _Bindings) -> PV:
        value = self.atom(expr.value, env)
        self.uses([value], out)
        ref = LocalRef(var.name_hint)
        self.local_refs[var] = ref
        self.store[ref] = _Entry(value, dirty=False, target=var)
        return self.emit(var, RefCreate(value.atom, span=expr.span), out, ref=ref)

    def ref_read(self, var: Var, expr: RefRead, env: dict[Var, PV], out: _Bindings) -> PV:
        ref = self.atom(expr.ref, env)
        ref_id = self.tracked(ref)
        if ref_id is None:
            if ref.ref is None:  # may be any global cell
                self.flush(out, _global_ids(self.store))
            return self.emit(var, RefRead(ref.atom, span=expr.span), out)
        entry = self.store.get(ref_id)
        if entry is not None:
            return entry.value
        pv = self.emit(var, RefRead(ref.atom, span=expr.span), out)
        self.store[ref_id] = _Entry(pv, dirty=False, target=ref.atom)
        return pv

    def ref_write(self, var: Var, expr: RefWrite, env: dict[Var, PV], out: _Bindings) -> PV:
        ref = self.atom(expr.ref, env)
        value = self.atom(expr.value, env)
        ref_id = self.tracked(ref)
        if ref_id is None:
            self.uses([value], out)
            if ref.ref is None:  # may be any global cell
                self.touch(_ANYTHING, out)
                self.touched(_ANYTHING)
            return self.emit(var, RefWrite(ref.atom, value.atom, span=expr.span), out)
        self.uses([v for v in [value] if v.ref is not None or v.fields is not None], out)
        self.store[ref_id] = _Entry(value, dirty=True, target=ref.atom)
        return self.emit(var, Tuple((), span=expr.span), out, fields=())

    # ------------------------------------------------------------ calls
    def call(self, var: Var, call: Call, env: dict[Var, PV], out: _Bindings):
        callee = call.callee
        args = [self.atom(a, env) for a in call.args]
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" in definition.traits:
                return (yield from self.loop(var, call, args, env, out))
            self.uses(args, out)
            rebuilt = Call(callee, tuple(a.atom for a in args), call.attrs, span=call.span)
            folded = _fold(definition, rebuilt, args)
            if folded is not None:
                return PV(Constant(folded, span=call.span), const=folded)
            return self.emit(var, rebuilt, out)
        if isinstance(callee, Constructor):
            self.uses(args, out)
            rebuilt = Call(callee, tuple(a.atom for a in args), span=call.span)
            return self.emit(var, rebuilt, out, ctor=callee, fields=tuple(args))
        target = self.atom(callee, env)
        if target.fn is not None and self.inlinable(target.fn, len(args)):
            return (yield from self.inline(target, args, out))
        self.uses(args, out)
        touched = self.touches_of(target)
        self.touch(touched, out)
        rebuilt = Call(target.atom, tuple(a.atom for a in args), call.attrs, span=call.span)
        pv = self.emit(var, rebuilt, out)
        self.touched(touched)
        return pv

    def loop(self, var: Var, call: Call, args: list[PV], env: dict[Var, PV], out: _Bindings):
        """A control-flow operator: unrolled when short and static, else
        residualised with its bodies partially evaluated."""
        unrolled = yield from self.unroll(call, args, env, out)
        if unrolled is not None:
            return unrolled
        touched = _NOTHING
        residual_args = []
        for a, pv in zip(call.args, args, strict=True):
            if isinstance(a, Function):
                self.capture(a, env, out)
                residual_args.append((yield from self.closure(a, env)))
                touched = _union(touched, self.closure_touches(a))
            else:
                self.uses([pv], out)
                residual_args.append(pv.atom)
                if _holds_function(a):
                    touched = _union(touched, self.touches_of(pv))
        self.touch(touched, out)
        rebuilt = Call(call.callee, tuple(residual_args), call.attrs, span=call.span)
        result = self.emit(var, rebuilt, out)
        self.touched(touched)
        return result

    def unroll(self, call: Call, args: list[PV], env: dict[Var, PV], out: _Bindings):
        """A short loop with a static trip count, one inlined body per step;
        None when it does not qualify."""
        if not call.has_type:
            return None
        name = op_def(call.callee).name
        if name == "cf.while_loop":
            return (yield from self.unroll_while(call, args, env, out))
        if name != "cf.foreach":
            return None
        length = _leading_length(call.args[1])
        result_type = call.checked_type
        if length is None or not 1 <= length <= MAX_UNROLL:
            return None
        body = self.known_function(call.args[0], args[0], env, 2)
        if body is None or self.size_of(body.fn) * length > self.budget:
            return None
        xs, state = args[1], args[2]
        outputs = []
        for t in range(length):
            x_t = self.step_of(xs, t, out, call.span)
            step = yield from self.inline(body, [x_t, state], out)
            outputs.append(self.project(step, 0, out))
            state = self.project(step, 1, out)
        assert isinstance(result_type, TupleType)
        stacked = self.stack(outputs, result_type.fields[0], out)
        return self.emit(
            Var("foreach"), Tuple((stacked.atom, state.atom)), out, fields=(stacked, state)
        )

    def known_function(self, arg: Expr, pv: PV, env: dict[Var, PV], arity: int) -> PV | None:
        """The loop body ``arg`` as a function that may be inlined, or None."""
        fn = PV(arg, fn=arg, env=self.captured(arg, env)) if isinstance(arg, Function) else pv
        if fn.fn is None or fn.fn in self.inlining or len(fn.fn.params) != arity:
            return None
        return fn if self.size_of(fn.fn) <= MAX_INLINE else None

    def unroll_while(self, call: Call, args: list[PV], env: dict[Var, PV], out: _Bindings):
        """``cf.while_loop`` whose condition is a constant at every step and
        false within ``MAX_UNROLL`` steps (or ``max_iterations``). The steps
        are evaluated on trial: when a condition is not a constant, what the
        trial emitted and learnt is thrown away and the loop stays a loop."""
        cond = self.known_function(call.args[0], args[0], env, 1)
        body = self.known_function(call.args[1], args[1], env, 1)
        result_type = call.checked_type
        if cond is None or body is None or not isinstance(result_type, TupleType):
            return None
        limit = call.attrs["max_iterations"]
        saved = (self.store, set(self.escaped), self.budget)
        self.store = self.snapshot()
        trial: _Bindings = []
        state, outputs = args[2], []
        while True:
            if limit is not None and len(outputs) >= limit:
                break
            if self.size_of(cond.fn) > self.budget:  # type: ignore[arg-type]
                return self.abandon(saved)
            go = yield from self.inline(cond, [state], trial)
            if go.const is None or go.const.shape != ():
                return self.abandon(saved)
            if not bool(go.const):
                break
            if len(outputs) >= MAX_UNROLL or self.size_of(body.fn) > self.budget:  # type: ignore[arg-type]
                return self.abandon(saved)
            step = yield from self.inline(body, [state], trial)
            outputs.append(self.project(step, 0, trial))
            state = self.project(step, 1, trial)
        stacked = self.stack_or_empty(outputs, result_type.fields[0], trial)
        if stacked is None:
            return self.abandon(saved)
        out.extend(trial)
        return self.emit(
            Var("while"), Tuple((stacked.atom, state.atom)), out, fields=(stacked, state)
        )

    def abandon(self, saved: tuple[dict[RefId, _Entry], set[LocalRef], int]) -> None:
        """Forget a trial: the store, the escaped references and the budget
        as they were before it."""
        self.store, self.escaped, self.budget = saved

    def stack_or_empty(self, outputs: list[PV], stacked_type: Type, out: _Bindings) -> PV | None:
        """The stacked outputs; for zero steps, empty tensors of the static
        per-step shapes (None if a shape is not static)."""
        if outputs:
            return self.stack(outputs, stacked_type, out)
        if isinstance(stacked_type, TupleType):
            parts = [self.stack_or_empty([], f, out) for f in stacked_type.fields]
            return None if None in parts else self.tuple_of(parts, out)  # type: ignore[arg-type]
        if not isinstance(stacked_type, TensorType):
            return None
        shape = stacked_type.shape[1:]
        if not all(isinstance(d, int) for d in shape):
            return None
        empty = np.zeros((0, *shape), dtype=stacked_type.dtype)
        return PV(Constant(empty), const=empty)

    def step_of(self, xs: PV, t: int, out: _Bindings, span) -> PV:
        """Step ``t`` of a sequence (a tensor or a tuple of tensors), as the
        operator's rule takes it: ``xs[t]``."""
        if xs.fields is not None:
            return self.tuple_of([self.step_of(f, t, out, span) for f in xs.fields], out)
        xs_type = xs.atom.checked_type if xs.atom.has_type else None
        if isinstance(xs_type, TupleType):
            fields = [self.project(xs, i, out) for i in range(len(xs_type.fields))]
            return self.tuple_of([self.step_of(f, t, out, span) for f in fields], out)
        index = np.asarray(t, dtype="int32")
        return self.apply("take", [xs, PV(Constant(index), const=index)], {"axis": 0}, out, span)

    def stack(self, outputs: list[PV], stacked_type: Type, out: _Bindings) -> PV:
        if isinstance(stacked_type, TupleType):
            parts = [
                self.stack([self.project(o, i, out) for o in outputs], f, out)
                for i, f in enumerate(stacked_type.fields)
            ]
            return self.tuple_of(parts, out)
        packed = self.tuple_of(outputs, out)
        return self.apply("stack", [packed], {"axis": 0}, out, None)

    def tuple_of(self, parts: list[PV], out: _Bindings) -> PV:
        return self.emit(
            Var("tuple"), Tuple(tuple(p.atom for p in parts)), out, fields=tuple(parts)
        )

    def project(self, pv: PV, index: int, out: _Bindings) -> PV:
        if pv.fields is not None:
            return pv.fields[index]
        return self.emit(Var("field"), TupleGetItem(pv.atom, index), out)

    def apply(self, name: str, args: list[PV], attrs: dict, out: _Bindings, span) -> PV:
        definition = op_def(name)
        call = Call(
            get_op(name), tuple(a.atom for a in args), definition.normalize_attrs(attrs), span=span
        )
        if all(a.const is not None for a in args):
            folded = _fold(definition, call, args)
            if folded is not None:
                return PV(Constant(folded, span=span), const=folded)
        if definition.num_inputs == 1 and args[0].fields is not None:
            # the operator takes a tuple: fold when every field is constant
            fields = args[0].fields
            if all(f.const is not None for f in fields):
                folded = _fold_tuple(definition, call, fields)
                if folded is not None:
                    return PV(Constant(folded, span=span), const=folded)
        return self.emit(Var(name.rsplit(".", 1)[-1]), call, out)

    def size_of(self, fn: Function) -> int:
        """``fn``'s number of nodes, or ``MAX_INLINE + 1`` if larger: what
        decides inlining, without a walk of each of many nested functions'
        whole bodies."""
        size = self.sizes.get(fn)
        if size is None:
            size = self.sizes[fn] = sum(1 for _ in islice(pre_order(fn), MAX_INLINE + 1))
        return size

    def inlinable(self, fn: Function, arity: int) -> bool:
        if fn in self.inlining or len(fn.params) != arity:
            return False
        size = self.size_of(fn)
        return size <= MAX_INLINE and size <= self.budget

    def inline(self, target: PV, args: list[PV], out: _Bindings):
        fn = target.fn
        assert fn is not None
        self.budget -= self.size_of(fn)
        copy = fresh_binders(fn)
        assert isinstance(copy, Function)
        self.free.update(free_vars_by_function(copy))
        env = dict(target.env or ())
        for param, arg in zip(copy.params, args, strict=True):
            env[param] = arg
        self.inlining.append(fn)
        try:
            return (yield from self.value(copy.body, env, out))
        finally:
            self.inlining.pop()


def _assemble(out: _Bindings, tail_binding: tuple[Var, Expr] | None, atom: Expr) -> Expr:
    """A let chain of ``out`` ending in the tail computation or atom. The
    write-backs appended after the tail computation was evaluated go before
    it: it touched no dirty value (that would have been written back before
    it), and so a tail call stays a tail call."""
    result = tail_binding[1] if tail_binding is not None else atom
    for var, bound in reversed(out):
        result = Let(var, bound, result, span=bound.span)
    return result


# ------------------------------------------------------------ touches
def _global_ids(store: dict[RefId, _Entry]) -> set[RefId]:
    return {k for k in store if isinstance(k, str)}


def _union(a: _Touch, b: _Touch) -> _Touch:
    cells = None if a.cells is None or b.cells is None else a.cells | b.cells
    writes = None if a.writes is None or b.writes is None else a.writes | b.writes
    return _Touch(cells, writes)


def _global_touches(module: IRModule) -> dict[str, _Touch]:
    """The cells each global function may read or write (``infer_effects``)."""
    result = {}
    for name, effects in infer_effects(module).functions.items():
        reads = {e.removeprefix("read @") for e in effects if e.startswith("read @")}
        writes = frozenset(e.removeprefix("write @") for e in effects if e.startswith("write @"))
        result[name] = _Touch(frozenset(reads) | writes, writes)
    return result


def _body_touches(fn: Function, module: IRModule, globals_: dict[str, _Touch]) -> _Touch:
    """The cells a closure's body may touch, read off its text: the cells it
    names, and those of the globals it calls; anything, when it calls a
    function or uses a reference that it did not make itself."""
    made_here: set[Var] = set()
    for node in pre_order(fn):
        if isinstance(node, Let) and isinstance(node.value, Function | RefCreate):
            made_here.add(node.var)
    touched = _NOTHING
    for node in pre_order(fn):
        if isinstance(node, GlobalVar):
            if node.name in module.cells:
                cell = frozenset({node.name})
                touched = _union(touched, _Touch(cell, cell))
            elif node.name in globals_:
                touched = _union(touched, globals_[node.name])
        elif isinstance(node, Call) and isinstance(node.callee, Var):
            if node.callee not in made_here:
                return _ANYTHING
        elif isinstance(node, Call) and isinstance(node.callee, Op):
            if "control_flow" in op_def(node.callee).traits:
                if any(
                    isinstance(a, Var) and a not in made_here
                    for a in node.args
                    if _holds_function(a)
                ):
                    return _ANYTHING
        elif isinstance(node, RefRead | RefWrite):
            if isinstance(node.ref, Var) and node.ref not in made_here:
                return _ANYTHING
    return touched


def _holds_function(expr: Expr) -> bool:
    """Whether an argument may be a function (by its type; unknown: yes)."""
    if not expr.has_type:
        return True
    return not isinstance(expr.checked_type, TensorType)


def _leading_length(expr: Expr) -> int | None:
    """The static number of steps of a ``cf.foreach`` sequence, if known."""
    if not expr.has_type:
        return None
    t = expr.checked_type
    while isinstance(t, TupleType) and t.fields:
        t = t.fields[0]
    if isinstance(t, TensorType) and t.shape and isinstance(t.shape[0], int):
        return t.shape[0]
    return None


def _annotated(param: Var) -> Var:
    """``param`` with its inferred type as annotation, when it has none and
    the type is closed (no type variables, nothing left unknown)."""
    if param.type_annotation is not None or not param.has_type:
        return param
    t = param.checked_type
    if any(isinstance(n, TypeVar | IncompleteType) for n in pre_order(t)):
        return param
    return Var(param.name_hint, t, span=param.span)


def _fold(definition, call: Call, args: list[PV], values: tuple | None = None) -> np.ndarray | None:
    """The value of a pure operator on constants (``values``: the arguments
    as the numpy rule takes them, when not the constants themselves), or None."""
    if definition.effect != "pure" or not all(a.const is not None for a in args):
        return None
    if definition.name.startswith("random."):
        return None
    try:
        given = tuple(a.const for a in args) if values is None else values
        result = definition.rule("numpy")(given, call.attrs)
    except Exception:  # a failure stays a run-time failure
        return None
    if not isinstance(result, np.ndarray | np.generic):
        return None
    result = np.asarray(result)
    if result.size > MAX_ELEMENTS:
        return None
    return result


def _fold_tuple(definition, call: Call, fields: tuple[PV, ...]) -> np.ndarray | None:
    """The value of a pure operator taking one tuple of constants, or None."""
    return _fold(
        definition, call, [PV(call.args[0], const=np.empty(0))], (tuple(f.const for f in fields),)
    )


def _static_match(pattern, data: PV) -> dict[Var, PV] | bool | None:
    """Bindings if ``pattern`` surely matches ``data``, False if it surely
    does not, None if that is not known statically."""
    work = [(pattern, data)]
    bound: dict[Var, PV] = {}
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            bound[p.var] = v
        elif isinstance(p, PatternConstructor):
            if v.ctor is None:
                return None
            if v.ctor.name != p.constructor.name:
                return False
            assert v.fields is not None
            work.extend(zip(p.patterns, v.fields, strict=True))
        elif isinstance(p, PatternTuple):
            if v.fields is None:
                return None
            work.extend(zip(p.patterns, v.fields, strict=True))
        else:
            return None
    return bound


def _substitute(expr: Expr, env: dict[Var, PV]) -> Expr:
    """A reference operation with its atoms replaced by their residual atoms."""
    changes = {}
    for name, kind in type(expr).FIELDS:
        value = getattr(expr, name)
        if kind == "node" and isinstance(value, Var) and value in env:
            changes[name] = env[value].atom
    return dataclasses.replace(expr, **changes) if changes else expr
