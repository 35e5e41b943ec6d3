"""The TVM backend's passes, as the pass registry's table names them
(``effir.passes.infra.registry.BUILTIN_PASSES``): importing this module registers
``lower-tvm`` (kernel/lower_tvm.py) without importing TVM, so ``effir opt
--list-passes`` stays fast. Code outside the backend names the driver, not
the stage that defines the pass."""

from ..kernel.lower_tvm import lower_tvm

__all__ = ["lower_tvm"]
