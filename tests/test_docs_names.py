"""Names and citations that stay true: every ``[RULE ...]`` tag is defined once
in docs/rules.md and used, and nothing cites a file outside the repository or
an issue tracker that is not in it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "rules.md"
SCANNED = ("effir", "docs", "tests", "benchmarks", "examples", "notebooks", "README.md")
SUFFIXES = {".py", ".md", ".cc", ".cuh", ".h", ".effir", ".txt", ".toml", ".ipynb"}
THIS = Path(__file__).resolve()

# A well-formed tag: one name, upper-case words joined by hyphens.
TAG = re.compile(r"\[RULE ([A-Z0-9]+(?:-[A-Z0-9]+)*)\]")
ANY_TAG = re.compile(r"\[RULE\b[^\]]*\]?")
ROW = re.compile(r"^\| `\[RULE ([A-Z0-9-]+)\]` \| (.+?) \| `([^`]+)` \|$")

MISSING_FILES = ("DESIGN.md", "TVM_NOTES.md")
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\s*\d+|(?<![\w&/(#])#\d+\b", re.IGNORECASE)


def texts() -> dict[str, str]:
    """Every scanned text file (notebooks: their cells' sources, not outputs)."""
    found: dict[str, str] = {}
    for top in SCANNED:
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in paths:
            if path == THIS or not path.is_file() or path.suffix not in SUFFIXES:
                continue
            if "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".ipynb":
                cells = json.loads(text)["cells"]
                text = "\n".join("".join(cell["source"]) for cell in cells)
            found[path.relative_to(ROOT).as_posix()] = text
    return found


def index() -> list[tuple[str, str, str]]:
    """The rows of docs/rules.md's table: (tag, meaning, defining file)."""
    rows = []
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), match.group(2), match.group(3)))
    return rows


def test_the_index_has_rows_and_each_tag_once():
    tags = [tag for tag, _, _ in index()]
    assert len(tags) > 50
    assert [tag for tag, n in Counter(tags).items() if n > 1] == []
    assert tags == sorted(tags)


def test_every_tag_is_well_formed():
    bad = [
        f"{path}: {match.group(0)}"
        for path, text in texts().items()
        for match in ANY_TAG.finditer(text)
        if not TAG.fullmatch(match.group(0))
    ]
    assert bad == []


def test_every_tag_used_is_in_the_index_and_every_indexed_tag_is_used():
    defined = {tag for tag, _, _ in index()}
    used: dict[str, set[str]] = {}
    for path, text in texts().items():
        if path == "docs/rules.md":
            continue
        for tag in TAG.findall(text):
            used.setdefault(tag, set()).add(path)
    undefined = {tag: sorted(paths) for tag, paths in used.items() if tag not in defined}
    assert undefined == {}, "add these tags to docs/rules.md"
    assert sorted(defined - used.keys()) == [], "indexed in docs/rules.md but used nowhere"


def test_each_rule_is_stated_in_the_file_the_index_names():
    wrong = [
        (tag, definer)
        for tag, _, definer in index()
        if not (ROOT / definer).is_file()
        or f"[RULE {tag}]" not in (ROOT / definer).read_text(encoding="utf-8")
    ]
    assert wrong == []


def test_nothing_cites_a_file_outside_the_repository():
    cited = [
        f"{path}: {name}"
        for path, text in texts().items()
        for name in MISSING_FILES
        if name in text
    ]
    assert cited == []


def test_nothing_cites_an_issue_number():
    cited = [
        f"{path}: {match.group(0)}"
        for path, text in texts().items()
        for match in ISSUE_NUMBER.finditer(text)
    ]
    assert cited == []


def test_the_citation_checks_catch_what_they_look_for():
    assert ISSUE_NUMBER.search("fixed in issue 12")
    assert ISSUE_NUMBER.search("see #34.")
    assert ISSUE_NUMBER.search("(Issue #7)")
    assert not ISSUE_NUMBER.search("[Values](#1-values), &#39;")
    assert TAG.fullmatch("[RULE CSE-DOM]")
    assert not TAG.fullmatch("[RULE D, E]")
    assert not TAG.fullmatch("[RULE NO PAD]")
