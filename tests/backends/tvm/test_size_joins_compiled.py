"""Compiled code of programs whose types join unknown sizes [RULE TYPE-JOIN]
(passes/analyses/type_solver.py) equals the interpreter. Before, the join of a
``(?, 4)`` and a ``(0, 4)`` branch was ``(0, 4)``: compiled ``shape_of``
said ``[0, 4]`` where the interpreter said ``[3, 4]`` (partial evaluation
at ``-O2`` made such a branch of a zero-trip ``cf.while_loop`` by itself,
and ``sum`` failed with "expected 0"); a loop state declared ``?`` took
its initial value's 0 (a ``match_cast`` failure); a variable passed to a
``(3)`` parameter in one branch became ``(3)`` everywhere. Compiled runs go
through tests/support/isolated.py. The type-level tests and properties are in
tests/passes/test_size_joins.py."""

from __future__ import annotations

import json

from tests.support.isolated import run_isolated

SCRIPT = r'''
import json
import numpy as np
import effir
from effir.backends.tvm.driver.compile import compile as compile_module

module = effir.check(effir.parse("""#[version = "0.0.5"]
def @g3(%v: Tensor[(3), float32]) { sum(%v) }
def @main(%x: Tensor[(?, 4), float32], %c: bool, %k: int32,
          %v: Tensor[(5), float32], %m: Tensor[(5), bool], %d: bool) {
  let %never = cf.while_loop(fn (%s: int32) { less(%s, 0) },
    fn (%s: int32) { (ones(shape=[4], dtype="float32"), add(%s, 1)) }, 0);
  let %y = if (%c) { %x } else { zeros(shape=[0, 4], dtype="float32") };
  let %z = if (%c) { %x } else { %never.0 };
  let %grown = cf.while_loop(fn (%s: Tensor[(?), float32]) { less(sum(shape_of(%s)), %k) },
    fn (%s: Tensor[(?), float32]) { ((), concatenate((%s, ones(shape=[1], dtype="float32")))) },
    zeros(shape=[0], dtype="float32"));
  let %masked = boolean_mask(%v, %m);
  let %s = if (%d) { @g3(%masked) } else { 0f };
  (shape_of(%y), sum(%y), shape_of(%z), sum(%z), %grown.1, %s, shape_of(%masked))
}
"""))
x = np.arange(12, dtype=np.float32).reshape(3, 4)
v = np.arange(5, dtype=np.float32)
mask = np.array([1, 1, 0, 1, 1], bool)
mismatches = []
for level in (0, 2):
    compiled = compile_module(module, opt_level=level)
    for c in (True, False):
        args = (x, np.bool_(c), np.int32(3), v, mask, np.bool_(False))
        want = effir.interpret(module, *args)
        got = compiled(*args)
        for i, (a, b) in enumerate(zip(want, got)):
            if not np.array_equal(np.asarray(a), np.asarray(b)):
                mismatches.append(f"O{level} c={c} result {i}: {np.asarray(b)} != {np.asarray(a)}")
print(json.dumps(mismatches))
'''


def test_joined_sizes_compile_to_what_the_interpreter_computes() -> None:
    result = run_isolated(SCRIPT).check()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
