"""Helpers first written for tests/autodiff/test_grad_hoist.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

from tests.support.gru_programs import NEW_STATE, gates


def _gru_text(length: int, batch: int = 32, inputs: int = 8, hidden: int = 128) -> str:
    """benchmarks/checkpoint_memory.py's GRU (the loss on the final state)."""
    g = 3 * hidden
    return f"""#[version = "0.0.5"]
def @main(%xs: Tensor[({length}, {batch}, {inputs}), float32], %h0: Tensor[({batch}, {hidden}), float32],
          %w: Tensor[({g}, {inputs}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[({batch}, {inputs}), float32], %h: Tensor[({batch}, {hidden}), float32]) {{
{gates(4)}
    ((), {NEW_STATE})
  }};
  let %scan = cf.foreach(%step, %xs, %h0);
  sum(%scan.1 * %scan.1)
}}
"""
