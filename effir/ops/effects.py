"""Effectful surface operators, as users write them against state cells, and I/O.

``explicate`` rewrites the first two into explicit reads and writes of their
cell around the pure keyed/functional operators."""

from ..ir.op import AttrSpec, register_op

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
