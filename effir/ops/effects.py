"""Effectful surface operators, as users write them against state cells, and I/O.

``explicate`` rewrites the first two into explicit reads and writes of their
cell around the pure keyed/functional operators."""

from collections.abc import Callable
from typing import Any

from ..ir.node import Attrs
from ..ir.op import AttrSpec, op_def, register_op
from ..ir.types import IncompleteType, KeyType, RefType, TupleType, Type
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


SPLIT_ATTRS = Attrs({"num": 2})
