"""The VJP rule of ``cf.foreach`` and ``cf.while_loop``: the loop taken
apart (``LoopVjp``) and handed to the ``grad`` run's checkpoint policy
(``effir.autodiff.checkpoint``), which binds the loop and records its
backward. Registered on import (``effir.autodiff.api`` imports it)."""

from __future__ import annotations

from ..ir.builder import LetBuilder
from ..ir.expr import Call, Var
from ..ir.expr_functor import Computation
from .checkpoint import CheckpointPolicy
from .loop_vjp import LoopVjp
from .reverse import Reverse
from .rules import def_binding_vjp


@def_binding_vjp("cf.foreach", "cf.while_loop")
def loop_vjp(rev: Reverse, var: Var, call: Call, b: LetBuilder) -> Computation[None]:
    """``var = call`` (a loop) differentiated under the run's policy."""
    policy = rev.ad.checkpoint
    assert isinstance(policy, CheckpointPolicy)  # api.py's, carried by the Differentiator
    yield policy.bind(LoopVjp.of(rev, var, call), b)


__all__ = ["loop_vjp"]
