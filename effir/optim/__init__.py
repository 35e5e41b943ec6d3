"""Optimisers written in effir: an update step is effir operators, so a
training step (forward, backward, update) compiles into one program.

Each optimiser is a small frozen dataclass of hyperparameters with

- ``init(params)``: the optimiser state for numpy ``params`` (a tuple of arrays);
- ``update(params, grads, state)``: ``(new_params, new_state)``, written with
  ``effir.op``: on numpy arrays it runs eagerly, inside a function being
  built (``ModuleBuilder.function``, ``effir.trace``) it emits the update into
  that function;
- ``function(types)`` / ``module(types)``: the update as a global function
  ``(params..., grads..., state...) -> ((params...), (state...))`` for
  parameters of the given types.

Hyperparameters are compiled in as constants (as optax closes over them):
changing the learning rate means building the step again.
"""

from .adam import Adam
from .base import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "Optimizer"]
