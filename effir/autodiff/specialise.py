"""Global functions specialised on their function arguments, before ``grad``.

Partial evaluation inlines a known closure into the function it is passed
to, but a recursive function (the prelude's ``map``, ``foldl``, ``foldr``)
is unfolded once and its recursive call is left taking the closure as a
value, which first-order AD cannot differentiate. This step removes such
arguments (``grad``'s ``specialise=True`` runs it after ``partial-eval``):

1. A call of a global function ``@g`` with an argument that is a *known
   function* (a let-bound closure, a global function, a constructor, or a
   parameter that a specialisation bound to one) becomes a call of a copy
   of ``@g`` specialised on it: the parameter is gone, and the copy's body
   starts by binding it to a copy of the closure whose captured variables
   are extra parameters, passed at the call (lambda lifting); a global
   function or constructor replaces the parameter where it is used. A
   polymorphic ``@g`` is copied at the call's types (``instantiate``).
2. Copies are memoised per ``(@g, its types, the known functions)``: a
   closure is known by its definition and what its captured functions are,
   so the recursive call inside the copy, which passes the parameter
   through, calls the copy itself, and a closure passed down a recursion
   (``map`` inside ``foldl``'s closure) is specialised once.
3. The copy is type-checked and walked in turn (a worklist, no Python
   recursion per call). Known functions nest at most ``MAX_DEPTH`` deep
   (a recursion that wraps its function argument in a new closure at each
   step would otherwise never end) and at most ``MAX_COPIES`` copies are
   made; a call beyond either stays as it is, and ``grad`` refuses what is
   still higher-order where a gradient flows through it.

A closure left without a use once its calls are specialised is dropped.
Only the functions the entry reaches are rewritten, and a polymorphic one
only through a copy at concrete types. The input is an A2 program (no
references), so copying a body never duplicates an effect on a cell.
"""

from __future__ import annotations

from dataclasses import dataclass

from effir.passes.analyses.anf_sharing import fresh_binders
from effir.passes.analyses.infer_type import infer_expr
from effir.passes.infra.transform import module_pass

from ..ir import type_tree
from ..ir.analysis import free_vars, use_counts
from ..ir.builder import fresh_name
from ..ir.diagnostics import TypeCheckError
from ..ir.dims import substitute_dims
from ..ir.expr import Call, Constructor, Expr, Function, GlobalVar, Let, Var
from ..ir.functor import Mutator, on, pre_order
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.types import ANY, Dim, TensorType
from .instantiate import instance_key, instantiate, instantiation

MAX_DEPTH = 4
MAX_COPIES = 64


@dataclass(eq=False)
class Known:
    """A function value known where it is used: a global function's name, a
    constructor, or a closure (its definition and, once asked for, the
    values of its free variables: an atom, or a known function)."""

    origin: str | Constructor | Function
    env: tuple[Expr | Known, ...] | None = None
    free: list[Var] | None = None
    recursive: bool = False  # a closure that captures itself: not specialised on
    depth: int = 1  # how deep known functions nest in it (at most MAX_DEPTH)

    def key(self) -> tuple:
        """What identifies the specialisation (the atoms passed do not)."""
        if isinstance(self.origin, str):
            return ("global", self.origin)
        if isinstance(self.origin, Constructor):
            return ("constructor", self.origin.name)
        env = tuple(v.key() if isinstance(v, Known) else None for v in self.env or ())
        return ("closure", id(self.origin), env)

    def atoms(self) -> list[Expr]:
        """The values of its captured first-order variables, depth first:
        the extra arguments of a specialised call."""
        out: list[Expr] = []
        stack: list[Expr | Known] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, Known):
                stack.extend(reversed(item.env or ()))
            else:
                out.append(item)
        return out


