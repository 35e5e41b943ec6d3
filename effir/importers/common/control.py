"""The control flow both importers build the same way, once converted.

- An ``if`` of two converted branches: their outputs are joined
  (types.py), each branch widened to the joined types (``forget_dims``
  where a dimension differs); different counts, ranks or dtypes are an
  error.
- A loop's carried types settle: what the body returns is joined with
  the types it was converted for, and the body converted again, until
  nothing changes ([RULE TYPE-JOIN], onnx/ops/control.py).
- A ``cf.foreach`` of a converted step: the step returns ``((per-step
  outputs), (carried results))`` and the loop gives the per-step outputs
  stacked along a new leading axis, then the final carried values.

What differs per importer (the node's arguments, where a branch comes
from, the names of the values) stays in its ``ops/control.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...ir.expr import Call, Expr, Function, Tuple, Var
from ...ir.op import get_op
from ...ir.types import TensorType, TupleType, Type
from .block import Block
from .types import JoinError, covers, join
from .values import Value

Failure = Callable[[str], Exception]
"""How a node reports an error (its ``ctx.error``: the node's label and place)."""

Branch = tuple[Block, Sequence[Value]]
"""A converted branch: its bindings and its outputs."""


def joined_if(
    block: Block,
    cond: Value,
    then: Branch,
    other: Branch,
    error: Failure,
    name: str,
    names: Sequence[str],
    *,
    unwrap_one: bool,
) -> list[Value]:
    """``if cond then else other``, bound in ``block``, and its outputs: the
    ``if`` itself when it has one and ``unwrap_one``, else the fields (named
    ``names``) of the tuple it gives."""
    then_out, else_out = then[1], other[1]
    if len(then_out) != len(else_out):
        raise error(f"its branches give {len(then_out)} and {len(else_out)} outputs")
    types = []
    for k, (a, b) in enumerate(zip(then_out, else_out, strict=True)):
        try:
            types.append(join(a.type, b.type))
        except JoinError as err:
            raise error(f"output {k} of its branches cannot be one value: {err}") from None
    single = unwrap_one and len(types) == 1
    then_expr, else_expr = (
        _branch_result(b, [b.widen(v, t) for v, t in zip(out, types, strict=True)], single)
        for b, out in (then, other)
    )
    if single:
        return [block.if_(cond, then_expr, else_expr, types[0], name)]
    result = block.if_(cond, then_expr, else_expr, TupleType(tuple(types)), name)
    return block.fields(result, len(types), names)


def _branch_result(block: Block, values: Sequence[Value], single: bool) -> Expr:
    """The branch's bindings around its result: one value, or their tuple."""
    if single:
        return block.finish(values[0].expr)
    return block.finish(Tuple(tuple(v.expr for v in values), span=block.span))


def settled_types(
    error: Failure, types: list[Type], returned: Sequence[Value]
) -> list[Type] | None:
    """[RULE TYPE-JOIN] The carried ``types`` joined with the types of the
    body's ``returned`` values, or None when they already cover them."""
    joined, changed = [], False
    for k, (t, v) in enumerate(zip(types, returned, strict=True)):
        if covers(t, v.type):
            joined.append(t)
            continue
        try:
            joined.append(join(t, v.type))
        except JoinError as err:
            raise error(
                f"its carried value {k} changes from one iteration to the next: {err}"
            ) from None
        changed = True
    return joined if changed else None


def emit_foreach(
    block: Block,
    step: tuple[Var, Var, Block],
    per_step: Sequence[Value],
    results: Sequence[Value],
    seqs: Value,
    length: Any,
    inits: Sequence[Value],
    types: Sequence[Type],
    name: str,
) -> Value:
    """The ``cf.foreach`` over ``seqs`` (``length`` steps) from ``inits``
    widened to the settled ``types``, bound in ``block``. ``step`` is its
    parameters (the element, the state) and the body's bindings, around
    ``(per_step, results)``; the loop's value is ``(stacked, finals)``."""
    x, state, body = step
    span = block.span
    returned = Tuple(
        (
            Tuple(tuple(v.expr for v in per_step), span=span),
            Tuple(tuple(v.expr for v in results), span=span),
        ),
        span=span,
    )
    fn = Function((x, state), body.finish(returned), span=span)
    init = block.tuple([block.widen(v, t) for v, t in zip(inits, types, strict=True)], "init")
    stacked = TupleType(
        tuple(TensorType((length, *v.tensor.shape), v.tensor.dtype) for v in per_step)
    )
    return block.emit(
        Call(get_op("cf.foreach"), (fn, seqs.expr, init.expr), span=span),
        TupleType((stacked, TupleType(tuple(types)))),
        name,
    )
