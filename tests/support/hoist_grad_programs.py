"""Helpers first written for tests/autodiff/test_grad_hoist.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations


def _gru_text(length: int, batch: int = 32, inputs: int = 8, hidden: int = 128) -> str:
    """benchmarks/checkpoint_memory.py's GRU (the loss on the final state)."""
    g = 3 * hidden
    return f"""#[version = "0.0.5"]
def @main(%xs: Tensor[({length}, {batch}, {inputs}), float32], %h0: Tensor[({batch}, {hidden}), float32],
          %w: Tensor[({g}, {inputs}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[({batch}, {inputs}), float32], %h: Tensor[({batch}, {hidden}), float32]) {{
    let %gx = nn.dense(%x, %w) + %bias;
    let %gh = nn.dense(%h, %u);
    let %gxs = split(%gx, indices_or_sections=3, axis=1);
    let %ghs = split(%gh, indices_or_sections=3, axis=1);
    let %z = sigmoid(%gxs.0 + %ghs.0);
    let %r = sigmoid(%gxs.1 + %ghs.1);
    let %n = tanh(%gxs.2 + %r * %ghs.2);
    ((), (1f - %z) * %n + %z * %h)
  }};
  let %scan = cf.foreach(%step, %xs, %h0);
  sum(%scan.1 * %scan.1)
}}
"""
