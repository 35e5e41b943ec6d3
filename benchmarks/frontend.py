"""The Python frontend's conversion time: @effir.script and effir.trace on
the GRU language model (target: under 50 ms each), and @effir.script on
generated straight-line functions of 200 and 2,000 statements (target:
2,000 under 2 s; conversion is linear, so 10x the statements take about
10x the time).

Run with `make bench` (or `.venv/bin/python benchmarks/frontend.py`).
"""

from __future__ import annotations

import importlib.util
import itertools
import linecache
import statistics
import time
from pathlib import Path

import numpy as np
from timing import median_seconds

import effir

ROOT = Path(__file__).parents[1]
_COUNTER = itertools.count()


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated(n: int) -> effir.ScriptFunction:
    """A scripted function of ``n`` statements, its source registered as a file's."""
    lines = ["def f(x: effir.Tensor[(4,), 'float32']):", "    v0 = x"]
    lines += [f"    v{i} = np.tanh(v{i - 1} * 0.5 + x)" for i in range(1, n)]
    lines.append(f"    return v{n - 1}")
    source = "\n".join(lines) + "\n"
    filename = f"<bench-{next(_COUNTER)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"effir": effir, "np": np}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


def cpu_seconds(action, repeats: int = 3) -> float:
    """Median CPU time of this process (less sensitive than wall time to
    the other processes of a shared machine)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        action()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    gru = load_example("gru_lm")
    actions = [
        ("script GRU LM", lambda: effir.script(gru.main.fn).module),
        ("trace GRU LM", gru.traced),
    ]
    for n in (200, 2000):
        fn = generated(n)
        actions.append((f"script {n} statements", lambda fn=fn: effir.script(fn).module))
    rows = [(name, median_seconds(action), cpu_seconds(action)) for name, action in actions]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'program':<{width}}  wall s   cpu s")
    for name, wall, cpu in rows:
        print(f"{name:<{width}}  {wall:.4f}  {cpu:.4f}")
    small, large = rows[-2][1], rows[-1][1]
    print(f"2000 / 200 statements: {large / small:.1f}x (linear: about 10x)")


if __name__ == "__main__":
    main()
