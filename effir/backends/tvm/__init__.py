"""The TVM backend: pure regions and loops compiled by Apache TVM, run by an
executor that does the rest (see docs/backend.md).

Most of its modules import TVM (a few seconds) at their top; those that
``import effir`` or the pass registry loads (runtime/errors.py,
runtime/importing.py, driver/passes.py, kernel/lower_tvm.py) do not, so
the core of effir never does. The backend's rules attach to the operator
registry when their modules are imported."""
