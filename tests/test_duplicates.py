"""The duplicate-code ratchet (tests/support/duplicates.py): symilar's blocks
are counted per pair of files, and a pair fails when it shares more duplicate
lines than its baseline."""

from __future__ import annotations

import json

from tests.support.duplicates import (
    BASELINE,
    MIN_LINES,
    ROOT,
    Block,
    Place,
    blank_ignored,
    compare,
    counts,
    find,
    parse,
)

REPORT = """\

9 similar lines in 2 files
==effir/a.py:[10:21]
==effir/b.py:[3:13]
   x = 1

   y = 2

7 similar lines in 3 files
==tests/c.py:[0:7]
==effir/a.py:[40:47]
==benchmarks/d.py:[5:12]
   z = 3
TOTAL lines=120 duplicates=23 percent=19.17
"""

AB = Block(9, (Place("effir/a.py", 11, 21), Place("effir/b.py", 4, 13)))


def test_the_report_gives_each_block_its_places_one_based_and_inclusive() -> None:
    blocks = parse(REPORT)
    assert blocks[0] == AB
    assert blocks[1] == Block(
        7,
        (Place("benchmarks/d.py", 6, 12), Place("effir/a.py", 41, 47), Place("tests/c.py", 1, 7)),
    )
    assert parse("TOTAL lines=10 duplicates=0 percent=0.00\n") == []


def test_a_block_in_three_files_counts_for_each_pair() -> None:
    assert counts(parse(REPORT)) == {
        "benchmarks/d.py effir/a.py": 7,
        "benchmarks/d.py tests/c.py": 7,
        "effir/a.py effir/b.py": 9,
        "effir/a.py tests/c.py": 7,
    }


def test_a_pair_above_its_baseline_fails_with_the_places_of_its_blocks() -> None:
    blocks = parse(REPORT)
    baseline = {**counts(blocks), "effir/a.py effir/b.py": 8}
    worse, better = compare(blocks, baseline)
    assert worse == [
        "effir/a.py and effir/b.py: 9 duplicate lines, the baseline allows 8:",
        "  9 lines: effir/a.py:11-21 and effir/b.py:4-13",
    ]
    assert better == []


def test_a_new_pair_allows_nothing_and_a_removed_copy_asks_for_a_lower_baseline() -> None:
    worse, better = compare([AB], {"effir/a.py effir/gone.py": 6})
    assert worse[0] == "effir/a.py and effir/b.py: 9 duplicate lines, the baseline allows 0:"
    assert better == ["effir/a.py and effir/gone.py: 0 duplicate lines, the baseline says 6"]


SOURCE = '''\
import os
from collections import (
    OrderedDict,
)


def f(
    a: int,
    b: int,
) -> int:
    """Docstring."""
    return a + b


async def g(): return 1
'''


def test_imports_and_signatures_become_empty_lines_in_place() -> None:
    lines = blank_ignored(SOURCE).splitlines()
    assert len(lines) == len(SOURCE.splitlines())
    assert [n for n, line in enumerate(lines, start=1) if line] == [11, 12, 15]
    assert blank_ignored("def (:\n") == "def (:\n"


BODY = """\
    total = 0
    for item in items:
        if item.ready:
            total += item.size
        else:
            total -= 1
    return total
"""


def test_a_copied_body_is_found_whatever_its_signature_comments_and_docstring() -> None:
    first = f'import a\n\n\ndef size(items):\n    """One."""\n{BODY}'
    second = (
        "from b import c\n\n\ndef weight(\n    items: list, /\n) -> int:\n"
        f'    """Two, longer."""\n{BODY.replace("-= 1", "-= 1  # a comment")}'
    )
    blocks = find({"x/one.py": first, "x/two.py": second})
    assert blocks == [Block(7, (Place("x/one.py", 6, 12), Place("x/two.py", 8, 14)))]


def test_a_copy_shorter_than_the_minimum_is_not_reported() -> None:
    body = "".join(f"    v{n} = w{n}\n" for n in range(MIN_LINES - 1))
    files = {"x/one.py": f"def f(items):\n{body}", "x/two.py": f"def g(items):\n{body}"}
    assert find(files) == []


def test_the_baseline_names_files_that_exist_with_positive_counts() -> None:
    baseline = json.loads(BASELINE.read_text())
    assert all(count > 0 for count in baseline.values())
    assert all((ROOT / path).is_file() for pair in baseline for path in pair.split())
