"""The one timing rule every benchmark table uses: the median of a few runs
(the machines are shared, so a single run is noise)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

REPEATS = 3


def median_seconds(action: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_after_warmup(action: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median seconds of ``repeats`` calls after ``warmup`` calls (caches,
    thread pools and lazy builds warm)."""
    for _ in range(warmup):
        action()
    return median_seconds(action, repeats)
