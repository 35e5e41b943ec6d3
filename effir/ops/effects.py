"""Effectful surface operators, as users write them against state cells, and I/O.

``explicate`` rewrites the first two into explicit reads and writes of their
cell around the pure keyed/functional operators."""

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.expr import Call, Expr, Let, RefRead, RefWrite, Tuple, TupleGetItem, Var
from ..ir.node import Attrs
from ..ir.op import AttrSpec, op_def, register_op
from ..ir.types import IncompleteType, KeyType, RefType, TensorType, TupleType, Type
from ..ir.vjp import Args, DifferentiationError, Grads, VjpContext, defvjp
from ..runtime.values import as_tensor
from .relations import NotReady, RelationError, describe, numpy_rule, type_rule

register_op(
    "nn.dropout",
    2,
    attrs=(AttrSpec("rate", "float", 0.5),),
    effect="random",
    traits=("opaque",),
    doc="dropout(x, @rng_cell): reads and advances the PRNG key in the cell",
)
register_op(
    "nn.batch_norm",
    4,
    attrs=(
        AttrSpec("training", "bool", False),
        AttrSpec("axis", "int", 1),
        AttrSpec("epsilon", "float", 1e-5),
        AttrSpec("momentum", "float", 0.1),
    ),
    effect="state",
    traits=("opaque",),
    doc="batch_norm(x, gamma, beta, @bn_cell): the cell holds (running_mean, running_var)",
)
register_op(
    "debug.print",
    1,
    attrs=(AttrSpec("label", "str", ""),),
    effect="io",
    traits=("opaque",),
    doc="prints its argument and returns it",
)
register_op(
    "io.print",
    2,
    attrs=(AttrSpec("label", "str", ""),),
    effect="io",
    traits=("opaque",),
    doc="io.print(world, x): the state-passing form of debug.print; prints x and returns "
    "(world + 1, x), so that outputs are ordered by data flow through the world token",
)

WORLD = "io"
"""The name under which state-passing functions pass the world token."""
WORLD_TYPE = TensorType((), "int64")
"""The world token of state-passing programs: a count of the outputs so far."""

# The output operators' state-passing forms: `debug.print(x)` becomes
# `io.print(%world, x)`, which takes and returns the world token.
op_def("debug.print").rules["world_form"] = "io.print"
# Outputs that are new state, which the linearity verifier checks are not
# dropped: here the world token (batch_norm_train declares its own).
op_def("io.print").rules["state_outputs"] = (0,)


def needs_world(definition) -> bool:
    """Whether an output operator still needs state passing to thread the
    world token to it: ``debug.print`` does; ``io.print``, its world form,
    already takes the token as an argument and returns the new one (its
    ``state_outputs``), so on an A2 program state passing leaves it alone
    and running the pass again is the identity."""
    return definition.effect == "io" and "state_outputs" not in definition.rules


# ---------------------------------------------------------------- type rules
def _cell_content(t: Type, what: str) -> Type:
    if isinstance(t, IncompleteType):
        raise NotReady
    if not isinstance(t, RefType):
        raise RelationError(f"{what} must be a state cell (a Ref), got {describe(t)}")
    if isinstance(t.value, IncompleteType):
        raise NotReady
    return t.value


@type_rule("nn.dropout")
def _dropout_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x, cell = args
    key = _cell_content(cell, "the second argument of nn.dropout")
    if not isinstance(key, KeyType):
        raise RelationError(f"the cell of nn.dropout must hold a Key, it holds {describe(key)}")
    return op_def("random.dropout").rule("type")((x, key), Attrs({"rate": attrs["rate"]}))


@type_rule("nn.batch_norm")
def _batch_norm_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x, gamma, beta, cell = args
    stats = _cell_content(cell, "the fourth argument of nn.batch_norm")
    if not isinstance(stats, TupleType) or len(stats.fields) != 2:
        raise RelationError(
            "the cell of nn.batch_norm must hold (running_mean, running_var), "
            f"it holds {describe(stats)}"
        )
    infer_attrs = Attrs({"axis": attrs["axis"], "epsilon": attrs["epsilon"]})
    rel = op_def("nn.batch_norm_infer").rule("type")
    return rel((x, gamma, beta, stats.fields[0], stats.fields[1]), infer_attrs)


@type_rule("debug.print")
def _print_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    return args[0]


# ------------------------------------------------------------ numpy rules
# The surface forms are defined by the pure operators they stand for, so that
# `explicate` (A1) and the interpreter agree bit for bit:
#   nn.dropout(x, @rng):  (new, sub) = random.split(@rng); @rng := new;
#                         random.dropout(x, sub)
#   nn.batch_norm(x, g, b, @bn, training=True):
#                         (y, m, v) = nn.batch_norm_train(x, g, b, @bn.0, @bn.1); @bn := (m, v)
#   nn.batch_norm(..., training=False): nn.batch_norm_infer(x, g, b, @bn.0, @bn.1)
@numpy_rule("nn.dropout")
def _dropout_numpy(args: tuple[Any, ...], attrs: Attrs) -> Any:
    x, cell = args
    new_key, sub_key = op_def("random.split").rule("numpy")((cell.value,), SPLIT_ATTRS)
    cell.value = new_key
    return op_def("random.dropout").rule("numpy")((x, sub_key), Attrs({"rate": attrs["rate"]}))


