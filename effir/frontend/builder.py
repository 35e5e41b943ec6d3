"""The builder every frontend shares: let-chains (``emit``), functions,
control flow from Python callables (``cond``, ``foreach``, ``while_loop``),
operator application with eager dispatch, and modules with state cells.

Inside a function being built, every operator call is bound to a fresh
variable in program order (a let-chain), so effects keep their order; outside
one, an operator on expressions returns the call (a nested expression) and an
operator on concrete values (numpy arrays, numbers, keys) runs at once through
the interpreter's numpy rule: the same user code runs eagerly and builds IR.

Each block's let-chain is an ``effir.ir.builder.LetBuilder`` (the one the
passes use); this module adds what a Python frontend needs on top: the stack
of blocks being built, names from the Python code, type hints, cells.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..backends.interpreter import _RUNTIME_FAILURES, print_sink
from ..ir.diagnostics import AttrError, Error, EvalError, FrontendError
from ..ir.expr import (
    Call,
    Clause,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.module import IRModule
from ..ir.node import Attrs
from ..ir.op import lookup_op
from ..ir.types import KeyType, RefType, TensorType, TupleType, Type
from ..ops.control import empty_outputs, run_time_limit
from ..ops.relations import OpFailure
from ..runtime.values import RefValue
from . import eager
from .blocks import (  # noqa: F401  (building, note_cell: used through this module)
    _Block,
    _blocks,
    _Root,
    building,
    current_block,
    fresh_name,
    note_cell,
)
from .eager import scoped
from .promotion import is_number, operand_group, promote
from .spans import current_span
from .values import Cell, as_type, is_concrete, to_expr, to_value


def new_var(name: str, type_annotation: Type | None = None) -> Var:
    var = Var(fresh_name(name), type_annotation, span=current_span())
    return var


def var(name: str, type: Any = None) -> Var:
    """A variable (a function parameter): ``effir.var("x", effir.Tensor[(n, 8), "float32"])``."""
    return Var(name, as_type(type) if type is not None else None, span=current_span())


def emit(value: Any, name: str | None = None) -> Any:
    """Bind ``value`` to a fresh variable in the let-chain being built and
    return the variable (atoms are returned as they are)."""
    expr = to_expr(value)
    if isinstance(expr, Var | GlobalVar | Constant | Op) and name is None:
        return expr
    block = current_block()
    if block is None:
        raise FrontendError(
            "emit outside a function being built",
            current_span(),
            hint="call it inside `with builder.function(...)`, effir.trace or @effir.script",
        )
    hint = type_hint(expr)
    var = Var(fresh_name(name or _name_for(expr)), span=expr.span or current_span())
    block.bindings.append((var, expr))
    if hint is not None:
        block.root.hints[id(var)] = (var, hint)
    if block.root.weak.get(id(expr)) is expr:
        block.root.weak[id(var)] = var
    return var


def _name_for(expr: Expr) -> str:
    if isinstance(expr, Call) and isinstance(expr.callee, Op):
        return expr.callee.name.rsplit(".", 1)[-1]
    if isinstance(expr, Function):
        return "f"
    return "t"


@contextlib.contextmanager
def _block(new_root: bool = False) -> Iterator[_Block]:
    blocks = _blocks()
    root = _Root() if new_root or not blocks else blocks[-1].root
    block = _Block(root)
    blocks.append(block)
    try:
        yield block
    finally:
        blocks.pop()


def _close(block: _Block, result: Expr) -> Expr:
    """The let-chain of ``block`` ending in ``result`` (built from the end,
    without recursion); a result that is the last binding's variable ends
    the chain as that binding's value (``f(x)``, not ``let %t = f(x); %t``)."""
    bindings = block.bindings
    if bindings and bindings[-1][0] is result and isinstance(result, Var):
        result = block.lets.pop()[1]
    return block.lets.finish(result)


def build_body(body_fn: Callable[..., Any], *args: Any, new_root: bool = False) -> tuple[Expr, Any]:
    """Run ``body_fn(*args)`` in a new let-chain: the chain ending in its
    result, and the result as the Python value it returned."""
    with _block(new_root) as block:
        result = body_fn(*args)
        body = to_expr(result)
        return _close(block, body), result


# ------------------------------------------------------------ type hints
_HINT_DEPTH = 4


