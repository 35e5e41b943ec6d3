"""docs/semantics.md documents every registered operator and every effect kind:
adding an operator (or an effect kind) without documenting it fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import effir  # noqa: F401  (registers every operator)
from effir.ir import all_ops
from effir.ir.op import EFFECT_KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "semantics.md"
OPERATORS = sorted(definition.name for definition in all_ops())


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def headings(text: str) -> list[str]:
    """The Markdown ATX headings of ``text`` (``## ...``), outside code fences."""
    found = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence and re.match(r"#{1,6}\s", line):
            found.append(line)
    return found


def test_the_registry_and_the_document_exist():
    assert DOC.is_file(), f"{DOC} is missing"
    assert len(OPERATORS) > 50  # the registry is loaded
    assert set(EFFECT_KINDS) == {"pure", "random", "state", "io"}


@pytest.mark.parametrize("name", OPERATORS)
def test_every_operator_is_named_in_backticks(name):
    assert f"`{name}`" in doc_text(), (
        f"operator {name} is registered but docs/semantics.md never names it as `{name}`; "
        "document it in the operator tables (section 5)"
    )


@pytest.mark.parametrize("kind", EFFECT_KINDS)
def test_every_effect_kind_has_its_own_section(kind):
    own = [
        h
        for h in headings(doc_text())
        if f"`{kind}`" in h
        and not any(f"`{other}`" in h for other in EFFECT_KINDS if other != kind)
    ]
    assert own, f"docs/semantics.md has no section heading of its own for the effect kind `{kind}`"
