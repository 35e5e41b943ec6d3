"""MLIR-style checks: each `tests/passes/checks/*.effir` file holds cases
split by `// -----`; `// expected-error@+N {{text}}` annotations name the
errors `effir check` must report (all of them, and no others), each at its
line. A case without annotations must check cleanly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import effir
from effir.passes.infer_effects import check_effects

CHECKS = Path(__file__).parent / "checks"
HEADER = '#[version = "0.0.5"]'
SEPARATOR = "// -----"
EXPECTED = re.compile(r"//\s*expected-error(?:@([+-]\d+))?\s*\{\{(.*?)\}\}")


def split_cases(path: Path) -> list[tuple[int, str]]:
    """(first line number, text) of each case; the text keeps the file's line
    numbers (blank lines stand in for what precedes the case)."""
    lines = path.read_text().splitlines()
    cases, start = [], 0
    for i, line in enumerate(lines + [SEPARATOR]):
        if line.strip() == SEPARATOR:
            body = lines[start:i]
            if start == 0:
                text = "\n".join(body)
            else:
                text = HEADER + "\n" * start + "\n".join(body)
            cases.append((start + 1, text + "\n"))
            start = i + 1
    return cases


def expected_errors(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in EXPECTED.finditer(line):
            offset = int(match.group(1) or 0)
            found.append((number + offset, match.group(2)))
    return found


def reported_errors(text: str, name: str) -> list[effir.Error]:
    module = effir.parse(text, source_name=name)
    try:
        effir.check(module)
    except effir.TypeError as err:
        return list(err.errors)
    try:
        check_effects(module)
    except effir.EffectError as err:
        return [err]
    return []


CASES = [
    pytest.param(path, line, text, id=f"{path.stem}:{line}")
    for path in sorted(CHECKS.glob("*.effir"))
    for line, text in split_cases(path)
]


@pytest.mark.parametrize("path, line, text", CASES)
def test_check_file_case(path, line, text):
    expected = expected_errors(text)
    errors = reported_errors(text, str(path))
    unmatched = list(errors)
    for want_line, want_text in expected:
        hit = next((e for e in unmatched if e.line == want_line and want_text in e.message), None)
        assert hit is not None, (
            f"{path.name}:{want_line}: expected an error containing {want_text!r}; got:\n"
            + "\n".join(f"  {e.line}: {e.message}" for e in errors)
        )
        unmatched.remove(hit)
    assert not unmatched, "unexpected errors:\n" + "\n".join(str(e) for e in unmatched)


def test_the_runner_notices_a_missing_error():
    text = HEADER + "\n// expected-error@+1 {{nothing}}\ndef @main() { 1 }\n"
    assert expected_errors(text) == [(3, "nothing")]
    assert reported_errors(text, "t") == []
