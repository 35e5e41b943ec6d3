"""The standard pipeline (`effir opt -O2`) on generated programs of 1k, 10k
and 100k bindings: straight-line arithmetic, with ifs, with loops, with
effects. Prints, per program, the pipeline's time (verification off: the
passes alone), the number of let bindings before and after, and the growth
of the time from 10k to 100k bindings (10 for a linear pass).

Run with `make bench` (or `.venv/bin/python benchmarks/pipeline.py`).
"""

from __future__ import annotations

import sys
import time

import effir
from effir.ir.expr import Let
from effir.ir.visitor import pre_order
from effir.passes.infra import PassContext
from effir.passes.pipeline import STANDARD_PIPELINES, pipeline

H = '#[version = "0.0.5"]\n'
CELLS = (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @acc: Ref[Tensor[(8), float32]] = ref(zeros(shape=[8]));\n"
)


def straight(n: int) -> str:
    lets = "".join(f"  let %v{i} = multiply(add(%v{i - 1}, 1f), 0.5f);\n" for i in range(1, n // 2))
    return H + f"def @main(%v0: Tensor[(8), float32]) {{\n{lets}  %v{n // 2 - 1}\n}}\n"


def with_ifs(n: int) -> str:
    lets = "".join(
        f"  let %v{i} = if (%c) {{ add(%v{i - 1}, 1f) }} else {{ multiply(%v{i - 1}, 2f) }};\n"
        for i in range(1, n)
    )
    return H + f"def @main(%c: bool, %v0: Tensor[(8), float32]) {{\n{lets}  %v{n - 1}\n}}\n"


def with_loops(n: int) -> str:
    body = (
        "fn (%x: Tensor[(8), float32], %h: Tensor[(8), float32]) { let %y = add(%x, %h); (%y, %y) }"
    )
    lets = "".join(
        f"  let %s{i} = cf.foreach({body}, %xs, %v{i - 1});\n  let %v{i} = %s{i}.1;\n"
        for i in range(1, n // 4)
    )
    return H + (
        f"def @main(%xs: Tensor[(3, 8), float32], %v0: Tensor[(8), float32]) {{\n"
        f"{lets}  %v{n // 4 - 1}\n}}\n"
    )


def with_effects(n: int) -> str:
    lets = "".join(
        f"  let %v{i} = nn.dropout(%v{i - 1}, @rng, rate=0.1f);\n"
        f"  ref_write(@acc, add(ref_read(@acc), %v{i}));\n"
        for i in range(1, n // 4)
    )
    return H + CELLS + f"def @main(%v0: Tensor[(8), float32]) {{\n{lets}  %v{n // 4 - 1}\n}}\n"


def bindings(module: effir.IRModule) -> int:
    return sum(isinstance(node, Let) for fn in module.functions.values() for node in pre_order(fn))


def main() -> None:
    sizes = [1_000, 10_000, 100_000]
    if "--quick" in sys.argv:
        sizes = [1_000, 10_000]
    passes = pipeline("O2")
    print(f"pipeline O2: {STANDARD_PIPELINES['O2']}")
    print("| program      | bindings | pipeline s | lets in | lets out |")
    print("|--------------|----------|------------|---------|----------|")
    ratios = []
    for name, make in [
        ("straight", straight),
        ("with ifs", with_ifs),
        ("with loops", with_loops),
        ("with effects", with_effects),
    ]:
        times = {}
        for n in sizes:
            module = effir.parse(make(n))
            before = bindings(effir.passes.anf.to_anf(module))
            start = time.perf_counter()
            result = passes(module, PassContext(verify=False))
            times[n] = time.perf_counter() - start
            print(
                f"| {name:<12} | {n:>8,} | {times[n]:10.3f} | {before:7,} | {bindings(result):8,} |"
            )
        if 100_000 in times:
            ratios.append((name, times[100_000] / times[10_000]))
    for name, ratio in ratios:
        print(f"growth from 10k to 100k bindings, {name}: x{ratio:.1f} (linear: x10)")


if __name__ == "__main__":
    main()
