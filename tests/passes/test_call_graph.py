"""The order global functions are processed in: callees before callers,
each strongly connected component (mutual recursion) together."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.passes.analyses.call_graph import definition_order, references


def module_from_graph(edges: dict[int, set[int]], n: int) -> effir.IRModule:
    defs = []
    for i in range(n):
        refs = "".join(f"@f{j}, " for j in sorted(edges.get(i, ())))
        defs.append(f"def @f{i}() {{ ({refs}0) }}")
    return effir.parse('#[version = "0.0.5"]\n' + "\n".join(defs))


def reachable(edges: dict[int, set[int]], start: int) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for succ in edges.get(node, ()):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.dictionaries(
                st.integers(0, n - 1), st.sets(st.integers(0, n - 1), max_size=3), max_size=n
            ),
        )
    )
)
def test_callees_come_before_callers(graph):
    n, edges = graph
    module = module_from_graph(edges, n)
    order = definition_order(module)
    assert sorted(order) == sorted(f"f{i}" for i in range(n))
    position = {name: i for i, name in enumerate(order)}
    for caller, callees in edges.items():
        for callee in callees:
            same_cycle = caller in reachable(edges, callee)
            if not same_cycle:
                assert position[f"f{callee}"] < position[f"f{caller}"]
    # Each cycle is contiguous in the order.
    for i in range(n):
        cycle = {j for j in reachable(edges, i) if i in reachable(edges, j)} | {i}
        spots = sorted(position[f"f{j}"] for j in cycle)
        assert spots == list(range(spots[0], spots[0] + len(spots)))


def test_references_in_module_order():
    module = module_from_graph({0: {2, 1}, 2: {2}}, 3)
    assert references(module) == {"f0": ["f1", "f2"], "f1": [], "f2": ["f2"]}
    assert definition_order(module) == ["f1", "f2", "f0"]
