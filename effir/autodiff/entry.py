"""The function ``grad`` adds: the entry's forward, then its backward.

``@main_grad`` takes the entry's parameters (and, when the differentiated
output is not a scalar, a ``%cotangent`` for it, placed before the state
parameters) and returns what the entry returns with the gradients added to
the user's result: for a state-passing entry ``((value, grads), new
state...)`` (``value_and_grad``) or ``(grads, new state...)`` (``grad``), so
that the A2 convention (state last) and ``effir.State`` keep working; for an
entry without state ``(value, grads)`` or ``grads``. ``grads`` is a tuple
with one cotangent per ``wrt`` parameter, in ``wrt``'s order.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, Var
from ..ir.types import TensorType, TupleType, Type
from ..ir.vjp import DifferentiationError
from .cotangent import CT, Adts, differentiable, is_float
from .differentiator import Differentiator
from .reverse import Reverse


def state_count(fn: Function) -> tuple[int, int]:
    """(number of state parameters, number of state results) of an A2 function."""
    return len(fn.attrs.get("state_in", ()) or ()), len(fn.attrs.get("state_out", ()) or ())


def choose_wrt(
    fn: Function, wrt: Sequence[str] | str | None, n_state: int, adts: Adts
) -> list[Var]:
    """The parameters named by ``wrt`` (default: every float parameter that is not state)."""
    params = list(fn.params)
    user = params[: len(params) - n_state]
    state = params[len(params) - n_state :]
    if wrt is None:
        chosen = [p for p in user if _float_tree(p.checked_type, adts)]
        if not chosen:
            raise DifferentiationError("the entry has no float parameter to differentiate", fn.span)
        return chosen
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    by_name = {p.name_hint: p for p in params}
    chosen = []
    for name in names:
        if not isinstance(name, str):
            raise DifferentiationError(f"wrt: {name!r} is not a parameter name", fn.span)
        p = by_name.get(name.lstrip("%"))
        if p is None:
            known = ", ".join(q.name_hint for q in user)
            raise DifferentiationError(
                f"wrt: the entry has no parameter %{name} ({known})", fn.span
            )
        if p in state:
            raise DifferentiationError(
                f"wrt: %{name} is state (a cell's value): state is threaded, never differentiated",
                fn.span,
            )
        if not _float_tree(p.checked_type, adts):
            raise DifferentiationError(
                f"wrt: %{name} has no float tensor in its type, so it has no gradient",
                fn.span,
            )
        chosen.append(p)
    return chosen


def _float_tree(t: Type, adts: Adts) -> bool:
    """Whether a float tensor is in ``t`` (in a tuple, or in an ADT value,
    whose gradient is a value of its cotangent ADT: effir.autodiff.adt)."""
    return differentiable(t, adts)


def build_grad(
    ad: Differentiator,
    fn: Function,
    wrt: Sequence[str] | str | None,
    output: int | None,
    with_value: bool,
) -> Function:
    """The gradient function of the entry ``fn`` (see the module docstring)."""
    n_state_in, n_state_out = state_count(fn)
    # A2 wraps the result with the new state only where the entry writes
    # some (state_out); one that only reads state (state_in) returns it as is.
    a2 = n_state_out > 0
    targets = choose_wrt(fn, wrt, n_state_in, ad.adts)
    b = LetBuilder(fn.span)
    rev = Reverse(ad)
    result = rev.forward(fn.body, b)
    result_type = fn.body.checked_type
    user_type = result_type.fields[0] if a2 else result_type
    chosen_type: Type = user_type
    if output is not None:
        if (
            not isinstance(output, int)
            or isinstance(output, bool)
            or not isinstance(user_type, TupleType)
            or not 0 <= output < len(user_type.fields)
        ):
            raise DifferentiationError(
                f"output={output!r}: the entry's result is not a tuple with that field",
                fn.span,
            )
        chosen_type = user_type.fields[output]
    if not isinstance(chosen_type, TensorType) or not is_float(chosen_type.dtype):
        raise DifferentiationError(
            "the differentiated output must be a float tensor (choose a field of a tuple "
            "result with output=)",
            fn.span,
        )
    params = list(fn.params)
    if chosen_type.shape == ():
        seed: Expr = b.emit(b.call_op("ones", shape=[], dtype=chosen_type.dtype), "seed")
    else:
        seed = Var("cotangent", chosen_type, span=fn.span)
        params.insert(len(params) - n_state_in, seed)
    ct: CT = seed
    if output is not None:
        ct = [None] * len(user_type.fields)
        ct[output] = seed
    if a2:
        ct = [ct] + [None] * n_state_out
    rev.add(b, result, ct)
    rev.backward(b)
    grads = b.emit(b.tuple([rev.total(b, p) for p in targets]), "grads")
    if not a2:
        out = b.tuple([result, grads]) if with_value else grads
        return Function(tuple(params), b.finish(b.emit(out, "out")), attrs=fn.attrs, span=fn.span)
    value = b.emit_get(result, 0, "value")
    user = b.emit(b.tuple([value, grads]), "user") if with_value else grads
    state = [b.emit_get(result, i + 1, "state") for i in range(n_state_out)]
    out = b.emit(b.tuple([user, *state]), "out")
    return Function(tuple(params), b.finish(out), attrs=fn.attrs, span=fn.span)
