"""Pacing Python's cyclic garbage collector while effir works on a large
program: the one place that sets the collector's thresholds."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

COLLECTOR_THRESHOLD = 100_000
"""Allocations between two young-generation collections while effir builds
or walks a large program (CPython's default is 700)."""

_pacing = threading.Lock()
_paced = 0  # paced phases running (in any thread)
_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def collector_paced() -> Iterator[None]:
    """Python's cyclic garbage collector, paced for the parser, the
    printer, the checks and each pass. They allocate millions of IR nodes
    (or pieces of text) that stay alive, and with the default
    thresholds each full collection walks all of them: the collector's share
    of a pass grows with the program (a third of the time at 100,000
    bindings). IR is acyclic, so reference counting frees what a pass drops;
    collecting every ``COLLECTOR_THRESHOLD`` allocations instead of every 700
    keeps cycles (generator frames) in check at a fraction of the cost, as
    mypy does. The thresholds are restored when the last paced phase ends;
    a collector that is off, or paced more slowly already, is left alone."""
    global _paced, _saved
    with _pacing:
        if _paced == 0:
            _saved = gc.get_threshold()
            if 0 < _saved[0] < COLLECTOR_THRESHOLD:
                gc.set_threshold(COLLECTOR_THRESHOLD, *_saved[1:])
        _paced += 1
    try:
        yield
    finally:
        with _pacing:
            _paced -= 1
            if _paced == 0:
                gc.set_threshold(*_saved)
