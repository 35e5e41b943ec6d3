"""The verifier's walk: each function body once, in evaluation order, on
the framework's ``Evaluator``, applying the rules of the package docstring.

A rule per expression class gets ``(node, site, ctx, tail)``: where the
node's value is used, the nearest enclosing span (for messages), and
whether it is the function's returned value. ``if``/``match`` fork the path
state at their branches and join it after them (``fork``/``enter_branch``/
``leave_branch``/``join``)."""

from __future__ import annotations

from effir.ir.diagnostics import LinearityError, Span
from effir.ir.evaluator import Evaluator
from effir.ir.expr import (
    ATOM_TYPES,
    Call,
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
from effir.ir.functor import on
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.op import OpDef, op_def
from effir.ir.structural import structural_equal
from effir.ir.types import KeyType, RefType, TupleType, Type
from effir.ops.effects import WORLD, WORLD_TYPE
from effir.passes.analyses.key_types import KeyTypes
from effir.passes.analyses.type_solver import show
from effir.passes.analyses.verify_linear.captures import (
    free_vars_with_paths,
    incomplete,
    shared_nodes,
)
from effir.passes.analyses.verify_linear.locations import (
    cell_list,
    full_location,
    short_location,
    site_span,
    slots,
)
from effir.passes.analyses.verify_linear.places import (
    SAT,
    Obligation,
    Path,
    PathState,
    Place,
    Site,
    Val,
    leaf_paths,
    overlap,
    path_text,
    type_at,
    type_of,
)

IO = WORLD  # the state name of the world token
REPLAYS_KEYS = "replays_keys"
"""The function attribute of a function that reads keys again on purpose
(``grad``'s ``@main_grad`` and ``@g_vjp``: the backward replays the forward's
draws): [RULE LINEAR-KEY] is not applied in it nor in the closures it creates."""


def loop_threading(op) -> dict | None:
    """How a loop operator threads its initial state (argument ``init``)
    through its bodies (argument, parameter; must the body use it? only a
    step must) to its final state (result field ``final``), from the
    operator's ``loop`` rule; a world token in it is followed there
    [RULE LINEAR-WORLD]."""
    shape = op.rules.get("loop")
    if shape is None:
        return None
    bodies = tuple((b.arg, b.state_param, b.step) for b in shape.bodies)
    return {"init": shape.init, "final": shape.final, "bodies": bodies}


class Verifier(Evaluator):
    def __init__(self, module: IRModule, require_incoming_use: bool) -> None:
        self.module = module
        self.require_incoming_use = require_incoming_use
        # loop bodies' parameters that receive a world token: (param, paths, must use)
        self.seeds: dict[Function, list[tuple[int, list[Path], bool]]] = {}
        self.errors: list[LinearityError] = []
        self.known_fns: dict[Var, Function] = {}  # let-bound (or captured) fn literals
        self.free: dict[Function, list[tuple[Var, Path]]] | None = None
        self.shared = shared_nodes(module)
        self.key_types = KeyTypes(module)
        self.queue: list[tuple[Function, dict[Var, Val], Place | None, bool]] = []
        self.replaying = False  # in a function marked REPLAYS_KEYS (or a closure of one)
        self.env: dict[Var, Val] = {}
        self.state = PathState()
        self.fn_name = ""
        self.state_out: tuple[str, ...] = ()

    def run(self) -> list[LinearityError]:
        for name, fn in self.module.functions.items():
            self.replaying = fn.attrs.get(REPLAYS_KEYS) is True
            self.analyze(fn, f"@{name}", {})
        while self.queue:
            fn, env, closure, self.replaying = self.queue.pop(0)
            if closure is not None and closure.name is not None:
                name = f"%{closure.name}"
            else:
                name = f"the function at {full_location(fn.span)}"
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
        self.env, self.state, self.fn_name = env, PathState(), name
        state_in, state_out = self.signature(fn, name)
        self.state_out = state_out
        first_state = len(fn.params) - len(state_in)
        for i, param in enumerate(fn.params):
            place = Place(param.name_hint, param.span, type_of(param), param)
            if i >= first_state:
                cell = state_in[i - first_state]
                if cell == IO:  # [RULE LINEAR-WORLD]
                    place.marks.add(())
                    self.oblige(place, (), f"the world token %{param.name_hint}", "bound")
                elif cell in state_out and self.require_incoming_use:  # [RULE LINEAR-STATE]
                    what = f"the incoming value of @{cell} (%{param.name_hint})"
                    self.oblige(place, (), what, "bound")
            env[param] = self.keep(place)
        for index, paths, must_use in self.seeds.get(fn, ()):  # [RULE LINEAR-WORLD]
            param = fn.params[index]
            val = env.get(param)
            place = val[0] if val else Place(param.name_hint, param.span, type_of(param), param)
            env[param] = (place, ())
            place.marks.update(paths)
            for path in paths if must_use else ():
                what = f"the world token %{place.name}{path_text(path)} of the loop state"
                self.oblige(place, path, what, "bound")
        body_site: Site = (fn.body, fn, len(slots(fn)) - 1, fn.span)
        self.evaluate(fn.body, body_site, fn.span, True)
        unmet: dict[int, list[tuple[Obligation, Site | None]]] = {}
        for ob, status in self.state.obs.items():
            if status is not SAT:
                unmet.setdefault(id(ob.group), []).append((ob, status))
        for dropped in unmet.values():
            ob, status = dropped[0]
            end = site_span(status) if status is not None else fn.span
            fields = [o.field for o, _ in dropped if o.field]
            part = ""
            if fields and len(dropped) < len(ob.group):
                part = f" (field{'s' if len(fields) > 1 else ''} {' and '.join(fields)})"
            self.error(
                f"{ob.what}{part} {ob.how} at {full_location(ob.span)} is dropped on the path ending at "
                f"{short_location(end, ob.span)}",
                ob.span or end,
                "use" if "world token" in ob.what else "drop",
            )

    def signature(self, fn: Function, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """[RULE LINEAR-SHAPE] the state attributes, or () () when they are malformed."""
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
            actual = type_of(param)
            if expected is None or actual is None or incomplete(expected):
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
        """Whether a value of type ``ty`` may hold a key (``key_types``)."""
        return self.key_types.holds_key(ty)

    def linear_at(self, place: Place, path: Path) -> bool:
        """[RULE LINEAR-KEY]/[RULE LINEAR-WORLD] is this part of a place used at most once?"""
        if place.captures:
            return True
        if self.is_world(place, path):
            return True
        return not self.replaying and self.holds_key(type_at(place.type, path))

    def keep(self, place: Place) -> Val:
        """The place as a value, or None when no rule cares about it."""
        if place.obs or place.marks or place.captures:
            return (place, ())
        if self.holds_key(place.type):
            return (place, ())
        return None

    def oblige(self, place: Place, path: Path, what: str, how: str, span=None, leaves=None):
        """[RULE LINEAR-STATE] each leaf of ``place`` at ``path`` must be used."""
        span = span if span is not None else place.binder
        group: list[Obligation] = []
        for leaf in leaves if leaves is not None else leaf_paths(type_at(place.type, path), path):
            ob = Obligation(what, how, span, path_text(leaf[len(path) :])[1:], group)
            group.append(ob)
            place.obs.setdefault(leaf, []).append(ob)
            self.state.set(self.state.obs, ob, None)

    def noun(self, place: Place, path: Path) -> str:
        if self.is_world(place, path):
            return "world token"
        return "key" if isinstance(type_at(place.type, path), KeyType) else "value"

    def describe(self, place: Place, path: Path) -> str:
        noun = self.noun(place, path)
        if place.name is not None:
            return f"{noun} %{place.name}{path_text(path)} (bound at {full_location(place.binder)})"
        field = f" (field {path_text(path)[1:]})" if path else ""
        return f"the {noun}{field} produced at {full_location(place.produced)}"

    # --------------------------------------------------------------- uses
    def record(self, val: Val, site: Site) -> None:
        """[RULE LINEAR-KEY]/[RULE LINEAR-WORLD] at most once: report an earlier overlapping
        use. A use of a let alias's key parts is a use of its source's too
        (reported once: on the alias if it is the alias that is used twice)."""
        stack: list[tuple[Place, Path, bool]] = [(*val, True)] if val is not None else []
        while stack:
            place, path, report = stack.pop()
            uses = self.state.uses
            for other in place.used:
                if not overlap(other, path):
                    continue
                first = uses.get((place, other))
                if first is None:
                    continue
                region = path if len(path) >= len(other) else other
                if self.linear_at(place, region):
                    if report:
                        self.report_reuse(place, region, first, site)
                    report = False
                    break
            place.used.setdefault(path)
            if (place, path) not in uses:
                self.state.set(uses, (place, path), site)
            if place.view is not None:
                source, at, parts = place.view
                for part in parts:
                    if overlap(part, path):
                        stack.append((source, at + max(part, path, key=len), report))

    def report_reuse(self, place: Place, region: Path, first: Site, second: Site) -> None:
        one, two = site_span(first), site_span(second)
        if place.captures:
            closure = f"%{place.name}" if place.name else "a closure"
            for captured, path in place.captures:
                subject = self.describe(captured, path)
                self.error(
                    f"{subject} is captured by {closure} (created at "
                    f"{short_location(place.produced, captured.binder)}), which is used twice: "
                    f"at {short_location(one, captured.binder)} and at {short_location(two, captured.binder)}",
                    two or one,
                )
            return
        subject = self.describe(place, region)
        ref = place.binder
        self.error(
            f"{subject} is used twice: at {short_location(one, ref)} and at {short_location(two, ref)}",
            two or one,
        )

    def satisfy(self, place: Place, path: Path, moved: bool = False) -> None:
        """Obligations in ``path`` are met (those of world tokens not by a move:
        the world token moves on to its new place)."""
        for at, obs in place.obs.items():
            if overlap(at, path) and not (moved and self.is_world(place, at)):
                for ob in obs:
                    if self.state.obs.get(ob, SAT) is not SAT:
                        self.state.set(self.state.obs, ob, SAT)

    def use(self, val: Val, site: Site) -> None:
        if val is not None:
            self.record(val, site)
            self.satisfy(*val)

    def transfer(self, val: Val, dest: Place, dest_path: Path) -> None:
        """The world tokens of ``val`` (marks, obligations) and its captures
        move to ``dest``."""
        if val is None:
            return
        place, path = val
        n = len(path)
        for at, obs in place.obs.items():
            if overlap(at, path) and self.is_world(place, at):
                target = dest_path + at[n:]
                dest.obs.setdefault(target, []).extend(obs)
        for mark in place.marks:
            if overlap(mark, path):
                dest.marks.add(dest_path + mark[n:])
        if not path and not dest_path:
            dest.captures.extend(place.captures)

    def move(self, val: Val, dest: Place, dest_path: Path, site: Site) -> None:
        if val is not None:
            self.record(val, site)
            self.satisfy(*val, moved=True)
            self.transfer(val, dest, dest_path)

    def is_world(self, place: Place, path: Path) -> bool:
        return any(overlap(mark, path) for mark in place.marks)

    def new_place(self, var: Var) -> Val:
        return self.keep(Place(var.name_hint, var.span, type_of(var), var))

    # ---------------------------------------------------------- the walk
    def atom(self, expr: Expr) -> Val:
        return self.env.get(expr) if isinstance(expr, Var) else None

    def eval(self, expr: Expr, site: Site, ctx: Span | None, tail: bool):  # type: ignore[override]
        if not tail and id(expr) in self.shared:
            return self.ev_shared(expr, site, ctx)
        return Evaluator.eval(self, expr, site, ctx, tail)

    def ev_shared(self, expr: Expr, site: Site, ctx: Span | None):
        """A graph-form shared expression is evaluated once per activation."""
        memo = self.state.memo
        if id(expr) in memo:
            return memo[id(expr)]
        val = yield Evaluator.eval(self, expr, site, ctx, False)
        self.state.set(memo, id(expr), val)
        return val

    def child(self, expr: Expr, parent: Node | None, index: int, ctx: Span | None, tail=False):
        """A child expression's site, and its evaluation (None for an atom
        read in place; a rule's immediate value is yielded back as it is)."""
        site = (expr, parent, index, ctx)
        if not tail and is_atom(expr):
            return site, None
        return site, self.eval(expr, site, ctx, tail)

    def done(self, val: Val, expr: Expr, site: Site, tail: bool) -> Val:
        if tail:
            self.ret(val, expr, site)
        return val

    @on(Let)
    def _let(self, let: Let, site: Site, ctx: Span | None, tail: bool):
        """A let chain in one frame; its tail is not looked up as shared."""
        expr: Expr = let
        while isinstance(expr, Let):
            ctx = expr.span or ctx
            vsite, gen = self.child(expr.value, expr, 1, ctx)
            val = self.atom(expr.value) if gen is None else (yield gen)
            self.bind_let(expr.var, val, expr.value, vsite)
            site, expr = (expr.body, expr, 2, ctx), expr.body
        return (yield Evaluator.eval(self, expr, site, ctx, tail))

    @on(*ATOM_TYPES)
    def _atom(self, expr: Expr, site: Site, ctx: Span | None, tail: bool) -> Val:
        return self.done(self.atom(expr), expr, site, tail)

    @on(Tuple)
    def _tuple(self, expr: Tuple, site: Site, ctx: Span | None, tail: bool):
        ctx = expr.span or ctx
        dest = Place(None, expr.span or ctx, type_of(expr), expr)
        for i, field in enumerate(expr.fields):
            fsite, gen = self.child(field, expr, i, ctx)
            self.move(self.atom(field) if gen is None else (yield gen), dest, (i,), fsite)
        return self.done(self.keep(dest), expr, site, tail)

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, site: Site, ctx: Span | None, tail: bool):
        ctx = expr.span or ctx
        _, gen = self.child(expr.tuple_value, expr, 0, ctx)
        inner = self.atom(expr.tuple_value) if gen is None else (yield gen)
        val = None if inner is None else (inner[0], inner[1] + (expr.index,))
        return self.done(val, expr, site, tail)

    @on(Function)
    def _function(self, expr: Function, site: Site, ctx: Span | None, tail: bool) -> Val:
        return self.done(self.closure(expr, site, expr.span or ctx), expr, site, tail)

    @on(RefCreate, RefRead, RefWrite)
    def _ref(self, expr: RefCreate | RefRead | RefWrite, site: Site, ctx: Span | None, tail: bool):
        ctx = expr.span or ctx
        parts: tuple[Expr, ...]
        if isinstance(expr, RefWrite):
            parts = (expr.ref, expr.value)
        else:
            parts = (expr.value,) if isinstance(expr, RefCreate) else (expr.ref,)
        for i, part in enumerate(parts):
            psite, gen = self.child(part, expr, i, ctx)
            self.use(self.atom(part) if gen is None else (yield gen), psite)
        val = None
        if isinstance(expr, RefRead):
            val = self.keep(Place(None, expr.span or ctx, type_of(expr), expr))
        return self.done(val, expr, site, tail)

    @on(Node)
    def _other(self, expr: Expr, site: Site, ctx: Span | None, tail: bool) -> Val:
        return self.done(None, expr, site, tail)  # pragma: no cover

    def bind_let(self, var: Var, val: Val, value: Expr, site: Site) -> None:
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
        dest = Place(var.name_hint, var.span, type_of(var), var)
        keys = self.key_parts(place, path)
        if not keys:
            self.move(val, dest, (), site)  # a let alias uses its source
        else:  # a view: its key parts are used where the alias's are
            rest = leaf_paths(type_at(place.type, path), path)
            for leaf in rest if len(keys) < len(rest) else ():
                if leaf not in keys:
                    self.record((place, leaf), site)
            self.satisfy(place, path, moved=True)
            self.transfer(val, dest, ())
            dest.view = (place, path, [k[len(path) :] for k in keys])
        self.env[var] = self.keep(dest)

    def key_parts(self, place: Place, path: Path) -> list[Path]:
        """The leaves of ``place`` under ``path`` that [RULE LINEAR-KEY] makes
        linear, and nothing else does (not a world token, not a closure):
        a let alias uses them only where its own uses do."""
        ty = type_at(place.type, path)
        if ty is None or place.captures or self.replaying or not self.holds_key(ty):
            return []
        return [
            leaf
            for leaf in leaf_paths(ty, path)
            if not self.is_world(place, leaf) and self.holds_key(type_at(place.type, leaf))
        ]

    def ret(self, val: Val, expr: Expr, site: Site) -> None:
        """A returned value is used; [RULE LINEAR-SHAPE]; the path ends here."""
        self.use(val, site)
        if self.state_out:
            want = 1 + len(self.state_out)
            ty = type_of(expr)
            if isinstance(expr, Tuple):
                got, what = len(expr.fields), f"a tuple of {len(expr.fields)} field(s)"
            elif isinstance(ty, TupleType):
                got, what = len(ty.fields), f"a tuple of {len(ty.fields)} field(s)"
            else:
                got, what = None, "a value of type " + (show(ty) if ty is not None else "unknown")
            if got != want:
                cells = ", ".join("new world" if c == IO else f"new @{c}" for c in self.state_out)
                self.error(
                    f"{self.fn_name} has state_out={cell_list(self.state_out)}, so it must return "
                    f"(result, {cells}): a tuple of {want} fields, but this returns {what}",
                    site_span(site),
                    "shape",
                )
        obs = self.state.obs
        for ob in [ob for ob, status in obs.items() if status is None]:
            self.state.set(obs, ob, site)

    @on(If, Match)
    def _branching(self, expr: If | Match, site: Site, ctx: Span | None, tail: bool):
        ctx = expr.span or ctx
        scrutinee = expr.cond if isinstance(expr, If) else expr.data
        ssite, gen = self.child(scrutinee, expr, 0, ctx)
        data = self.atom(scrutinee) if gen is None else (yield gen)
        if isinstance(expr, If):
            self.use(data, ssite)
            bodies = [expr.then_branch, expr.else_branch]
        else:
            if data is not None:  # used; its patterns take over its world tokens
                self.record(data, ssite)
                self.satisfy(data[0], data[1], moved=True)
            bodies = [c.body for c in expr.clauses]
        if tail:  # a tail call: nothing to do after the branches
            return self.branches(expr, bodies, data, None, ctx, tail)
        result = Place(None, expr.span or ctx, type_of(expr), expr)
        yield self.branches(expr, bodies, data, result, ctx, tail)
        return self.keep(result)

    def enter_branch(self, node, index: int, start, data: Val, result, ctx, tail: bool):  # type: ignore[override]
        """Each branch from the same path state (its changes logged); the
        mark holds the branch's site (where its path ends)."""
        mark = self.state.begin()
        if isinstance(node, Match):
            self.bind_pattern(node.clauses[index].pattern, data)
        return mark, self.branch_site(node, index, ctx)

    @staticmethod
    def branch_site(node: If | Match, index: int, ctx: Span | None) -> Site:
        if isinstance(node, If):
            return (
                node.then_branch if index == 0 else node.else_branch,
                node,
                index + 1,
                node.span or ctx,
            )
        clause = node.clauses[index]
        return (clause.body, clause, 1, clause.span or ctx)

    def body(self, node, index: int, body: Expr, data: Val, result, ctx, tail: bool):  # type: ignore[override]
        """A branch's value moves into the ``if``/``match``'s result. In
        tail position there is no result: the body's own evaluation is
        returned (one generator less a level of nesting)."""
        bsite = self.branch_site(node, index, ctx)
        if result is None:
            return self.child(body, bsite[1], bsite[2], bsite[3], tail)[1]
        return self._into(body, bsite, result)

    def _into(self, body: Expr, bsite: Site, result: Place):
        _, gen = self.child(body, bsite[1], bsite[2], bsite[3], False)
        val = self.atom(body) if gen is None else (yield gen)
        self.move(val, result, (), bsite)

    def leave_branch(self, node, index: int, mark: tuple[tuple[int, int], Site], value: Val):
        """The branch's changes, undone (``join`` has them), and its site."""
        return self.state.end(mark[0]), mark[1]

    def join(self, node, start, ends) -> None:
        """The worst case of the branches: ``PathState.merge``."""
        self.state.merge(ends)

    def bind_pattern(self, pattern: Pattern, data: Val) -> None:
        stack: list[tuple[Pattern, Val]] = [(pattern, data)]
        while stack:
            p, val = stack.pop()
            if isinstance(p, PatternVar):
                dest = Place(p.var.name_hint, p.var.span, type_of(p.var), p.var)
                self.transfer(val, dest, ())
                self.env[p.var] = self.keep(dest)
            elif isinstance(p, PatternTuple):
                for i, sub in enumerate(p.patterns):
                    stack.append((sub, None if val is None else (val[0], val[1] + (i,))))
            elif isinstance(p, PatternConstructor):
                if val is not None:  # ADT fields are not tracked: matching uses it
                    self.satisfy(*val)
                stack.extend((sub, None) for sub in p.patterns)

    @on(Call)
    def _call(self, call: Call, site: Site, ctx: Span | None, tail: bool):
        ctx = call.span or ctx
        callee = call.callee
        op = op_def(callee) if isinstance(callee, Op) else None
        control = op is not None and "control_flow" in op.traits
        result = Place(None, call.span or ctx, type_of(call), call)
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
            if op is not None and control and val is not None:
                self.every_iteration(val, call, op, asite)
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
            loop = loop_threading(op)
            if loop is not None and args[loop["init"]] is not None:
                self.thread(call, op, args[loop["init"]], result, loop, span)
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
        return self.done(self.keep(result), call, site, tail)

    def thread(
        self, call: Call, op: OpDef, init: tuple[Place, Path], result: Place, loop, span
    ) -> None:
        """[RULE LINEAR-WORLD] a world token in a loop's initial state is the body's
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
        what = f"the world token threaded through {op.name}"
        self.oblige(result, at, what, "produced", span, leaves)

    def known_callee(self, callee: Expr) -> tuple[Function | None, str]:
        if isinstance(callee, GlobalVar):
            return self.module.functions.get(callee.name), f"@{callee.name}"
        if isinstance(callee, Var):
            return self.known_fns.get(callee), f"%{callee.name_hint}"
        if isinstance(callee, Function):
            return callee, f"the function at {full_location(callee.span)}"
        return None, ""

    def every_iteration(self, val: tuple[Place, Path], call: Call, op: OpDef, site: Site) -> None:
        """[RULE LINEAR-KEY] a closure run by a control-flow operator reuses its captures."""
        place, path = val
        if path or not place.captures:
            return
        where = site_span(site)
        for captured, cpath in place.captures:
            closure = f"%{place.name}" if place.name else "the closure"
            self.error(
                f"{self.describe(captured, cpath)} is captured by {closure} (created at "
                f"{short_location(place.produced, captured.binder)}), which "
                f"{op.name} at {short_location(call.span or where, captured.binder)} runs "
                f"once per iteration: the same {self.noun(captured, cpath)} is used in every "
                "iteration",
                where,
            )

    def closure(self, fn: Function, site: Site, ctx: Span | None) -> Val:
        """[RULE LINEAR-KEY] free places are used where the closure is created."""
        if self.free is None:
            self.free = free_vars_with_paths(self.module)
        place = Place(None, fn.span or ctx, type_of(fn), fn)
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
                copy = Place(captured.name, captured.binder, captured.type, var)
                copy.produced = captured.produced
                self.transfer(val, copy, ())
                copy.obs = {}  # met by the capture: the body need not use it again
                inner[var] = self.keep(copy)
        self.queue.append((fn, inner, place, self.replaying))
        return self.keep(place)

    def linear_somewhere(self, place: Place, path: Path) -> bool:
        if place.captures or self.is_world(place, path):
            return True
        return not self.replaying and self.holds_key(type_at(place.type, path))
