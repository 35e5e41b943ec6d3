"""The type-check ratchet (tests/support/typecheck.py): mypy's errors are
counted per file, and a file fails when it has more than its baseline, or
any at all in a directory typed through (``ZERO``)."""

from __future__ import annotations

import json

from tests.support.typecheck import BASELINE, ZERO, Report, compare, zero_directory

OUTPUT = """\
effir/ir/a.py:3: error: Incompatible types in assignment  [assignment]
effir/ir/a.py:9:5: error: "Foo" has no attribute "bar"  [attr-defined]
effir/ir/a.py:9: note: See https://mypy.rtfd.io
effir/passes/b.py:1: error: Missing return statement  [return]
"""


def test_errors_are_counted_per_file_and_notes_are_not_errors() -> None:
    assert Report.parse(OUTPUT).counts() == {"effir/ir/a.py": 2, "effir/passes/b.py": 1}


def test_a_file_with_more_errors_than_its_baseline_fails_with_its_errors() -> None:
    baseline = {"effir/ir/a.py": 1, "effir/passes/b.py": 1}
    worse, better = compare(Report.parse(OUTPUT), baseline, zero=())
    assert worse[0] == "effir/ir/a.py: 2 type errors, the baseline allows 1:"
    assert worse[1:] == [
        "  effir/ir/a.py:3: error: Incompatible types in assignment  [assignment]",
        '  effir/ir/a.py:9:5: error: "Foo" has no attribute "bar"  [attr-defined]',
    ]
    assert better == []


def test_a_new_file_allows_no_error_and_a_fixed_one_asks_for_a_lower_baseline() -> None:
    baseline = {"effir/ir/a.py": 2, "effir/gone.py": 4}
    worse, better = compare(Report.parse(OUTPUT), baseline, zero=())
    assert worse[0] == "effir/passes/b.py: 1 type errors, the baseline allows 0:"
    assert better == ["effir/gone.py: 0 type errors, the baseline says 4"]


def test_the_baseline_names_files_that_exist_with_positive_counts() -> None:
    baseline = json.loads(BASELINE.read_text())
    root = BASELINE.parents[2]
    assert all((root / path).is_file() and count > 0 for path, count in baseline.items())


def test_an_error_in_a_directory_typed_through_fails_whatever_the_baseline_says() -> None:
    worse, better = compare(
        Report.parse(OUTPUT), {"effir/ir/a.py": 5, "effir/passes/b.py": 1}, zero=("effir/ir",)
    )
    assert worse == [
        "effir/ir/a.py: 2 type errors, none is allowed under effir/ir/:",
        "  effir/ir/a.py:3: error: Incompatible types in assignment  [assignment]",
        '  effir/ir/a.py:9:5: error: "Foo" has no attribute "bar"  [attr-defined]',
    ]
    assert better == []


def test_a_zero_directory_holds_its_files_only_not_a_sibling_with_its_prefix() -> None:
    assert zero_directory("effir/ir/a.py", ("effir/ir",)) == "effir/ir"
    assert zero_directory("effir/ir/sub/a.py", ("effir/ir/",)) == "effir/ir/"
    assert zero_directory("effir/irregular.py", ("effir/ir",)) is None


def test_the_baseline_allows_nothing_in_the_directories_typed_through() -> None:
    baseline = json.loads(BASELINE.read_text())
    assert [path for path in baseline if zero_directory(path, ZERO) is not None] == []
    assert {"effir/ir", "effir/passes", "effir/backends/tvm/relax"} <= set(ZERO)
