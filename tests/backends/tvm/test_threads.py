"""Compiled programs called from many threads at once (runtime/thread_vms.py: one
Relax VM per thread; driver/compile.py: the builds' table). Before, all threads
shared one VM and the process crashed or TVM raised ``Check failed: reg <
frame->register_file.size()``.

The stress test runs in a fresh process (tests/support/isolated.py): 16 threads
call one compiled module 500 times each, then 16 threads call the
artifact it exports, reloaded with ``effir.load``, 500 times each. Each
thread follows one of four call sequences (its inputs and shapes, its own
State); every result and the final key equal those of the same sequence
called from one thread. The threads start together on shapes not built
yet, so two of them meet each new binding at once: it is built once."""

from __future__ import annotations

from tests.support.isolated import run_isolated

SCRIPT = r'''
import tempfile
import threading

import numpy as np

import effir

THREADS, CALLS, SEQUENCES = 16, 500, 4
module = effir.check(effir.parse("""#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(3));
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(8, 8), float32]) {
  let %y = nn.dropout(nn.dense(%x, %w), @rng, rate=0.5f);
  let %z = if (greater(sum(%y), 0f)) { tanh(%y) } else { nn.dropout(negative(%y), @rng) };
  cf.while_loop(fn (%s: (int32, Tensor[(n, 8), float32])) { less(%s.0, 2) },
                fn (%s: (int32, Tensor[(n, 8), float32])) {
                  let %t = multiply(%s.1, 0.5f);
                  (sum(%t), (add(%s.0, 1), %t))
                }, (0, %z))
}"""))
rng = np.random.default_rng(0)
w = rng.standard_normal((8, 8)).astype(np.float32)
xs = [rng.standard_normal((2 + i % 2, 8)).astype(np.float32) for i in range(6)]


def inputs(sequence):
    """Sequence k: its own order of the inputs, starting at shape n=2 or 3."""
    return [xs[(k * (sequence + 1) + sequence) % 6] for k in range(CALLS)]


def run(program, sequence, state):
    results = []
    for x in inputs(sequence):
        steps, (count, last) = program(x, w, state=state)
        results.append((steps, count, last))
    results.append(state["rng"].data)
    return results


def same(a, b):
    flat_a = [np.asarray(v) for r in a for v in (r if isinstance(r, tuple) else (r,))]
    flat_b = [np.asarray(v) for r in b for v in (r if isinstance(r, tuple) else (r,))]
    return len(flat_a) == len(flat_b) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(flat_a, flat_b)
    )


def stress(program, new_state, name):
    results, errors = [None] * THREADS, []
    barrier = threading.Barrier(THREADS)

    def worker(i):
        try:
            state = new_state()
            barrier.wait()
            results[i] = run(program, i % SEQUENCES, state)
        except Exception as err:  # reported below, with the thread
            errors.append(f"thread {i}: {err!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{name}: {errors[:3]}"
    return results


compiled = effir.compile(module)
threaded = stress(compiled, lambda: effir.State(module), "compiled")
assert len(compiled.report.builds) == 2, compiled.report.table()  # n=2 and n=3, once each
wanted = [run(compiled, k, effir.State(module)) for k in range(SEQUENCES)]
for i, got in enumerate(threaded):
    assert same(got, wanted[i % SEQUENCES]), f"compiled: thread {i} differs from sequential calls"
print("compiled ok", flush=True)

with tempfile.TemporaryDirectory() as tmp:
    compiled.export(tmp + "/model")
    loaded = effir.load(tmp + "/model")
    threaded = stress(loaded, loaded.new_state, "loaded")
for i, got in enumerate(threaded):
    assert same(got, wanted[i % SEQUENCES]), f"loaded: thread {i} differs from sequential calls"
print("loaded ok", flush=True)
'''


def test_sixteen_threads_call_one_compiled_module_and_one_loaded_artifact() -> None:
    run = run_isolated(SCRIPT, timeout=120).check()
    assert "compiled ok" in run.stdout and "loaded ok" in run.stdout, run.describe()
