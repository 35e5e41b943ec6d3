"""The GRU of benchmarks/gru_loop.py (input and hidden 256, T=100, batch 1 by
default) compiled whole through the public path, ``effir.compile`` for this
CPU: how long the compile takes and how long a call.

Written against the public API that every commit since 2530f05 has
(``effir.parse``, ``effir.check``, ``effir.compile`` with ``dims``,
``effir.interpret``), so that benchmarks/compare_commits.py can run this one
file against another commit's effir (``PYTHONPATH``); the GRU's text is read
from the file beside this one's tree (tests/support/gru_programs.py), which
that commit's tree may lack.

Prints where effir was imported from, then ``RESULT {"compile": s, "call":
s}``: ``compile`` is the wall time of ``effir.compile`` with the dimensions
bound (so TVM builds there; it includes TVM's import, which effir.compile
does on first use), ``call`` the minimum of ``--calls`` calls after
``--warmup`` calls. The first call's result is checked against the
interpreter's.

    .venv/bin/python benchmarks/gru_compiled.py [--hidden 256] [--length 100] [--batch 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import numpy as np

import effir

HEADER = '#[version = "0.0.5"]\n'
GRU_PROGRAMS = Path(__file__).resolve().parents[1] / "tests" / "support" / "gru_programs.py"


def gru_programs() -> ModuleType:
    """tests/support/gru_programs.py of this file's tree, loaded from its path:
    ``import tests.support...`` would find the tree on ``PYTHONPATH``, which
    may be a commit without it."""
    spec = importlib.util.spec_from_file_location("gru_programs", GRU_PROGRAMS)
    assert spec is not None and spec.loader is not None, GRU_PROGRAMS
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arguments(hidden: int, length: int, batch: int) -> list[np.ndarray]:
    """The GRU's inputs: the sequence, the first state, the weights and bias."""
    rng = np.random.default_rng(0)
    g = 3 * hidden
    return [
        rng.standard_normal((length, batch, hidden), dtype=np.float32),
        rng.standard_normal((batch, hidden), dtype=np.float32),
        (rng.standard_normal((g, hidden)) / np.sqrt(hidden)).astype(np.float32),
        (rng.standard_normal((g, hidden)) / np.sqrt(hidden)).astype(np.float32),
        (rng.standard_normal(g) * 0.1).astype(np.float32),
    ]


def leaves(value: object) -> list[np.ndarray]:
    """A result's tensors, in order (a result may be a tuple of tuples)."""
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in leaves(item)]
    return [np.asarray(value)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args()
    print(f"effir from {Path(effir.__file__).parent}")
    module = effir.check(effir.parse(HEADER + gru_programs().gru_text(options.hidden)))
    args = arguments(options.hidden, options.length, options.batch)

    start = time.perf_counter()
    compiled = effir.compile(module, "llvm", dims={"t": options.length, "b": options.batch})
    compile_seconds = time.perf_counter() - start

    got, want = leaves(compiled(*args)), leaves(effir.interpret(module, *args))
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    for _ in range(options.warmup):
        compiled(*args)
    calls = []
    for _ in range(options.calls):
        start = time.perf_counter()
        compiled(*args)
        calls.append(time.perf_counter() - start)
    print("RESULT " + json.dumps({"compile": compile_seconds, "call": min(calls)}))


if __name__ == "__main__":
    main()
