"""Control-flow operators whose bodies are functions (MXNet's proposal)."""

from ..ir.op import AttrSpec, register_op

register_op(
    "cf.foreach",
    3,
    traits=("control_flow",),
    doc="foreach(body, xs, init): body (x_t, state) -> (out_t, new_state) over xs' leading axis",
)
register_op(
    "cf.while_loop",
    3,
    attrs=(AttrSpec("max_iterations", "int", None, optional=True),),
    traits=("control_flow", "dynamic_shape"),
    doc="while_loop(cond, body, init): outputs stacked over the iterations actually run",
)
