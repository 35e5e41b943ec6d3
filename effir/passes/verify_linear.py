"""The linearity verifier for state-passing (A2) programs.

Why. A PRNG key is a value, so nothing stops a program from handing the
same key to two random operators, and then the two "independent" draws are
equal. JAX checks this ("key reuse") at trace time; effir checks it
statically on A2 programs, where ``state-passing`` has turned every global
state cell into values threaded through functions. Threading is the other
half of the contract: an A2 function that receives the state of a cell and
is meant to hand back its new value must really thread it, and the world
token that orders output (``io``) must flow through every output exactly
once, or the rewrite has silently dropped an update or reordered output.

What is a place. A *place* is a value that the rules track: a variable (or
an anonymous call result) whose type holds a ``Key``, a world token, a
value that is new state, or a closure that captured such a value. A
projection path names a part of it: ``%ks.0`` and ``%ks.1`` are different
places, and using ``%ks`` whole uses both.

The walk. Each function body (global ``def`` and every ``fn``) is walked
once in evaluation order (a call's arguments left to right, then the call)
on the trampoline, so deep programs need no Python recursion. The walk
keeps a *path state*: which places were used and which obligations are met
on the path taken so far. ``if`` and ``match`` fork it: each branch is
walked from the same state (the changes are logged and undone), and at the
join the worst case is kept: a place used in any branch counts as used, an
obligation counts as met only if every branch met it.

Uses. An occurrence as a call argument, returned value, ``if``/``match``
scrutinee, ``ref``/``ref_write`` value or closure capture is a *use*. A
``let`` alias, a tuple field, a branch result and a pattern variable are
*moves*: they use the source too, and the new place takes over the source's
world tokens, which must then be used through it. New state, in contrast,
counts as kept once it has been bound or used: an A1 program may write a
cell twice, and the first new value is then rightly dead in A2.

Rules.

1. [RULE KEY] A part of a place whose type holds a ``Key`` is used at most
   once on every path. A key free in a ``fn`` is used where the closure is
   created; the closure is then a place used at most once (a call is a use),
   and passing it to a control-flow operator (trait ``control_flow``) reuses
   the key in every iteration.
2. [RULE WORLD] The world token is used exactly once on every path: the
   ``io`` state parameter, the ``state_outputs`` of an ``io`` operator
   (``io.print``'s output 0), the ``io`` field of a state-passing call's
   result, and a world token in a loop's initial state, which the loop body
   (a ``fn`` it is given) must use once and which comes out in the loop's
   final state.
3. [RULE STATE] New state is not dropped: the ``state_outputs`` of an
   operator call (``nn.batch_norm_train``'s new mean and variance) and
   fields 1.. of a call to a function whose ``state_out`` is non-empty
   (callee known statically: a global ``def``, or a variable let-bound to a
   ``fn``) are used or bound on every path, field by field for tuples. With
   ``require_incoming_use=True`` each ``state_in`` parameter of a cell that
   is also in ``state_out`` must be used too; that is off by default because
   a function that only writes a cell (``ref_write(@acc, ...)`` in A1)
   rightly ignores the cell's incoming value.
4. [RULE SHAPE] A function with ``state_out`` returns on every path a tuple
   of ``1 + len(state_out)`` fields (a tuple literal, or a value whose type
   is such a tuple); ``state_in`` names at most as many cells as there are
   parameters, without repeats, and each such parameter has the type of its
   cell's content (the world token: ``Tensor[(), int64]``).

Each violation is one ``LinearityError`` naming both places involved (the
binder or producer, and the second use or the end of the path that drops
it), located at the offending expression.

What it does not check (imprecise, never crashing): keys inside ``Ref``
cells (A2 programs have no references); what an unknown callee does with
its arguments (each counts as one use); ADT values field by field (a
constructor's arguments move into the value as a whole); a closure stored
in a tuple and called from there (captures are followed through ``let``
only); state other than the world token carried through a loop (a program
may drop a loop's final state); whether new state is returned in the right
position of the result tuple. A graph-form shared expression is evaluated
once per function, as the interpreter does, but one that a closure needs is
treated as evaluated again inside it.
"""

from __future__ import annotations

import itertools
import re

