"""state-passing: effectful A1 programs become explicit state passing (A2).

An A1 program keeps its state in global cells (``global @rng: Ref[Key]``)
and local references, and changes it with ``ref_read``/``ref_write``. The A2
program has no state at all: every function that (transitively) touches a
cell takes the cell's current value as an extra parameter and returns its
new value after the result. It is then a pure program, which the optimiser
may reorder, merge and drop in freely, and which several threads can run at
once with separate states.

The convention (docs/passes.md). A function that needs cells gets the
attributes ``state_in`` (the cells whose values it takes, appended to its
parameters) and ``state_out`` (the cells whose new values it returns:
``(result, new_1, ..., new_k)``; with no ``state_out`` it returns the result
alone). Cells are ordered as declared in the module, then local references
in the order they are created, then the world token ``io`` (a count of the
outputs so far; ``debug.print(%x)`` becomes ``io.print(%world, %x)``).
A function takes exactly the cells it reads or writes, including through
its callees, and returns exactly those it writes; a function that touches
nothing keeps its signature exactly. Cell declarations stay in the module:
they are the initial state a caller starts from.

How it works, in order:

1. ``explicate`` (surface operators become reads and writes) and A-normal
   form, so that each effect has a binding of its own.
2. Cells passed to global functions are resolved by specialisation: a call
   ``@layer(%x, @bn1)`` calls a copy of ``@layer`` in which the parameter is
   ``@bn1`` itself (one copy per function and cells, recursion included).
3. A flow analysis (``infer_effects.solve_flows``: 0-CFA) tells which cell
   or local reference every ``ref_read``/``ref_write`` touches and which
   functions every call may call. A reference that may be one of several
   cells is rejected: the pass must know which value to pass.
4. Signatures, by a fixpoint over the call graph (recursion and mutual
   recursion included). Functions that may be called from the same call site
   (closures stored in one tuple, passed to one higher-order parameter) must
   agree on their signature, so they are grouped (union-find) and each group
   takes the union of its members' cells: this is specialisation of the
   calling convention rather than effect polymorphism. A global function
   keeps its own signature for direct calls; where it is used as a value in
   a group that needs more cells, an adapter closure is passed instead.
5. Translation, binding by binding, with the current value of each cell in
   an environment: a read is that value, a write replaces it, a call passes
   the values and rebinds the new ones, both branches of an ``if``/``match``
   return the same new values, a loop body's written cells become part of
   the loop-carried state (cells it only reads are captured; a loop
   condition that writes state moves into the step), and a local
   ``ref(...)`` becomes a plain value from its creation on.

A closure over a local reference may be passed down to a global function
(``@map(%add_to_acc, %xs)``): the callee then reads and writes the
reference, so it takes the reference's value as state like a cell's; each
caller gets its own copy of the callee and of what the callee calls
directly ([RULE DOWN], ``_copy_for_callers``), since another caller has
other references or none.

What is rejected, with a located error, rather than mis-compiled: a
reference whose cell is not unique, a local reference used as a value (passed,
stored, returned), a closure over a local reference that escapes its
function (returned by it, stored in a reference or a data structure, or
called where the reference is not live), and an ADT field holding functions
that need different cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..ir.analysis import operand_fields
from ..ir.diagnostics import EffectError, Span, TypeCheckError, WellFormedError
from ..ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
    const,
)
from ..ir.module import IRModule
from ..ir.node import Attrs, Node
from ..ir.op import call_op, op_def
from ..ir.trampoline import Computation, run
from ..ir.types import FuncType, RefType, TupleType, Type
from ..ir.visitor import ExprMutator, pre_order
from ..ops.control import LoopBody, LoopShape
from ..ops.effects import WORLD, WORLD_TYPE
from .anf import fresh_binders
from .explicate import explicate
from .infer_effects import Source, solve_flows
from .infer_type import check


@dataclass(frozen=True)
class Signature:
    """The cells a function takes (``state_in``) and returns (``state_out``)."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reads)


def state_passing(module: IRModule) -> IRModule:
    """The A2 form of ``module`` (see the module docstring); raises
    EffectError, located, for what it cannot turn into state passing."""
    module = explicate(module)
    if not _has_state(module):
        return module  # nothing to pass: every function keeps its signature
    check(module)
    nodes = {name: _expr_nodes(fn) for name, fn in module.functions.items()}
    specialised = _specialise_cell_arguments(module, nodes)
    if specialised is not module:  # the copies need their types too
        module = check(specialised)
        nodes = {name: _expr_nodes(fn) for name, fn in module.functions.items()}
    copies: dict[str, str] = {}  # a copy made for a caller's local references -> that caller
    while True:
        try:
            analysis = _Analysis(module, nodes, copies)
            break
        except _DownwardClosures as need:  # [RULE DOWN]
            module = check(_copy_for_callers(module, need.pairs, copies))
            nodes = {name: _expr_nodes(fn) for name, fn in module.functions.items()}
    result = _Translator(module, analysis).run()
    try:
        check(result)
    except (TypeCheckError, WellFormedError) as err:  # a bug of this pass, not the user's
        raise EffectError(
            "state passing produced an ill-typed program; this is a bug in effir, "
            f"please report it: {err.message}",
            err.span,
            err.notes,
        ) from None
    return result


def _has_state(module: IRModule) -> bool:
    """Whether anything could need state passing: a global cell, a local
    reference or an output operator."""
    if module.cells:
        return True
    for fn in module.functions.values():
        for node in pre_order(fn):
            if isinstance(node, RefCreate):
                return True
            if isinstance(node, Call) and isinstance(node.callee, Op):
                if op_def(node.callee).effect != "pure":
                    return True
    return False


# --------------------------------------------------------- specialisation
def _specialise_cell_arguments(module: IRModule, nodes: dict[str, list[Node]]) -> IRModule:
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
        new = rewriter.mutate(functions[name])
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


class _CellArguments(ExprMutator):
    def __init__(self, cells, functions, copies, specialised, work, ref_params) -> None:
        super().__init__()
        self.ref_params = ref_params
        self.cells = cells
        self.functions = functions
        self.copies = copies
        self.specialised = specialised
        self.work = work

    def visit_Call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call)
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
            name = _fresh_name(callee.name + "_" + "_".join(c for _, c in fixed), self.functions)
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


def _fresh_name(base: str, taken) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _copy_with_cells(fn: Function, fixed: dict[int, str]) -> Function:
    replace: dict[Var, Expr] = {
        fn.params[i]: GlobalVar(cell, span=fn.params[i].span) for i, cell in fixed.items()
    }
    copy = fresh_binders(fn, replace)  # shares no node: a `ref(...)` is its own
    assert isinstance(copy, Function)
    params = tuple(p for i, p in enumerate(copy.params) if i not in fixed)
    return dataclasses.replace(copy, params=params)


