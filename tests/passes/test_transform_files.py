"""MLIR-style transform tests: each `tests/passes/transforms/*.effir` file
starts with `// RUN: <pipeline>` and holds cases split by `// -----`.

A case is an input program followed by its expected output after the
pipeline, as `// CHECK: ` lines (the whole printed module, line by line,
without the version header). The test checks the text exactly, then runs
input and output in the interpreter on random arguments and compares the
results, the final state and the printed values bit for bit (a pipeline
with split-keys, which changes random values on purpose, is only run). A
case with `// expected-error@+N {{text}}` annotations must instead fail
with those errors. Set EFFIR_UPDATE_GOLDEN=1 to rewrite the CHECK lines from the
current output (then read the diff)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.infra.pipeline import run_pipeline
from tests.support.check_file_cases import SEPARATOR, expected_errors, split_cases

from .equivalence import arguments_for, assert_same_run, run_observed

TRANSFORMS = Path(__file__).parent / "transforms"
RUN = re.compile(r"^//\s*RUN:\s*(\S+)\s*$")
CHECK = "// CHECK:"
UPDATE = os.environ.get("EFFIR_UPDATE_GOLDEN") == "1"
# Passes that change random values on purpose (docs/passes.md says which):
# their outputs are run, not compared with the input's.
VALUE_CHANGING = {"split-keys"}


def pipeline_of(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    match = RUN.match(first)
    assert match, f"{path.name} must start with '// RUN: <pipeline>'"
    return match.group(1)


def expected_output(text: str) -> list[str]:
    return [
        line.strip()[len(CHECK) :].removeprefix(" ")
        for line in text.splitlines()
        if line.strip().startswith(CHECK)
    ]


def actual_output(module) -> list[str]:
    """The printed module without its version header."""
    lines = [line.rstrip() for line in effir.astext(module).splitlines()[1:]]
    return lines[1:] if lines and not lines[0] else lines


CASES = [
    pytest.param(path, index, id=f"{path.stem}:{line}")
    for path in sorted(TRANSFORMS.glob("*.effir"))
    for index, (line, _) in enumerate(split_cases(path))
]


@pytest.mark.parametrize("path, index", CASES)
def test_transform_case(path, index):
    pipeline = pipeline_of(path)
    line, text = split_cases(path)[index]
    before = effir.parse(text, source_name=str(path))
    errors = expected_errors(text)
    if errors:
        with pytest.raises(effir.Error) as caught:
            run_pipeline(before, pipeline)
        (want_line, want_text), *others = errors
        assert not others, "one expected error per case"
        assert caught.value.line == want_line and want_text in caught.value.message, (
            f"expected {want_text!r} at line {want_line}; got:\n{caught.value}"
        )
        return
    after = run_pipeline(before, pipeline)
    got = actual_output(after)
    if UPDATE:
        _update(path, line, got)
    else:
        want = expected_output(text)
        assert got == want, "output differs:\n" + "\n".join(got)
    # The output reads back as itself and type-checks.
    assert effir.astext(effir.parse(effir.astext(after))) == effir.astext(after)
    effir.check(after)
    if "state-passing" in pipeline.split(","):
        verify_linear(after)
    # Same behaviour, on several random arguments (both branches of bools);
    # a pass that changes random values by design must still run.
    rng = np.random.default_rng(line)
    for _ in range(4):
        args = arguments_for(before["main"], rng)
        assert args is not None, "give @main tensor (or tuple) parameters only"
        if VALUE_CHANGING & set(pipeline.split(",")):
            run_observed(after, args, a2=True)
        else:
            assert_same_run(before, after, args)


def _update(path: Path, line: int, got: list[str]) -> None:
    """Rewrite the CHECK lines of the case that starts at ``line``."""
    lines = path.read_text().splitlines()
    end = next(
        (i for i in range(line - 1, len(lines)) if lines[i].strip() == SEPARATOR), len(lines)
    )
    body = [x for x in lines[line - 1 : end] if not x.strip().startswith(CHECK)]
    while body and not body[-1].strip():
        body.pop()
    checks = [f"{CHECK} {x}".rstrip() for x in got]
    tail = [""] if end < len(lines) else []
    lines[line - 1 : end] = body + checks + tail
    path.write_text("\n".join(lines) + "\n")


def test_the_runner_reads_check_lines():
    assert expected_output("x\n// CHECK: def @f() {\n// CHECK:\n  // CHECK:   1\n") == [
        "def @f() {",
        "",
        "  1",
    ]
