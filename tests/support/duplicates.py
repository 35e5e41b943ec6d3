"""Duplicate code, against a checked-in baseline that may only shrink.

``python -m tests.support.duplicates`` looks for blocks of at least
``MIN_LINES`` lines that are the same in two places of effir/, tests/,
benchmarks/ or examples/ (pylint's symilar; comments, docstrings, imports and
function signatures do not count), adds up the duplicate lines of each pair of
files and fails when a pair has more than tests/support/duplicates_baseline.json
allows, printing the places of that pair's blocks. ``--update`` (``make
duplicates-baseline``) writes the baseline from this run; a pair below its
baseline is reported so the baseline is lowered in the change that removes the
copy. The logic that two places share belongs in one function (shared test
helpers in tests/support/): the baseline records the copies not yet removed,
not what is accepted.

Symilar's own import and signature filters parse every file with astroid (some
20 s on this tree); the same lines are blanked here with the standard
library's parser, so the check takes seconds.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import itertools
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "tests" / "support" / "duplicates_baseline.json"
ROOTS = ("effir", "tests", "benchmarks", "examples")
# Six lines: below it symilar finds idioms (a dataclass's fields, an argparse
# block); a copied helper is longer.
MIN_LINES = 6

_HEADER = re.compile(r"^(?P<lines>\d+) similar lines in \d+ files$")
_PLACE = re.compile(r"^==(?P<path>.+):\[(?P<start>\d+):(?P<end>\d+)\]$")


@dataclass(frozen=True, order=True)
class Place:
    """Where a copy lies: a file and its lines, 1-based and inclusive."""

    path: str
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.path}:{self.first}-{self.last}"


@dataclass(frozen=True)
class Block:
    """Lines that are the same (after symilar's filters) in every place."""

    lines: int
    places: tuple[Place, ...]


def parse(report: str) -> list[Block]:
    """The blocks of symilar's text report (the one its command line prints):
    a header line, then one ``==path:[start:end]`` line per place, with
    0-based half-open line ranges, then the lines themselves."""
    blocks: list[Block] = []
    lines = 0
    places: list[Place] = []
    for line in [*report.splitlines(), ""]:
        place = _PLACE.match(line)
        if place:
            start, end = int(place["start"]), int(place["end"])
            places.append(Place(place["path"], start + 1, end))
            continue
        if places:
            blocks.append(Block(lines, tuple(sorted(places))))
            places = []
        header = _HEADER.match(line)
        if header:
            lines = int(header["lines"])
    return blocks


def pair_key(a: str, b: str) -> str:
    return " ".join(sorted((a, b)))


def by_pair(blocks: list[Block]) -> dict[str, list[Block]]:
    """Each pair of files with the blocks they share (a block in three files
    counts for each of its three pairs)."""
    pairs: dict[str, list[Block]] = defaultdict(list)
    for block in blocks:
        paths = sorted({place.path for place in block.places})
        for a, b in itertools.combinations(paths, 2):
            pairs[pair_key(a, b)].append(block)
    return dict(sorted(pairs.items()))


def counts(blocks: list[Block]) -> dict[str, int]:
    """Duplicate lines per pair of files: what the baseline records."""
    return {pair: sum(b.lines for b in shared) for pair, shared in by_pair(blocks).items()}


def compare(blocks: list[Block], baseline: dict[str, int]) -> tuple[list[str], list[str]]:
    """What fails (pairs with more duplicate lines than their baseline, with
    the places of their blocks) and what improved (pairs below it)."""
    now = counts(blocks)
    worse: list[str] = []
    for pair, shared in by_pair(blocks).items():
        allowed = baseline.get(pair, 0)
        if now[pair] > allowed:
            worse.append(
                f"{' and '.join(pair.split())}: {now[pair]} duplicate lines, "
                f"the baseline allows {allowed}:"
            )
            worse.extend(
                f"  {block.lines} lines: {' and '.join(map(str, block.places))}" for block in shared
            )
    better = [
        f"{' and '.join(pair.split())}: {now.get(pair, 0)} duplicate lines, "
        f"the baseline says {allowed}"
        for pair, allowed in sorted(baseline.items())
        if now.get(pair, 0) < allowed
    ]
    return worse, better


def blank_ignored(source: str) -> str:
    """``source`` with its import statements and function signatures (from
    ``def`` to the line before the body) made empty lines, keeping every other
    line where it was: what symilar's ``ignore_imports`` and
    ``ignore_signatures`` leave out, found without astroid."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # ruff reports it; symilar still compares the text
        return source
    blank: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            blank.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            blank.update(range(node.lineno, node.body[0].lineno))
    lines = source.splitlines(keepends=True)
    return "".join("\n" if n in blank else line for n, line in enumerate(lines, start=1))


def sources(roots: tuple[str, ...] = ROOTS) -> dict[str, str]:
    """The Python files under ``roots``, by path relative to the repository."""
    paths = sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def find(files: dict[str, str], min_lines: int = MIN_LINES) -> list[Block]:
    """The duplicate blocks of ``files`` (path to source text), by symilar."""
    try:
        from pylint.checkers.symilar import Symilar
    except ImportError:
        raise SystemExit("duplicates: pylint is not installed (pip install -e '.[test]')") from None
    symilar = Symilar(min_lines=min_lines, ignore_comments=True, ignore_docstrings=True)
    for path, text in files.items():
        symilar.append_stream(path, io.StringIO(blank_ignored(text)))
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        symilar.run()
    return parse(report.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    args = parser.parse_args(argv)
    blocks = find(sources())
    total = sum(counts(blocks).values())
    if args.update:
        BASELINE.write_text(json.dumps(counts(blocks), indent=1) + "\n")
        print(f"duplicates: baseline written, {len(blocks)} blocks, {total} lines")
        return 0
    worse, better = compare(blocks, json.loads(BASELINE.read_text()))
    for line in better:
        print(f"duplicates: fewer duplicate lines than the baseline, lower it: {line}")
    if worse:
        print(
            f"duplicates: new copies of {MIN_LINES} lines or more; move the shared"
            " logic into one function (shared test helpers: tests/support/)",
            *worse,
            sep="\n",
        )
        return 1
    print(f"duplicates: {len(blocks)} blocks, {total} lines, none above the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
