"""The call graph of a module's global functions, and an order to process
them in: callees before callers, each cycle (mutual recursion) together.

Type inference uses it so that a caller sees its callees' inferred types;
passes that transform functions bottom-up use it the same way.
"""

from __future__ import annotations

from effir.ir.expr import GlobalVar
from effir.ir.module import IRModule
from effir.ir.visitor import pre_order


def references(module: IRModule) -> dict[str, list[str]]:
    """For each global function, the global functions it mentions (calls or
    uses as values), in module order."""
    names = list(module.functions)
    refs: dict[str, list[str]] = {}
    for name in names:
        found = {
            node.name
            for node in pre_order(module.functions[name])
            if isinstance(node, GlobalVar) and node.name in module.functions
        }
        refs[name] = sorted(found, key=names.index)
    return refs


def reachable(module: IRModule, *roots: str) -> list[str]:
    """The global functions ``roots`` are or mention, directly or through
    others, the first root first (of those the module has): what a backend
    compiles for the entries ``roots``, and nothing else of the module (a
    library's functions they do not use)."""
    work = [r for r in dict.fromkeys(roots) if r in module.functions]
    order: list[str] = []
    seen = set(work)
    work.reverse()
    while work:
        name = work.pop()
        order.append(name)
        for node in pre_order(module.functions[name]):
            if isinstance(node, GlobalVar) and node.name in module.functions:
                if node.name not in seen:
                    seen.add(node.name)
                    work.append(node.name)
    return order


def definition_order(module: IRModule) -> list[str]:
    """Global functions, callees before callers, so that a caller sees its
    callees' inferred result types; within a cycle, module order."""
    return [name for component in components(module) for name in component]


def recursive(module: IRModule) -> set[str]:
    """The global functions on a cycle of the reference graph (which may
    call themselves, directly or through others)."""
    refs = references(module)
    return {
        name
        for component in components(module)
        for name in component
        if len(component) > 1 or name in refs[name]
    }


def components(module: IRModule) -> list[list[str]]:
    """The strongly connected components of the reference graph in reverse
    topological order (Tarjan's algorithm without recursion), each in
    module order."""
    names = list(module.functions)
    refs = references(module)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    order: list[list[str]] = []
    for root in names:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(refs[node]):
                work.append((node, i + 1))
                succ = refs[node][i]
                if succ not in index:
                    work.append((succ, 0))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                order.append(sorted(component, key=names.index))
    return order
