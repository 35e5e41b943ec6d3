"""What each closure captures (free variables with the tuple paths it
uses of them), and the nodes that graph form shares (evaluated once)."""

from __future__ import annotations

from effir.ir import analysis
from effir.ir.expr import Expr, Function, Let, PatternVar, TupleGetItem, Var
from effir.ir.functor import Visitor, on, post_order, pre_order
from effir.ir.module import IRModule
from effir.ir.types import IncompleteType, Type
from effir.passes.analyses.verify_linear.places import Path


def incomplete(ty: Type) -> bool:
    return any(isinstance(n, IncompleteType) for n in pre_order(ty))


def free_vars_with_paths(module: IRModule) -> dict[Function, list[tuple[Var, Path]]]:
    """The free places of every function: each free variable with the
    projection path the body applies to it (``%ks.1`` captures only that
    field), in order of first use; inner functions first, so that each body
    is walked once."""
    free: dict[Function, list[tuple[Var, Path]]] = {}
    for root in module.functions.values():
        for node in post_order(root):
            if isinstance(node, Function):
                free[node] = _free_in(node, free)
    return free


def _free_in(fn: Function, free: dict[Function, list[tuple[Var, Path]]]) -> list[tuple[Var, Path]]:
    walk = _Uses(free)
    walk.bound.update(fn.params)
    walk.visit(fn.body)
    used, bound = walk.used, walk.bound
    paths: dict[Var, set[Path]] = {}
    for var, path in used:
        paths.setdefault(var, set()).add(path)
    return [
        (var, path)
        for var, path in used
        if var not in bound and not any(path[:k] in paths[var] for k in range(len(path)))
    ]


class _Uses(Visitor):
    """The places a body uses (a variable with the projection path applied
    to it) in order of first use, and the variables it binds; nested
    functions contribute their own free places without being entered."""

    def __init__(self, free: dict[Function, list[tuple[Var, Path]]]) -> None:
        super().__init__()
        self.free = free
        self.used: dict[tuple[Var, Path], None] = {}
        self.bound: set[Var] = set()

    @on(TupleGetItem)
    def _project(self, node: TupleGetItem) -> bool:
        path: list[int] = []
        base: Expr = node
        while isinstance(base, TupleGetItem):
            path.append(base.index)
            base = base.tuple_value
        if isinstance(base, Var):
            self.used.setdefault((base, tuple(reversed(path))))
            return False
        return True

    @on(Var)
    def _var(self, node: Var) -> None:
        self.used.setdefault((node, ()))

    @on(Function)
    def _function(self, node: Function) -> bool:
        for item in self.free.get(node, ()):
            self.used.setdefault(item)
        return False

    @on(Let, PatternVar)
    def _binder(self, node: Let | PatternVar) -> None:
        self.bound.add(node.var)


def shared_nodes(module: IRModule) -> set[int]:
    """Expressions reached along more than one edge (graph form)."""
    return analysis.shared_nodes(*module.functions.values())
