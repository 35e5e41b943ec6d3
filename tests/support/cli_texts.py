"""Helpers first written for tests/cli/test_cli.py, shared with other
test modules (which import tests/support, never each other)."""

H = '#[version = "0.0.5"]\n'


MESSY = H + "def @main(%x: Tensor[(2), float32]) {let %y = %x + 1f; %y * %y}\n"


CANONICAL = (
    H
    + "\n"
    + "def @main(%x: Tensor[(2), float32]) {\n"
    + "  let %y = add(%x, 1f);\n"
    + "  multiply(%y, %y)\n"
    + "}\n"
)
