"""A differential fuzzer for the compiled path (issue 12, item 5): typed
random programs (``generator.py``), each compiled with ``effir.compile`` and
interpreted in a subprocess, their results compared (``harness.py``)."""
