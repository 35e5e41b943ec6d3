"""A padded ``cf.while_loop`` (``pad_outputs=True``) differentiated as its
exact loop followed by the padding written in operators.

``cf.while_loop(cond, body, init[, m], max_iterations=M, pad_outputs=True)``
becomes a loop that runs the same steps on ``(carry, count)``, counting
them, and exact outputs padded with ``concatenate((outs, dyn.zeros(...)))``
to ``M`` (or ``m``) rows; its result is ``(padded, final, count)`` as the
operator's. The loop's backward is then the exact loop's (loop_rule.py: a
reverse loop over the steps run, never over padding), and the padding's
the operators' own (a concatenate's cotangent is cut at the rows run; zero
rows and the count have none). Run before differentiating
(api.grad_module), on the whole module: the forward computes the same
values.
"""

from __future__ import annotations

import numpy as np

from effir.passes.analyses.anf_sharing import fresh_binders
from effir.passes.analyses.infer_type import check

from ..ir.builder import LetBuilder
from ..ir.expr import Call, Expr, Function, GlobalVar, TupleGetItem, Var
from ..ir.module import IRModule
from ..ir.rewrite import PatternRewriter, RewritePattern, apply_patterns
from ..ir.types import TensorType, TupleType, Type
from ..ir.vjp import DifferentiationError
from ..ops.control import pads, while_limit
from .loop_vjp import splice


class _Unpad(RewritePattern):
    """A padded while_loop: its exact, counting loop and the padding."""

    roots = (Call,)
    ops = ("cf.while_loop",)

    def __init__(self, module: IRModule) -> None:
        self.module = module

    def match_and_rewrite(self, new: Expr, old: Expr, rw: PatternRewriter) -> Expr | None:
        if not isinstance(new, Call) or not pads(new):
            return None
        body = self._function(rw.resolve(new.args[1]), new)
        stacked_type = old.checked_type.fields[0]  # type: ignore[attr-defined]
        return _unpadded(new, body, stacked_type)

    def _function(self, body: Expr, call: Call) -> Function:
        """The loop body as a function whose copy may be inlined."""
        if isinstance(body, Function):
            return body
        if isinstance(body, GlobalVar) and body.name in self.module.functions:
            fn = self.module.functions[body.name]
            if not fn.type_params:
                return fn
        raise DifferentiationError(
            "the body of a padded while_loop must be a function literal, a let-bound closure "
            "or a monomorphic global function to be differentiated",
            call.span,
        )


def _unpadded(call: Call, body: Function, stacked_type: Type) -> Expr:
    """The block computing a padded ``call``'s ``(padded, final, count)``
    from an exact loop that counts its steps."""
    cond, _, init, *given = call.args
    limit, _ = while_limit(call)
    b = LetBuilder(call.span)
    with b.span(call.span):
        start = b.emit(b.tuple([init, b.const(0, "int64")]), "start")
        attrs = {"max_iterations": limit}
        loop = b.emit(
            b.call_op(
                "cf.while_loop", _paired_cond(cond, b), _counting(body, b), start, *given, **attrs
            ),
            "loop",
        )
        outs = b.emit_get(loop, 0, "outs")
        pair = b.emit_get(loop, 1, "final")
        final = b.emit_get(pair, 0, "final")
        count = b.emit_get(pair, 1, "count")
        if limit is not None:
            rows: Expr = b.const(limit, "int64")
        else:
            rows = b.emit(b.call_op("cast", given[0], dtype="int64"), "rows")
        missing = b.emit(b.call_op("subtract", rows, count), "missing")
        padded = _pad(b, outs, stacked_type, missing)
        return b.finish(b.tuple([padded, final, count]))


def _paired_cond(cond: Expr, b: LetBuilder) -> Function:
    """The condition on ``(carry, count)``: the carry's."""
    pair = Var("carry_and_count", span=b.current_span)
    cb = b.child()
    carry = cb.emit_get(pair, 0, "carry")
    test = cb.emit(cond, "cond") if isinstance(cond, Function) else cond
    return Function((pair,), cb.finish(cb.emit(cb.call(test, [carry]), "go")), span=cond.span)


def _counting(body: Function, b: LetBuilder) -> Function:
    """A copy of ``body`` on ``(carry, count)`` that counts its steps."""
    copy = fresh_binders(body)
    assert isinstance(copy, Function)
    pair = Var("carry_and_count", span=body.span)
    fb = b.child()
    fb.bind(copy.params[0], TupleGetItem(pair, 0))
    count = fb.emit_get(pair, 1, "count")
    result = splice(fb, copy.body)
    out = fb.emit_get(result, 0, "out")
    carry = fb.emit_get(result, 1, "carry")
    following = fb.emit(fb.call_op("add", count, fb.const(1, "int64")), "count")
    pair_out = fb.emit(fb.tuple([carry, following]), "carry_and_count")  # A-normal form
    ret = fb.emit(fb.tuple([out, pair_out]), "ret")
    return Function((pair,), fb.finish(ret), span=body.span)


def _pad(b: LetBuilder, outs: Expr, t: Type, missing: Expr) -> Expr:
    """The stacked outputs ``outs`` of type ``t`` followed by ``missing``
    rows of zeros, leaf by leaf. A per-step shape known statically is
    written into the zeros' type (a reshape), so that compiled code can
    relate the two pieces' sizes; a symbolic one is read at run time."""
    if isinstance(t, TupleType):
        fields = [_pad(b, b.emit_get(outs, i, "outs"), f, missing) for i, f in enumerate(t.fields)]
        return b.emit(b.tuple(fields), "padded")
    assert isinstance(t, TensorType)
    step = t.shape[1:]
    leading = b.emit(b.call_op("reshape", missing, newshape=[1]), "leading")
    if all(isinstance(d, int) for d in step):
        sizes = b.const(np.array(step, np.int64))
        rest: Expr = sizes
    else:
        full = b.emit(b.call_op("shape_of", outs, dtype="int64"), "shape")
        rest = b.emit(
            b.call_op("strided_slice", full, begin=[1], end=[t.ndim], axes=[0]), "step_shape"
        )
    parts = b.emit(b.tuple([leading, rest]), "parts")
    shape = b.emit(b.call_op("concatenate", parts, axis=0), "zeros_shape")
    zeros = b.emit(b.call_op("dyn.zeros", shape, dtype=t.dtype), "zeros")
    if all(isinstance(d, int) for d in step):
        zeros = b.emit(b.call_op("reshape", zeros, newshape=[-1, *step]), "zeros")
    rows = b.emit(b.tuple([outs, zeros]), "rows")  # bound: A-normal form
    return b.emit(b.call_op("concatenate", rows, axis=0), "padded")


def unpad_while_loops(module: IRModule) -> IRModule:
    """``module`` with every padded while_loop written as its exact loop
    and the padding (``module`` itself when it has none)."""
    return apply_patterns(module, lambda: [_Unpad(module)], check)


__all__ = ["unpad_while_loops"]
