"""Golden files: tests/ir/golden/NAME.effir parses and prints as
NAME.canonical.effir, which is a fixpoint of fmt. Regenerate the expected
files after an intentional printer change with EFFIR_UPDATE_GOLDEN=1."""

import os
from pathlib import Path

import pytest

import effir

GOLDEN = Path(__file__).parent / "golden"
INPUTS = sorted(p for p in GOLDEN.glob("*.effir") if not p.name.endswith(".canonical.effir"))


@pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])
def test_golden(path: Path):
    expected_path = path.with_name(path.stem + ".canonical.effir")
    module = effir.parse(path.read_text(), source_name=str(path))
    effir.check_well_formed(module)
    printed = effir.astext(module)
    if os.environ.get("EFFIR_UPDATE_GOLDEN"):
        expected_path.write_text(printed)
    assert printed == expected_path.read_text()
    reparsed = effir.parse(printed)
    effir.assert_structural_equal(reparsed, module)
    assert effir.astext(reparsed) == printed


def test_every_golden_input_has_an_expected_output():
    assert INPUTS, "no golden inputs found"
    for path in INPUTS:
        assert path.with_name(path.stem + ".canonical.effir").exists(), path