@numpy_rule("nn.batch_norm")
def _batch_norm_numpy(args: tuple[Any, ...], attrs: Attrs) -> Any:
    x, gamma, beta, cell = args
    mean, var = cell.value
    if attrs["training"]:
        train_attrs = Attrs(
            {"axis": attrs["axis"], "epsilon": attrs["epsilon"], "momentum": attrs["momentum"]}
        )
        y, new_mean, new_var = op_def("nn.batch_norm_train").rule("numpy")(
            (x, gamma, beta, mean, var), train_attrs
        )
        cell.value = (new_mean, new_var)
        return y
    infer_attrs = Attrs({"axis": attrs["axis"], "epsilon": attrs["epsilon"]})
    return op_def("nn.batch_norm_infer").rule("numpy")((x, gamma, beta, mean, var), infer_attrs)


@numpy_rule("debug.print")
def _print_numpy(args: tuple[Any, ...], attrs: Attrs, sink: Callable[[str, Any], None]) -> Any:
    sink(attrs["label"], args[0])
    return args[0]


@type_rule("io.print")
def _world_print_type(args: tuple[Type, ...], attrs: Attrs) -> Type:
    world, x = args
    if isinstance(world, IncompleteType):
        raise NotReady
    if not (isinstance(world, TensorType) and world.shape == () and world.dtype == "int64"):
        raise RelationError(
            f"the first argument of io.print must be the world token {describe(WORLD_TYPE)}, "
            f"got {describe(world)}"
        )
    return TupleType((WORLD_TYPE, x))


@numpy_rule("io.print")
def _world_print_numpy(
    args: tuple[Any, ...], attrs: Attrs, sink: Callable[[str, Any], None]
) -> Any:
    world, x = args
    sink(attrs["label"], x)
    return (np.asarray(as_tensor(world) + 1, dtype=np.int64), x)


SPLIT_ATTRS = Attrs({"num": 2})


# ------------------------------------------------------------ explicate rules
# `rules["explicate"](call) -> Expr`: the A1 form of a surface call whose
# arguments are atoms, a let chain with the same value and the same effect on
# the cell, spelled with ref_read/ref_write and pure operators (the numpy
# rules above are the same definitions, run directly).
def _explicate_dropout(call: Call) -> Expr:
    x, cell = call.args
    span = call.span
    key, keys = Var("key", span=span), Var("keys", span=span)
    new_key, sub_key = Var("new_key", span=span), Var("sub_key", span=span)
    dropout = Call(
        op_def("random.dropout").op, (x, sub_key), Attrs({"rate": call.attrs["rate"]}), span=span
    )
    return _chain(
        [
            (key, RefRead(cell, span=span)),
            (keys, Call(op_def("random.split").op, (key,), SPLIT_ATTRS, span=span)),
            (new_key, TupleGetItem(keys, 0, span=span)),
            (sub_key, TupleGetItem(keys, 1, span=span)),
            (Var("_", span=span), RefWrite(cell, new_key, span=span)),
        ],
        dropout,
    )


def _explicate_batch_norm(call: Call) -> Expr:
    x, gamma, beta, cell = call.args
    span = call.span
    attrs = call.attrs
    stats, mean, var = Var("stats", span=span), Var("mean", span=span), Var("var", span=span)
    reads = [
        (stats, RefRead(cell, span=span)),
        (mean, TupleGetItem(stats, 0, span=span)),
        (var, TupleGetItem(stats, 1, span=span)),
    ]
    args = (x, gamma, beta, mean, var)
    if not attrs["training"]:
        infer = Attrs({"axis": attrs["axis"], "epsilon": attrs["epsilon"]})
        return _chain(reads, Call(op_def("nn.batch_norm_infer").op, args, infer, span=span))
    train = Attrs(
        {"axis": attrs["axis"], "epsilon": attrs["epsilon"], "momentum": attrs["momentum"]}
    )
    out, y = Var("bn", span=span), Var("y", span=span)
    new_mean, new_var = Var("new_mean", span=span), Var("new_var", span=span)
    new_stats = Var("new_stats", span=span)
    return _chain(
        reads
        + [
            (out, Call(op_def("nn.batch_norm_train").op, args, train, span=span)),
            (y, TupleGetItem(out, 0, span=span)),
            (new_mean, TupleGetItem(out, 1, span=span)),
            (new_var, TupleGetItem(out, 2, span=span)),
            (new_stats, Tuple((new_mean, new_var), span=span)),
            (Var("_", span=span), RefWrite(cell, new_stats, span=span)),
        ],
        y,
    )


def _chain(bindings: list[tuple[Var, Expr]], result: Expr) -> Expr:
    for var, value in reversed(bindings):
        result = Let(var, value, result, span=value.span)
    return result


op_def("nn.dropout").rules["explicate"] = _explicate_dropout
op_def("nn.batch_norm").rules["explicate"] = _explicate_batch_norm


# ------------------------------------------------------------------- vjp
# ``grad`` differentiates state-passing (A2) programs, where the effects are
# explicit values: nn.dropout and nn.batch_norm have become random.dropout
# (with a key) and nn.batch_norm_train/infer (with the statistics), whose
# rules do the work. Meeting a surface form means the effect passes did not
# run: a located error says so rather than a zero gradient. The output
# operators return their input unchanged: the cotangent passes through (the
# backward prints nothing; the world token has no cotangent).


@defvjp("nn.dropout", "nn.batch_norm")
def _surface_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    name = getattr(ctx.call.callee, "name", "?")
    raise DifferentiationError(
        f"{name} reads and writes a state cell: grad differentiates state-passing "
        "programs (run the effect passes first, e.g. effir.grad does)",
        ctx.span,
    )


@defvjp("debug.print")
def _print_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ct,)


@defvjp("io.print")
def _world_print_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Any) -> Grads:
    _, ct_x = ct
    return (None, ct_x)
