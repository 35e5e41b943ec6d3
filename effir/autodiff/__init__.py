"""Reverse-mode automatic differentiation of effir programs (docs/autodiff.md).

- ``cotangent``: which values get a gradient, their types, accumulation;
- ``reverse``: one block's forward and backward, pullbacks for calls,
  closures and branches;
- ``rules``: binding VJP rules, registered on higher-order operators;
  ``loop_rule``: the one of ``cf.foreach`` and ``cf.while_loop``;
- ``checkpoint``: the checkpoint policies the loop rule consults (a table
  by name); ``loop_vjp``: ``LoopVjp``, a loop under differentiation;
  ``loops``: its backward from stored residuals or carries; ``segments``
  (``static_segments``, ``runtime_segments``): its steps in segments;
  ``hoist``: weight-gradient terms out of the reverse loop; ``keytape``:
  keys carried by a loop, stored for its backward;
- ``free``: the free variables of every branch and closure, in one walk;
- ``differentiator``: the module-wide state; ``entry``: the function
  ``grad`` adds; ``api``: ``effir.grad``, ``effir.value_and_grad`` and the
  ``grad`` pass.
"""

from ..ir.vjp import DifferentiationError
from .api import grad, grad_module, value_and_grad

__all__ = ["DifferentiationError", "grad", "grad_module", "value_and_grad"]
