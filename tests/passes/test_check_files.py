"""MLIR-style checks: each `tests/passes/checks/*.effir` file holds cases
split by `// -----`; `// expected-error@+N {{text}}` annotations name the
errors `effir check` must report (all of them, and no others), each at its
line. A case without annotations must check cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

import effir
from effir.passes.analyses.infer_effects import check_effects
from tests.support.check_file_cases import HEADER, expected_errors, split_cases

CHECKS = Path(__file__).parent / "checks"


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
