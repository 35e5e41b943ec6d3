"""Helpers first written for tests/passes/test_check_files.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

import re
from pathlib import Path

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
