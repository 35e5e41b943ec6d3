"""Type inference, effect inference and the reference interpreter on large
and long-running programs.

Prints a table: program, then the median of several runs of `effir.check`,
effect inference and `effir.interpret`. Run with `make bench` (or
`.venv/bin/python benchmarks/check_and_run.py`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from timing import median_seconds

import effir
from effir.passes.analyses.infer_effects import infer_effects

H = '#[version = "0.0.5"]\n'
EXAMPLE = Path(__file__).parents[1] / "examples" / "gru_lm.effir"


def let_chain(n: int) -> tuple[str, tuple]:
    lets = "".join(f"let %v{i} = %v{i - 1} + 1f;\n" for i in range(1, n))
    return H + f"def @main(%v0: float32) {{\n{lets}%v{n - 1}\n}}", (np.float32(0),)


def recursion(n: int) -> tuple[str, tuple]:
    text = H + (
        "def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @count(%n - 1) } }\n"
        "def @main(%n: int32) { @count(%n) }\n"
    )
    return text, (n,)


def while_loop(n: int) -> tuple[str, tuple]:
    text = H + (
        "def @main(%n: int32) {\n"
        "  let %cond = fn (%i: int32) { %i < %n };\n"
        "  let %body = fn (%i: int32) { (%i * 2, %i + 1) };\n"
        "  cf.while_loop(%cond, %body, 0)\n"
        "}\n"
    )
    return text, (n,)


def gru_lm(t: int, b: int) -> tuple[str, tuple]:
    module = effir.parse(EXAMPLE.read_text())
    rng = np.random.default_rng(0)
    sizes = {"t": t, "b": b}
    args = []
    for param in module["main"].params:
        ty = param.type_annotation
        shape = tuple(sizes.get(d, d) for d in ty.shape)
        if ty.dtype == "int32":
            args.append(rng.integers(0, 1000, shape).astype(np.int32))
        else:
            args.append((0.1 * rng.standard_normal(shape)).astype(ty.dtype))
    return EXAMPLE.read_text(), tuple(args)


def discard(label: str, value: object) -> None:
    """A debug.print sink that keeps printing out of the timings."""


def main() -> None:
    cases = [
        ("let chain, 10,000 bindings", let_chain(10_000)),
        ("let chain, 100,000 bindings", let_chain(100_000)),
        ("recursion 10,000 deep", recursion(10_000)),
        ("while_loop, 10,000 iterations", while_loop(10_000)),
        ("GRU LM example, t=50, b=16", gru_lm(50, 16)),
    ]
    print("| program                        | check s | effects s | interpret s |")
    print("|--------------------------------|---------|-----------|-------------|")
    for name, (text, args) in cases:
        module = effir.parse(text)
        check = median_seconds(lambda m=module: effir.check(m))
        effects = median_seconds(lambda m=module: infer_effects(m))
        run = median_seconds(lambda m=module, a=args: effir.interpret(m, *a, sink=discard))
        print(f"| {name:<30} | {check:7.3f} | {effects:9.3f} | {run:11.3f} |")


if __name__ == "__main__":
    main()