# ------------------------------------------------------ downward closures
class _DownwardClosures(Exception):
    """Raised by the analysis: global functions that touch a caller's local
    references (through a closure passed down to them) and need a copy of
    their own for that caller, as (function, caller) pairs."""

    def __init__(self, pairs: set[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def _copy_for_callers(
    module: IRModule, pairs: set[tuple[str, str]], copies: dict[str, str]
) -> IRModule:
    """[RULE DOWN] A closure over a local reference, passed down to a global
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
        renamed = {name: _fresh_name(f"{name}_in_{caller}", functions) for name in sorted(seen)}
        for old, new in renamed.items():
            copy = fresh_binders(functions[old], {})
            assert isinstance(copy, Function)
            functions[new] = _Redirect(renamed).mutate(copy)
            copies[new] = caller
        functions[caller] = _Redirect({callee: renamed[callee]}).mutate(functions[caller])
    return IRModule(functions, module.type_defs, module.cells)


class _Redirect(ExprMutator):
    """Direct calls of the named global functions go to their copies."""

    def __init__(self, renamed: dict[str, str]) -> None:
        super().__init__()
        self.renamed = renamed

    def visit_Call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call)
        callee = new.callee
        if isinstance(callee, GlobalVar) and callee.name in self.renamed:
            target = GlobalVar(self.renamed[callee.name], span=callee.span)
            return Call(target, new.args, new.attrs, span=new.span)
        return new


# --------------------------------------------------------------- analysis
class _Analysis:
    """Which cell each reference names, each function's signature, and the
    checks that make the translation sound."""

    def __init__(
        self, module: IRModule, nodes: dict[str, list[Node]], copies: dict[str, str]
    ) -> None:
        self.module = module
        self.nodes = nodes  # each global function's nodes, in pre-order (``_expr_nodes``)
        self.copies = copies  # global copies made for a caller's local references
        self.flows = solve_flows(module)
        self.order: dict[str, int] = {name: i for i, name in enumerate(module.cells)}
        self.types: dict[str, Type] = {WORLD: WORLD_TYPE}
        for name, cell in module.cells.items():
            declared = cell.type
            if isinstance(declared, RefType):
                self.types[name] = declared.value
            else:
                self.types[name] = cell.init.checked_type
        self.parent: dict[Source, Source | None] = {}
        self.unit_fn: dict[Source, Function] = {}
        self.unit_of: dict[Function, Source] = {}
        self.owner: dict[str, Source] = {}  # local reference -> the function creating it
        self.alloc_name: dict[RefCreate, str] = {}
        self.alloc_span: dict[str, Span | None] = {}
        self.target: dict[Expr, str] = {}  # ref_read / ref_write -> cell
        self.used: set[Var] = set()
        self.bound: set[Var] = set()
        self._bodies: dict[Function, list[Node]] = {}
        self._units()
        self._resolve_references()
        self._signatures()
        self._check_local_closures()
        self._adt_fields()

    # ----------------------------------------------------------- units
    def _units(self) -> None:
        """Every function (def or fn) with its lexically enclosing function."""
        # (node, the enclosing function, the node's own name if it is a def)
        stack: list[tuple[Node, Source | None, Source | None]] = []
        for name, fn in self.module.functions.items():
            stack.append((fn, None, ("def", name)))
        used = self.used
        while stack:
            node, unit, own = stack.pop()
            for name, many in operand_fields(node):  # the variables it uses
                value = getattr(node, name)
                if many:
                    used.update(v for v in value if isinstance(v, Var))
                elif isinstance(value, Var):
                    used.add(value)
            if isinstance(node, Function):
                src: Source = own if own is not None else ("fn", node)
                if src in self.unit_fn:
                    continue
                self.parent[src] = unit
                self.unit_fn[src] = node
                self.unit_of[node] = src
                for child in node.children():
                    stack.append((child, src, None))
                continue
            if isinstance(node, Let):
                self.bound.add(node.var)
            if isinstance(node, RefCreate):
                k = len(self.alloc_name)
                name = f"%ref{k}" if k else "%ref"
                self.alloc_name[node] = name
                self.alloc_span[name] = node.span
                self.types[name] = node.value.checked_type
                self.owner[name] = unit
                self.order[name] = len(self.module.cells) + k
            for child in node.children():
                if not isinstance(child, Type):  # no type holds a variable or a function
                    stack.append((child, unit, None))
        self.order[WORLD] = len(self.order) + 1

    def body_nodes(self, fn: Function) -> list[Node]:
        """``_body_nodes(fn.body)``, computed once per function: the analysis
        and the translation walk each body several times."""
        nodes = self._bodies.get(fn)
        if nodes is None:
            nodes = self._bodies[fn] = _body_nodes(fn.body)
        return nodes

    def needed(self, var: Var) -> bool:
        """Whether a binding of ``var`` must be kept: a variable of the
        program that is never used is not rebound after translation."""
        return var in self.used or var not in self.bound

    def sort(self, cells: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted(set(cells), key=self.order.__getitem__))

    def nested_in(self, unit: Source, ancestor: Source) -> bool:
        current: Source | None = unit
        while current is not None:
            if current == ancestor:
                return True
            current = self.parent.get(current)
        return False

    # ------------------------------------------------------ references
    def _resolve_references(self) -> None:
        """The cell behind every ref_read/ref_write; local references may
        only be read and written."""
        ref_vars: dict[Var, str] = {}
        for fn in self.unit_fn.values():
            for node in self.body_nodes(fn):
                if isinstance(node, Let) and isinstance(node.value, RefCreate):
                    ref_vars[node.var] = self.alloc_name[node.value]
        # Aliases only come from references already known, so with none
        # there is nothing to check but the targets.
        local = bool(ref_vars)
        for name in self.module.functions:
            for node in self.nodes[name]:
                if local:
                    self._check_reference_uses(node, ref_vars)
                    if isinstance(node, Let) and isinstance(node.value, Var):
                        if node.value in ref_vars:
                            ref_vars[node.var] = ref_vars[node.value]
                if isinstance(node, RefRead | RefWrite):
                    self.target[node] = self._cell_of(node)
        bound = set(ref_vars.values())  # one set, not a scan per allocation
        for node, name in self.alloc_name.items():
            if name not in bound:
                raise EffectError(
                    "this local reference is used as a value (it is not bound by a let "
                    "and only read and written); state passing can turn a local reference "
                    "into plain values only when it is only read and written",
                    node.span,
                )

    def _check_reference_uses(self, node: Node, ref_vars: dict[Var, str]) -> None:
        for field_name, child in _var_uses(node):
            if child not in ref_vars:
                continue
            if isinstance(node, RefRead | RefWrite) and field_name == "ref":
                continue
            if isinstance(node, Let) and field_name == "value":
                continue  # an alias, checked where it is used
            name = ref_vars[child]
            raise EffectError(
                f"the local reference %{child.name_hint} is used as a value here (passed, "
                "stored or returned); state passing turns a local reference into plain "
                "values only when it is only read and written",
                node.span or child.span,
                (f"the reference is created at {_where(self.alloc_span[name])}",),
            )

    def _cell_of(self, node: RefRead | RefWrite) -> str:
        sources = self.flows.value_of(node.ref)
        cells = sorted(
            {s[1] for s in sources if s[0] == "cell"}
            | {self.alloc_name[s[1]] for s in sources if s[0] == "alloc"}
        )
        what = "ref_read" if isinstance(node, RefRead) else "ref_write"
        if len(cells) == 1:
            return cells[0]
        if not cells:
            raise EffectError(
                f"cannot tell which cell this {what} touches: no reference reaches it",
                node.span,
            )
        names = ", ".join(c if c.startswith("%") else "@" + c for c in cells)
        raise EffectError(
            f"this {what} may touch any of {names}; state passing must know which cell "
            "to pass, so pass the cell itself (functions given a cell are specialised per "
            "cell) or write one function per cell",
            node.span,
        )

    # ------------------------------------------------------ signatures
    def _signatures(self) -> None:
        """Each function's cells (reads, writes), by a fixpoint over the call
        sites; functions that one call site may call form a group (union-find)
        whose signature is the union of its members'."""
        reads: dict[Source, set[str]] = {u: set() for u in self.unit_fn}
        writes: dict[Source, set[str]] = {u: set() for u in self.unit_fn}
        self.call_sites: dict[Source, list[tuple[Call, str, frozenset[Source]]]] = {}
        self.loop_bodies: dict[tuple[Call, int], frozenset[Source]] = {}
        groups = _UnionFind()
        union = groups.union
        for unit, fn in self.unit_fn.items():
            sites: list[tuple[Call, str, frozenset[Source]]] = []
            for node in self.body_nodes(fn):
                if isinstance(node, RefRead):
                    reads[unit].add(self.target[node])
                elif isinstance(node, RefWrite):
                    writes[unit].add(self.target[node])
                elif isinstance(node, Call):
                    callee = node.callee
                    if isinstance(callee, Op):
                        definition = op_def(callee)
                        if definition.effect == "io":
                            reads[unit].add(WORLD)
                            writes[unit].add(WORLD)
                        if "control_flow" in definition.traits:
                            for i, arg in enumerate(node.args):
                                if not _is_function(arg):
                                    continue  # data, even if the flows mention functions
                                found = self.functions_of(arg)
                                if found:
                                    union(found)
                                    self.loop_bodies[(node, i)] = found
                                    sites.append((node, "loop", found))
                    elif isinstance(callee, GlobalVar) and callee.name in self.module.functions:
                        sites.append((node, "direct", frozenset({("def", callee.name)})))
                    elif not isinstance(callee, Constructor):
                        found = self.functions_of(callee)
                        if found:
                            union(found)
                            sites.append((node, "indirect", found))
            self.call_sites[unit] = sites
        self.group: dict[Source, int] = groups.classes()
        members: dict[int, list[Source]] = {}
        for src, g in self.group.items():
            members.setdefault(g, []).append(src)
        owned: dict[Source, set[str]] = {}
        for name, unit in self.owner.items():
            owned.setdefault(unit, set()).add(name)
        for unit, mine in owned.items():  # a function's own references are not its state
            reads[unit] -= mine
            writes[unit] -= mine
        group_reads: dict[int, set[str]] = {g: set() for g in members}
        group_writes: dict[int, set[str]] = {g: set() for g in members}
        changed = True
        while changed:
            changed = False
            for g, srcs in members.items():
                for s in srcs:
                    if s in reads:
                        if not reads[s] <= group_reads[g] or not writes[s] <= group_writes[g]:
                            group_reads[g] |= reads[s]
                            group_writes[g] |= writes[s]
                            changed = True
            for unit, sites in self.call_sites.items():
                r, w = reads[unit], writes[unit]
                before = (len(r), len(w))
                for _, kind, found in sites:
                    if kind == "direct":
                        (callee,) = found
                        r |= reads[callee]
                        w |= writes[callee]
                    else:
                        g = self.group[next(iter(found))]
                        r |= group_reads[g]
                        w |= group_writes[g]
                mine = owned.get(unit, set())
                r -= mine
                w -= mine
                if (len(r), len(w)) != before:
                    changed = True
        self.reads, self.writes = reads, writes
        self.group_sig = {
            g: Signature(self.sort(group_reads[g] | group_writes[g]), self.sort(group_writes[g]))
            for g in members
        }
        downward: set[tuple[str, str]] = set()
        escaped: list[tuple[Source, str]] = []
        for unit in self.unit_fn:
            for cell in reads[unit] | writes[unit]:
                owner = self.owner.get(cell)
                if owner is None or self.nested_in(unit, owner):
                    continue
                if unit[0] == "def":
                    caller = self.top_level(owner)
                    if self.copies.get(unit[1]) == caller:
                        if self.called_only_from(unit, owner):
                            continue
                    elif self.calls_directly(caller, unit):
                        downward.add((unit[1], caller))
                        continue
                escaped.append((unit, cell))
        if downward:  # copies first: they may leave nothing that escapes
            raise _DownwardClosures(downward)
        if escaped:
            unit, cell = escaped[0]
            span = self.unit_fn[unit].span
            for call, kind, found in self.call_sites[unit]:
                if cell in self.site_signature(kind, found).reads:
                    span = call.span or span
                    break
            raise EffectError(
                f"this touches the local reference created at "
                f"{_where(self.alloc_span[cell])} outside the function that created "
                "it (a closure over the reference escaped); state passing turns a "
                "local reference into plain values only when it does not escape",
                span,
            )

    def top_level(self, unit: Source) -> str:
        """The global function ``unit`` is (or is nested in)."""
        while unit[0] != "def":
            parent = self.parent[unit]
            assert parent is not None  # every fn is nested in some def
            unit = parent
        return unit[1]

    def calls_directly(self, caller: str, unit: Source) -> bool:
        """Whether the global function ``caller`` (or a function nested in
        it) calls ``unit`` directly: a closure may have been passed down."""
        top = ("def", caller)
        return any(
            kind == "direct" and unit in found and self.nested_in(site_unit, top)
            for site_unit, sites in self.call_sites.items()
            for _, kind, found in sites
        )

    def called_only_from(self, unit: Source, owner: Source) -> bool:
        """Whether the copy ``unit`` is only ever called directly, from
        ``owner`` (or functions nested in it) and from copies made for the
        same caller: then the owner's references are live at every call."""
        caller = self.copies[unit[1]]
        for site_unit, sites in self.call_sites.items():
            for _, kind, found in sites:
                if unit not in found:
                    continue
                if kind != "direct":
                    return False  # called as a value: from anywhere
                if not (
                    self.nested_in(site_unit, owner)
                    or self.copies.get(self.top_level(site_unit)) == caller
                ):
                    return False
        return True

    def functions_of(self, atom: Expr) -> frozenset[Source]:
        """The functions ``atom`` may be."""
        return frozenset(s for s in self.flows.value_of(atom) if s[0] in ("def", "fn"))

    def own_signature(self, unit: Source) -> Signature:
        r, w = self.reads.get(unit, set()), self.writes.get(unit, set())
        return Signature(self.sort(r | w), self.sort(w))

    def signature_of(self, unit: Source) -> Signature:
        """A closure's signature is its group's; a def's is its own."""
        if unit[0] == "fn" and unit in self.group:
            return self.group_sig[self.group[unit]]
        return self.own_signature(unit)

    def site_signature(self, kind: str, found: frozenset[Source]) -> Signature:
        if kind == "direct":
            return self.own_signature(next(iter(found)))
        return self.group_sig[self.group[next(iter(found))]]

    def _check_local_closures(self) -> None:
        """A closure that touches a local reference may be called, given to
        a loop, or passed down as an argument (the callee then takes the
        reference's value as state, [RULE DOWN]); returned from the function
        that created the reference or stored, it could run after that
        activation is gone, or in another one."""
        touching: dict[Var, str] = {}
        closures: dict[Function, str] = {}
        for src in self.unit_fn:
            if src[0] == "fn":
                local = [c for c in self.signature_of(src).reads if c in self.owner]
                if local:
                    closures[src[1]] = local[0]
        if not closures:
            return
        self._check_escapes(closures)
        for fn in self.unit_fn.values():
            for node in self.body_nodes(fn):
                if isinstance(node, Let) and node.value in closures:
                    touching[node.var] = closures[node.value]
        for name in self.module.functions:
            for node in self.nodes[name]:
                for field_name, child in _var_uses(node):
                    if child not in touching:
                        continue
                    if isinstance(node, Call) and field_name in ("callee", "args"):
                        continue  # called, given to a loop or passed down
                    cell = touching[child]
                    raise EffectError(
                        f"%{child.name_hint} touches the local reference created at "
                        f"{_where(self.alloc_span[cell])} and escapes here (it is "
                        "returned, passed or stored); it could then run where that "
                        "reference's value is not known",
                        node.span or child.span,
                    )

    def _check_escapes(self, closures: dict[Function, str]) -> None:
        """A closure over a local reference must not reach the result of the
        function owning the reference, nor any reference's contents (the
        flows follow it through calls, tuples and constructors)."""
        values = self.flows.values
        stored_anywhere: set[Source] = set()
        for key, found in values.items():
            if isinstance(key, tuple) and key[0] == "content":
                stored_anywhere |= found
        # The closures that touch the reference themselves are reported
        # first (the others only share a call site's signature with them).
        own_first = sorted(
            closures.items(),
            key=lambda item: (
                item[1] not in self.reads.get(("fn", item[0]), set())
                and item[1] not in self.writes.get(("fn", item[0]), set())
            ),
        )
        for fn, cell in own_first:
            src = ("fn", fn)
            owner = self.owner[cell]
            stored = src in stored_anywhere
            returned = self.flows.value_of(self.unit_fn[owner].body)
            # Passed back to the function owning the reference (recursion):
            # there it would meet another activation's reference.
            again = any(src in self.flows.value_of(p) for p in self.unit_fn[owner].params)
            if src in returned or stored or again:
                how = (
                    "stored in a reference"
                    if stored
                    else "passed back to the function creating it, whose next activation has "
                    "a reference of its own"
                    if again
                    else "returned by the function creating it"
                )
                raise EffectError(
                    f"this closure touches the local reference created at "
                    f"{_where(self.alloc_span[cell])} and escapes ({how}); it could then run "
                    "where that reference's value is not known",
                    fn.span,
                )

    def _adt_fields(self) -> None:
        """Function-typed constructor fields that hold functions with state:
        the field's declared type gains the state (one signature per field)."""
        found: dict[tuple[str, int], dict[Signature, Call]] = {}
        for fn in self.unit_fn.values():
            for node in self.body_nodes(fn):
                if not (isinstance(node, Call) and isinstance(node.callee, Constructor)):
                    continue
                ctor = node.callee
                for i, arg in enumerate(node.args):
                    for src in self.functions_of(arg):
                        sig = self.signature_of(src)
                        if sig:
                            found.setdefault((ctor.name, i), {}).setdefault(sig, node)
        self.adt_fields: dict[tuple[str, int], Signature] = {}
        for (name, i), sigs in found.items():
            ctor = self.module.constructors[name]
            declared = ctor.inputs[i] if i < len(ctor.inputs) else None
            if len(sigs) > 1 or not isinstance(declared, FuncType):
                calls = list(sigs.values())
                call = calls[-1]
                notes = tuple(f"another is stored at {_where(c.span)}" for c in calls[:-1])
                raise EffectError(
                    f"field {i} of constructor {name} holds functions that need state "
                    + (
                        "with different cells; state passing needs one signature per field"
                        if len(sigs) > 1
                        else "but its declared type is not a function type, so it cannot "
                        "say which state they take"
                    ),
                    call.span,
                    notes,
                )
            self.adt_fields[(name, i)] = next(iter(sigs))

    # ---------------------------------------------------- writes inside
    def writes_inside(self, fn: Function) -> dict[int, frozenset[str]]:
        """For each compound node of a body: the cells written within it."""
        nodes = self.body_nodes(fn)
        inside: dict[int, frozenset[str]] = {}
        sites = {
            id(c): (kind, found)
            for c, kind, found in self.call_sites[self.unit_of[fn]]
            if kind != "loop"
        }
        for node in reversed(nodes):
            own: set[str] = set()
            if isinstance(node, RefWrite):
                own.add(self.target[node])
            elif isinstance(node, Call):
                if isinstance(node.callee, Op) and op_def(node.callee).effect == "io":
                    own.add(WORLD)
                site = sites.get(id(node))
                if site is not None:
                    own |= set(self.site_signature(*site).writes)
                if isinstance(node.callee, Op) and "control_flow" in op_def(node.callee).traits:
                    for i in range(len(node.args)):
                        found = self.loop_bodies.get((node, i))
                        if found:
                            own |= set(self.group_sig[self.group[next(iter(found))]].writes)
            if not isinstance(node, Function):
                for child in node.children():
                    if id(child) in inside:
                        own |= inside[id(child)]
            inside[id(node)] = frozenset(own)
        return inside


class _UnionFind:
    """Disjoint sets of function sources."""

    def __init__(self) -> None:
        self.parent: dict[Source, Source] = {}

    def find(self, src: Source) -> Source:
        parent = self.parent
        parent.setdefault(src, src)
        while parent[src] != src:
            parent[src] = parent[parent[src]]  # path halving
            src = parent[src]
        return src

    def union(self, sources: Iterable[Source]) -> None:
        roots = [self.find(s) for s in sources]
        for root in roots[1:]:
            self.parent[self.find(root)] = self.find(roots[0])

    def classes(self) -> dict[Source, int]:
        """Each source's class, numbered."""
        numbers: dict[Source, int] = {}
        return {s: numbers.setdefault(self.find(s), len(numbers)) for s in list(self.parent)}


def _var_uses(node: Node) -> Iterator[tuple[str, Var]]:
    """The variables ``node`` uses directly (not binds), with their fields."""
    for field_name, kind in type(node).FIELDS:
        value = getattr(node, field_name)
        if kind == "node" and isinstance(value, Var):
            yield field_name, value
        elif kind == "nodes":
            for item in value:
                if isinstance(item, Var):
                    yield field_name, item


def _expr_nodes(root: Expr, into_functions: bool = True) -> list[Node]:
    """``pre_order(root)`` without the types (no type holds an expression),
    and without entering nested functions unless ``into_functions``."""
    out: list[Node] = []
    stack: list[Node] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        if isinstance(node, Var):  # a variable's only child is its type
            continue
        if isinstance(node, Function) and not into_functions:
            continue
        stack.extend(reversed([c for c in node.children() if not isinstance(c, Type)]))
    return out


def _body_nodes(body: Expr) -> list[Node]:
    """The nodes of a body in pre-order, not entering nested functions."""
    return _expr_nodes(body, into_functions=False)


def _boolean(value: bool, span: Span | None) -> Constant:
    return Constant(np.bool_(value), span=span)


def _out_name(var: Var) -> str:
    return "out" if var.name_hint == "_" else var.name_hint + "_out"


def _is_function(expr: Expr) -> bool:
    return isinstance(expr, Function) or (expr.has_type and isinstance(expr.checked_type, FuncType))


def _where(span: Span | None) -> str:
    return str(span) if span is not None else "an unknown location"


# ------------------------------------------------------------ translation
_Bindings = list[tuple[Var, Expr]]


class _Translator:
    """Rewrites each function binding by binding, with ``sigma``: each
    cell's current value. ``subst`` maps variables bound to a read to the
    value read; ``inside`` gives the cells written inside an ``if``/``match``."""

    def __init__(self, module: IRModule, analysis: _Analysis) -> None:
        self.module = module
        self.a = analysis
        self.subst: dict[Var, Expr] = {}
        self.inside: dict[int, frozenset[str]] = {}

    def run(self) -> IRModule:
        functions = {}
        for name, fn in self.module.functions.items():
            functions[name] = run(self.function(fn, self.a.own_signature(("def", name))))
        if not self.a.adt_fields:
            return IRModule(functions, self.module.type_defs, self.module.cells)
        type_defs, constructors = self.type_defs_with_state()
        rename = _Constructors(constructors)
        functions = {name: rename.mutate(fn) for name, fn in functions.items()}
        return IRModule(functions, type_defs, self.module.cells)

    def type_defs_with_state(self) -> tuple[dict[str, TypeData], dict[str, Constructor]]:
        type_defs: dict[str, TypeData] = {}
        constructors: dict[str, Constructor] = {}
        for name, data in self.module.type_defs.items():
            new_ctors = []
            for ctor in data.constructors:
                inputs = list(ctor.inputs)
                for i, t in enumerate(inputs):
                    sig = self.a.adt_fields.get((ctor.name, i))
                    if sig is not None and isinstance(t, FuncType):
                        inputs[i] = self.with_state(t, sig)
                new = dataclasses.replace(ctor, inputs=tuple(inputs))
                constructors[ctor.name] = new
                new_ctors.append(new)
            type_defs[name] = dataclasses.replace(data, constructors=tuple(new_ctors))
        return type_defs, constructors

    def with_state(self, t: FuncType, sig: Signature) -> FuncType:
        """The type of a function of type ``t`` after state passing."""
        ret = t.ret_type
        if sig.writes:
            ret = TupleType((ret,) + tuple(self.cell_type(c) for c in sig.writes))
        args = t.arg_types + tuple(self.cell_type(c) for c in sig.reads)
        return FuncType(args, ret, t.type_params, None)

    # ------------------------------------------------------- helpers
    def cell_type(self, cell: str) -> Type:
        """The type of the value a cell holds (the world token's for ``io``)."""
        return self.a.types[cell]

    def state_var(self, cell: str, span: Span | None) -> Var:
        hint = cell.lstrip("%") if cell.startswith("%") else cell
        return Var(hint, span=span)

    def current(self, sigma: dict[str, Expr], cell: str, node: Expr) -> Expr:
        if cell not in sigma:
            what = cell if cell.startswith("%") else "@" + cell
            raise EffectError(
                f"the value of {what} is not available here: the reference may be used "
                "outside the function that created it",
                node.span,
            )
        return sigma[cell]

    def atom(self, expr: Expr) -> Expr:
        if isinstance(expr, Var):
            return self.subst.get(expr, expr)
        return expr

    def value_atom(self, expr: Expr, bindings: _Bindings) -> Expr:
        """An atom in value position: a global function that a group of
        closures calls with more cells than it takes is wrapped."""
        if isinstance(expr, GlobalVar) and expr.name in self.module.functions:
            src = ("def", expr.name)
            if src in self.a.group:
                need = self.a.group_sig[self.a.group[src]]
                own = self.a.own_signature(src)
                if need != own:
                    adapter = Var(expr.name + "_adapter", span=expr.span)
                    bindings.append((adapter, self.adapter(expr, own, need)))
                    return adapter
        return self.atom(expr)

    def adapter(self, g: GlobalVar, own: Signature, need: Signature) -> Function:
        target = self.module.functions[g.name]
        span = g.span
        params = tuple(Var(p.name_hint, span=span) for p in target.params)
        states = {c: self.state_var(c, span) for c in need.reads}
        bindings: _Bindings = []
        call = Call(g, params + tuple(states[c] for c in own.reads), span=span)
        sigma: dict[str, Expr] = dict(states)
        result = self.bind_call(Var("r", span=span), call, own, sigma, bindings)
        body = self.tail_tuple(result, sigma, need.writes, span)
        return Function(
            params + tuple(states[c] for c in need.reads),
            _chain(bindings, body),
            attrs=_state_attrs(Attrs(), need),
            span=span,
        )

    def bind_call(
        self, var: Var, call: Call, sig: Signature, sigma: dict[str, Expr], bindings: _Bindings
    ) -> Var:
        """``let var = call`` where call returns ``(result, new...)`` for ``sig.writes``."""
        if not sig.writes:
            bindings.append((var, call))
            return var
        out = Var(_out_name(var), span=call.span)
        bindings.append((out, call))
        if self.a.needed(var):
            bindings.append((var, TupleGetItem(out, 0, span=call.span)))
        for i, cell in enumerate(sig.writes):
            new = self.state_var(cell, call.span)
            bindings.append((new, TupleGetItem(out, i + 1, span=call.span)))
            sigma[cell] = new
        return var

    def tail_tuple(
        self, value: Expr, sigma: dict[str, Expr], writes: tuple[str, ...], span: Span | None
    ) -> Expr:
        if not writes:
            return value
        return Tuple((value,) + tuple(sigma[c] for c in writes), span=span)

    def retyped(self, var: Var) -> Var:
        """A binder whose function-type annotation must now mention state."""
        annotation = var.type_annotation
        new_type = self.retyped_annotation(annotation, self.a.functions_of(var))
        if new_type is annotation:
            return var
        new = Var(var.name_hint, new_type, span=var.span)
        self.subst[var] = new
        return new

    def retyped_annotation(self, annotation: Type | None, found) -> Type | None:
        """A function-type annotation of a value that may be ``found``, with
        their state; a type that nests function types needing state is
        dropped (inference recovers it)."""
        if annotation is None or not _mentions_function(annotation):
            return annotation
        sigs = {self.a.signature_of(s) for s in found}
        sigs.discard(Signature())
        if not sigs:
            return annotation
        if isinstance(annotation, FuncType) and len(sigs) == 1:
            return self.with_state(annotation, next(iter(sigs)))
        return None

    # ------------------------------------------------------ functions
    def function(self, fn: Function, sig: Signature) -> Computation[Function]:
        self.inside.update(self.a.writes_inside(fn))
        typed = {
            c: Var(self.state_var(c, fn.span).name_hint, self.cell_type(c), span=fn.span)
            for c in sig.reads
        }
        sigma: dict[str, Expr] = dict(typed)
        params = tuple(self.retyped(p) for p in fn.params)
        body = yield self.block(fn.body, sigma, sig.writes)
        ret_type = self.retyped_annotation(fn.ret_type, self.a.functions_of(fn.body))
        if ret_type is not None and sig.writes:
            ret_type = TupleType((ret_type,) + tuple(self.cell_type(c) for c in sig.writes))
        return dataclasses.replace(
            fn,
            params=params + tuple(typed[c] for c in sig.reads),
            body=body,
            ret_type=ret_type,
            attrs=_state_attrs(fn.attrs, sig),
        )

    def block(
        self, expr: Expr, sigma: dict[str, Expr], writes: tuple[str, ...]
    ) -> Computation[Expr]:
        """``expr`` in state passing: it evaluates to ``(value, new...)`` for
        ``writes`` (to the value alone when there are none)."""
        sigma = dict(sigma)
        bindings: _Bindings = []
        while isinstance(expr, Let):
            yield from self.bind(expr.var, expr.value, sigma, bindings)
            expr = expr.body
        tail = yield from self.tail(expr, sigma, writes, bindings)
        return _chain(bindings, tail)

    def tail(
        self, expr: Expr, sigma: dict[str, Expr], writes: tuple[str, ...], bindings: _Bindings
    ):
        if isinstance(expr, If):
            cond = self.atom(expr.cond)
            then_branch = yield self.block(expr.then_branch, sigma, writes)
            else_branch = yield self.block(expr.else_branch, sigma, writes)
            return If(cond, then_branch, else_branch, span=expr.span)
        if isinstance(expr, Match):
            clauses = []
            for clause in expr.clauses:
                body = yield self.block(clause.body, sigma, writes)
                clauses.append(Clause(clause.pattern, body, span=clause.span))
            return Match(self.atom(expr.data), tuple(clauses), expr.complete, span=expr.span)
        if isinstance(expr, Call) and not isinstance(expr.callee, Op | Constructor):
            site = self._site(expr) or Signature()
            if site.writes == writes:  # a tail call stays a tail call
                return self.call_with_state(expr, site, sigma, bindings)
        if isinstance(expr, Var | Constant | GlobalVar):
            return self.tail_tuple(self.value_atom(expr, bindings), sigma, writes, expr.span)
        result = Var("result", span=expr.span)
        self.a.used.add(result)
        yield from self.bind(result, expr, sigma, bindings)
        if not writes and bindings and bindings[-1][0] is result:
            return bindings.pop()[1]
        return self.tail_tuple(self.atom(result), sigma, writes, expr.span)

    def _site(self, call: Call) -> Signature | None:
        callee = call.callee
        if isinstance(callee, GlobalVar) and callee.name in self.module.functions:
            return self.a.own_signature(("def", callee.name))
        found = self.a.functions_of(callee)
        if not found:
            return None
        return self.a.site_signature("indirect", found)

    def call_with_state(
        self, call: Call, sig: Signature, sigma: dict[str, Expr], bindings: _Bindings
    ) -> Call:
        args = tuple(self.value_atom(a, bindings) for a in call.args)
        extra = tuple(self.current(sigma, c, call) for c in sig.reads)
        return Call(self.atom(call.callee), args + extra, call.attrs, span=call.span)

    # -------------------------------------------------------- bindings
    def bind(self, var: Var, value: Expr, sigma: dict[str, Expr], bindings: _Bindings):
        a = self.a
        if isinstance(value, RefRead):
            self.subst[var] = self.current(sigma, a.target[value], value)
            return
        if isinstance(value, RefWrite):
            sigma[a.target[value]] = self.value_atom(value.value, bindings)
            if a.needed(var):
                bindings.append((var, Tuple((), span=value.span)))
            return
        if isinstance(value, RefCreate):
            sigma[a.alloc_name[value]] = self.value_atom(value.value, bindings)
            return
        var = self.retyped(var)
        if isinstance(value, Function):
            sig = a.signature_of(("fn", value))
            bindings.append((var, (yield self.function(value, sig))))
            return
        if isinstance(value, If | Match):
            written = tuple(c for c in a.sort(self.inside.get(id(value), ())) if c in sigma)
            branch = yield from self.tail(value, sigma, written, bindings)
            if not written:
                bindings.append((var, branch))
                return
            out = Var(_out_name(var), span=value.span)
            bindings.append((out, branch))
            if self.a.needed(var):
                bindings.append((var, TupleGetItem(out, 0, span=value.span)))
            for i, cell in enumerate(written):
                new = self.state_var(cell, value.span)
                bindings.append((new, TupleGetItem(out, i + 1, span=value.span)))
                sigma[cell] = new
            return
        if isinstance(value, Call):
            self.bind_call_value(var, value, sigma, bindings)
            return
        if isinstance(value, Tuple):
            fields = tuple(self.value_atom(f, bindings) for f in value.fields)
            bindings.append((var, Tuple(fields, span=value.span)))
            return
        if isinstance(value, TupleGetItem):
            bindings.append(
                (var, TupleGetItem(self.atom(value.tuple_value), value.index, span=value.span))
            )
            return
        if isinstance(value, Let):  # not produced by to_anf, but harmless
            inner = yield self.block(value, sigma, ())
            bindings.append((var, inner))
            return
        bindings.append((var, self.value_atom(value, bindings)))

    def bind_call_value(self, var: Var, call: Call, sigma: dict[str, Expr], bindings: _Bindings):
        callee = call.callee
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" in definition.traits:
                self.bind_loop(var, call, definition.name, sigma, bindings)
                return
            args = tuple(self.value_atom(a, bindings) for a in call.args)
            world_form = definition.rules.get("world_form")
            if world_form is not None:
                world = self.current(sigma, WORLD, call)
                threaded = Call(op_def(world_form).op, (world,) + args, call.attrs, span=call.span)
                out = Var(world_form.rsplit(".", 1)[-1], span=call.span)
                new_world = self.state_var(WORLD, call.span)
                bindings.append((out, threaded))
                bindings.append((new_world, TupleGetItem(out, 0, span=call.span)))
                if self.a.needed(var):
                    bindings.append((var, TupleGetItem(out, 1, span=call.span)))
                sigma[WORLD] = new_world
                return
            if definition.effect == "io":
                raise EffectError(
                    f"{definition.name} is an output operator without a state-passing form "
                    "(a 'world_form' rule), so its order could not be kept",
                    call.span,
                )
            if definition.effect in ("random", "state"):
                raise EffectError(
                    f"{definition.name} is an effectful operator without an explicate rule",
                    call.span,
                )
            bindings.append((var, Call(callee, args, call.attrs, span=call.span)))
            return
        if isinstance(callee, Constructor):
            args = tuple(self.value_atom(a, bindings) for a in call.args)
            bindings.append((var, Call(callee, args, call.attrs, span=call.span)))
            return
        sig = self._site(call) or Signature()
        new_call = self.call_with_state(call, sig, sigma, bindings)
        self.bind_call(var, new_call, sig, sigma, bindings)

    # ----------------------------------------------------------- loops
    def bind_loop(
        self, var: Var, call: Call, name: str, sigma: dict[str, Expr], bindings: _Bindings
    ) -> None:
        """A loop whose functions touch cells: the cells its steps write join
        the loop-carried state; those they only read are captured. The loop's
        shape (which argument is the state, which parameter receives it)
        is its ``loop`` rule."""
        span = call.span
        sigs: dict[int, Signature] = {}
        for i, arg in enumerate(call.args):
            found = self.a.loop_bodies.get((call, i))
            if not found:
                continue
            if isinstance(arg, GlobalVar) and arg.name in self.module.functions:
                sigs[i] = self.a.own_signature(("def", arg.name))
            else:
                sigs[i] = self.a.site_signature("indirect", found)
        args = [
            self.atom(a) if i in sigs else self.value_atom(a, bindings)
            for i, a in enumerate(call.args)
        ]
        if not any(sigs.values()):
            bindings.append((var, Call(call.callee, tuple(args), call.attrs, span=span)))
            return
        shape = op_def(name).rules.get("loop")
        if shape is None:
            raise EffectError(
                f"{name} runs functions that touch state but has no 'loop' rule saying how "
                "it threads its state",
                span,
            )
        carried: tuple[str, ...] = ()
        for body in shape.bodies:
            sig = sigs.get(body.arg, Signature())
            if body.step:
                carried = self.a.sort(set(carried) | set(sig.writes))
            elif sig.writes:
                self.bind_condition_loop(var, call, shape, sigs, args, sigma, bindings)
                return
        for body in shape.bodies:
            sig = sigs.get(body.arg, Signature())
            if sig or carried:
                args[body.arg] = self.loop_function(args[body.arg], body, sig, carried, sigma, span)
        if not carried:
            bindings.append((var, Call(call.callee, tuple(args), call.attrs, span=span)))
            return
        init = Var("init", span=span)
        bindings.append(
            (init, Tuple((args[shape.init],) + tuple(sigma[c] for c in carried), span=span))
        )
        args[shape.init] = init
        out = Var(_out_name(var), span=span)
        bindings.append((out, Call(call.callee, tuple(args), call.attrs, span=span)))
        # The user's result, with the bare final state in its place.
        result_type = call.checked_type
        assert isinstance(result_type, TupleType)
        fields: list[Expr] = []
        for k in range(len(result_type.fields)):
            field = Var("final" if k == shape.final else "outputs", span=span)
            bindings.append((field, TupleGetItem(out, k, span=span)))
            fields.append(field)
        final = fields[shape.final]
        state = Var("state", span=span)
        bindings.append((state, TupleGetItem(final, 0, span=span)))
        for i, cell in enumerate(carried):
            new = self.state_var(cell, span)
            bindings.append((new, TupleGetItem(final, i + 1, span=span)))
            sigma[cell] = new
        fields[shape.final] = state
        bindings.append((var, Tuple(tuple(fields), span=span)))

    def bind_condition_loop(
        self,
        var: Var,
        call: Call,
        shape: LoopShape,
        sigs: dict[int, Signature],
        args: list[Expr],
        sigma: dict[str, Expr],
        bindings: _Bindings,
    ) -> None:
        """A loop whose condition writes state (draws a key, prints): the
        condition cannot return new state, so it moves into the loop. It is
        tested once before the loop and then at the end of each step, unless
        that step was the last one ``max_iterations`` allows; the loop's own
        condition reads the answer from the carried state. The effects
        happen in the original order: test, step, test, ..., the failing
        test (or the last step)."""
        span = call.span
        name = op_def(call.callee).name
        conditions = [b for b in shape.bodies if not b.step]
        steps = [b for b in shape.bodies if b.step]
        if len(conditions) != 1 or len(steps) != 1 or any(b.params != 1 for b in shape.bodies):
            raise EffectError(
                f"the condition of {name} writes state, which state passing can only "
                "thread through a loop of one condition and one step on the loop state",
                span,
            )
        cond, step = conditions[0], steps[0]
        csig = sigs.get(cond.arg, Signature())
        bsig = sigs.get(step.arg, Signature())
        carried = self.a.sort(set(csig.writes) | set(bsig.writes))
        limit = call.attrs.get("max_iterations")

        def test(state: Expr, env: dict[str, Expr], out: _Bindings) -> Expr:
            """Call the condition on ``state``, rebinding the cells it writes."""
            args_ = (state,) + tuple(self.current(env, c, call) for c in csig.reads)
            return self.bind_call(
                Var("go", span=span), Call(args[cond.arg], args_, span=span), csig, env, out
            )

        before = dict(sigma)
        go: Expr = _boolean(False, span) if limit == 0 else test(args[shape.init], before, bindings)
        counter = () if limit is None else (const(0),)
        init = Var("init", span=span)
        bindings.append(
            (
                init,
                Tuple(
                    (args[shape.init], go, *counter) + tuple(before[c] for c in carried),
                    span=span,
                ),
            )
        )
        first_cell = 2 + len(counter)
        # The loop's condition: the answer the last test left in the carry.
        carry = Var("carry", span=span)
        new_cond = Function((carry,), TupleGetItem(carry, 1, span=span), span=span)
        # The loop's step: the original step, then the next test.
        carry = Var("carry", span=span)
        inner: dict[str, Expr] = dict(sigma)
        body: _Bindings = []
        loop_state = Var("s", span=span)
        body.append((loop_state, TupleGetItem(carry, 0, span=span)))
        for i, cell in enumerate(carried):
            v = self.state_var(cell, span)
            body.append((v, TupleGetItem(carry, first_cell + i, span=span)))
            inner[cell] = v
        step_args = (loop_state,) + tuple(self.current(inner, c, call) for c in bsig.reads)
        result = self.bind_call(
            Var("step", span=span), Call(args[step.arg], step_args, span=span), bsig, inner, body
        )
        out, new_state = Var("out", span=span), Var("s", span=span)
        body.append((out, TupleGetItem(result, 0, span=span)))
        body.append((new_state, TupleGetItem(result, 1, span=span)))
        if limit is None:
            next_go = test(new_state, inner, body)
            count: tuple[Expr, ...] = ()
        else:
            done, k = Var("done", span=span), Var("k", span=span)
            body.append((done, TupleGetItem(carry, 2, span=span)))
            body.append((k, call_op("add", done, const(1))))
            more = Var("more", span=span)
            body.append((more, call_op("less", k, const(limit))))
            then_env = dict(inner)
            then_bindings: _Bindings = []
            then_go = test(new_state, then_env, then_bindings)
            then_value = Tuple((then_go,) + tuple(then_env[c] for c in csig.writes), span=span)
            else_value = Tuple(
                (_boolean(False, span),) + tuple(inner[c] for c in csig.writes), span=span
            )
            tested = Var("tested", span=span)
            body.append(
                (tested, If(more, _chain(then_bindings, then_value), else_value, span=span))
            )
            next_go = Var("go", span=span)
            body.append((next_go, TupleGetItem(tested, 0, span=span)))
            for i, cell in enumerate(csig.writes):
                v = self.state_var(cell, span)
                body.append((v, TupleGetItem(tested, i + 1, span=span)))
                inner[cell] = v
            count = (k,)
        new_carry = Var("carry", span=span)
        body.append(
            (
                new_carry,
                Tuple((new_state, next_go, *count) + tuple(inner[c] for c in carried), span=span),
            )
        )
        new_step = Function((carry,), _chain(body, Tuple((out, new_carry), span=span)), span=span)
        loop_args = list(args)
        loop_args[cond.arg] = new_cond
        loop_args[step.arg] = new_step
        loop_args[shape.init] = init
        looped = Var(_out_name(var), span=span)
        bindings.append((looped, Call(call.callee, tuple(loop_args), call.attrs, span=span)))
        outputs, final = Var("outputs", span=span), Var("final", span=span)
        state = Var("state", span=span)
        bindings.append((outputs, TupleGetItem(looped, 0, span=span)))
        bindings.append((final, TupleGetItem(looped, shape.final, span=span)))
        bindings.append((state, TupleGetItem(final, 0, span=span)))
        for i, cell in enumerate(carried):
            new = self.state_var(cell, span)
            bindings.append((new, TupleGetItem(final, first_cell + i, span=span)))
            sigma[cell] = new
        bindings.append((var, Tuple((outputs, state), span=span)))

    def loop_function(
        self,
        fn_atom: Expr,
        body: LoopBody,
        sig: Signature,
        carried: tuple[str, ...],
        sigma: dict[str, Expr],
        span: Span | None,
    ) -> Function:
        """The function the loop calls instead of ``fn_atom``: its state
        parameter receives ``(state, carried cells...)``; a step returns
        ``(out, (new_state, new cells...))``, a condition its bool."""
        params = [Var("x", span=span) for _ in range(body.params)]
        bindings: _Bindings = []
        inner: dict[str, Expr] = {}
        call_args: list[Expr] = list(params)
        if carried:
            carry = Var("carry", span=span)
            params[body.state_param] = carry
            loop_state = Var("s", span=span)
            bindings.append((loop_state, TupleGetItem(carry, 0, span=span)))
            call_args[body.state_param] = loop_state
            for i, cell in enumerate(carried):
                v = self.state_var(cell, span)
                bindings.append((v, TupleGetItem(carry, i + 1, span=span)))
                inner[cell] = v
        for cell in sig.reads:  # cells only read inside the loop are captured
            if cell not in inner:
                inner[cell] = self.current(sigma, cell, Var("loop", span=span))
        call = Call(fn_atom, tuple(call_args) + tuple(inner[c] for c in sig.reads), span=span)
        if not body.step or not carried:
            return Function(tuple(params), _chain(bindings, call), span=span)
        result = self.bind_call(Var("step", span=span), call, sig, inner, bindings)
        out, new_state = Var("out", span=span), Var("s", span=span)
        bindings.append((out, TupleGetItem(result, 0, span=span)))
        bindings.append((new_state, TupleGetItem(result, 1, span=span)))
        new_carry = Var("carry", span=span)
        bindings.append(
            (new_carry, Tuple((new_state,) + tuple(inner[c] for c in carried), span=span))
        )
        return Function(
            tuple(params), _chain(bindings, Tuple((out, new_carry), span=span)), span=span
        )


class _Constructors(ExprMutator):
    """Constructor nodes replaced by those of the rewritten ADT definitions."""

    def __init__(self, constructors: dict[str, Constructor]) -> None:
        super().__init__()
        self.constructors = constructors

    def visit_Constructor(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Constructor)
        return self.constructors.get(new.name, new)


def _chain(bindings: _Bindings, body: Expr) -> Expr:
    for var, value in reversed(bindings):
        body = Let(var, value, body, span=value.span)
    return body


def _state_attrs(attrs: Attrs, sig: Signature) -> Attrs:
    if not sig:
        return attrs
    items = [(k, v) for k, v in attrs.items() if k not in ("state_in", "state_out")]
    return Attrs(tuple(items) + (("state_in", sig.reads), ("state_out", sig.writes)))


def _mentions_function(t: Type) -> bool:
    return any(isinstance(node, FuncType) for node in pre_order(t))