def type_hint(expr: Expr, depth: int = 0) -> Type | None:
    """The type of ``expr`` as far as the builder can tell without a full
    check (parameter annotations and operators' type relations); None when
    unknown. Used for Python numbers' dtypes, unpacking and indexing. Looks
    at most ``_HINT_DEPTH`` nested expressions deep (inside a function every
    call is bound, so its arguments are variables; an unbound expression
    built outside one may be deep): no recursion proportional to a program."""
    if depth > _HINT_DEPTH:
        return None
    if isinstance(expr, Var):
        if expr.type_annotation is not None:
            return expr.type_annotation
        blocks = _blocks()
        found = blocks[-1].root.hints.get(id(expr)) if blocks else None
        return found[1] if found is not None and found[0] is expr else None
    if isinstance(expr, Constant):
        return TensorType(expr.data.shape, str(expr.data.dtype))
    if isinstance(expr, Tuple):
        fields = [type_hint(f, depth + 1) for f in expr.fields]
        return None if any(f is None for f in fields) else TupleType(tuple(fields))
    if isinstance(expr, TupleGetItem):
        t = type_hint(expr.tuple_value, depth + 1)
        if isinstance(t, TupleType) and 0 <= expr.index < len(t.fields):
            return t.fields[expr.index]
        return None
    if isinstance(expr, GlobalVar):
        block = current_block()
        cell = block.root.cells.get(expr.name) if block is not None else None
        return RefType(cell.value_type) if cell is not None and cell.value_type else None
    if isinstance(expr, Let):
        while isinstance(expr, Let):
            expr = expr.body
        return type_hint(expr, depth + 1)
    if isinstance(expr, If):
        return type_hint(expr.then_branch, depth + 1)
    if isinstance(expr, Match) and expr.clauses:
        return type_hint(expr.clauses[0].body, depth + 1)
    if isinstance(expr, RefRead):
        t = type_hint(expr.ref, depth + 1)
        return t.value if isinstance(t, RefType) else None
    if isinstance(expr, Call) and isinstance(expr.callee, Op):
        definition = lookup_op(expr.callee.name)
        relation = definition.rules.get("type") if definition else None
        if relation is None or "control_flow" in definition.traits:
            return None
        args = [type_hint(a, depth + 1) for a in expr.args]
        if any(a is None for a in args):
            return None
        try:
            return relation(tuple(args), expr.attrs)
        except Exception:  # a hint only: effir.check reports the real error
            return None
    return None


def dtype_hint(value: Any) -> str | None:
    if isinstance(value, Expr):
        t = type_hint(value)
        return t.dtype if isinstance(t, TensorType) else None
    if isinstance(value, np.ndarray | np.generic):
        return str(value.dtype)
    return None


