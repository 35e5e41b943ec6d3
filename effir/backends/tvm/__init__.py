"""The TVM backend: pure regions and loops compiled by Apache TVM, run by an
executor that does the rest (see docs/backend.md).

Importing this package imports TVM (a few seconds), so the core of effir
never does; the backend's rules attach to the operator registry when their
modules are imported."""
