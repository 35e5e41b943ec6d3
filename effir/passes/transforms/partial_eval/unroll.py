"""Unrolling short loops with a static trip count (the fuel rules of the
package docstring): ``cf.foreach`` over a sequence of static length, and
``cf.while_loop`` whose condition folds to a constant at every step, tried
and thrown away when it does not.

``MAX_UNROLL`` bounds the loop bodies that unrolling a loop inlines, the
bodies of the short loops nested in it included (``inlined_steps``): each
level of a loop nest may be short (the k-step segments of a checkpointed
gradient's loop, T/k of them) while the nest runs T steps, which unrolled
whole would be straight-line code T steps long, where a loop of T steps
stays a loop. So an outer loop whose nest is too long stays a loop, and
only its short inner loops may unroll in its body.

``Unrolling`` is a part of ``evaluator.Evaluator``, written apart: it uses
the evaluator's ``inline``, ``emit``, ``size_of``, ``snapshot`` and its
store and budget."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from effir.ir.builder import LetBuilder
from effir.ir.evaluator import Computation
from effir.ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from effir.ir.functor import post_order, pre_order
from effir.ir.node import Node, child_nodes
from effir.ir.op import get_op, op_def
from effir.ir.types import TensorType, TupleType, Type
from effir.ops.control import LIMIT_ARG, pads, while_limit
from effir.passes.transforms.partial_eval.static import fold, fold_tuple, leading_length
from effir.passes.transforms.partial_eval.values import (
    MAX_INLINE,
    MAX_UNROLL,
    PV,
    Entry,
    LocalRef,
    RefId,
)


class _Emit(Protocol):
    def __call__(self, var: Var, value: Expr, out: LetBuilder, **known: Any) -> PV: ...


class Unrolling:
    """The evaluator's rules for unrolling loops."""

    # What the rules use of the evaluator (``evaluator.PartialEvaluator`` defines them).
    budget: int
    inlining: list[Function]
    store: dict[RefId, Entry]
    escaped: set[LocalRef]
    captured: Callable[[Function, dict[Var, PV]], dict[Var, PV]]
    emit: _Emit
    inline: Callable[[PV, list[PV], LetBuilder], Computation[PV]]
    instantiation: Callable[[Function, Iterable[tuple[Type, Type]]], dict[str, Type] | None]
    size_of: Callable[[Function], int]
    nests: set[Function]
    snapshot: Callable[[], dict[RefId, Entry]]

    def unroll(self, call: Call, args: list[PV], env: dict[Var, PV], out: LetBuilder):
        """A short loop with a static trip count, one inlined body per step;
        None when it does not qualify."""
        if not call.has_type or not isinstance(call.callee, Op):
            return None
        name = op_def(call.callee).name
        if name == "cf.while_loop":
            return (yield self.unroll_while(call, args, env, out))
        if name != "cf.foreach":
            return None
        length = leading_length(call.args[1])
        result_type = call.checked_type
        if length is None or not 1 <= length <= MAX_UNROLL:
            return None
        known = self.known_function(call.args[0], args[0], env, 2)
        if known is None:
            return None
        body, body_fn = known
        if self.size_of(body_fn) * length > self.budget:
            return None
        if length * self.steps_of(body_fn) > MAX_UNROLL:
            return None  # a nest too long to unroll whole (module docstring)
        xs, state = args[1], args[2]
        xs_type = call.args[1].checked_type if call.args[1].has_type else None
        outputs: list[PV] = []
        for t in range(length):
            x_t = self.step_of(xs, t, out, call.span, xs_type)
            step = yield self.inline(body, [x_t, state], out)
            outputs.append(self.project(step, 0, out))
            state = self.project(step, 1, out)
        assert isinstance(result_type, TupleType)
        stacked = self.stack(outputs, result_type.fields[0], out)
        return self.emit(
            Var("foreach"), Tuple((stacked.atom, state.atom)), out, fields=(stacked, state)
        )

    def steps_of(self, body_fn: Function) -> int:
        """``inlined_steps(body_fn)``, 1 without a walk for a body that
        ``size_of`` found holds no loop."""
        return inlined_steps(body_fn) if body_fn in self.nests else 1

    def known_function(
        self, arg: Expr, pv: PV, env: dict[Var, PV], arity: int
    ) -> tuple[PV, Function] | None:
        """The loop body ``arg`` as a function that may be inlined (its value
        and its function), or None."""
        fn = PV(arg, fn=arg, env=self.captured(arg, env)) if isinstance(arg, Function) else pv
        if fn.fn is None or fn.fn in self.inlining or len(fn.fn.params) != arity:
            return None
        if self.instantiation(fn.fn, ()) is None:  # no call site tells its types
            return None
        return (fn, fn.fn) if self.size_of(fn.fn) <= MAX_INLINE else None

    def unroll_while(self, call: Call, args: list[PV], env: dict[Var, PV], out: LetBuilder):
        """``cf.while_loop`` whose condition is a constant at every step and
        false within ``MAX_UNROLL`` steps (or ``max_iterations``). The steps
        are evaluated on trial: when a condition is not a constant, what the
        trial emitted and learnt is thrown away and the loop stays a loop."""
        known_cond = self.known_function(call.args[0], args[0], env, 1)
        known_body = self.known_function(call.args[1], args[1], env, 1)
        result_type = call.checked_type
        if known_cond is None or known_body is None or not isinstance(result_type, TupleType):
            return None
        (cond, cond_fn), (body, body_fn) = known_cond, known_body
        per_step = self.steps_of(body_fn)
        limit, given = while_limit(call)
        if given is not None:  # a run-time max_iterations: only a constant one unrolls
            value = args[LIMIT_ARG].const
            if value is None or value.shape != () or int(value) < 0:
                return None  # (a negative one fails when the loop runs, as it should)
            limit = int(value)
        saved = (self.store, set(self.escaped), self.budget)
        self.store = self.snapshot()
        trial = LetBuilder()
        state = args[2]
        outputs: list[PV] = []
        while True:
            if limit is not None and len(outputs) >= limit:
                break
            if self.size_of(cond_fn) > self.budget:
                return self.abandon(saved)
            go = yield self.inline(cond, [state], trial)
            if go.const is None or go.const.shape != ():
                return self.abandon(saved)
            if not bool(go.const):
                break
            too_long = (len(outputs) + 1) * per_step > MAX_UNROLL
            if too_long or self.size_of(body_fn) > self.budget:
                return self.abandon(saved)
            step = yield self.inline(body, [state], trial)
            outputs.append(self.project(step, 0, trial))
            state = self.project(step, 1, trial)
        stacked = self.stack_or_empty(outputs, result_type.fields[0], trial)
        if stacked is not None and pads(call):
            assert limit is not None  # the type relation requires it
            stacked = self.pad_rows(stacked, limit - len(outputs), result_type.fields[0], trial)
        if stacked is None:
            return self.abandon(saved)
        out.bindings.extend(trial.bindings)
        fields: tuple[PV, ...] = (stacked, state)
        if pads(call):
            count = np.asarray(len(outputs), np.int64)
            fields += (PV(Constant(count, span=call.span), const=count),)
        return self.emit(Var("while"), Tuple(tuple(f.atom for f in fields)), out, fields=fields)

    def pad_rows(self, stacked: PV, rows: int, stacked_type: Type, out: LetBuilder) -> PV | None:
        """A padded while_loop's ``stacked`` outputs followed by ``rows``
        rows of zeros (None where a per-step shape is not static)."""
        if rows == 0:
            return stacked
        if isinstance(stacked_type, TupleType):
            padded = [
                self.pad_rows(self.project(stacked, i, out), rows, f, out)
                for i, f in enumerate(stacked_type.fields)
            ]
            parts = [p for p in padded if p is not None]
            return self.tuple_of(parts, out) if len(parts) == len(padded) else None
        if not isinstance(stacked_type, TensorType):
            return None
        shape = [d for d in stacked_type.shape[1:] if isinstance(d, int)]
        if len(shape) != len(stacked_type.shape) - 1:
            return None
        zeros = np.zeros((rows, *shape), dtype=stacked_type.dtype)
        padding = PV(Constant(zeros), const=zeros)
        return self.apply("concatenate", [self.tuple_of([stacked, padding], out)], {}, out, None)

    def abandon(self, saved: tuple[dict[RefId, Entry], set[LocalRef], int]) -> None:
        """Forget a trial: the store, the escaped references and the budget
        as they were before it."""
        self.store, self.escaped, self.budget = saved

    def stack_or_empty(self, outputs: list[PV], stacked_type: Type, out: LetBuilder) -> PV | None:
        """The stacked outputs; for zero steps, empty tensors of the static
        per-step shapes (None if a shape is not static)."""
        if outputs:
            return self.stack(outputs, stacked_type, out)
        if isinstance(stacked_type, TupleType):
            empties = [self.stack_or_empty([], f, out) for f in stacked_type.fields]
            parts = [p for p in empties if p is not None]
            return self.tuple_of(parts, out) if len(parts) == len(empties) else None
        if not isinstance(stacked_type, TensorType):
            return None
        shape = [d for d in stacked_type.shape[1:] if isinstance(d, int)]
        if len(shape) != len(stacked_type.shape) - 1:
            return None
        empty = np.zeros((0, *shape), dtype=stacked_type.dtype)
        return PV(Constant(empty), const=empty)

    def step_of(
        self, xs: PV, t: int, out: LetBuilder, span: Any, xs_type: Type | None = None
    ) -> PV:
        """Step ``t`` of a sequence (a tensor or a tuple of tensors), as the
        operator's rule takes it: ``xs[t]``. ``xs_type`` is the sequence's
        type as the loop's call was checked: the value's atom may be a
        variable the evaluator made, which carries no type of its own (a
        parameter of an enclosing loop's body that stays a loop)."""
        if xs_type is None and xs.atom.has_type:
            xs_type = xs.atom.checked_type
        if xs.fields is not None:
            parts = xs_type.fields if isinstance(xs_type, TupleType) else [None] * len(xs.fields)
            steps = [
                self.step_of(f, t, out, span, p) for f, p in zip(xs.fields, parts, strict=True)
            ]
            return self.tuple_of(steps, out)
        if isinstance(xs_type, TupleType):
            fields = [self.project(xs, i, out) for i in range(len(xs_type.fields))]
            steps = [
                self.step_of(f, t, out, span, p)
                for f, p in zip(fields, xs_type.fields, strict=True)
            ]
            return self.tuple_of(steps, out)
        index = np.asarray(t, dtype="int32")
        return self.apply("take", [xs, PV(Constant(index), const=index)], {"axis": 0}, out, span)

    def stack(self, outputs: list[PV], stacked_type: Type, out: LetBuilder) -> PV:
        if isinstance(stacked_type, TupleType):
            parts = [
                self.stack([self.project(o, i, out) for o in outputs], f, out)
                for i, f in enumerate(stacked_type.fields)
            ]
            return self.tuple_of(parts, out)
        packed = self.tuple_of(outputs, out)
        return self.apply("stack", [packed], {"axis": 0}, out, None)

    def tuple_of(self, parts: list[PV], out: LetBuilder) -> PV:
        return self.emit(
            Var("tuple"), Tuple(tuple(p.atom for p in parts)), out, fields=tuple(parts)
        )

    def project(self, pv: PV, index: int, out: LetBuilder) -> PV:
        if pv.fields is not None:
            return pv.fields[index]
        return self.emit(Var("field"), TupleGetItem(pv.atom, index), out)

    def apply(self, name: str, args: list[PV], attrs: dict, out: LetBuilder, span) -> PV:
        definition = op_def(name)
        call = Call(
            get_op(name), tuple(a.atom for a in args), definition.normalize_attrs(attrs), span=span
        )
        if all(a.const is not None for a in args):
            folded = fold(definition, call, args)
            if folded is not None:
                return PV(Constant(folded, span=span), const=folded)
        if definition.num_inputs == 1 and args[0].fields is not None:
            # the operator takes a tuple: fold when every field is constant
            fields = args[0].fields
            if all(f.const is not None for f in fields):
                folded = fold_tuple(definition, call, fields)
                if folded is not None:
                    return PV(Constant(folded, span=span), const=folded)
        return self.emit(Var(name.rsplit(".", 1)[-1]), call, out)


