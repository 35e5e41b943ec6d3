"""State passing, step 2: cells passed to global functions are resolved
by copying the functions (``specialise_cell_arguments``), and a global
function that a closure over a caller's local reference is passed down to
gets a copy per caller ([RULE STATE-DOWNWARD], ``copy_for_callers``). Both rewrite the
module before the analysis, which then sees only direct uses of cells."""

from __future__ import annotations

import dataclasses

from effir.ir.builder import fresh_name
from effir.ir.expr import Call, Expr, Function, GlobalVar, RefRead, RefWrite, Var
from effir.ir.functor import Mutator, on, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.passes.transforms.anf import fresh_binders


def specialise_cell_arguments(module: IRModule, nodes: dict[str, list[Node]]) -> IRModule:
    """Calls that pass a global cell to a global function call a copy of it
    in which that parameter is the cell (to a fixpoint, so recursion that
    passes the cell on reaches the same copy)."""
    cells = set(module.cells)
    if not _passes_a_cell(module, cells, nodes):
        return module
    functions = dict(module.functions)
    copies: dict[tuple[str, tuple[tuple[int, str], ...]], str] = {}
    specialised: set[str] = set()
    ref_params = _reference_parameters(functions)
    work = list(functions)
    changed = False
    while work:
        name = work.pop()
        rewriter = _CellArguments(cells, functions, copies, specialised, work, ref_params)
        new = rewriter.mutate_as(functions[name], Function)
        if new is not functions[name]:
            functions[name] = new
            changed = True
    if not changed:
        return module
    # Originals whose every use was specialised are gone from the program.
    referenced: set[str] = set()
    for fn in functions.values():
        for node in pre_order(fn):
            if isinstance(node, GlobalVar):
                referenced.add(node.name)
    for name in specialised - referenced:
        del functions[name]
    return IRModule(functions, module.type_defs, module.cells)


def _passes_a_cell(module: IRModule, cells: set[str], nodes: dict[str, list[Node]]) -> bool:
    """Whether some call of a global function has a global cell for an
    argument (only such calls are specialised)."""
    functions = module.functions
    for name in functions:
        for node in nodes[name]:
            if (
                isinstance(node, Call)
                and isinstance(node.callee, GlobalVar)
                and node.callee.name in functions
                and any(isinstance(a, GlobalVar) and a.name in cells for a in node.args)
            ):
                return True
    return False


def _reference_parameters(functions: dict[str, Function]) -> dict[str, set[int]]:
    """For each global function, the parameters it reads or writes as a
    reference, itself or by passing them to such a parameter of another."""
    found: dict[str, set[int]] = {name: set() for name in functions}
    nodes = {name: list(pre_order(fn)) for name, fn in functions.items()}
    changed = True
    while changed:
        changed = False
        for name, fn in functions.items():
            index = {p: i for i, p in enumerate(fn.params)}
            mine = found[name]
            for node in nodes[name]:
                if isinstance(node, RefRead | RefWrite) and node.ref in index:
                    uses = {index[node.ref]}
                elif (
                    isinstance(node, Call)
                    and isinstance(node.callee, GlobalVar)
                    and node.callee.name in found
                ):
                    theirs = found[node.callee.name]
                    uses = {index[a] for j, a in enumerate(node.args) if j in theirs and a in index}
                else:
                    continue
                if not uses <= mine:
                    mine |= uses
                    changed = True
    return found


class _CellArguments(Mutator):
    def __init__(self, cells, functions, copies, specialised, work, ref_params) -> None:
        super().__init__()
        self.ref_params = ref_params
        self.cells = cells
        self.functions = functions
        self.copies = copies
        self.specialised = specialised
        self.work = work

    @on(Call)
    def _call(self, new: Call, old: Call) -> Expr:
        callee = new.callee
        if not (isinstance(callee, GlobalVar) and callee.name in self.functions):
            return new
        refs = self.ref_params.get(callee.name, set())
        fixed = tuple(
            (i, a.name)
            for i, a in enumerate(new.args)
            if i in refs and isinstance(a, GlobalVar) and a.name in self.cells
        )
        if not fixed:
            return new
        key = (callee.name, fixed)
        name = self.copies.get(key)
        if name is None:
            name = fresh_name(callee.name + "_" + "_".join(c for _, c in fixed), self.functions)
            self.copies[key] = name
            self.functions[name] = _copy_with_cells(self.functions[callee.name], dict(fixed))
            self.ref_params[name] = {
                i - sum(j < i for j, _ in fixed)
                for i in self.ref_params[callee.name]
                if i not in dict(fixed)
            }
            self.specialised.add(callee.name)
            self.work.append(name)
        dropped = {i for i, _ in fixed}
        args = tuple(a for i, a in enumerate(new.args) if i not in dropped)
        return Call(GlobalVar(name, span=callee.span), args, new.attrs, span=new.span)


def _copy_with_cells(fn: Function, fixed: dict[int, str]) -> Function:
    replace: dict[Var, Expr] = {
        fn.params[i]: GlobalVar(cell, span=fn.params[i].span) for i, cell in fixed.items()
    }
    copy = fresh_binders(fn, replace)  # shares no node: a `ref(...)` is its own
    assert isinstance(copy, Function)
    params = tuple(p for i, p in enumerate(copy.params) if i not in fixed)
    return dataclasses.replace(copy, params=params)


# ------------------------------------------------------ downward closures
class DownwardClosures(Exception):
    """Raised by the analysis: global functions that touch a caller's local
    references (through a closure passed down to them) and need a copy of
    their own for that caller, as (function, caller) pairs."""

    def __init__(self, pairs: set[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def copy_for_callers(
    module: IRModule, pairs: set[tuple[str, str]], copies: dict[str, str]
) -> IRModule:
    """[RULE STATE-DOWNWARD] A closure over a local reference, passed down to a global
    function (``@map(%add_to_acc, %xs)``), makes that function read and
    write the reference: it must then take the reference's value as state.
    Another caller has other references (or none), so each caller gets its
    own copy of the function and of every global function it calls directly
    (recursion reaches the same copy), and the caller's direct calls go to
    the copies; ``copies`` records each copy's caller."""
    functions = dict(module.functions)
    for callee, caller in sorted(pairs):
        reach = [callee]
        seen = {callee}
        while reach:  # the global functions the callee calls directly
            name = reach.pop()
            for node in pre_order(functions[name]):
                if isinstance(node, Call) and isinstance(node.callee, GlobalVar):
                    other = node.callee.name
                    if other in functions and other not in seen and other != caller:
                        seen.add(other)
                        reach.append(other)
        renamed = {name: fresh_name(f"{name}_in_{caller}", functions) for name in sorted(seen)}
        for old, new in renamed.items():
            copy = fresh_binders(functions[old], {})
            assert isinstance(copy, Function)
            functions[new] = _Redirect(renamed).mutate_as(copy, Function)
            copies[new] = caller
        redirect = _Redirect({callee: renamed[callee]})
        functions[caller] = redirect.mutate_as(functions[caller], Function)
    return IRModule(functions, module.type_defs, module.cells)


class _Redirect(Mutator):
    """Direct calls of the named global functions go to their copies."""

    def __init__(self, renamed: dict[str, str]) -> None:
        super().__init__()
        self.renamed = renamed

    @on(Call)
    def _call(self, new: Call, old: Call) -> Expr:
        callee = new.callee
        if isinstance(callee, GlobalVar) and callee.name in self.renamed:
            target = GlobalVar(self.renamed[callee.name], span=callee.span)
            return Call(target, new.args, new.attrs, span=new.span)
        return new
