"""The GRU in effir text, shared by test modules and benchmarks (which
import tests/support, never each other's modules).

``gates`` is the cell's equations, written once: every GRU program of the
suite and the benchmarks is its own signature and loop around them.
"""

from __future__ import annotations

import textwrap

GATES = """\
let %gx = nn.dense(%x, %w) + %bias;
let %gh = nn.dense(%h, %u);
let %gxs = split(%gx, indices_or_sections=3, axis=1);
let %ghs = split(%gh, indices_or_sections=3, axis=1);
let %z = sigmoid(%gxs.0 + %ghs.0);
let %r = sigmoid(%gxs.1 + %ghs.1);
let %n = tanh(%gxs.2 + %r * %ghs.2);
"""
"""ONNX's GRU gates (``z, r, n``; the reset gate applied after ``%u``),
from ``%x``, ``%h``, ``%w``, ``%u`` and ``%bias``; the new state is
``NEW_STATE``."""

NEW_STATE = "(1f - %z) * %n + %z * %h"


def gates(indent: int) -> str:
    """``GATES`` indented by ``indent`` spaces, with no final newline, to
    stand on its own lines in a program's f-string."""
    return textwrap.indent(GATES, " " * indent).rstrip("\n")


def gru_text(hidden: int) -> str:
    g = 3 * hidden
    return f"""
def @main(%xs: Tensor[(t, b, {hidden}), float32], %h0: Tensor[(b, {hidden}), float32],
          %w: Tensor[({g}, {hidden}), float32], %u: Tensor[({g}, {hidden}), float32],
          %bias: Tensor[({g}), float32]) {{
  let %step = fn (%x: Tensor[(b, {hidden}), float32], %h: Tensor[(b, {hidden}), float32]) {{
{gates(4)}
    let %h_new = {NEW_STATE};
    (%h_new, %h_new)
  }};
  cf.foreach(%step, %xs, %h0)
}}
"""
