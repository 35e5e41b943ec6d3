"""Reductions over axes."""

from ..ir.op import AttrSpec, register_op

_REDUCE_ATTRS = (
    AttrSpec("axis", "ints", None, optional=True),
    AttrSpec("keepdims", "bool", False),
    AttrSpec("exclude", "bool", False),
)

for _name in ("sum", "mean", "max", "min", "prod"):
    register_op(_name, 1, attrs=_REDUCE_ATTRS, traits=("reduction",), doc=f"{_name} over axes")

register_op(
    "argmax",
    1,
    attrs=(
        AttrSpec("axis", "ints", None, optional=True),
        AttrSpec("keepdims", "bool", False),
        AttrSpec("exclude", "bool", False),
        AttrSpec("select_last_index", "bool", False),
    ),
    traits=("reduction",),
    doc="index of the maximum (int32)",
)
