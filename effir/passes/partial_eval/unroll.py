"""Unrolling short loops with a static trip count (the fuel rules of the
package docstring): ``cf.foreach`` over a sequence of static length, and
``cf.while_loop`` whose condition folds to a constant at every step, tried
and thrown away when it does not.

``Unrolling`` is a part of ``evaluator.Evaluator``, written apart: it uses
the evaluator's ``inline``, ``emit``, ``size_of``, ``snapshot`` and its
store and budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir.builder import LetBuilder
from ...ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ...ir.op import get_op, op_def
from ...ir.types import TensorType, TupleType, Type
from ...ops.control import LIMIT_ARG, pads, while_limit
from .static import fold, fold_tuple, leading_length
from .values import MAX_INLINE, MAX_UNROLL, PV, Entry, LocalRef, RefId

if TYPE_CHECKING:
    from .evaluator import PartialEvaluator


class Unrolling:
    """The evaluator's rules for unrolling loops."""

    def unroll(
        self: PartialEvaluator, call: Call, args: list[PV], env: dict[Var, PV], out: LetBuilder
    ):
        """A short loop with a static trip count, one inlined body per step;
        None when it does not qualify."""
        if not call.has_type:
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
        body = self.known_function(call.args[0], args[0], env, 2)
        if body is None or self.size_of(body.fn) * length > self.budget:
            return None
        xs, state = args[1], args[2]
        outputs = []
        for t in range(length):
            x_t = self.step_of(xs, t, out, call.span)
            step = yield self.inline(body, [x_t, state], out)
            outputs.append(self.project(step, 0, out))
            state = self.project(step, 1, out)
        assert isinstance(result_type, TupleType)
        stacked = self.stack(outputs, result_type.fields[0], out)
        return self.emit(
            Var("foreach"), Tuple((stacked.atom, state.atom)), out, fields=(stacked, state)
        )

    def known_function(
        self: PartialEvaluator, arg: Expr, pv: PV, env: dict[Var, PV], arity: int
    ) -> PV | None:
        """The loop body ``arg`` as a function that may be inlined, or None."""
        fn = PV(arg, fn=arg, env=self.captured(arg, env)) if isinstance(arg, Function) else pv
        if fn.fn is None or fn.fn in self.inlining or len(fn.fn.params) != arity:
            return None
        if self.instantiation(fn.fn, ()) is None:  # no call site tells its types
            return None
        return fn if self.size_of(fn.fn) <= MAX_INLINE else None

    def unroll_while(
        self: PartialEvaluator, call: Call, args: list[PV], env: dict[Var, PV], out: LetBuilder
    ):
        """``cf.while_loop`` whose condition is a constant at every step and
        false within ``MAX_UNROLL`` steps (or ``max_iterations``). The steps
        are evaluated on trial: when a condition is not a constant, what the
        trial emitted and learnt is thrown away and the loop stays a loop."""
        cond = self.known_function(call.args[0], args[0], env, 1)
        body = self.known_function(call.args[1], args[1], env, 1)
        result_type = call.checked_type
        if cond is None or body is None or not isinstance(result_type, TupleType):
            return None
        limit, given = while_limit(call)
        if given is not None:  # a run-time max_iterations: only a constant one unrolls
            value = args[LIMIT_ARG].const
            if value is None or value.shape != () or int(value) < 0:
                return None  # (a negative one fails when the loop runs, as it should)
            limit = int(value)
        saved = (self.store, set(self.escaped), self.budget)
        self.store = self.snapshot()
        trial = LetBuilder()
        state, outputs = args[2], []
        while True:
            if limit is not None and len(outputs) >= limit:
                break
            if self.size_of(cond.fn) > self.budget:  # type: ignore[arg-type]
                return self.abandon(saved)
            go = yield self.inline(cond, [state], trial)
            if go.const is None or go.const.shape != ():
                return self.abandon(saved)
            if not bool(go.const):
                break
            if len(outputs) >= MAX_UNROLL or self.size_of(body.fn) > self.budget:  # type: ignore[arg-type]
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

    def pad_rows(
        self: PartialEvaluator, stacked: PV, rows: int, stacked_type: Type, out: LetBuilder
    ) -> PV | None:
        """A padded while_loop's ``stacked`` outputs followed by ``rows``
        rows of zeros (None where a per-step shape is not static)."""
        if rows == 0:
            return stacked
        if isinstance(stacked_type, TupleType):
            parts = [
                self.pad_rows(self.project(stacked, i, out), rows, f, out)
                for i, f in enumerate(stacked_type.fields)
            ]
            return None if None in parts else self.tuple_of(parts, out)  # type: ignore[arg-type]
        if not isinstance(stacked_type, TensorType):
            return None
        shape = stacked_type.shape[1:]
        if not all(isinstance(d, int) for d in shape):
            return None
        zeros = np.zeros((rows, *shape), dtype=stacked_type.dtype)
        padding = PV(Constant(zeros), const=zeros)
        return self.apply("concatenate", [self.tuple_of([stacked, padding], out)], {}, out, None)

    def abandon(
        self: PartialEvaluator, saved: tuple[dict[RefId, Entry], set[LocalRef], int]
    ) -> None:
        """Forget a trial: the store, the escaped references and the budget
        as they were before it."""
        self.store, self.escaped, self.budget = saved

    def stack_or_empty(
        self: PartialEvaluator, outputs: list[PV], stacked_type: Type, out: LetBuilder
    ) -> PV | None:
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

    def step_of(self: PartialEvaluator, xs: PV, t: int, out: LetBuilder, span) -> PV:
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

    def stack(self: PartialEvaluator, outputs: list[PV], stacked_type: Type, out: LetBuilder) -> PV:
        if isinstance(stacked_type, TupleType):
            parts = [
                self.stack([self.project(o, i, out) for o in outputs], f, out)
                for i, f in enumerate(stacked_type.fields)
            ]
            return self.tuple_of(parts, out)
        packed = self.tuple_of(outputs, out)
        return self.apply("stack", [packed], {"axis": 0}, out, None)

    def tuple_of(self: PartialEvaluator, parts: list[PV], out: LetBuilder) -> PV:
        return self.emit(
            Var("tuple"), Tuple(tuple(p.atom for p in parts)), out, fields=tuple(parts)
        )

    def project(self: PartialEvaluator, pv: PV, index: int, out: LetBuilder) -> PV:
        if pv.fields is not None:
            return pv.fields[index]
        return self.emit(Var("field"), TupleGetItem(pv.atom, index), out)

    def apply(
        self: PartialEvaluator, name: str, args: list[PV], attrs: dict, out: LetBuilder, span
    ) -> PV:
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
