"""Helpers first written for tests/ir/test_relay_std.py, shared with other
test modules (which import tests/support, never each other)."""

from pathlib import Path

import effir

STD = Path(__file__).parents[1] / "ir" / "relay_std"


PRELUDE = Path(effir.__file__).parent / "std" / "prelude.rly"


def without_header(text: str) -> str:
    return text.split("]", 1)[1]


PROGRAMS = {
    "prelude": lambda: PRELUDE.read_text(),
    "prelude+nat": lambda: PRELUDE.read_text() + without_header((STD / "nat.rly").read_text()),
    "gradient_cell": lambda: (STD / "gradient_cell.rly").read_text(),
}