def inlined_steps(fn: Function) -> int:
    """The loop bodies one inlined copy of ``fn`` (a loop body) makes when
    the short loops in it unroll in turn: 1 for a body without loops; else
    the sum over its loops of a ``cf.foreach``'s static steps times its
    body's, where that is at most ``MAX_UNROLL`` (it would unroll), and 1
    for any other loop (one that stays a loop; a ``while_loop``, whose steps
    only a trial tells). ``fn`` is small (at most ``MAX_INLINE`` nodes, as
    ``known_function`` requires), so the walk is bounded; a nested body
    found neither as a literal nor as a function let-bound in ``fn`` counts
    as one step."""
    functions = {n.var: n.value for n in pre_order(fn.body, children=_exprs) if isinstance(n, Let)}
    counts: dict[int, int] = {}  # per node: the bodies its subtree's loops make

    def body_of(arg: Expr) -> Function | None:
        found = functions.get(arg) if isinstance(arg, Var) else arg
        return found if isinstance(found, Function) else None

    def steps_of(body: Function | None) -> int:
        return 1 if body is None else max(1, counts.get(id(body), 0))

    for node in post_order(fn.body, children=_exprs):
        # a nested function's loops count where it is called or looped over
        total = sum(counts.get(id(c), 0) for c in _exprs(node) if not isinstance(c, Function))
        if isinstance(node, Function):
            total = counts.get(id(node.body), 0)
        elif isinstance(node, Call) and isinstance(node.callee, Op):
            name = op_def(node.callee).name
            if name == "cf.foreach":
                length = leading_length(node.args[1])
                nested = None if length is None else length * steps_of(body_of(node.args[0]))
                total += nested if nested is not None and nested <= MAX_UNROLL else 1
            elif name == "cf.while_loop":
                total += 1
        elif isinstance(node, Call):  # a closure called: its loops, once
            callee = body_of(node.callee)
            total += 0 if callee is None else counts.get(id(callee), 0)
        counts[id(node)] = total
    return max(1, counts.get(id(fn.body), 0))


def _exprs(node: Node) -> list[Node]:
    """The children of ``node`` that may hold loops (not its types)."""
    return [c for c in child_nodes(node) if not isinstance(c, Type)]