class Specialiser:
    """One run over a module (see the module docstring)."""

    def __init__(self, module: IRModule) -> None:
        self.module = module
        self.functions: dict[str, Function] = dict(module.functions)
        self.taken = set(module.functions) | set(module.cells)
        self.copies: dict[tuple, str | None] = {}  # None: no copy (it did not type-check)
        self.pending: list[str] = []  # functions to walk
        # per copy: what its walk knows from the start (its rebuilt closures)
        self.starts: dict[str, dict[Var, Known]] = {}
        self.known: dict[Var, Known] = {}
        self.origins: list[Function] = []  # keeps the ids in the keys alive

    def run(self, entry: str) -> IRModule:
        done: set[str] = set()
        self.pending.append(entry)
        changed = False
        while self.pending:
            name = self.pending.pop()
            if name in done:
                continue
            done.add(name)
            fn = self.functions[name]
            if fn.type_params:
                continue  # reached through copies at concrete types only
            known = self.starts.get(name, {})
            self.known.update(known)
            before = len(self.copies)
            new = _Rewrite(self).mutate(fn)
            assert isinstance(new, Function)
            if len(self.copies) > before or known:
                new = _drop_dead_closures(new)
            if new is not fn:
                changed = True
                self.functions[name] = new
            for node in pre_order(new):
                if isinstance(node, GlobalVar) and node.name in self.functions:
                    if node.name not in done:
                        self.pending.append(node.name)
        if not changed:
            return self.module
        return IRModule(self.functions, self.module.type_defs, self.module.cells)

    # ------------------------------------------------------------ values
    def known_of(self, arg: Expr) -> Known | None:
        """What is known of the function ``arg`` is, if anything."""
        if isinstance(arg, Var):
            kf = self.known.get(arg)
            if kf is not None and self.environment(kf, arg):
                return kf
            return None
        if isinstance(arg, GlobalVar) and arg.name in self.functions:
            return Known(arg.name)
        if isinstance(arg, Constructor):
            return Known(arg)
        return None

    def environment(self, kf: Known, var: Var | None = None) -> bool:
        """Fill in a closure's free variables' values (and those of the
        closures it captures, with a stack); False for a closure that
        captures itself (a recursive local function stays a value)."""
        stack: list[tuple[Known, Var | None]] = [(kf, var)]
        while stack:
            item, v = stack[-1]
            fn = item.origin
            if not isinstance(fn, Function) or item.env is not None:
                stack.pop()
                continue
            if item.free is None:
                item.free = free_vars(fn)
                if v is not None and v in item.free:
                    item.env, item.recursive = (), True
                    stack.pop()
                    continue
            subs = [(self.known[w], w) for w in item.free if w in self.known]
            todo = [(sub, w) for sub, w in subs if _closure(sub) and sub.env is None]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            env: list[Expr | Known] = []
            for w in item.free:
                sub = self.known.get(w)
                # a captured function nested deeper stays a value (a parameter)
                if sub is not None and not sub.recursive and sub.depth < MAX_DEPTH:
                    env.append(sub)
                    item.depth = max(item.depth, sub.depth + 1)
                else:
                    env.append(w)
            item.env = tuple(env)
        return not kf.recursive

    # ------------------------------------------------------- specialising
    def specialise(self, new: Call, old: Call, known: dict[int, Known]) -> Call:
        """``new`` (the call ``old`` rewritten) as a call of the copy of its
        callee specialised on the known function arguments, or as it is."""
        assert isinstance(new.callee, GlobalVar)
        name = new.callee.name
        g = self.functions[name]
        if len(g.params) != len(new.args):
            return new
        mapping = None
        if g.type_params:
            mapping = instantiation(g, old.args, old.checked_type)
            if mapping is None:
                return new  # the call's types are not all known here
        dims = _dimensions(g, old) if any(_closure(kf) for kf in known.values()) else {}
        key = (
            name,
            instance_key(g, mapping) if mapping is not None else None,
            tuple((i, kf.key()) for i, kf in sorted(known.items())),
            tuple(sorted(dims.items(), key=str)),
        )
        if key not in self.copies:
            if len(self.copies) >= MAX_COPIES:
                return new
            self.copies[key] = self._copy(name, g, mapping, known, dims)
        copy = self.copies[key]
        if copy is None:
            return new
        first_state = len(new.args) - _state_count(g)
        args = [a for i, a in enumerate(new.args[:first_state]) if i not in known]
        for i in sorted(known):
            args.extend(known[i].atoms())
        args.extend(new.args[first_state:])
        return Call(GlobalVar(copy, span=new.callee.span), tuple(args), new.attrs, span=new.span)

    def _copy(
        self, name: str, g: Function, mapping, known: dict[int, Known], dims: dict[str, Dim]
    ) -> str | None:
        """A copy of ``g`` without the parameters ``known`` gives, typed and
        queued to be walked; its name. A closure's types are written in its
        caller's symbolic dimensions, and each function's own are rigid in
        it: the copy is written in the caller's (``dims``, as the call
        matches them). None when the copy does not type-check even so."""
        fn = instantiate(g, mapping) if mapping is not None else fresh_binders(g)
        assert isinstance(fn, Function)
        if dims:
            fn = substitute_dims(fn, dims)
            assert isinstance(fn, Function)
        # a global function or constructor replaces its parameter's uses
        subst = {fn.params[i]: _atom_of(kf) for i, kf in known.items() if not _closure(kf)}
        if subst:
            fn = fresh_binders(fn, subst)  # (the replaced binders are dropped below)
            assert isinstance(fn, Function)
        prologue: list[tuple[Var, Expr]] = []
        extra: list[Var] = []
        seeded: dict[Var, Known] = {}
        for i in sorted(known):
            if _closure(known[i]):
                param = fn.params[i]
                assert isinstance(param, Var)
                self._rebuild(known[i], param, prologue, extra, seeded)
        # lifted parameters go before the state ones, which A2 puts last
        first_state = len(fn.params) - _state_count(fn)
        user = [p for i, p in enumerate(fn.params[:first_state]) if i not in known]
        params = [*user, *extra, *fn.params[first_state:]]
        body = fn.body
        for var, value in reversed(prologue):
            body = Let(var, value, body, span=value.span)
        copy = Function(tuple(params), body, fn.ret_type, (), fn.attrs, span=g.span)
        module = IRModule(self.functions, self.module.type_defs, self.module.cells)
        try:
            infer_expr(copy, module)  # its own nodes: the walk reads their types
        except TypeCheckError:
            return None
        target = fresh_name(f"{name}_spec", self.taken)
        self.taken.add(target)
        self.functions[target] = copy
        self.starts[target] = seeded
        self.pending.append(target)
        return target

    def _rebuild(
        self,
        kf: Known,
        var: Var,
        prologue: list[tuple[Var, Expr]],
        extra: list[Var],
        seeded: dict[Var, Known],
    ) -> None:
        """Bind ``var`` to a copy of the closure ``kf`` whose first-order
        captured variables are new parameters (appended to ``extra`` in
        ``Known.atoms``' order) and whose captured functions are rebuilt
        first; ``seeded[var]`` is what the copy's walk knows of it."""
        fn = kf.origin
        assert isinstance(fn, Function) and kf.env is not None
        replace: dict[Var, Expr] = {}
        env: list[Expr | Known] = []
        assert kf.free is not None
        for v, value in zip(kf.free, kf.env, strict=True):
            if isinstance(value, Known):
                if isinstance(value.origin, Function):
                    inner = Var(v.name_hint, span=v.span)
                    self._rebuild(value, inner, prologue, extra, seeded)
                    replace[v] = inner
                    env.append(seeded[inner])
                else:
                    replace[v] = _atom_of(value)
                    env.append(value)
            else:
                p = Var(v.name_hint, v.checked_type, span=v.span)
                extra.append(p)
                replace[v] = p
                env.append(p)
        copy = fresh_binders(fn, replace)
        prologue.append((var, copy))
        self.origins.append(fn)
        seeded[var] = Known(fn, tuple(env), list(kf.free), depth=kf.depth)