# ------------------------------------------------------------ operators
def apply_op(name: str, args: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
    """``name(*args, **attrs)``: built (and bound, inside a function) when an
    argument is an expression or a function is being built, else run eagerly."""
    definition = lookup_op(name)
    if definition is None:
        raise FrontendError(f"unknown operator {name!r}", current_span())
    span = current_span()
    if not definition.takes(len(args)):
        assert definition.num_inputs is not None
        inputs = [f"x{i}" for i in range(definition.num_inputs + definition.optional_inputs)]
        raise FrontendError(
            definition.arity_error(len(args)),
            span,
            hint=f"{name}({', '.join(inputs)}, attr=...)",
        )
    try:
        normalized = definition.normalize_attrs(attrs)
    except AttrError as err:
        raise FrontendError(err.message, span) from None
    eager = not building() and all(is_concrete(a) for a in args)
    group = operand_group(name, definition, len(args))
    try:
        dtype, weak = promote(name, args, group, _eager_dtype if eager else dtype_hint, is_weak)
    except FrontendError as err:
        raise FrontendError(err.message, span, hint=err.hint) from None
    if group and dtype is not None:
        args = tuple(_promoted(a, dtype, eager) if k in group else a for k, a in enumerate(args))
    if eager:
        return run_eagerly(name, args, normalized, span)
    exprs = tuple(to_expr(a) for a in args)
    call = Call(definition.op, exprs, normalized, span=span)
    result = emit(call) if building() else call
    if weak:
        mark_weak(result)
    return result


def _eager_dtype(value: Any) -> str | None:
    return str(value.dtype) if isinstance(value, np.ndarray | np.generic) else None


def _promoted(value: Any, dtype: str, eager: bool) -> Any:
    """An operand in the dtype ``promote`` chose: a Python number as a
    constant of it, a weak value cast to it."""
    if is_number(value):
        array = np.asarray(value, dtype)
        return array if eager else to_expr(array)
    if not eager and is_weak(value) and dtype_hint(value) not in (None, dtype):
        return apply_op("cast", (value,), {"dtype": dtype})
    return value


def mark_weak(value: Any) -> None:
    """``value`` (an effir value of the function being built) is a Python
    int or float when the function runs eagerly: a ``range`` counter, a
    loop variable that starts as a number (promotion.py)."""
    block = current_block()
    if block is not None and isinstance(value, Expr):
        block.root.weak[id(value)] = value


def is_weak(value: Any) -> bool:
    """Whether ``value`` is weak (promotion.py): a Python number, or a value
    marked by ``mark_weak``."""
    if is_number(value):
        return True
    block = current_block()
    return block is not None and block.root.weak.get(id(value)) is value


def run_eagerly(name: str, args: tuple[Any, ...], attrs: Attrs, span: Any) -> Any:
    """An operator on concrete values, by its numpy rule (as the interpreter runs it)."""
    definition = lookup_op(name)
    impl = definition.rules.get("numpy")
    if impl is None:
        raise EvalError(f"operator {name} has no numpy rule registered", span)
    values = tuple(to_value(a) for a in args)
    try:
        if definition.effect == "io":
            result = impl(values, attrs, sink=print_sink)
        else:
            result = impl(values, attrs)
        return eager.wrap(result) if eager.active() else result
    except Error:
        raise
    except _RUNTIME_FAILURES as err:
        raise EvalError(f"{name}: {err}", span) from None


def call_module_function(module: IRModule, name: str, args: tuple[Any, ...]) -> Any:
    """Inside a function being built, a call of ``@name`` of ``module`` (a
    scripted or traced function's), whose globals and cells join the
    module being built."""
    block = current_block()
    assert block is not None
    block.root.functions.update(module.functions)
    block.root.declarations.update(module.cells)
    block.root.adts.update(module.type_defs)
    result = call(GlobalVar(name, span=current_span()), *args)
    ret = module.functions[name].ret_type
    if ret is not None and isinstance(result, Var):
        block.root.hints[id(result)] = (result, ret)
    return result


def call(callee: Any, *args: Any) -> Any:
    """A call of a function value (a closure, ``@global``) on ``args``."""
    expr = Call(to_expr(callee), tuple(to_expr(a) for a in args), span=current_span())
    return emit(expr) if building() else expr


def read(ref: Any) -> Any:
    """The value in a reference cell (``!ref``); on a cell run eagerly, its value."""
    if isinstance(ref, Cell) and not building():
        return ref.eager.value
    if isinstance(ref, RefValue):
        return ref.value
    expr = RefRead(to_expr(ref), span=current_span())
    return emit(expr) if building() else expr


def write(ref: Any, value: Any) -> Any:
    """Store ``value`` in a reference cell (``ref := value``)."""
    if not building() and isinstance(ref, Cell | RefValue) and is_concrete(value):
        (ref.eager if isinstance(ref, Cell) else ref).value = to_value(value)
        return ()
    expr = RefWrite(to_expr(ref), to_expr(value), span=current_span())
    return emit(expr) if building() else expr


# ------------------------------------------------------------ structure
def unflatten(expr: Expr, like: Any) -> Any:
    """``expr`` shaped as the Python value ``like``: a tuple becomes a tuple
    of projections, so that bodies see the structure their user gave."""
    if isinstance(like, tuple | list) and not isinstance(expr, Tuple):
        return shaped_as(
            like,
            (unflatten(TupleGetItem(expr, i, span=expr.span), f) for i, f in enumerate(like)),
        )
    if isinstance(like, tuple | list) and isinstance(expr, Tuple):
        return shaped_as(like, (unflatten(e, f) for e, f in zip(expr.fields, like, strict=True)))
    return expr


def shaped_as(like: tuple | list, fields: Any) -> tuple | list:
    """``fields`` as a list when the Python value ``like`` is one, else a
    tuple: a list a loop body returns is a list, eagerly and built alike
    (in the IR both are tuples)."""
    return list(fields) if isinstance(like, list) else tuple(fields)


def _as_structure(value: Any, like: Any) -> Any:
    """``value`` (tuples, as the interpreter gives them) with the lists of
    ``like`` where ``like`` has them."""
    if isinstance(like, tuple | list) and isinstance(value, tuple | list):
        return shaped_as(like, (_as_structure(v, f) for v, f in zip(value, like, strict=True)))
    return value


def _param(name: str, like: Any) -> Var:
    """A closure parameter for a value shaped like ``like`` (annotated when
    the builder knows its type exactly)."""
    t = _structure_type(like)
    return new_var(name, t)


def _structure_type(like: Any) -> Type | None:
    if isinstance(like, tuple | list):
        fields = [_structure_type(f) for f in like]
        return None if any(f is None for f in fields) else TupleType(tuple(fields))
    if isinstance(like, Expr):
        t = type_hint(like)
        return t if _complete(t) else None
    if isinstance(like, np.ndarray | np.generic):
        return TensorType(np.shape(like), str(like.dtype))
    if isinstance(like, bool):
        return TensorType((), "bool")
    if isinstance(like, int):
        return TensorType((), "int32")
    if isinstance(like, float):
        return TensorType((), "float32")
    return None


def _complete(t: Type | None) -> bool:
    if isinstance(t, TensorType):
        return True
    if isinstance(t, TupleType):
        return all(_complete(f) for f in t.fields)
    return isinstance(t, KeyType)


def _step_like(xs: Any) -> Any:
    """A value shaped like one step of ``xs`` (for the body parameter's type)."""
    if isinstance(xs, tuple | list):
        return tuple(_step_like(x) for x in xs)
    t = type_hint(xs) if isinstance(xs, Expr) else _structure_type(xs)
    if isinstance(t, TensorType) and t.ndim >= 1:
        return Var("x", TensorType(t.shape[1:], t.dtype))
    return None


def _as_fn(value: Any, what: str) -> Callable[..., Any]:
    if isinstance(value, Expr):
        return lambda *args: call(value, *args)
    if not callable(value):
        raise FrontendError(
            f"{what} must be a Python function, got {type(value).__name__}", current_span()
        )
    return value


def cond(pred: Any, then_fn: Any, else_fn: Any) -> Any:
    """``if pred { then_fn() } else { else_fn() }``; each function builds its
    branch, both return values of the same structure. On a concrete ``pred``
    only the chosen branch runs (eagerly)."""
    if is_concrete(pred) and not building():
        chosen = then_fn if bool(np.asarray(to_value(pred))) else else_fn
        return eager.run(_as_fn(chosen, "a branch of effir.cond"), ())
    span = current_span()
    pred_expr = to_expr(pred)
    then_body, then_result = build_body(_as_fn(then_fn, "the then branch"))
    else_body, _ = build_body(_as_fn(else_fn, "the else branch"))
    result = emit(If(pred_expr, then_body, else_body, span=span), "if")
    return unflatten(result, then_result)


def match_clauses(data: Any, clauses: list[tuple[Pattern, Callable[[], Any]]]) -> Any:
    """``match (data) { pattern => body() ... }``: each callable builds its
    clause's body (the pattern's variables bound where it was made); all
    return values of the same structure, as ``cond``'s branches. Built in
    the order given, the first clause that matches running."""
    span = current_span()
    data_expr = to_expr(data)
    built = []
    first: Any = None
    for k, (pattern, body_fn) in enumerate(clauses):
        body, result = build_body(body_fn)
        built.append(Clause(pattern, body, span=span))
        if k == 0:
            first = result
    node = Match(data_expr, tuple(built), True, span=span)
    return unflatten(emit(node, "match") if building() else node, first)


def foreach(body: Any, xs: Any, init: Any = ()) -> tuple[Any, Any]:
    """``cf.foreach``: ``body(x_t, state) -> (out_t, new_state)`` over the
    leading axis of ``xs`` (or of each tensor of a tuple); returns the
    stacked outputs and the final state, shaped as the body returned them."""
    if not building() and is_concrete(xs) and is_concrete(init):
        return _foreach_eager(eager.scoped(_as_fn(body, "the body of effir.foreach")), xs, init)
    span = current_span()
    x = _param("x", _step_like(xs))
    s = _param("state", init)
    holder: list[Any] = []

    def step(x: Var, s: Var) -> Any:
        out, new_state = _as_fn(body, "the body of effir.foreach")(
            unflatten(x, xs if isinstance(xs, tuple | list) else None),
            unflatten(s, init),
        )
        holder.append(out)
        return (out, new_state)

    fn_body, _ = build_body(step, x, s)
    fn = Function((x, s), fn_body, span=span)
    result = apply_op("cf.foreach", (emit(fn, "step") if building() else fn, xs, init), {})
    _loop_hint(result, holder[0], _length_hint(xs), init)
    outs = TupleGetItem(result, 0, span=span)
    final = TupleGetItem(result, 1, span=span)
    return unflatten(outs, holder[0]), unflatten(final, init)


def while_loop(
    cond_fn: Any,
    body: Any,
    init: Any,
    max_iterations: Any = None,
    outputs: bool = False,
    pad_outputs: bool = False,
) -> Any:
    """``cf.while_loop``: while ``cond_fn(state)``, ``state = body(state)``;
    returns the final state. With ``outputs=True`` the body returns ``(out,
    new_state)`` and the result is ``(stacked outs, final state)``.
    ``max_iterations`` stops it: a Python int is the operator's attribute,
    an effir value its run-time argument. ``pad_outputs=True`` (with
    outputs) pads the stacked outputs to ``max_iterations`` rows of zeros
    and returns ``(outs, final state, count of rows written)``."""
    span = current_span()
    if pad_outputs and not outputs:
        raise FrontendError(
            "pad_outputs=True pads the stacked outputs, which only outputs=True gives",
            span,
            hint="effir.while_loop(cond, body, init, max_iterations=n, outputs=True, "
            "pad_outputs=True)",
        )
    eager = max_iterations is None or is_concrete(max_iterations)
    if not building() and is_concrete(init) and eager:
        return _while_eager(
            scoped(cond_fn), scoped(body), init, max_iterations, outputs, pad_outputs
        )
    c = _param("state", init)
    cond_body, _ = build_body(
        lambda s: _as_fn(cond_fn, "the loop condition")(unflatten(s, init)), c
    )
    s = _param("state", init)
    holder: list[Any] = []

    def step(s: Var) -> Any:
        got = _as_fn(body, "the loop body")(unflatten(s, init))
        out, new_state = got if outputs else ((), got)
        holder.append(out)
        return (out, new_state)

    fn_body, _ = build_body(step, s)
    cond_f = Function((c,), cond_body, span=span)
    step_f = Function((s,), fn_body, span=span)
    if building():
        cond_f, step_f = emit(cond_f, "cond"), emit(step_f, "body")
    args: tuple[Any, ...] = (cond_f, step_f, init)
    attrs: dict[str, Any] = {"pad_outputs": pad_outputs}
    if isinstance(max_iterations, Expr | np.ndarray):
        args += (max_iterations,)  # a value: the loop's fourth argument
    elif max_iterations is not None:  # an int: the attribute (the registry checks it)
        attrs["max_iterations"] = (
            int(max_iterations) if isinstance(max_iterations, np.integer) else max_iterations
        )
    result = apply_op("cf.while_loop", args, attrs)
    rows = attrs.get("max_iterations", "?") if pad_outputs else "?"
    _loop_hint(result, holder[0], rows, init, counted=pad_outputs)
    final = unflatten(TupleGetItem(result, 1, span=span), init)
    if not outputs:
        return final
    outs = unflatten(TupleGetItem(result, 0, span=span), holder[0])
    if pad_outputs:
        return outs, final, TupleGetItem(result, 2, span=span)
    return outs, final


def _length_hint(xs: Any) -> Any:
    if isinstance(xs, tuple | list):
        return _length_hint(xs[0]) if xs else None
    t = type_hint(xs) if isinstance(xs, Expr) else None
    if isinstance(t, TensorType) and t.ndim:
        return t.shape[0]
    return np.shape(xs)[0] if isinstance(xs, np.ndarray) and xs.ndim else None


def _loop_hint(result: Any, out: Any, length: Any, init: Any, counted: bool = False) -> None:
    """The type of a loop's result, when the builder knows it: outputs
    stacked along ``length``, the state's type (and, ``counted``, the count
    of a padded while_loop)."""
    block = current_block()
    if block is None or not isinstance(result, Var) or length is None:
        return

    outs, state = _stacked_type(out, length), _structure_type(init)
    if outs is not None and state is not None:
        count = (TensorType((), "int64"),) if counted else ()
        block.root.hints[id(result)] = (result, TupleType((outs, state, *count)))


def _foreach_eager(body: Callable[..., Any], xs: Any, init: Any) -> tuple[Any, Any]:
    values = to_value(xs)
    state = init
    length = len(values[0]) if isinstance(values, tuple) else len(values)
    outs = []
    for t in range(length):
        x_t = (
            tuple(np.asarray(v[t]) for v in values)
            if isinstance(values, tuple)
            else np.asarray(values[t])
        )
        out, state = body(x_t, state)
        outs.append(out)
    if outs:
        return _stack(outs), state
    params = [("x", _structure_type(_step_values(values))), ("state", _structure_type(init))]
    step = lambda x, s: body(unflatten(x, values), unflatten(s, init))  # noqa: E731
    return _no_outputs(step, params), state


def _step_values(values: Any) -> Any:
    """Placeholders of one step of the sequences ``values`` (their types only)."""
    if isinstance(values, tuple):
        return tuple(_step_values(v) for v in values)
    return np.empty(np.shape(values)[1:], np.asarray(values).dtype)


def _stack(outs: list[Any]) -> Any:
    """Per-step outputs stacked along a new leading axis, field by field
    for a tuple or list output (a list stays a list)."""
    if isinstance(outs[0], tuple | list):
        return shaped_as(outs[0], (_stack([o[i] for o in outs]) for i in range(len(outs[0]))))
    return np.stack([np.asarray(to_value(o)) for o in outs])


def _no_outputs(
    step: Callable[..., Any], params: list[tuple[str, Type | None]], rows: int = 0
) -> Any:
    """``rows`` rows of zeros shaped as a loop's stacked outputs, for a loop
    that ran zero times eagerly (or a padded one's rows past its last step),
    as the interpreter builds them from the loop's type (docs/semantics.md
    §7.1): from the type of what ``step`` returns, traced once aside on
    placeholders of ``params``' types (nothing runs: a cell's key is not
    drawn; nothing traced is kept)."""
    span = current_span()
    with _block(new_root=True):
        out = step(*[new_var(name, t) for name, t in params])[0]
        stacked = _stacked_type(out)
    if stacked is None:
        raise EvalError(
            "the loop ran zero times and the type of its per-step output is not known, so "
            "the empty output's shape is unknown",
            span,
        )
    try:
        return _as_structure(empty_outputs(stacked, rows), out)
    except OpFailure as err:
        raise EvalError(str(err), span) from None


def _stacked_type(out: Any, length: Any = 0) -> Type | None:
    """The type of per-step outputs ``out`` (Python tuples of values, or a
    value of a tuple type) stacked along a leading axis of ``length``."""
    if isinstance(out, tuple | list):
        fields = [_stacked_type(f, length) for f in out]
        return None if any(f is None for f in fields) else TupleType(tuple(fields))
    return _stacked_fields(_structure_type(out), length)


def _stacked_fields(t: Type | None, length: Any) -> Type | None:
    if isinstance(t, TupleType):
        fields = [_stacked_fields(f, length) for f in t.fields]
        return None if any(f is None for f in fields) else TupleType(tuple(fields))
    return TensorType((length, *t.shape), t.dtype) if isinstance(t, TensorType) else None


def _while_eager(cond_fn, body, init, max_iterations, outputs, pad_outputs):
    """The loop run in Python, as the operator's numpy rule runs it."""
    try:
        limit = None if max_iterations is None else run_time_limit(to_value(max_iterations))
    except OpFailure as err:
        raise EvalError(f"cf.while_loop: {err}", current_span()) from None
    if pad_outputs and limit is None:
        raise FrontendError(
            "pad_outputs pads the outputs to max_iterations rows: give max_iterations",
            current_span(),
        )
    state, outs, n = init, [], 0
    while limit is None or n < limit:
        if not bool(np.asarray(to_value(cond_fn(state)))):
            break
        got = body(state)
        out, state = got if outputs else ((), got)
        outs.append(out)
        n += 1
    if not outputs:
        return state
    rows = limit if pad_outputs else 0
    if not outs or pad_outputs:  # rows of zeros, shaped by the body's output type
        step = lambda s: body(unflatten(s, init))  # noqa: E731
        padding = _no_outputs(step, [("state", _structure_type(init))], rows - len(outs))
        stacked = padding if not outs else _concatenated(_stack(outs), padding)
    else:
        stacked = _stack(outs)
    if pad_outputs:
        return stacked, state, np.asarray(len(outs), np.int64)
    return stacked, state


def _concatenated(stacked: Any, padding: Any) -> Any:
    if isinstance(stacked, tuple | list):
        return shaped_as(
            stacked, (_concatenated(s, p) for s, p in zip(stacked, padding, strict=True))
        )
    return np.concatenate([stacked, padding], axis=0)


# ------------------------------------------------------------ functions and modules
def function(
    params: list[Var] | tuple[Var, ...], body_fn: Callable[..., Any], ret_type: Any = None
) -> Function:
    """A function of ``params`` whose body ``body_fn(*params)`` builds."""
    span = current_span()
    body, _ = build_body(body_fn, *params)
    return Function(
        tuple(params), body, as_type(ret_type) if ret_type is not None else None, span=span
    )
