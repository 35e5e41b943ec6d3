"""State passing through loops (``cf.foreach``, ``cf.while_loop`` and any
operator with a ``loop`` rule, ``ops.control.LoopShape``).

The cells a loop's steps write join the loop-carried state: the loop's
state becomes ``(state, cells...)`` (``signature.carry``), and each function
the loop calls is wrapped to unpack it, call the original with the cells'
values, and pack the new ones. Cells the bodies only read are captured. A
condition that writes state (it draws a key, it prints) cannot return new
state, so it moves into the step (``bind_condition_loop``); its carry gains
the answer of the last test and the iteration count.

``LoopTranslation`` is a part of ``translate.Translator``, written apart: it
uses the translator's ``a`` (the analysis), ``atom``, ``value_atom``,
``current``, ``bind_call`` and ``rebind``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from effir.ir.builder import LetBuilder, TupleLayout
from effir.ir.diagnostics import EffectError, Span
from effir.ir.expr import Call, Expr, Function, GlobalVar, Var
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.ir.types import TupleType
from effir.ops.control import LIMIT_ARG, LoopBody, LoopShape, pads, while_limit
from effir.passes.transforms.state_passing.signature import STEP, Signature, carry, out_name

if TYPE_CHECKING:
    from effir.passes.transforms.state_passing.analyse import Analysis


class LoopTranslation:
    """The translator's rules for loop operators."""

    # What the rules use of the translator (``translate.Translator`` defines them).
    module: IRModule
    a: Analysis
    atom: Callable[[Expr], Expr]
    value_atom: Callable[[Expr, LetBuilder], Expr]
    current: Callable[[dict[str, Expr], str, Expr], Expr]
    bind_call: Callable[[Var, Call, Signature, dict[str, Expr], LetBuilder], Var]
    rebind: Callable[[LetBuilder, Expr, TupleLayout, str, tuple[str, ...], dict[str, Expr]], None]

    def bind_loop(
        self,
        var: Var,
        call: Call,
        name: str,
        sigma: dict[str, Expr],
        b: LetBuilder,
    ) -> None:
        """A loop whose functions touch cells: the cells its steps write join
        the loop-carried state; those they only read are captured. The loop's
        shape (which argument is the state, which parameter receives it)
        is its ``loop`` rule."""
        span = call.span
        sigs: dict[int, Signature] = {}
        for i, arg in enumerate(call.args):
            found = self.a.loop_bodies.get((call, i))
            if not found:
                continue
            if isinstance(arg, GlobalVar) and arg.name in self.module.functions:
                sigs[i] = self.a.own_signature(("def", arg.name))
            else:
                sigs[i] = self.a.site_signature("indirect", found)
        args = [
            self.atom(a) if i in sigs else self.value_atom(a, b) for i, a in enumerate(call.args)
        ]
        if not any(sigs.values()):
            b.bind(var, Call(call.callee, tuple(args), call.attrs, span=span))
            return
        shape = op_def(name).rules.get("loop")
        if shape is None:
            raise EffectError(
                f"{name} runs functions that touch state but has no 'loop' rule saying how "
                "it threads its state",
                span,
            )
        carried: tuple[str, ...] = ()
        for body in shape.bodies:
            sig = sigs.get(body.arg, Signature())
            if body.step:
                carried = self.a.sort(set(carried) | set(sig.writes))
            elif sig.writes:
                self.bind_condition_loop(var, call, name, shape, sigs, args, sigma, b)
                return
        for body in shape.bodies:
            sig = sigs.get(body.arg, Signature())
            if sig or carried:
                args[body.arg] = self.loop_function(args[body.arg], body, sig, carried, sigma, span)
        if not carried:
            b.bind(var, Call(call.callee, tuple(args), call.attrs, span=span))
            return
        layout = carry(len(carried))
        with b.span(span):
            init = layout.build(b, state=args[shape.init], cells=[sigma[c] for c in carried])
            args[shape.init] = b.emit(init, "init")
            out = b.emit(b.call(call.callee, args, call.attrs), out_name(var))
            # The user's result, with the bare final state in its place.
            result_type = call.checked_type
            assert isinstance(result_type, TupleType)
            fields: list[Expr] = [
                b.emit_get(out, k, "final" if k == shape.final else "outputs")
                for k in range(len(result_type.fields))
            ]
            final = fields[shape.final]
            fields[shape.final] = layout.get(b, final, "state")
            self.rebind(b, final, layout, "cells", carried, sigma)
            b.bind(var, b.tuple(fields))

    def bind_condition_loop(
        self,
        var: Var,
        call: Call,
        name: str,
        shape: LoopShape,
        sigs: dict[int, Signature],
        args: list[Expr],
        sigma: dict[str, Expr],
        b: LetBuilder,
    ) -> None:
        """A loop whose condition writes state (draws a key, prints): the
        condition cannot return new state, so it moves into the loop. It is
        tested once before the loop (unless ``max_iterations`` is 0, known
        when compiling or at run time) and then at the end of each step,
        unless that step was the last one ``max_iterations`` allows (an
        attribute or a run-time argument); the loop's own
        condition reads the answer from the carried state. The effects
        happen in the original order: test, step, test, ..., the failing
        test (or the last step)."""
        span = call.span
        conditions = [body for body in shape.bodies if not body.step]
        steps = [body for body in shape.bodies if body.step]
        if len(conditions) != 1 or len(steps) != 1 or any(x.params != 1 for x in shape.bodies):
            raise EffectError(
                f"the condition of {name} writes state, which state passing can only "
                "thread through a loop of one condition and one step on the loop state",
                span,
            )
        cond, step = conditions[0], steps[0]
        csig = sigs.get(cond.arg, Signature())
        bsig = sigs.get(step.arg, Signature())
        carried = self.a.sort(set(csig.writes) | set(bsig.writes))
        # ``max_iterations``: the attribute, or the loop's run-time argument
        # (translated: ``args``), which the counter takes the dtype of.
        limit, given = while_limit(call)
        bound: Expr | None = args[LIMIT_ARG] if given is not None else None
        dtype = given.checked_type.dtype if given is not None else "int32"
        limited = limit is not None or bound is not None
        # The carried state: the loop state, the answer of the last test,
        # the iterations run so far (under ``max_iterations``), the cells.
        layout = TupleLayout(
            "state", "go", ("counter", 1 if limited else 0), ("cells", len(carried))
        )
        # What the test after a step gives: the answer and the cells it wrote.
        tested_layout = TupleLayout("go", ("cells", len(csig.writes)))

        def test(state: Expr, env: dict[str, Expr], tb: LetBuilder) -> Expr:
            """Call the condition on ``state``, rebinding the cells it writes."""
            test_args = (state,) + tuple(self.current(env, c, call) for c in csig.reads)
            return self.bind_call(tb.var("go"), tb.call(args[cond.arg], test_args), csig, env, tb)

        def test_below(state: Expr, count: Expr, env: dict[str, Expr], tb: LetBuilder) -> Expr:
            """The test, only while ``count`` is below the limit (else no
            test: false, the cells as they are), rebinding the cells it
            writes."""
            more = tb.emit(tb.call_op("less", count, bound or tb.const(limit)), "more")
            then_env = dict(env)
            then_b = tb.child()
            then_go = test(state, then_env, then_b)
            then_value = tested_layout.build(
                then_b, go=then_go, cells=[then_env[c] for c in csig.writes]
            )
            else_value = tested_layout.build(
                tb, go=tb.const(False), cells=[env[c] for c in csig.writes]
            )
            tested = tb.emit(tb.if_(more, then_b.finish(then_value), else_value), "tested")
            go = tested_layout.get(tb, tested, "go")
            self.rebind(tb, tested, tested_layout, "cells", csig.writes, env)
            return go

        with b.span(span):
            before = dict(sigma)
            zero = b.const(0, dtype)
            go: Expr
            if limit == 0:
                go = b.const(False)
            elif bound is not None:  # known at run time: no test if it is 0
                go = test_below(args[shape.init], zero, before, b)
            else:
                go = test(args[shape.init], before, b)
            init = layout.build(
                b,
                state=args[shape.init],
                go=go,
                counter=[zero] if limited else [],
                cells=[before[c] for c in carried],
            )
            init_var = b.emit(init, "init")
            # The loop's condition: the answer the last test left in the carry.
            carry_var = b.var("carry")
            new_cond = b.function([carry_var], layout.item(b, carry_var, "go"))
            # The loop's step: the original step, then the next test.
            body = b.child()
            carry_var = body.var("carry")
            inner: dict[str, Expr] = dict(sigma)
            loop_state = layout.get(body, carry_var, "state", "s")
            self.rebind(body, carry_var, layout, "cells", carried, inner)
            step_args = (loop_state,) + tuple(self.current(inner, c, call) for c in bsig.reads)
            result = self.bind_call(
                body.var("step"), body.call(args[step.arg], step_args), bsig, inner, body
            )
            out = STEP.get(body, result, "out")
            new_state = STEP.get(body, result, "state", "s")
            count: list[Expr] = []
            if not limited:
                next_go = test(new_state, inner, body)
            else:
                (done,) = layout.get_group(body, carry_var, "counter", ["done"])
                k = body.emit(body.call_op("add", done, body.const(1, dtype)), "k")
                next_go = test_below(new_state, k, inner, body)
                count = [k]
            new_carry = layout.build(
                body,
                state=new_state,
                go=next_go,
                counter=count,
                cells=[inner[c] for c in carried],
            )
            new_carry_var = body.emit(new_carry, "carry")
            step_result = STEP.build(body, out=out, state=new_carry_var)
            new_step = b.function([carry_var], body.finish(step_result))
            loop_args = list(args)
            loop_args[cond.arg] = new_cond
            loop_args[step.arg] = new_step
            loop_args[shape.init] = init_var
            looped = b.emit(b.call(call.callee, loop_args, call.attrs), out_name(var))
            # The loop's result: the stacked outputs, then the final carry.
            outputs = b.emit_get(looped, 0, "outputs")
            final = b.emit_get(looped, shape.final, "final")
            state = layout.get(b, final, "state")
            self.rebind(b, final, layout, "cells", carried, sigma)
            rows = [b.emit_get(looped, 2, "count")] if pads(call) else []
            b.bind(var, b.tuple([outputs, state, *rows]))

    def loop_function(
        self,
        fn_atom: Expr,
        body: LoopBody,
        sig: Signature,
        carried: tuple[str, ...],
        sigma: dict[str, Expr],
        span: Span | None,
    ) -> Function:
        """The function the loop calls instead of ``fn_atom``: its state
        parameter receives ``(state, carried cells...)``; a step returns
        ``(out, (new_state, new cells...))``, a condition its bool."""
        b = LetBuilder(span)
        layout = carry(len(carried))
        params = [b.var("x") for _ in range(body.params)]
        inner: dict[str, Expr] = {}
        call_args: list[Expr] = list(params)
        if carried:
            carry_var = b.var("carry")
            params[body.state_param] = carry_var
            call_args[body.state_param] = layout.get(b, carry_var, "state", "s")
            self.rebind(b, carry_var, layout, "cells", carried, inner)
        for cell in sig.reads:  # cells only read inside the loop are captured
            if cell not in inner:
                inner[cell] = self.current(sigma, cell, b.var("loop"))
        call = b.call(fn_atom, tuple(call_args) + tuple(inner[c] for c in sig.reads))
        if not body.step or not carried:
            return b.function(params, b.finish(call))
        result = self.bind_call(b.var("step"), call, sig, inner, b)
        out = STEP.get(b, result, "out")
        new_state = STEP.get(b, result, "state", "s")
        new_carry = layout.build(b, state=new_state, cells=[inner[c] for c in carried])
        new_carry_var = b.emit(new_carry, "carry")
        return b.function(params, b.finish(STEP.build(b, out=out, state=new_carry_var)))