def _dimensions(g: Function, call: Call) -> dict[str, Dim]:
    """What the call ``g(...)`` gives ``g``'s symbolic dimensions, by name
    (an integer, a caller's dimension, or ``?``)."""
    dims: dict[str, Dim] = {}
    pairs = [(p.checked_type, a.checked_type) for p, a in zip(g.params, call.args, strict=True)]
    pairs.append((g.body.checked_type, call.checked_type))
    for pattern, concrete in type_tree.corresponding(pairs):
        if isinstance(pattern, TensorType) and isinstance(concrete, TensorType):
            if len(pattern.shape) == len(concrete.shape):
                for d, c in zip(pattern.shape, concrete.shape, strict=True):
                    if isinstance(d, str) and d != ANY:
                        dims.setdefault(d, c)
    return {d: c for d, c in dims.items() if c != d}


def _closure(kf: Known) -> bool:
    return isinstance(kf.origin, Function)


def _atom_of(kf: Known) -> Expr:
    if isinstance(kf.origin, str):
        return GlobalVar(kf.origin)
    assert isinstance(kf.origin, Constructor)
    return kf.origin


class _Rewrite(Mutator):
    """One function's calls of globals with known function arguments
    specialised (``Specialiser.specialise``)."""

    def __init__(self, owner: Specialiser) -> None:
        super().__init__()
        self.owner = owner

    def bind(self, let: Let) -> None:
        known = self.owner.known
        if let.var in known:
            return  # a specialisation's prologue: known from its caller
        value = self.child(let.value)
        if isinstance(value, Function):
            self.owner.origins.append(value)
            known[let.var] = Known(value)
        elif isinstance(value, Var | GlobalVar | Constructor):
            kf = self.owner.known_of(value)
            if kf is not None:
                known[let.var] = kf

    @on(Call)
    def _call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call) and isinstance(old, Call)
        callee = new.callee
        if not isinstance(callee, GlobalVar) or callee.name not in self.owner.functions:
            return new
        known = {}
        for i, arg in enumerate(new.args):
            kf = self.owner.known_of(arg)
            if kf is not None:
                known[i] = kf
        if not known:
            return new
        return self.owner.specialise(new, old, known)


