"""The scratch of a whole-loop kernel of symbolic length (relax/loops.py
[RULE LOOP-CHUNK]): a call on T steps allocates memory proportional to
min(T, LOOP_CHUNK), not to ``LOOP_CHUNK`` whatever T (the short loops of
``checkpoint="sqrt"``'s segments held as much scratch as a long one).

The bytes are counted where the Relax VM allocates them: the script wraps
``vm.builtin.alloc_storage`` (every storage a VM function creates, the
statically planned ones included) and sums the sizes of one call, in a
process of its own (run_isolated: compiled code)."""

from __future__ import annotations

from tests.support.isolated import run_isolated

SCRIPT = """
import numpy as np
import tvm
import effir
from effir.backends.tvm.driver.compile import compile as compile_module

allocate = tvm.get_global_func("vm.builtin.alloc_storage")
sizes = []

def counted(vm, shape, index, dtype, scope):
    sizes.append(int(shape[0]))
    return allocate(vm, shape, index, dtype, scope)

tvm.register_global_func("vm.builtin.alloc_storage", counted, override=True)
module = effir.check(effir.parse('''#[version = "0.0.5"]
def @main(%xs: Tensor[(t, 4, 16), float32], %w: Tensor[(16, 32), float32]) {
  cf.foreach(fn (%x: Tensor[(4, 16), float32], %h: Tensor[(4, 32), float32]) {
    let %g = tanh(add(nn.matmul(%x, %w), %h));
    (%g, %g)
  }, %xs, zeros(shape=[4, 32]))
}''', source_name="scratch.effir"))
compiled = compile_module(module)
rng = np.random.default_rng(0)
w = (rng.standard_normal((16, 32)) * 0.1).astype(np.float32)
for t in (3, 40, 700):
    xs = rng.standard_normal((t, 4, 16)).astype(np.float32)
    compiled(xs, w)  # the first call builds
    sizes.clear()
    outputs, state = compiled(xs, w)
    expected = effir.interpret(module, xs, w)
    assert np.allclose(outputs, expected[0], atol=1e-5) and np.allclose(state, expected[1], atol=1e-5), t
    print(t, sum(sizes))
"""

STEP_BYTES = 4 * 32 * 4  # a step's (4, 32) float32 row: of the outputs, of the projections


def test_symbolic_loop_scratch_follows_the_length() -> None:
    """Each call's storages stay within 4 times what max(T, 16) steps'
    outputs and hoisted projections need, plus a little for the state and
    the VM's scalars; before, 524 KB of projections for 1,024 steps at
    every length (T = 3: 526 KB against a bound of 70 KB)."""
    result = run_isolated(SCRIPT)
    result.check()
    allocated = dict(map(int, line.split()) for line in result.stdout.split("\n") if line)
    assert set(allocated) == {3, 40, 700}, result.stdout
    for t, nbytes in allocated.items():
        assert nbytes <= 4 * max(t, 16) * 2 * STEP_BYTES + 4096, (t, nbytes, result.stdout)
