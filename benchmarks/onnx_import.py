"""How long ``effir.from_onnx`` takes, by model size: a chain of
elementwise nodes (1,000 to 20,000), subgraphs nested (If in If), and a
Loop whose body is a long chain. Importing is linear in the model's size
(tests/importers/test_onnx_roundtrip.py counts the work).

Prints a table: model, nodes, median seconds to import (type-checked).

    .venv/bin/python benchmarks/onnx_import.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from timing import median_seconds

import effir
from tests.importers.onnx_models import I64, B, F, graph, helper, model, tensor
from tests.importers.test_onnx_roundtrip import _chain, _nested_ifs


def loop_of_chain(n: int):
    nodes, previous = [helper.make_node("Identity", ["c_in"], ["c_out"])], "v_in"
    for k in range(n):
        nodes.append(
            helper.make_node(
                "Add" if k % 2 else "Tanh", [previous, "w"] if k % 2 else [previous], [f"b{k}"]
            )
        )
        previous = f"b{k}"
    nodes.append(helper.make_node("Identity", [previous], ["v_out"]))
    body = graph(
        nodes,
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("v_in", F, [8])],
        [tensor("c_out", B, []), tensor("v_out", F, [8])],
    )
    return model(
        [helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)],
        [tensor("x", F, [8]), tensor("m", I64, [])],
        [tensor("y", F, [8])],
        [("w", np.ones(8, np.float32))],
    )


def main() -> None:
    rows = [("chain", n, _chain(n)) for n in (1_000, 5_000, 20_000)]
    rows += [("nested If", d, _nested_ifs(d)) for d in (8, 16, 30)]
    rows += [("Loop of a chain", n, loop_of_chain(n)) for n in (1_000, 10_000)]
    print(f"{'model':16} {'size':>7} {'seconds':>9} {'us/node':>9}")
    for name, size, made in rows:
        nodes = _count(made.graph)
        seconds = median_seconds(lambda made=made: effir.from_onnx(made), repeats=3)
        print(f"{name:16} {size:>7} {seconds:>9.3f} {1e6 * seconds / nodes:>9.1f}")


def _count(g) -> int:
    total, stack = 0, [g]
    while stack:
        current = stack.pop()
        for node in current.node:
            total += 1
            for attribute in node.attribute:
                if attribute.type == 5:
                    stack.append(attribute.g)
    return total


if __name__ == "__main__":
    main()