class _DropDeadClosures(Mutator):
    """The let-bindings of closures without a use removed."""

    body_first = True

    def __init__(self, uses) -> None:
        super().__init__()
        self.uses = uses

    def keep(self, let: Let) -> bool:
        return not (isinstance(let.value, Function) and self.uses[let.var] == 0)


def _drop_dead_closures(fn: Function) -> Function:
    """``fn`` without the let-bound closures nothing uses any more."""
    uses = use_counts(fn)
    dead = [
        n
        for n in pre_order(fn)
        if isinstance(n, Let) and isinstance(n.value, Function) and uses[n.var] == 0
    ]
    if not dead:
        return fn
    out = _DropDeadClosures(uses).mutate(fn)
    assert isinstance(out, Function)
    return out


def _state_count(fn: Function) -> int:
    """How many of ``fn``'s parameters are state (the last ones, in A2)."""
    return len(fn.attrs.get("state_in", ()) or ())


@module_pass(
    name="specialise-function-arguments",
    preserves={"anf", "a2"},  # copies of functions, with known arguments bound
    options={"entry": "the function whose calls are specialised"},
)
def specialise_function_arguments(module: IRModule, entry: str = "main") -> IRModule:
    """Specialises the functions the entry calls on their known function
    arguments (lambda lifting of the closures grad cannot differentiate as
    values; docs/autodiff.md)."""
    return Specialiser(module).run(entry)


SPECIALISE = specialise_function_arguments.effir_pass
"""The pass ``grad`` runs after partial evaluation."""
