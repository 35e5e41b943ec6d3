"""Values whose type comes from their context, and the annotations that keep
it when a pass takes the context away.

Why. Nothing in ``Nil`` or ``None`` says what their ADT's type argument is:
type inference learns it from how the value is used (``Cons(%x, %l)``, the
other branch of an ``if``, an annotated parameter). The language requires
every variable's type to be inferable (docs/semantics.md §2.4, "cannot
infer the type of %x"), so a program stays well typed only while those
uses stay. A pass that removes a use (``dce``, ``to-gnf`` removing an
unused binding), replaces one (``fold-constant`` keeping the taken branch
of an ``if``) or inlines the function whose parameter fixed the type
(``partial-eval``) can leave a binding ``let %v = Nil`` that nothing types
any more. The type it had is still known: the pass's input was checked. So
such a pass *pins* it [RULE PIN-CONTEXT]: in a function it changed, every
unannotated ``let`` variable whose value is context-typed gets its checked
type as annotation, and so does the result of the function when its body
is; a type not known or not closed (an unknown left in it) is not written.
The program then types alone, printed and read back, with the type it had.

Context-typed, decided from the expression alone, in one post-order walk
(conservative: it may say so of a value whose type is in fact fixed, which
costs an annotation, never a wrong one):

- a constructor call that leaves a type parameter of its ADT unfixed: one
  that no field mentions (``Nil``, ``None``), or that only fields whose
  arguments are context-typed mention (``Just(Nil)``);
- a call of a polymorphic global function, likewise (``@rev(%l)`` with
  ``%l`` context-typed);
- an operator call with a context-typed argument (``debug.print(None)``
  has its argument's type);
- a tuple with a context-typed field, a projection of a context-typed
  tuple, a reference to a context-typed value;
- an ``if`` or ``match`` whose every branch is context-typed (one typed
  branch types the others), a ``let`` whose body is;
- a variable bound, unannotated and not pinned, to a context-typed value.

A call of a monomorphic global function or of a closure is typed by the
callee's signature; a function literal by its result, once pinned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .expr import (
    Call,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    Tuple,
    TupleGetItem,
    Var,
)
from .functor import Mutator, on, pre_order
from .module import IRModule
from .node import Node
from .types import FuncType, IncompleteType, Type, TypeVar


def context_typed_constructor(ctor: Constructor, module: IRModule) -> bool:
    """Whether a value built by ``ctor`` does not fix its ADT's type
    arguments (``Nil``, ``None``: a parameter none of its fields mentions)."""
    return _leaves_unfixed(module, ctor, [False] * len(ctor.inputs))


def annotated(var: Var, t: Type | None = None, *, type_vars: bool = False) -> Var:
    """``var`` with its checked type (or ``t``) as annotation, when it has
    none and the type is closed: nothing unknown left in it, and no type
    variable unless ``type_vars`` (a type variable is in scope only in the
    global function that declares it: code moved into another function
    must not name it)."""
    if var.type_annotation is not None:
        return var
    if t is None:
        if not var.has_type:
            return var
        t = var.checked_type
    if not _closed(t, type_vars):
        return var
    pinned = Var(var.name_hint, t, span=var.span)
    pinned.set_checked_type(t)
    return pinned


def pin_context_types(fn: Function, module: IRModule, fn_type: Type | None = None) -> Function:
    """[RULE PIN-CONTEXT] ``fn`` with its context-typed bindings and result
    annotated with their checked types (``fn_type``: the function's type
    before the pass, when ``fn`` itself was rebuilt without one); ``fn``
    itself when there is nothing to pin."""
    return _Pins(module, fn, fn_type).mutate_as(fn, Function)


def pin_changed_functions(
    module: IRModule,
    functions: dict[str, Function],
    typecheck: Callable[[IRModule], object] | None = None,
) -> dict[str, Function]:
    """[RULE PIN-CONTEXT] ``functions`` (a pass's output for the global
    functions of ``module``, its input) with each one that changed pinned;
    the unchanged ones as they are. ``typecheck(module)`` gives the input
    its checked types when it may not have them (a pass that did not need
    them), and is called only when something may be context-typed."""
    if all(functions[n] is fn for n, fn in module.functions.items()):
        return functions
    if not _may_be_context_typed(module):
        return functions
    if typecheck is not None:
        typecheck(module)
    pinned = {}
    for name, fn in functions.items():
        before = module.functions.get(name)
        if fn is not before:
            t = before.checked_type if before is not None and before.has_type else None
            fn = pin_context_types(fn, module, t)
        pinned[name] = fn
    return pinned


def _may_be_context_typed(module: IRModule) -> bool:
    """Whether any value of ``module`` may be context-typed: only a
    constructor or a polymorphic function can leave a type argument
    unfixed (a module without either, most of them, is not walked)."""
    return any(fn.type_params for fn in module.functions.values()) or any(
        context_typed_constructor(c, module)
        for data in module.type_defs.values()
        for c in data.constructors
    )


def _closed(t: Type, type_vars: bool) -> bool:
    unwanted = IncompleteType if type_vars else (TypeVar, IncompleteType)
    return not any(isinstance(n, unwanted) for n in pre_order(t))


def _type_var_names(types: list[Type]) -> set[str]:
    return {n.name for t in types for n in pre_order(t) if isinstance(n, TypeVar)}


def _leaves_unfixed(module: IRModule, callee: Expr, open_args: list[bool]) -> bool:
    """Whether a call of ``callee`` (a constructor or a polymorphic global
    function) leaves one of its type parameters unfixed, when the
    arguments flagged in ``open_args`` are context-typed."""
    if isinstance(callee, Constructor):
        data = module.type_defs.get(callee.adt)
        if data is None or not data.type_params:
            return False
        params, inputs = data.type_params, list(callee.inputs)
    elif isinstance(callee, GlobalVar):
        found = module.functions.get(callee.name)
        if found is None or not found.type_params:
            return False
        params = found.type_params
        inputs = [p.type_annotation for p in found.params if p.type_annotation is not None]
        if len(inputs) != len(found.params):  # an unannotated parameter: not followed
            return True
    else:
        return False
    fixed = _type_var_names(
        [t for t, is_open in zip(inputs, open_args, strict=False) if not is_open]
    )
    return any(p.name not in fixed for p in params)


class _Pins(Mutator):
    """The walk: context-typed flags bottom-up (by the original node's
    identity), let variables pinned as they are bound, their uses renamed."""

    def __init__(self, module: IRModule, root: Function, root_type: Type | None) -> None:
        super().__init__()
        self.module = module
        self.root = root
        self.root_type = root_type
        self.open: set[Var] = set()  # unannotated, unpinned, bound to a context-typed value
        self.pinned: dict[Var, Var] = {}
        self.results: dict[Var, Type] = {}  # let-bound function literals: their result types
        self.context: set[int] = set()  # original compound nodes that are context-typed

    def child(self, node: Node) -> Node:
        if type(node) is Var:
            return self.pinned.get(node, node)  # type: ignore[call-overload]
        return self.memo.get(id(node), node)

    def typed_by_context(self, node: Expr) -> bool:
        if type(node) is Var:
            return node in self.open
        return id(node) in self.context

    def _flag(self, old: Expr, context_typed: bool) -> None:
        if context_typed:
            self.context.add(id(old))

    # ------------------------------------------------------------ bindings
    def bind(self, let: Let) -> None:
        var = let.var
        if var.type_annotation is not None or not self.typed_by_context(let.value):
            return
        if isinstance(let.value, Function):
            # A function literal is pinned by its result (its let may be
            # recursive: uses inside the value would keep the old variable).
            t = var.checked_type if var.has_type else None
            if isinstance(t, FuncType) and _closed(t.ret_type, type_vars=True):
                self.results[var] = t.ret_type
            else:
                self.open.add(var)
            return
        pinned = annotated(var, type_vars=True)
        if pinned is var:
            self.open.add(var)
        else:
            self.pinned[var] = pinned

    @on(Let)
    def _let(self, new: Let, old: Let) -> Expr:
        self._flag(old, self.typed_by_context(old.body))
        pinned = self.pinned.get(old.var)
        if pinned is not None:
            return dataclasses.replace(new, var=pinned)
        result = self.results.get(old.var)
        if result is not None and isinstance(new.value, Function):
            return dataclasses.replace(new, value=dataclasses.replace(new.value, ret_type=result))
        return new

    # -------------------------------------------------------------- values
    @on(Call)
    def _call(self, new: Call, old: Call) -> Expr:
        open_args = [self.typed_by_context(a) for a in old.args]
        callee = old.callee
        if isinstance(callee, Op):
            self._flag(old, any(open_args))
        else:
            self._flag(old, _leaves_unfixed(self.module, callee, open_args))
        return new

    @on(Tuple)
    def _tuple(self, new: Tuple, old: Tuple) -> Expr:
        self._flag(old, any(self.typed_by_context(f) for f in old.fields))
        return new

    @on(TupleGetItem)
    def _project(self, new: TupleGetItem, old: TupleGetItem) -> Expr:
        self._flag(old, self.typed_by_context(old.tuple_value))
        return new

    @on(RefCreate)
    def _ref(self, new: RefCreate, old: RefCreate) -> Expr:
        self._flag(old, self.typed_by_context(old.value))
        return new

    @on(If)
    def _if(self, new: If, old: If) -> Expr:
        branches = (old.then_branch, old.else_branch)
        self._flag(old, all(self.typed_by_context(b) for b in branches))
        return new

    @on(Match)
    def _match(self, new: Match, old: Match) -> Expr:
        self._flag(old, all(self.typed_by_context(c.body) for c in old.clauses))
        return new

    @on(Function)
    def _function(self, new: Function, old: Function) -> Expr:
        if new.ret_type is not None or not self.typed_by_context(old.body):
            return new
        t = old.checked_type if old.has_type else None
        if t is None and old is self.root:
            t = self.root_type
        if isinstance(t, FuncType) and _closed(t.ret_type, type_vars=True):
            return dataclasses.replace(new, ret_type=t.ret_type)
        self._flag(old, True)
        return new


__all__ = [
    "annotated",
    "context_typed_constructor",
    "pin_changed_functions",
    "pin_context_types",
]
