"""Helpers first written for tests/backends/tvm/test_loop_tiles.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations


def gru_text(hidden: int) -> str:
    g = 3 * hidden
    return f"""
def @main(%xs: Tensor[(t, b, {hidden}), float32], %h0: Tensor[(b, {hidden}), float32],
          %w: Tensor[({g}, {hidden}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[(b, {hidden}), float32], %h: Tensor[(b, {hidden}), float32]) {{
    let %gx = nn.dense(%x, %w) + %bias;
    let %gh = nn.dense(%h, %u);
    let %gxs = split(%gx, indices_or_sections=3, axis=1);
    let %ghs = split(%gh, indices_or_sections=3, axis=1);
    let %z = sigmoid(%gxs.0 + %ghs.0);
    let %r = sigmoid(%gxs.1 + %ghs.1);
    let %n = tanh(%gxs.2 + %r * %ghs.2);
    let %h_new = (1f - %z) * %n + %z * %h;
    (%h_new, %h_new)
  }};
  cf.foreach(%step, %xs, %h0)
}}
"""
