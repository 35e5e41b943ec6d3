"""Reverse-mode automatic differentiation of effir programs (docs/autodiff.md).

- ``cotangent``: which values get a gradient, their types, accumulation;
- ``reverse``: one block's forward and backward, pullbacks for calls,
  closures and branches;
- ``loops``: ``cf.foreach`` and ``cf.while_loop`` (checkpointing ``none``
  and ``loop``); ``sqrt``: segment checkpointing; ``keytape``: keys
  carried by a loop, stored for its backward;
- ``free``: the free variables of every branch and closure, in one walk;
- ``differentiator``: the module-wide state; ``entry``: the function
  ``grad`` adds; ``api``: ``effir.grad``, ``effir.value_and_grad`` and the
  ``grad`` pass.
"""

from ..ir.vjp import DifferentiationError
from .api import grad, grad_module, value_and_grad

__all__ = ["DifferentiationError", "grad", "grad_module", "value_and_grad"]
