"""Binding VJP rules: operators whose derivative is a whole binding's
rewrite, registered beside the VJP rules of the other operators.

An ordinary operator's ``"vjp"`` rule (``effir.ir.vjp``) maps the
cotangent of its result to its arguments' and sees nothing of the
program around it. A higher-order operator (a loop, whose body is a
function) needs more: its forward is rewritten to store what its backward
reads, and its backward differentiates its body. Such an operator
registers a ``"binding_vjp"`` rule, as JAX registers ``scan_p``'s
transpose and partial-evaluation rules beside the primitive; ``Reverse``
calls it for ``var = op(args)`` in place of copying the binding::

    @def_binding_vjp("cf.foreach", "cf.while_loop")
    def loop_vjp(rev, var, call, b):
        ...  # bind var in b, append the backward to rev.tape

The rule is a computation on the trampoline (a generator, as every
``Reverse`` hook): it yields the nested blocks it differentiates.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.expr import Op
from ..ir.expr_functor import Computation
from ..ir.op import lookup_op

BINDING_VJP = "binding_vjp"
"""The key of the rule in an operator's ``rules``."""

BindingVjp = Callable[..., Computation[None]]
"""A rule, called as ``rule(rev, var, call, b)``: ``rev`` the ``Reverse``
differentiating the block (reverse.py, which builds on this table and
looks rules up in it), ``var = call`` the binding, ``b`` the forward's
builder. Each rule types its own parameters (loop_rule.py)."""


def def_binding_vjp(*names: str) -> Callable[[BindingVjp], BindingVjp]:
    """Register the decorated function as the binding VJP rule of ``names``."""

    def register(rule: BindingVjp) -> BindingVjp:
        for name in names:
            definition = lookup_op(name)
            if definition is None:
                raise ValueError(f"def_binding_vjp: unknown operator {name!r}")
            if BINDING_VJP in definition.rules:
                raise ValueError(f"def_binding_vjp: operator {name} already has a binding rule")
            definition.rules[BINDING_VJP] = rule
        return rule

    return register


def binding_vjp_rule(op: Op) -> BindingVjp | None:
    """The binding VJP rule of ``op``, or None (its ``"vjp"`` rule applies)."""
    definition = lookup_op(op.name)
    return None if definition is None else definition.rules.get(BINDING_VJP)
