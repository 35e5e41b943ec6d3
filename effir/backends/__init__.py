"""Backends: the reference interpreter and the TVM backend (import effir.ir,
effir.ops and effir.passes). See docs/architecture.md."""

from ..passes.registry import register_pass_module

# The TVM backend's passes (lower-tvm), imported at the registry's first
# look-up; that module imports TVM only when the pass runs.
register_pass_module("effir.backends.tvm.driver.passes")
