"""Backends: the reference interpreter and the TVM backend (import effir.ir,
effir.ops and effir.passes). See docs/architecture.md."""
