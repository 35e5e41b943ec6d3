"""Programs of Relay's standard library (prelude: lists, options, trees;
naturals; the gradient cell) parse, check and round-trip."""

from pathlib import Path

import pytest

import effir

STD = Path(__file__).parent / "relay_std"


def without_header(text: str) -> str:
    return text.split("]", 1)[1]


PROGRAMS = {
    "prelude": lambda: (STD / "prelude.rly").read_text(),
    "prelude+nat": lambda: (
        (STD / "prelude.rly").read_text() + without_header((STD / "nat.rly").read_text())
    ),
    "gradient_cell": lambda: (STD / "gradient_cell.rly").read_text(),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_relay_std_roundtrip(name):
    module = effir.parse(PROGRAMS[name](), source_name=name)
    effir.check_well_formed(module)
    text = effir.astext(module)
    again = effir.parse(text)
    effir.assert_structural_equal(again, module)
    assert effir.astext(again) == text
    assert effir.structural_hash(again) == effir.structural_hash(module)


def test_prelude_contents():
    module = effir.parse(PROGRAMS["prelude+nat"]())
    assert set(module.type_defs) == {"List", "Option", "Tree", "nat"}
    for name in (
        "map",
        "foldl",
        "foldr",
        "zip",
        "unfoldr",
        "tmap",
        "size",
        "iterate",
        "nat_iterate",
    ):
        assert name in module
    assert not module["hd"].body.complete  # match? stays incomplete
    assert [len(f.type_params) for f in (module["map"], module["compose"])] == [2, 3]
