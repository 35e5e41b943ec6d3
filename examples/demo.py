"""`make demo`: the effectful GRU language model through what effir has today.

It parses examples/gru_lm.effir, checks that it is well formed, prints its
canonical text, proves the text round-trips, and lists every effectful
operator call with its source location, read from the operator registry.
(Type checking, state passing, optimisation and TVM compilation join this
demo as they land.)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import effir
from effir.ir import Call, GlobalVar, Op, lookup_op, post_order

EXAMPLE = Path(__file__).with_name("gru_lm.effir")


def effectful_calls(module: effir.IRModule) -> list[str]:
    """One line per call of a non-pure operator, in source order."""
    found = []
    for name, fn in module.functions.items():
        for node in post_order(fn):
            if isinstance(node, Call) and isinstance(node.callee, Op):
                effect = lookup_op(node.callee.name).effect
                if effect != "pure":
                    cells = [a.name for a in node.args if isinstance(a, GlobalVar)]
                    where = f"{node.span}" if node.span else f"@{name}"
                    target = f" on @{cells[0]}" if cells else ""
                    line = f"  {where}: {node.callee.name} ({effect}){target}"
                    found.append((node.span.start if node.span else 0, line))
    return [line for _, line in sorted(found)]


def main() -> int:
    text = EXAMPLE.read_text()
    start = time.perf_counter()
    module = effir.parse(text, source_name=f"examples/{EXAMPLE.name}")
    parsed = time.perf_counter()
    effir.check_well_formed(module)
    canonical = effir.astext(module)
    printed = time.perf_counter()

    print(f"== {EXAMPLE.name}: canonical text ==")
    print(canonical)
    reparsed = effir.parse(canonical)
    effir.assert_structural_equal(reparsed, module)
    if effir.astext(reparsed) != canonical:
        print("error: printing the reparsed module gave different text", file=sys.stderr)
        return 1

    print("== effects (from the operator registry) ==")
    for line in effectful_calls(module):
        print(line)
    print(f"  state cells: {', '.join('@' + c for c in module.cells)}")
    print()
    print("== report ==")
    nodes = sum(len(post_order(fn)) for fn in module.functions.values())
    print(f"  functions: {len(module.functions)}, IR nodes: {nodes}")
    print(
        f"  parse: {1e3 * (parsed - start):.1f} ms, check + print: {1e3 * (printed - parsed):.1f} ms"
    )
    print("  round trip: parse(astext(m)) == m and astext is a fixpoint: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
