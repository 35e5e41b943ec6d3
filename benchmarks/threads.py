"""What one VM per thread costs (effir/backends/tvm/runtime/thread_vms.py).

Single thread: the VM function reached as before (one VM shared by every
thread, the entry looked up at each call), as now (the calling thread's VM,
its entry cached), and a function object held by the caller (the floor);
then the whole compiled call, and what a thread's first call pays to make
its VM. Many threads: calls per second of one compiled module called by 1
to 16 threads at once, each with its own State. Program: a dropout, an
``if`` on data and a two-step while loop over an (8, 16) tensor.

    .venv/bin/python benchmarks/threads.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import relax

import effir
from effir.backends.tvm.runtime.signature import to_tvm
from effir.backends.tvm.runtime.thread_vms import ThreadVMs

PROGRAM = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(3));
def @main(%x: Tensor[(8, 16), float32]) {
  let %y = nn.dropout(%x, @rng, rate=0.5f);
  let %z = if (greater(sum(%y), 0f)) { tanh(%y) } else { negative(%y) };
  cf.while_loop(fn (%s: (int32, Tensor[(8, 16), float32])) { less(%s.0, 2) },
                fn (%s: (int32, Tensor[(8, 16), float32])) {
                  let %t = multiply(%s.1, 0.5f);
                  ((), (add(%s.0, 1), %t))
                }, (0, %z)).1.1
}
"""


def per_call_us(action: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over ``repeats`` runs of the mean microseconds per call."""
    for _ in range(calls // 10):
        action()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        runs.append((time.perf_counter() - start) / calls)
    return 1e6 * statistics.median(runs)


def first_call_us(vms: ThreadVMs, repeats: int) -> float:
    """A thread's first call of ``vms``: making its VM."""
    times: list[float] = []

    def first() -> None:
        start = time.perf_counter()
        vms.function("main")
        times.append(time.perf_counter() - start)

    for _ in range(repeats):
        thread = threading.Thread(target=first)
        thread.start()
        thread.join()
    return 1e6 * statistics.median(times)


def throughput(compiled: Any, module: Any, x: np.ndarray, threads: int, calls: int) -> float:
    """Calls per second of ``threads`` threads making ``calls`` calls each."""
    barrier = threading.Barrier(threads + 1)

    def work() -> None:
        state = effir.State(module)
        barrier.wait()
        for _ in range(calls):
            compiled(x, state=state)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    return threads * calls / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    module = effir.check(effir.parse(PROGRAM))
    compiled = effir.compile(module)
    spec = next(iter(compiled.specialisations.values()))
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    signature = compiled.signature()
    state = effir.State(module)
    args = [to_tvm(v, s) for v, (_, s) in zip((x, state["rng"]), signature.params, strict=True)]
    shared = relax.VirtualMachine(spec.executable, spec.device)
    held = shared["main"]
    rows = [
        ("VM function, one VM shared, entry looked up per call (before)",
         per_call_us(lambda: shared["main"](*args), 2000, repeats)),
        ("VM function, the thread's own VM (now)",
         per_call_us(lambda: spec.function()(*args), 2000, repeats)),
        ("VM function held by the caller (floor)",
         per_call_us(lambda: held(*args), 2000, repeats)),
        ("whole compiled call (arguments, state, results)",
         per_call_us(lambda: compiled(x, state=state), 1000, repeats)),
    ]  # fmt: skip
    print("One thread, us per call (median of", repeats, "runs)")
    print("| path | us |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")
    made = first_call_us(ThreadVMs(spec.executable, spec.device), 20)
    print(f"| a thread's first call, making its VM | {made:.0f} |")
    print("\nMany threads: one compiled module, each thread its own State, 400 calls each")
    print("| threads | calls/s |\n|---|---|")
    for n in (1, 2, 4, 8, 16):
        print(f"| {n} | {throughput(compiled, module, x, n, 400):.0f} |", flush=True)


if __name__ == "__main__":
    main()