from ..ir.diagnostics import LinearityError, Span
from ..ir.expr import (
    Call,
    Clause,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import op_def
from ..ir.structural import structural_equal
from ..ir.trampoline import run as run_computation
from ..ir.types import IncompleteType, KeyType, RefType, TupleType, Type, TypeCall
from ..ir.visitor import post_order, pre_order
from ..ops.effects import WORLD, WORLD_TYPE
from .infer_type import check
from .type_solver import show

IO = WORLD  # the state name of the world token


def _loop(op) -> dict | None:
    """How a loop operator threads its initial state (argument ``init``)
    through its bodies (argument, parameter; must the body use it? only a
    step must) to its final state (result field ``final``), from the
    operator's ``loop`` rule; a world token in it is followed there
    [RULE WORLD]."""
    shape = op.rules.get("loop")
    if shape is None:
        return None
    bodies = tuple((b.arg, b.state_param, b.step) for b in shape.bodies)
    return {"init": shape.init, "final": shape.final, "bodies": bodies}


Path = tuple[int, ...]
# Where a value is used: (the expression, its parent, its index among the
# parent's children, the nearest enclosing span). Resolved lazily, on error.
Site = tuple[Expr, Node | None, int, Span | None]
_MISSING = object()
_SERIALS = itertools.count()
_SAT = "met"  # an obligation met on every path so far


def linearity_errors(
    module: IRModule, *, require_incoming_use: bool = False
) -> list[LinearityError]:
    """Every violation of the rules above, in source order. Type-checks the
    module first when its types are missing (Key detection needs them)."""
    if any(not fn.body.has_type for fn in module.functions.values()):
        check(module)
    return _Verifier(module, require_incoming_use).run()


def verify_linear(module: IRModule, *, require_incoming_use: bool = False) -> None:
    """Raise the first ``LinearityError`` (the others as its notes)."""
    errors = linearity_errors(module, require_incoming_use=require_incoming_use)
    if errors:
        first = errors[0]
        raise LinearityError(first.message, first.span, tuple(str(e) for e in errors[1:]))


# ------------------------------------------------------------------ places
class _Ob:
    """An obligation: one part (``field``) of a piece of new state that must
    be used on every path; ``group`` holds the obligations of all its parts."""

    __slots__ = ("what", "how", "span", "field", "group")

    def __init__(self, what: str, how: str, span: Span | None, field: str, group: list) -> None:
        self.what, self.how, self.span, self.field, self.group = what, how, span, field, group


class _Place:
    __slots__ = (
        "name",
        "binder",
        "produced",
        "type",
        "origin",
        "marks",
        "obs",
        "captures",
        "used",
        "serial",
    )

    def __init__(self, name: str | None, span: Span | None, ty: Type | None, origin: object):
        self.serial = next(_SERIALS)  # places made after a branch began die with it
        self.name = name  # None: an anonymous value (a call's result...)
        self.binder = span  # where it is bound (or produced, if anonymous)
        self.produced = span
        self.type = ty
        self.origin = origin  # the node whose evaluation created it
        self.marks: set[Path] = set()  # world tokens
        self.obs: dict[Path, list[_Ob]] = {}
        self.captures: list[tuple[_Place, Path]] = []  # a closure's linear captures
        self.used: dict[Path, None] = {}  # every path ever used, on any path


Val = tuple[_Place, Path] | None


def _type_of(node: Expr) -> Type | None:
    return node.checked_type if node.has_type else None


def _type_at(ty: Type | None, path: Path) -> Type | None:
    for index in path:
        if not isinstance(ty, TupleType) or index >= len(ty.fields):
            return None
        ty = ty.fields[index]
    return ty


def _leaves(ty: Type | None, path: Path) -> list[Path]:
    """The paths of the non-tuple parts of ``ty`` (under ``path``)."""
    found, stack = [], [(ty, path)]
    while stack:
        t, p = stack.pop()
        if isinstance(t, TupleType):
            stack.extend((f, p + (i,)) for i, f in reversed(list(enumerate(t.fields))))
        else:
            found.append(p)
    return found


def _overlap(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def _path_text(path: Path) -> str:
    return "".join(f".{i}" for i in path)


# ------------------------------------------------------------ path states
class _PathState:
    """Uses and obligations on the current path; ``begin``/``end`` log and
    undo a branch's changes so that ``merge`` can join the branches."""

    def __init__(self) -> None:
        self.uses: dict[tuple[_Place, Path], Site] = {}
        self.obs: dict[_Ob, object] = {}  # _SAT, None (unmet), or the Site of a path end
        self.memo: dict[int, Val] = {}  # shared (graph-form) expressions evaluated
        self.log: list[tuple[dict, object, object]] = []
        self.depth = 0

    def set(self, table: dict, key: object, value: object) -> None:
        if self.depth:
            self.log.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def begin(self) -> tuple[int, int]:
        self.depth += 1
        return len(self.log), next(_SERIALS)

    def end(self, mark: tuple[int, int]) -> dict[tuple[bool, object], object]:
        """Undo the branch since ``mark``; its changes that matter after the
        join (not those to its own places, nor obligations it created and met)."""
        entries = self.log[mark[0] :]
        before: dict[tuple[int, object], object] = {}
        for table, key, old in entries:
            before.setdefault((id(table), key), old)
        delta = {}
        for (table_id, key), old in before.items():
            if table_id == id(self.uses):
                if key[0].serial < mark[1]:
                    delta[(False, key)] = self.uses[key]
            elif table_id == id(self.obs):
                if old is not _MISSING or self.obs[key] is not _SAT:
                    delta[(True, key)] = self.obs[key]
        for table, key, old in reversed(entries):
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        del self.log[mark[0] :]
        self.depth -= 1
        return delta

    def merge(self, branches: list[tuple[dict, Site]]) -> None:
        keys = {k for delta, _ in branches for k in delta}
        for is_ob, key in keys:
            table = self.obs if is_ob else self.uses
            base = table.get(key, _MISSING)
            values = [(delta.get((is_ob, key), base), end) for delta, end in branches]
            if not is_ob:  # [RULE KEY] used on some path: used
                value = next((v for v, _ in values if v is not _MISSING), _MISSING)
            else:  # [RULE STATE] met only if met on every path where it exists
                value = _SAT
                for v, end in values:
                    if v is not _MISSING and v is not _SAT:
                        value = end if v is None else v
                        break
            if value is not _MISSING:
                self.set(table, key, value)


# --------------------------------------------------------------- locations
def _slots(node: Node) -> list[tuple[str, Node]]:
    """A node's children with their field kinds, in ``children()`` order."""
    out: list[tuple[str, Node]] = []
    for name, kind in type(node).FIELDS:
        value = getattr(node, name)
        if kind in ("node", "def"):
            if value is not None:
                out.append((kind, value))
        elif kind in ("nodes", "defs"):
            out.extend((kind, v) for v in value)
    return out


_LOCAL_RES: dict[str, re.Pattern] = {}


def _locate(parent: Node, index: int) -> Span | None:
    """The text of a variable's use: a ``Var`` node is shared by all its
    uses and carries its binder's span, so find ``%name`` in the parent's
    text after the children that precede it."""
    span = parent.span
    if span is None:
        return None
    source, cursor = span.source, span.start
    for i, (kind, child) in enumerate(_slots(parent)):
        if isinstance(child, Var) and kind in ("node", "nodes"):
            pattern = _LOCAL_RES.get(child.name_hint)
            if pattern is None:
                pattern = re.compile(r"%" + re.escape(child.name_hint) + r"(?![A-Za-z0-9_])")
                _LOCAL_RES[child.name_hint] = pattern
            found = pattern.search(source.text, cursor)
            if found is None:
                return None
            if i == index:
                return Span(source, found.start(), found.end())
            cursor = found.end()
        else:
            if i == index:
                return child.span
            sp = child.span
            if sp is not None and sp.source is source and sp.start >= cursor:
                cursor = sp.end
    return None


def _site_span(site: Site | None) -> Span | None:
    if site is None:
        return None
    node, parent, index, ctx = site
    if not isinstance(node, Var) and node.span is not None:
        return node.span
    if isinstance(node, Var) and parent is not None:
        found = _locate(parent, index)
        if found is not None:
            return found
    if parent is not None and parent.span is not None:
        return parent.span
    return ctx


def _names(cells: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{c}"' for c in cells) + "]"


def _full(span: Span | None) -> str:
    return str(span) if span is not None else "<unknown>"


def _short(span: Span | None, ref: Span | None) -> str:
    if span is None:
        return "<unknown>"
    if ref is not None and ref.source.name == span.source.name:
        return f"{span.line}:{span.column}"
    return str(span)


# ---------------------------------------------------------------- verifier
class _Verifier:
    def __init__(self, module: IRModule, require_incoming_use: bool) -> None:
        self.module = module
        self.require_incoming_use = require_incoming_use
        # loop bodies' parameters that receive a world token: (param, paths, must use)
        self.seeds: dict[Function, list[tuple[int, list[Path], bool]]] = {}
        self.errors: list[LinearityError] = []
        self.known_fns: dict[Var, Function] = {}  # let-bound (or captured) fn literals
        self.free: dict[Function, list[tuple[Var, Path]]] | None = None
        self.shared = _shared_nodes(module)
        self.holds: dict[Type, bool] = {}
        self.adt_holds: dict[str, bool] = {}
        self.queue: list[tuple[Function, dict[Var, Val], _Place | None]] = []
        self.env: dict[Var, Val] = {}
        self.state = _PathState()
        self.fn_name = ""
        self.state_out: tuple[str, ...] = ()

    def run(self) -> list[LinearityError]:
        for name, fn in self.module.functions.items():
            self.analyze(fn, f"@{name}", {})
        while self.queue:
            fn, env, closure = self.queue.pop(0)
            if closure is not None and closure.name is not None:
                name = f"%{closure.name}"
            else:
                name = f"the function at {_full(fn.span)}"
            self.analyze(fn, name, env)
        self.errors.sort(key=lambda e: (0, e.span.source.name, e.span.start) if e.span else (1,))
        return self.errors

    def error(self, message: str, span: Span | None, rule: str = "use") -> None:
        """Record a violation of ``rule``: "use" (a key or the world token
        used twice, or the world token dropped), "drop" (new state dropped)
        or "shape" (a state-passing signature or return)."""
        err = LinearityError(message, span)
        err.rule = rule
        self.errors.append(err)

    # ---------------------------------------------------------- functions
    def analyze(self, fn: Function, name: str, env: dict[Var, Val]) -> None:
        self.env, self.state, self.fn_name = env, _PathState(), name
        state_in, state_out = self.signature(fn, name)
        self.state_out = state_out
        first_state = len(fn.params) - len(state_in)
        for i, param in enumerate(fn.params):
            place = _Place(param.name_hint, param.span, _type_of(param), param)
            if i >= first_state:
                cell = state_in[i - first_state]
                if cell == IO:  # [RULE WORLD]
                    place.marks.add(())
                    self.oblige(place, (), f"the world token %{param.name_hint}", "bound")
                elif cell in state_out and self.require_incoming_use:  # [RULE STATE]
                    what = f"the incoming value of @{cell} (%{param.name_hint})"
                    self.oblige(place, (), what, "bound")
            env[param] = self.keep(place)
        for index, paths, must_use in self.seeds.get(fn, ()):  # [RULE WORLD]
            param = fn.params[index]
            val = env.get(param)
            place = val[0] if val else _Place(param.name_hint, param.span, _type_of(param), param)
            env[param] = (place, ())
            place.marks.update(paths)
            for path in paths if must_use else ():
                what = f"the world token %{place.name}{_path_text(path)} of the loop state"
                self.oblige(place, path, what, "bound")
        body_site: Site = (fn.body, fn, len(_slots(fn)) - 1, fn.span)
        run_computation(self.ev(fn.body, body_site, fn.span, True))
        unmet: dict[int, list[tuple[_Ob, object]]] = {}
        for ob, status in self.state.obs.items():
            if status is not _SAT:
                unmet.setdefault(id(ob.group), []).append((ob, status))
        for dropped in unmet.values():
            ob, status = dropped[0]
            end = _site_span(status) if status is not None else fn.span
            fields = [o.field for o, _ in dropped if o.field]
            part = ""
            if fields and len(dropped) < len(ob.group):
                part = f" (field{'s' if len(fields) > 1 else ''} {' and '.join(fields)})"
            self.error(
                f"{ob.what}{part} {ob.how} at {_full(ob.span)} is dropped on the path ending at "
                f"{_short(end, ob.span)}",
                ob.span or end,
                "use" if "world token" in ob.what else "drop",
            )

    def signature(self, fn: Function, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """[RULE SHAPE] the state attributes, or () () when they are malformed."""
        lists = []
        for attr in ("state_in", "state_out"):
            cells = fn.attrs.get(attr, ())
            if not isinstance(cells, tuple) or not all(isinstance(c, str) for c in cells):
                self.error(
                    f"{attr} of {name} must be a list of cell names, got {cells!r}",
                    fn.span,
                    "shape",
                )
                return (), ()
            repeated = sorted({c for c in cells if cells.count(c) > 1})
            if repeated:
                self.error(f"{attr} of {name} names @{repeated[0]} twice", fn.span, "shape")
                return (), ()
            lists.append(cells)
        state_in, state_out = lists
        if len(state_in) > len(fn.params):
            self.error(
                f"{name} names {len(state_in)} state cell(s) in state_in but has only "
                f"{len(fn.params)} parameter(s)",
                fn.span,
                "shape",
            )
            return (), ()
        params = fn.params[len(fn.params) - len(state_in) :]
        for cell, param in zip(state_in, params, strict=True):
            expected = WORLD_TYPE if cell == IO else self.cell_content(cell)
            actual = _type_of(param)
            if expected is None or actual is None or _incomplete(expected):
                continue
            if not structural_equal(expected, actual):
                holds = "the world token is" if cell == IO else f"@{cell} holds"
                self.error(
                    f"parameter %{param.name_hint} of {name} carries the state of "
                    f"{'the world' if cell == IO else '@' + cell} (state_in) but has type "
                    f"{show(actual)}; {holds} {show(expected)}",
                    param.span or fn.span,
                    "shape",
                )
        return state_in, state_out

    def cell_content(self, cell: str) -> Type | None:
        found = self.module.cells.get(cell)
        if found is not None and isinstance(found.type, RefType):
            return found.type.value
        return None

    # ------------------------------------------------------------- places
    def holds_key(self, ty: Type | None) -> bool:
        """Whether a value of type ``ty`` may hold a key: in its tuple
        fields, type arguments or an ADT's constructors. Each part of a type
        is looked at once: the types of nested tuples share their parts,
        and a walk of each whole type would be quadratic in the depth."""
        if ty is None:
            return False
        holds = self.holds
        stack: list[tuple[Type, list[Type] | None]] = [(ty, None)]
        while stack:
            t, parts = stack.pop()
            if parts is not None:  # its parts are done
                holds[t] = any(holds[p] for p in parts) or (
                    isinstance(t, TypeCall) and self.adt_holds_key(t.func.name)
                )
            elif t in holds:
                continue
            elif isinstance(t, KeyType):
                holds[t] = True
            elif isinstance(t, TupleType | TypeCall):
                parts = list(t.fields if isinstance(t, TupleType) else t.args)
                stack.append((t, parts))
                stack.extend((p, None) for p in parts)
            else:
                holds[t] = False
        return holds[ty]

    def adt_holds_key(self, name: str) -> bool:
        """Whether a constructor of the ADT ``name`` may hold a key (its
        definition walked once)."""
        known = self.adt_holds.get(name)
        if known is None:
            data = self.module.type_defs.get(name)
            stack = [i for c in data.constructors for i in c.inputs] if data is not None else []
            known, adts = False, {name}
            while stack and not known:
                t = stack.pop()
                if isinstance(t, KeyType):
                    known = True
                elif isinstance(t, TupleType):
                    stack.extend(t.fields)
                elif isinstance(t, TypeCall):
                    stack.extend(t.args)
                    inner = self.module.type_defs.get(t.func.name)
                    if inner is not None and inner.name not in adts:
                        adts.add(inner.name)
                        stack.extend(i for c in inner.constructors for i in c.inputs)
            self.adt_holds[name] = known
        return known

    def linear_at(self, place: _Place, path: Path) -> bool:
        """[RULE KEY]/[RULE WORLD] is this part of a place used at most once?"""
        if place.captures:
            return True
        if self.is_world(place, path):
            return True
        return self.holds_key(_type_at(place.type, path))

    def keep(self, place: _Place) -> Val:
        """The place as a value, or None when no rule cares about it."""
        if place.obs or place.marks or place.captures:
            return (place, ())
        if self.holds_key(place.type):
            return (place, ())
        return None

    def oblige(self, place: _Place, path: Path, what: str, how: str, span=None, leaves=None):
        """[RULE STATE] each leaf of ``place`` at ``path`` must be used."""
        span = span if span is not None else place.binder
        group: list[_Ob] = []
        for leaf in leaves if leaves is not None else _leaves(_type_at(place.type, path), path):
            ob = _Ob(what, how, span, _path_text(leaf[len(path) :])[1:], group)
            group.append(ob)
            place.obs.setdefault(leaf, []).append(ob)
            self.state.set(self.state.obs, ob, None)

    def noun(self, place: _Place, path: Path) -> str:
        if self.is_world(place, path):
            return "world token"
        return "key" if isinstance(_type_at(place.type, path), KeyType) else "value"

    def describe(self, place: _Place, path: Path) -> str:
        noun = self.noun(place, path)
        if place.name is not None:
            return f"{noun} %{place.name}{_path_text(path)} (bound at {_full(place.binder)})"
        field = f" (field {_path_text(path)[1:]})" if path else ""
        return f"the {noun}{field} produced at {_full(place.produced)}"

    # --------------------------------------------------------------- uses
    def record(self, val: Val, site: Site) -> None:
        """[RULE KEY]/[RULE WORLD] at most once: report an earlier overlapping use."""
        if val is None:
            return
        place, path = val
        uses = self.state.uses
        for other in place.used:
            if not _overlap(other, path):
                continue
            first = uses.get((place, other))
            if first is None:
                continue
            region = path if len(path) >= len(other) else other
            if self.linear_at(place, region):
                self.report_reuse(place, region, first, site)
                break
        place.used.setdefault(path)
        if (place, path) not in uses:
            self.state.set(uses, (place, path), site)

    def report_reuse(self, place: _Place, region: Path, first: Site, second: Site) -> None:
        one, two = _site_span(first), _site_span(second)
        if place.captures:
            closure = f"%{place.name}" if place.name else "a closure"
            for captured, path in place.captures:
                subject = self.describe(captured, path)
                self.error(
                    f"{subject} is captured by {closure} (created at "
                    f"{_short(place.produced, captured.binder)}), which is used twice: "
                    f"at {_short(one, captured.binder)} and at {_short(two, captured.binder)}",
                    two or one,
                )
            return
        subject = self.describe(place, region)
        ref = place.binder
        self.error(
            f"{subject} is used twice: at {_short(one, ref)} and at {_short(two, ref)}", two or one
        )

    def satisfy(self, place: _Place, path: Path, moved: bool = False) -> None:
        """Obligations in ``path`` are met (those of world tokens not by a move:
        the world token moves on to its new place)."""
        for at, obs in place.obs.items():
            if _overlap(at, path) and not (moved and self.is_world(place, at)):
                for ob in obs:
                    if self.state.obs.get(ob, _SAT) is not _SAT:
                        self.state.set(self.state.obs, ob, _SAT)

    def use(self, val: Val, site: Site) -> None:
        if val is not None:
            self.record(val, site)
            self.satisfy(*val)

    def transfer(self, val: Val, dest: _Place, dest_path: Path) -> None:
        """The world tokens of ``val`` (marks, obligations) and its captures
        move to ``dest``."""
        if val is None:
            return
        place, path = val
        n = len(path)
        for at, obs in place.obs.items():
            if _overlap(at, path) and self.is_world(place, at):
                target = dest_path + at[n:]
                dest.obs.setdefault(target, []).extend(obs)
        for mark in place.marks:
            if _overlap(mark, path):
                dest.marks.add(dest_path + mark[n:])
        if not path and not dest_path:
            dest.captures.extend(place.captures)

    def move(self, val: Val, dest: _Place, dest_path: Path, site: Site) -> None:
        if val is not None:
            self.record(val, site)
            self.satisfy(*val, moved=True)
            self.transfer(val, dest, dest_path)

    def is_world(self, place: _Place, path: Path) -> bool:
        return any(_overlap(mark, path) for mark in place.marks)

    def new_place(self, var: Var) -> Val:
        return self.keep(_Place(var.name_hint, var.span, _type_of(var), var))

    # ---------------------------------------------------------- the walk
    def atom(self, expr: Expr) -> Val:
        return self.env.get(expr) if isinstance(expr, Var) else None

    def ev(self, expr: Expr, site: Site, ctx: Span | None, tail: bool):
        if not tail and id(expr) in self.shared:
            return self.ev_shared(expr, site, ctx)
        return self.ev_expr(expr, site, ctx, tail)

    def ev_shared(self, expr: Expr, site: Site, ctx: Span | None):
        """A graph-form shared expression is evaluated once per activation."""
        memo = self.state.memo
        if id(expr) in memo:
            return memo[id(expr)]
        val = yield self.ev_expr(expr, site, ctx, False)
        self.state.set(memo, id(expr), val)
        return val

    def child(self, expr: Expr, parent: Node, index: int, ctx: Span | None, tail=False):
        """Sub-computation evaluating a child expression (atoms inline)."""
        site = (expr, parent, index, ctx)
        if not tail and is_atom(expr):
            return site, None
        return site, self.ev(expr, site, ctx, tail)

    def ev_expr(self, expr: Expr, site: Site, ctx: Span | None, tail: bool):
        while isinstance(expr, Let):  # a let chain in one frame
            ctx = expr.span or ctx
            vsite, gen = self.child(expr.value, expr, 1, ctx)
            val = self.atom(expr.value) if gen is None else (yield gen)
            self.bind(expr.var, val, expr.value, vsite)
            site, expr = (expr.body, expr, 2, ctx), expr.body
        if not isinstance(expr, Var):
            ctx = expr.span or ctx
        if isinstance(expr, If | Match):
            return (yield from self.ev_branches(expr, site, ctx, tail))
        if isinstance(expr, Call):
            val = yield from self.ev_call(expr, ctx)
        elif isinstance(expr, Tuple):
            dest = _Place(None, expr.span or ctx, _type_of(expr), expr)
            for i, field in enumerate(expr.fields):
                fsite, gen = self.child(field, expr, i, ctx)
                self.move(self.atom(field) if gen is None else (yield gen), dest, (i,), fsite)
            val = self.keep(dest)
        elif isinstance(expr, TupleGetItem):
            _, gen = self.child(expr.tuple_value, expr, 0, ctx)
            inner = self.atom(expr.tuple_value) if gen is None else (yield gen)
            val = None if inner is None else (inner[0], inner[1] + (expr.index,))
        elif isinstance(expr, Function):
            val = self.closure(expr, site, ctx)
        elif isinstance(expr, RefCreate | RefRead | RefWrite):
            for i, part in enumerate(expr.children()):
                psite, gen = self.child(part, expr, i, ctx)
                self.use(self.atom(part) if gen is None else (yield gen), psite)
            val = None
            if isinstance(expr, RefRead):
                val = self.keep(_Place(None, expr.span or ctx, _type_of(expr), expr))
        else:
            val = self.atom(expr)
        if tail:
            self.ret(val, expr, site)
        return val

    def bind(self, var: Var, val: Val, value: Expr, site: Site) -> None:
        if isinstance(value, Function):
            self.known_fns[var] = value
        elif isinstance(value, Var) and value in self.known_fns:
            self.known_fns[var] = self.known_fns[value]
        if val is None:
            self.env[var] = self.new_place(var)
            return
        place, path = val
        if place.name is None and not path and place.origin is value:
            place.name, place.binder = var.name_hint, var.span  # name the fresh value
            self.env[var] = val
            return
        dest = _Place(var.name_hint, var.span, _type_of(var), var)
        self.move(val, dest, (), site)  # a let alias uses its source
        self.env[var] = self.keep(dest)

    def ret(self, val: Val, expr: Expr, site: Site) -> None:
        """A returned value is used; [RULE SHAPE]; the path ends here."""
        self.use(val, site)
        if self.state_out:
            want = 1 + len(self.state_out)
            ty = _type_of(expr)
            if isinstance(expr, Tuple):
                got, what = len(expr.fields), f"a tuple of {len(expr.fields)} field(s)"
            elif isinstance(ty, TupleType):
                got, what = len(ty.fields), f"a tuple of {len(ty.fields)} field(s)"
            else:
                got, what = None, "a value of type " + (show(ty) if ty is not None else "unknown")
            if got != want:
                cells = ", ".join("new world" if c == IO else f"new @{c}" for c in self.state_out)
                self.error(
                    f"{self.fn_name} has state_out={_names(self.state_out)}, so it must return "
                    f"(result, {cells}): a tuple of {want} fields, but this returns {what}",
                    _site_span(site),
                    "shape",
                )
        obs = self.state.obs
        for ob in [ob for ob, status in obs.items() if status is None]:
            self.state.set(obs, ob, site)

    def ev_branches(self, expr: If | Match, site: Site, ctx: Span | None, tail: bool):
        scrutinee = expr.cond if isinstance(expr, If) else expr.data
        ssite, gen = self.child(scrutinee, expr, 0, ctx)
        data = self.atom(scrutinee) if gen is None else (yield gen)
        if isinstance(expr, If):
            self.use(data, ssite)
            branches = [(expr.then_branch, expr, 1, None), (expr.else_branch, expr, 2, None)]
        else:
            if data is not None:  # used; its patterns take over its world tokens
                self.record(data, ssite)
                self.satisfy(*data, moved=True)
            branches = [(c.body, c, 1, c.pattern) for c in expr.clauses]
        result = None if tail else _Place(None, expr.span or ctx, _type_of(expr), expr)
        ends = []
        for body, parent, index, pattern in branches:
            mark = self.state.begin()
            if pattern is not None:
                self.bind_pattern(pattern, data)
            bctx = parent.span or ctx
            bsite, gen = self.child(body, parent, index, bctx, tail)
            val = self.atom(body) if gen is None else (yield gen)
            if result is not None:
                self.move(val, result, (), bsite)
            ends.append((self.state.end(mark), bsite))
        self.state.merge(ends)
        return None if result is None else self.keep(result)

    def bind_pattern(self, pattern: Pattern, data: Val) -> None:
        stack: list[tuple[Pattern, Val]] = [(pattern, data)]
        while stack:
            p, val = stack.pop()
            if isinstance(p, PatternVar):
                dest = _Place(p.var.name_hint, p.var.span, _type_of(p.var), p.var)
                self.transfer(val, dest, ())
                self.env[p.var] = self.keep(dest)
            elif isinstance(p, PatternTuple):
                for i, sub in enumerate(p.patterns):
                    stack.append((sub, None if val is None else (val[0], val[1] + (i,))))
            elif isinstance(p, PatternConstructor):
                if val is not None:  # ADT fields are not tracked: matching uses it
                    self.satisfy(*val)
                stack.extend((sub, None) for sub in p.patterns)

    def ev_call(self, call: Call, ctx: Span | None):
        callee = call.callee
        op = op_def(callee) if isinstance(callee, Op) else None
        control = op is not None and "control_flow" in op.traits
        result = _Place(None, call.span or ctx, _type_of(call), call)
        if op is None and not isinstance(callee, Constructor):
            csite, gen = self.child(callee, call, 0, ctx)
            self.use(self.atom(callee) if gen is None else (yield gen), csite)
        args: list[Val] = []
        for i, arg in enumerate(call.args):
            asite, gen = self.child(arg, call, 1 + i, ctx)
            val = self.atom(arg) if gen is None else (yield gen)
            if isinstance(callee, Constructor):
                self.move(val, result, (), asite)  # the ADT value holds it
            else:
                self.use(val, asite)
            if control and val is not None:
                self.every_iteration(val, call, asite)
            args.append(val)
        span = call.span or ctx
        if op is not None:
            for index in op.rules.get("state_outputs", ()):
                if op.effect == IO:
                    result.marks.add((index,))
                    what = f"the new world token (output {index} of {op.name})"
                else:
                    what = f"the new state (output {index} of {op.name})"
                self.oblige(result, (index,), what, "produced", span)
            loop = _loop(op)
            if loop is not None and args[loop["init"]] is not None:
                self.thread(call, args[loop["init"]], result, loop, span)
        else:
            fn, name = self.known_callee(callee)
            if fn is not None:
                cells = fn.attrs.get("state_out", ())
                for j, cell in enumerate(cells if isinstance(cells, tuple) else ()):
                    if cell == IO:
                        result.marks.add((1 + j,))
                        what = f"the new world token (from {name})"
                    else:
                        what = f"the new value of @{cell} (from {name})"
                    self.oblige(result, (1 + j,), what, "produced", span)
        return self.keep(result)

    def thread(self, call: Call, init: tuple[_Place, Path], result: _Place, loop, span) -> None:
        """[RULE WORLD] a world token in a loop's initial state is the body's
        to use once per iteration, and comes out in the final state, where it
        must be used. (Other state is not followed: a program may drop a
        loop's final state.)"""
        place, path = init
        marks = [mark[len(path) :] for mark in place.marks if mark[: len(path)] == path]
        if not marks:
            return
        for arg, param, must_use in loop["bodies"]:
            body, _ = self.known_callee(call.args[arg])
            if body is not None and param < len(body.params):
                self.seeds.setdefault(body, []).append((param, marks, must_use))
        at = (loop["final"],)
        leaves = [at + mark for mark in marks]
        result.marks.update(leaves)
        what = f"the world token threaded through {call.callee.name}"
        self.oblige(result, at, what, "produced", span, leaves)

    def known_callee(self, callee: Expr) -> tuple[Function | None, str]:
        if isinstance(callee, GlobalVar):
            return self.module.functions.get(callee.name), f"@{callee.name}"
        if isinstance(callee, Var):
            return self.known_fns.get(callee), f"%{callee.name_hint}"
        if isinstance(callee, Function):
            return callee, f"the function at {_full(callee.span)}"
        return None, ""

    def every_iteration(self, val: tuple[_Place, Path], call: Call, site: Site) -> None:
        """[RULE KEY] a closure run by a control-flow operator reuses its captures."""
        place, path = val
        if path or not place.captures:
            return
        where = _site_span(site)
        for captured, cpath in place.captures:
            closure = f"%{place.name}" if place.name else "the closure"
            self.error(
                f"{self.describe(captured, cpath)} is captured by {closure} (created at "
                f"{_short(place.produced, captured.binder)}), which "
                f"{call.callee.name} at {_short(call.span or where, captured.binder)} runs "
                f"once per iteration: the same {self.noun(captured, cpath)} is used in every "
                "iteration",
                where,
            )

    def closure(self, fn: Function, site: Site, ctx: Span | None) -> Val:
        """[RULE KEY] free places are used where the closure is created."""
        if self.free is None:
            self.free = _free_vars(self.module)
        place = _Place(None, fn.span or ctx, _type_of(fn), fn)
        inner: dict[Var, Val] = {}
        for var, path in self.free.get(fn, ()):
            val = self.env.get(var)
            if val is None:
                continue
            captured = val[0]
            self.use((captured, path), site)
            if self.linear_somewhere(captured, path):
                place.captures.append((captured, path))
            if var not in inner:  # inside, a fresh copy: one use per call
                copy = _Place(captured.name, captured.binder, captured.type, var)
                copy.produced = captured.produced
                self.transfer(val, copy, ())
                copy.obs = {}  # met by the capture: the body need not use it again
                inner[var] = self.keep(copy)
        self.queue.append((fn, inner, place))
        return self.keep(place)

    def linear_somewhere(self, place: _Place, path: Path) -> bool:
        if place.captures or self.is_world(place, path):
            return True
        return self.holds_key(_type_at(place.type, path))


def _incomplete(ty: Type) -> bool:
    return any(isinstance(n, IncompleteType) for n in pre_order(ty))


def _free_vars(module: IRModule) -> dict[Function, list[tuple[Var, Path]]]:
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
    used: dict[tuple[Var, Path], None] = {}
    bound: set[Var] = set(fn.params)
    stack: list[Node] = [fn.body]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, TupleGetItem):
            path: list[int] = []
            base: Expr = node
            while isinstance(base, TupleGetItem):
                path.append(base.index)
                base = base.tuple_value
            if isinstance(base, Var):
                used.setdefault((base, tuple(reversed(path))))
            else:
                stack.append(base)
            continue
        if isinstance(node, Var):
            used.setdefault((node, ()))
            continue
        if isinstance(node, Function):
            for item in free.get(node, ()):
                used.setdefault(item)
            continue
        for kind, child in reversed(_slots(node)):
            if kind in ("def", "defs"):
                if isinstance(child, Var):
                    bound.add(child)
            elif isinstance(child, Expr | Pattern | Clause):
                stack.append(child)
    paths: dict[Var, set[Path]] = {}
    for var, path in used:
        paths.setdefault(var, set()).add(path)
    return [
        (var, path)
        for var, path in used
        if var not in bound and not any(path[:k] in paths[var] for k in range(len(path)))
    ]


def _shared_nodes(module: IRModule) -> set[int]:
    """Expressions reached along more than one edge (graph form)."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack: list[Node] = list(module.functions.values())
    while stack:
        node = stack.pop()
        for child in node.children():
            if not isinstance(child, Expr):
                if isinstance(child, Clause):  # a match's clause: walk its body
                    stack.append(child)
                continue
            if is_atom(child):
                continue
            if id(child) in seen:
                shared.add(id(child))
            else:
                seen.add(id(child))
                stack.append(child)
    return shared
