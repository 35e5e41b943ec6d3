"""Helpers first written for tests/backends/tvm/test_artifact.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import effir

HEADER = '#[version = "0.0.5"]\n'


PROGRAM = """
global @rng: Ref[Key] = ref(random.key(3));
global @count: Ref[Tensor[(), float32]] = ref(0f);
def @main(%x: Tensor[(n, 4), float32], %w: Tensor[(4, 4), float32]) {
  let %y = nn.dropout(nn.dense(%x, %w), @rng, rate=0.5f);
  ref_write(@count, add(ref_read(@count), 1f));
  debug.print(sum(%y), label="total");
  tanh(%y)
}
"""


def program() -> effir.IRModule:
    return effir.check(effir.parse(HEADER + PROGRAM, source_name="artifact.effir"))
