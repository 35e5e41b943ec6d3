"""The TVM backend's passes, as the pass registry and effir.compile find
them: importing this module registers ``lower-tvm`` (kernel/lower_tvm.py)
without importing TVM, so ``effir opt --list-passes`` stays fast."""

from ..kernel import lower_tvm  # noqa: F401  (registers lower-tvm)
