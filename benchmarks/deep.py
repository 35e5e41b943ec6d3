"""Each command on deep programs: is its time linear in the depth?

Prints a table: for each construct of `tests/deep_programs.py` (nested
tuples, closures, references, ifs, lets, calls, a long infix chain, a flat
let chain) and each stage of a command, the median seconds at each size and
the ratio of the largest size's time to the smallest's (4 for 5k -> 20k
when the stage is linear; 16 when it is quadratic). The stages:

- parse: `effir.parse` of the text;
- print: `effir.astext` of the parsed module (`effir fmt` is parse + print);
- check: `effir.check` and `check_effects` (what `effir check` runs);
- opt -O2: the -O2 pipeline with each pass's output verified (what
  `effir opt -O2` runs, less its parse and print).

Run with `.venv/bin/python benchmarks/deep.py` (sizes 5k/10k/20k, a few
minutes); `--sizes 1000,2000,4000` chooses the sizes, `--limit S` gives up on
a cell after S seconds (and on the larger sizes of its row). `--work` counts
the lines of Python each stage executes instead (`tests.deep_programs.work`,
slow: use sizes in the hundreds): the same on any machine under any load,
and what the linear-work tests check.
"""

from __future__ import annotations

import argparse
import gc
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.deep_programs

import effir
from tests.deep_programs import DEEP_PROGRAMS, STAGES, stage_action, work


class _OverLimit(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _OverLimit


def time_stage(text: str, stage: str, repeats: int, limit: float) -> tuple[float, bool]:
    """Median seconds of ``stage`` on ``text``, and whether it ended in an
    effir error (a program the command rejects, as it should). Raises
    ``_OverLimit`` when one run takes more than ``limit`` seconds."""
    times, failed = [], False
    for _ in range(repeats):
        action = stage_action(stage, text)
        gc.collect()  # the garbage of the runs before is not this run's
        signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.perf_counter()
        try:
            action()
        except effir.Error:
            failed = True
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        times.append(time.perf_counter() - start)
    return statistics.median(times), failed


def work_of_stage(text: str, stage: str) -> int:
    """Lines of Python ``stage`` executes on ``text`` (`work`): the
    machine-independent measure the linear-work tests assert on."""
    action = stage_action(stage, text)

    def run() -> None:
        try:
            action()
        except effir.Error:
            pass

    return work(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000,10000,20000", help="comma-separated depths")
    parser.add_argument("--repeats", type=int, default=1, help="runs per cell (the median)")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before giving up")
    parser.add_argument("--only", default="", help="constructs whose name contains this")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument(
        "--work", action="store_true", help="count lines of Python executed instead of seconds"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    stages = [s.strip() for s in args.stages.split(",")]
    signal.signal(signal.SIGALRM, _on_alarm)

    unit = "lines" if args.work else "s"
    heads = [f"{n // 1000}k {unit}" if n % 1000 == 0 else f"{n} {unit}" for n in sizes]
    ratio_head = f"{heads[-1].split()[0]}/{heads[0].split()[0]}"
    width = max(7, *(len(h) for h in heads), len(ratio_head))
    sw = max(len(s) for s in ["stage", *stages])
    header = f"| {'construct':20} | {'stage':{sw}} | " + " | ".join(h.rjust(width) for h in heads)
    header += f" | {ratio_head.rjust(width)} |"
    print(header)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|")
    sys.stdout.flush()
    rejected = False
    for name, generate in DEEP_PROGRAMS.items():
        if args.only not in name:
            continue
        texts = [generate(n) for n in sizes]
        for stage in stages:
            cells, seconds = [], []
            for text in texts:
                if len(cells) > len(seconds):  # a smaller size went over the limit
                    cells.append(f"{'-':>7}")
                    continue
                if args.work:
                    lines = work_of_stage(text, stage)
                    seconds.append(lines)
                    cells.append(f"{lines / 1e6:6.2f}M")
                    continue
                try:
                    t, failed = time_stage(text, stage, args.repeats, args.limit)
                except _OverLimit:
                    cells.append(f"{'>' + format(args.limit, 'g'):>7}")
                    continue
                rejected |= failed
                seconds.append(t)
                cells.append(f"{t:6.2f}{'*' if failed else ' '}")
            if len(seconds) == len(sizes) and seconds[0] > 0:
                ratio = f"{seconds[-1] / seconds[0]:7.1f}"
            else:
                ratio = f"{'-':>7}"
            row = " | ".join(c.rjust(width) for c in [*cells, ratio])
            print(f"| {name:20} | {stage:{sw}} | {row} |")
            sys.stdout.flush()
    if rejected:
        print("\n* the command rejects the program with an effir error (as it should)")


if __name__ == "__main__":
    main()
