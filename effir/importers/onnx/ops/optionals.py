"""Optional values as options (the prelude's ``Option``,
common/optionals.py): ``Optional`` is ``Some(x)``, or ``None`` of the
type its ``type`` attribute names; ``OptionalHasElement`` calls
``@option_has``; ``OptionalGetElement`` is a ``match? o { Some(x) => x }``
at the node, so that reading an absent value is a run-time error located
there. From version 18 both also take a
plain tensor or sequence (present), and ``OptionalHasElement`` no input
(absent)."""

from __future__ import annotations

from ....ir.expr import Call, Clause, Match, PatternConstructor, PatternVar, Var
from ....ir.types import TensorType
from ...common.types import option_element, option_type
from ...common.values import Value
from ..graph import NodeContext
from ..registry import converter
from ..types import UnsupportedType, type_of
from .elementwise import scalar


@converter("Optional", versions=(15,))
def _optional(ctx: NodeContext) -> list[Value]:
    some, none = ctx.state.parts.option_constructors()
    value = ctx.optional(0)
    if value is not None:
        made = Call(some, (value.expr,), span=ctx.span)
        return [ctx.block.emit(made, option_type(value.type), ctx.name)]
    declared = ctx.attrs.get("type")
    if declared is None:
        raise ctx.error("an empty Optional needs its type attribute")
    try:
        held = type_of(declared, "its type attribute")
    except UnsupportedType as err:
        raise ctx.error(str(err)) from None
    return [ctx.block.emit(Call(none, (), span=ctx.span), option_type(held), ctx.name)]


@converter("OptionalHasElement", versions=(15, 18))
def _has_element(ctx: NodeContext) -> list[Value]:
    value = ctx.optional(0)
    if value is None:
        return [scalar(False, "bool")]
    if option_element(value.type) is None:
        if ctx.version < 18:
            raise ctx.error("its input must be an optional value")
        return [scalar(True, "bool")]
    fn = ctx.state.parts.option_library("option_has")
    call = Call(fn, (value.expr,), span=ctx.span)
    return [ctx.block.emit(call, TensorType((), "bool"), ctx.name)]


@converter("OptionalGetElement", versions=(15, 18))
def _get_element(ctx: NodeContext) -> list[Value]:
    value = ctx.input(0)
    held = option_element(value.type)
    if held is None:
        if ctx.version < 18:
            raise ctx.error("its input must be an optional value")
        return [value]
    some, _ = ctx.state.parts.option_constructors()
    x = Var("value", held, span=ctx.span)
    clause = Clause(PatternConstructor(some, (PatternVar(x),)), x)
    read = Match(value.expr, (clause,), complete=False, span=ctx.span)
    return [ctx.block.emit(read, held, ctx.name)]
