"""Control-flow operators whose bodies are functions (MXNet's proposal)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import type_tree
from ..ir.node import Attrs
from ..ir.op import AttrSpec, op_def, register_op
from ..ir.types import ANY, Dim, FuncType, IncompleteType, TensorType, TupleType, Type
from ..runtime.values import describe_value
from .relations import (
    NotReady,
    OpFailure,
    RelationError,
    allocation,
    describe,
    dtype_kind,
    expect_tensor,
    merge_dim,
    numpy_rule,
    type_rule,
)

register_op(
    "cf.foreach",
    3,
    traits=("control_flow",),
    doc="foreach(body, xs, init): body (x_t, state) -> (out_t, new_state) over xs' leading axis",
)
register_op(
    "cf.while_loop",
    3,
    attrs=(
        AttrSpec("max_iterations", "int", None, optional=True),
        AttrSpec("pad_outputs", "bool", False),
    ),
    traits=("control_flow", "dynamic_shape"),
    doc="while_loop(cond, body, init[, max_iterations]): outputs stacked over the iterations "
    "actually run; max_iterations, a static attribute or an integer scalar argument, stops "
    "it; pad_outputs=True pads the outputs to max_iterations rows of zeros and adds the count "
    "of rows the loop wrote",
    optional_inputs=1,
)


LOOP_OPS = frozenset({"cf.foreach", "cf.while_loop"})
"""The names of the loop operators."""

LIMIT_ARG = 3
"""The argument of ``cf.while_loop`` that is its run-time ``max_iterations``
(when the call has a fourth argument)."""


def while_limit(call: Any) -> tuple[int | None, Any]:
    """A ``cf.while_loop`` call's ``max_iterations``: the static attribute
    (or None) and the run-time argument (or None); at most one is given."""
    return call.attrs["max_iterations"], (
        call.args[LIMIT_ARG] if len(call.args) > LIMIT_ARG else None
    )


def pads(call: Any) -> bool:
    """Whether a ``cf.while_loop`` call pads its outputs (its result is then
    ``(outputs, final, count)``)."""
    return bool(call.attrs["pad_outputs"])


@dataclass(frozen=True)
class LoopBody:
    """A function argument of a loop operator: argument ``arg``, taking
    ``params`` parameters of which ``state_param`` receives the loop state,
    and returning ``(out, new_state)`` (a ``step``) or a bool (a condition)."""

    arg: int
    params: int
    state_param: int
    step: bool
    role: str


@dataclass(frozen=True)
class LoopShape:
    """How a loop operator threads its state: the initial state is argument
    ``init``, the final state is field ``final`` of the result, and the
    ``bodies`` receive it. Passes that thread state through loops (state
    passing, the linearity verifier) read this rule, ``rules["loop"]``."""

    init: int
    final: int
    bodies: tuple[LoopBody, ...]


op_def("cf.foreach").rules["loop"] = LoopShape(2, 1, (LoopBody(0, 2, 1, True, "body"),))
op_def("cf.while_loop").rules["loop"] = LoopShape(
    2, 1, (LoopBody(1, 1, 0, True, "body"), LoopBody(0, 1, 0, False, "condition"))
)


# ---------------------------------------------------------------- type rules
def _step_slice(t: Type, what: str) -> tuple[Type, Dim]:
    """The type of one step of ``xs`` (a tensor or a tuple of tensors), and
    the number of steps."""
    if isinstance(t, TupleType):
        if not t.fields:
            raise RelationError(f"{what} must not be an empty tuple")
        parts = [_step_slice(f, what) for f in t.fields]
        length = parts[0][1]
        for _, other in parts[1:]:
            length = merge_dim(length, other, f"the leading dimensions of {what}")
        return TupleType(tuple(p for p, _ in parts)), length
    tensor = expect_tensor(t, what)
    if tensor.ndim == 0:
        raise RelationError(f"{what} must have a leading axis to iterate over, got a scalar")
    return TensorType(tensor.shape[1:], tensor.dtype), tensor.shape[0]


def _stacked(t: Type, length: Dim, what: str) -> Type:
    """The type of per-step outputs ``t`` stacked along a new leading axis."""
    if isinstance(t, IncompleteType):
        raise NotReady
    if isinstance(t, TupleType):
        return TupleType(tuple(_stacked(f, length, what) for f in t.fields))
    if not isinstance(t, TensorType):
        raise RelationError(f"{what} must be a tensor, a tuple of tensors or (), got {describe(t)}")
    return TensorType((length,) + t.shape, t.dtype)


def _step_types(
    solver, body: Type, before: tuple[Type, ...], init: Type
) -> tuple[Type, Type, Type]:
    """The state parameter's type, the new state's and the per-step output
    of a loop step ``body``: ``fn(*before, state) -> (out, new_state)``.

    [RULE TYPE-JOIN] (passes/analyses/type_solver.py) The state is ``init`` on entry and
    ``new_state`` after a step. A state parameter with a type (annotated, or
    known otherwise) is that type: ``init`` and ``new_state`` are values of
    it, checked as arguments are. An unannotated one is given ``init``'s
    type, so ``new_state`` must be a value of that type: a state that grows
    (or whose size the body does not know) is an error asking for the
    type, never a parameter that claims the initial size."""
    param, out, new_state = IncompleteType(), IncompleteType(), IncompleteType()
    solver.unify(FuncType((*before, param), TupleType((out, new_state))), body, "the loop body")
    if isinstance(solver.resolve(param), IncompleteType):
        solver.memo["inferred"] = True  # this call's first attempt
        solver.unify(param, init, "the loop state (the body's parameter)")
    else:
        solver.unify(param, init, "the initial loop state")
    joined = solver.join(param, new_state, "the loop body's new state")  # NotReady until known
    if solver.memo.get("inferred") and not solver.within(new_state, param):
        raise RelationError(
            f"the loop state is {describe(solver.resolve(param))} on entry and "
            f"{describe(solver.resolve(new_state))} after the body; give the body's state "
            f"parameter a type that holds both, {describe(joined)}"
        )
    solver.unify(param, new_state, "the loop body's new state")
    return param, new_state, solver.resolve(out)


@type_rule("cf.foreach")
def _foreach_type(args: tuple[Type, ...], attrs: Attrs, solver) -> Type:
    body, xs, init = args
    x_t, length = _step_slice(xs, "the sequence argument of cf.foreach")
    _, new_state, out = _step_types(solver, body, (x_t,), init)
    final = solver.join(init, new_state, "the loop state")
    return TupleType((_stacked(out, length, "the per-step output"), final))


COUNT = TensorType((), "int64")
"""The type of the count of rows a padded ``cf.while_loop`` wrote."""


@type_rule("cf.while_loop")
def _while_type(args: tuple[Type, ...], attrs: Attrs, solver) -> Type:
    """``(outputs stacked along ?, final state)``; padded, ``(outputs
    stacked along max_iterations, final state, count)``, the leading
    dimension static when the attribute gives it."""
    cond, body, init, *limit = args
    max_iterations = attrs["max_iterations"]
    if max_iterations is not None and max_iterations < 0:
        raise RelationError(f"max_iterations must be >= 0, got {max_iterations}")
    if limit:
        if max_iterations is not None:
            raise RelationError(
                "max_iterations is given twice: as an attribute and as the fourth argument"
            )
        given = expect_tensor(limit[0], "max_iterations")
        if given.ndim != 0 or dtype_kind(given.dtype) not in "iu":
            raise RelationError(f"max_iterations must be an integer scalar, got {describe(given)}")
    pad = attrs["pad_outputs"]
    if pad and max_iterations is None and not limit:
        raise RelationError(
            "pad_outputs pads the outputs to max_iterations rows: give max_iterations "
            "(an attribute or the fourth argument)"
        )
    state, new_state, out = _step_types(solver, body, (), init)
    solver.unify(FuncType((state,), TensorType((), "bool")), cond, "the loop condition")
    final = solver.join(init, new_state, "the loop state")
    rows: Dim = max_iterations if pad and max_iterations is not None else ANY
    stacked = _stacked(out, rows, "the per-step output")
    if not pad:
        return TupleType((stacked, final))
    for leaf in type_tree.leaves(solver.resolve(out)):
        if isinstance(leaf, TensorType) and ANY in leaf.shape:
            raise RelationError(
                "pad_outputs fills the rows past the last step with zeros, so the per-step "
                f"output's shape must be known, got {describe(leaf)}"
            )
    return TupleType((stacked, final, COUNT))


# ------------------------------------------------------------ numpy rules
# Control-flow rules are generators: they yield (function, args) requests
# that the interpreter runs, and receive each call's result back.
def _stack_outputs(outs: list[Any]) -> Any:
    if isinstance(outs[0], tuple):
        return tuple(_stack_outputs([o[i] for o in outs]) for i in range(len(outs[0])))
    return np.stack(outs)


def empty_outputs(out_type: Type, rows: int = 0) -> Any:
    """``rows`` rows of zeros shaped as the stacked outputs of type
    ``out_type``: the outputs of a loop that ran zero times, or a padded
    loop's rows past its last step (OpFailure where a per-step dimension
    is not static; the size limit applies)."""
    if isinstance(out_type, TupleType):
        return tuple(empty_outputs(f, rows) for f in out_type.fields)
    assert isinstance(out_type, TensorType)
    if not all(isinstance(d, int) for d in out_type.shape[1:]):
        raise OpFailure(
            f"the loop ran zero times and its per-step output shape {out_type.shape[1:]} "
            "is not static, so the empty result's shape is unknown"
        )
    return np.zeros(allocation((rows,) + out_type.shape[1:], out_type.dtype), out_type.dtype)


def _step_values(xs: Any, t: int) -> Any:
    if isinstance(xs, tuple):
        return tuple(_step_values(x, t) for x in xs)
    return np.asarray(xs[t])  # a 0-d array, not a numpy scalar, for 1-d sequences


def _length(xs: Any) -> int:
    if isinstance(xs, tuple):
        lengths = {_length(x) for x in xs}
        if len(lengths) != 1:
            raise OpFailure(f"the sequences have different lengths {sorted(lengths)}")
        return lengths.pop()
    return int(np.shape(xs)[0])


OutputType = Type | Callable[[], Type | None] | None
"""What a loop's numpy rule is told of its stacked outputs' type, which
only a loop that ran zero times needs (the empty outputs' shape): the
type, or how to find it (the interpreter types an unchecked module only
then)."""


def _output_type(out_type: OutputType, what: str) -> Type:
    """The stacked outputs' type a loop that ran zero times needs (for
    ``what``), found now if it was not given."""
    if callable(out_type):
        out_type = out_type()
    if out_type is None:
        raise OpFailure(
            f"the loop ran zero times and the program does not type-check, so {what} is unknown"
        )
    return out_type


def _finish(outs: list[Any], state: Any, out_type: OutputType) -> tuple[Any, Any]:
    if outs:
        return (_stack_outputs(outs), state)
    return (empty_outputs(_output_type(out_type, "the empty output's type")), state)


@numpy_rule("cf.foreach")
def _foreach_numpy(args: tuple[Any, ...], attrs: Attrs, out_type: OutputType = None):
    body, xs, state = args
    outs = []
    for t in range(_length(xs)):
        out, state = yield (body, (_step_values(xs, t), state))
        outs.append(out)
    return _finish(outs, state, out_type)


def run_time_limit(value: Any) -> int:
    """A ``max_iterations`` argument's value (the type relation checks its
    type; an unchecked program meets these checks here)."""
    array = np.asarray(value)
    if array.shape != () or array.dtype.kind not in "iu":
        raise OpFailure(f"max_iterations must be an integer scalar, got {describe_value(value)}")
    limit = int(array)
    if limit < 0:
        raise OpFailure(f"max_iterations must be >= 0, got {limit}")
    return limit


@numpy_rule("cf.while_loop")
def _while_numpy(args: tuple[Any, ...], attrs: Attrs, out_type: OutputType = None):
    cond, body, state, *given = args
    limit = run_time_limit(given[0]) if given else attrs["max_iterations"]
    pad = attrs["pad_outputs"]
    if pad and limit is None:
        raise OpFailure("pad_outputs pads the outputs to max_iterations rows: give max_iterations")
    outs = []
    while limit is None or len(outs) < limit:
        go = yield (cond, (state,))
        if not bool(go):
            break
        out, state = yield (body, (state,))
        outs.append(out)
    if not pad:
        return _finish(outs, state, out_type)
    assert limit is not None
    if outs:
        stacked = _padded(_stack_outputs(outs), limit - len(outs))
    else:  # the rows of zeros shaped by the type
        stacked = empty_outputs(_output_type(out_type, "the padding rows' shape"), limit)
    return (stacked, state, np.asarray(len(outs), np.int64))


def _padded(stacked: Any, rows: int) -> Any:
    """``stacked`` outputs followed by ``rows`` rows of zeros, field by field."""
    if isinstance(stacked, tuple):
        return tuple(_padded(s, rows) for s in stacked)
    zeros = np.zeros(allocation((rows, *stacked.shape[1:]), stacked.dtype), stacked.dtype)
    return np.concatenate([stacked, zeros], axis=0)
