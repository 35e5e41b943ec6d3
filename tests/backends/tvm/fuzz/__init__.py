"""A differential fuzzer for the compiled path: typed
random programs (``generator.py``), each compiled with ``effir.compile`` and
interpreted in a subprocess, their results compared (``harness.py``)."""
