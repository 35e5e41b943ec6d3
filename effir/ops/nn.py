"""Neural-network operators (pure; the effectful surface forms are in effects.py)."""

from ..ir.op import AttrSpec, register_op

_EPS = AttrSpec("epsilon", "float", 1e-5)

register_op(
    "nn.dense",
    2,
    attrs=(AttrSpec("units", "int", None, optional=True), AttrSpec("out_dtype", "str", "")),
    traits=("opaque",),
    doc="dense(x, w) = x @ w.T",
)
register_op(
    "nn.matmul",
    2,
    attrs=(
        AttrSpec("units", "int", None, optional=True),
        AttrSpec("out_dtype", "str", ""),
        AttrSpec("transpose_a", "bool", False),
        AttrSpec("transpose_b", "bool", False),
    ),
    traits=("opaque",),
)
register_op("nn.softmax", 1, attrs=(AttrSpec("axis", "int", -1),), traits=("opaque",))
register_op("nn.log_softmax", 1, attrs=(AttrSpec("axis", "int", -1),), traits=("opaque",))
register_op(
    "nn.layer_norm",
    3,
    attrs=(
        AttrSpec("axis", "int", -1),
        _EPS,
        AttrSpec("center", "bool", True),
        AttrSpec("scale", "bool", True),
    ),
    traits=("opaque",),
    doc="layer_norm(x, gamma, beta)",
)
register_op(
    "nn.batch_norm_infer",
    5,
    attrs=(AttrSpec("axis", "int", 1), _EPS),
    traits=("opaque",),
    doc="batch_norm_infer(x, gamma, beta, running_mean, running_var)",
)
register_op(
    "nn.batch_norm_train",
    5,
    attrs=(AttrSpec("axis", "int", 1), _EPS, AttrSpec("momentum", "float", 0.1)),
    traits=("opaque",),
    doc="batch_norm_train(x, gamma, beta, mean, var) -> (y, new_mean, new_var); PyTorch's "
    "convention: momentum weights the batch statistic, running var is unbiased",
)
