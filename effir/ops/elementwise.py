"""Elementwise and broadcasting math, comparisons and logic."""

from ..ir.op import AttrSpec, register_op

UNARY = ("negative", "exp", "log", "sqrt", "tanh", "sigmoid", "nn.relu", "logical_not")
BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum")
COMMUTATIVE = {"add", "multiply", "maximum", "minimum", "equal", "not_equal"}
COMPARISON = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = ("logical_and", "logical_or")

for _name in UNARY:
    register_op(_name, 1, traits=("elementwise",), doc=f"elementwise {_name}")

for _name in BINARY + COMPARISON + LOGICAL:
    _traits = ("broadcast", "commutative") if _name in COMMUTATIVE else ("broadcast",)
    register_op(_name, 2, traits=_traits, doc=f"elementwise {_name} with numpy broadcasting")


register_op("where", 3, traits=("broadcast",), doc="where(cond, x, y) with broadcasting")
register_op(
    "cast", 1, attrs=(AttrSpec("dtype", "dtype"),), traits=("elementwise",), doc="dtype cast"
)
