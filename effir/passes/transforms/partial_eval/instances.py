"""Instances of polymorphic functions: what inlining a function with type
parameters copies into the caller.

The body of ``def @flip[A, B, C]`` speaks of A, B and C: its closure's
parameters are annotated with them. Copied as it is into another function,
where A, B and C are bound by nothing, the residual program is ill formed.
So the copy is the *instance* used at the call site: each type parameter
replaced by the type it stands for there, in the scope of the function
being evaluated. The types come from what inference recorded at the call
site (the callee's, the arguments' and the result's types), matched against
the callee's signature. A type parameter that no hint determines (or that
only a type foreign to the scope would fill) is unknown; a function whose
body mentions an unknown type parameter is not inlined (the call stays,
which is always right).

A global function's symbolic dimensions are its own in the same way
(docs/semantics.md, [RULE TYPE-CALLDIMS]): ``@rows(%x: Tensor[(n, 3),
float32])``'s ``Nil`` has type ``List[Tensor[(n, 3), float32]]``, and that
type copied into a caller names an ``n`` that is not the caller's. So the
instance also replaces them by what the call binds them to
[RULE DIMS-BIND] (``effir.ir.dims.bind_dims``), in the same annotations and
inferred types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from effir.ir.analysis import bound_vars
from effir.ir.dims import substitute_dims
from effir.ir.expr import (
    Call,
    Expr,
    Function,
    If,
    Let,
    Match,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from effir.ir.functor import Mutator, on, pre_order
from effir.ir.node import Node
from effir.ir.types import (
    Dim,
    FuncType,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from effir.passes.analyses.type_solver import map_type
from effir.passes.transforms.anf import fresh_binders


def signature(fn: Function) -> FuncType:
    """``fn``'s type in terms of its own type parameters."""
    if fn.has_type and isinstance(fn.checked_type, FuncType):
        return fn.checked_type
    params = tuple(p.type_annotation or IncompleteType() for p in fn.params)
    return FuncType(params, fn.ret_type or IncompleteType(), fn.type_params)


def call_hints(fn: Function, callee: Expr, args: Iterable[Expr], result: Var | None):
    """Pairs (a part of ``fn``'s signature, the type inference gave it at
    this call site), from whatever of the call has a recorded type."""
    sig = signature(fn)
    if callee.has_type:  # a variable holding the function
        yield sig, callee.checked_type
    for param, arg in zip(sig.arg_types, args, strict=False):
        if arg.has_type:
            yield param, arg.checked_type
    if result is not None and result.has_type:
        yield sig.ret_type, result.checked_type


def instantiation(
    fn: Function,
    hints: Iterable[tuple[Type, Type]],
    scope: Mapping[str, TypeVar],
    mentioned: frozenset[str],
) -> dict[str, Type] | None:
    """What each of ``fn``'s type parameters stands for at a call site, in
    terms of ``scope`` (the type parameters of the function being
    evaluated); None when a parameter its body ``mentioned`` stays unknown."""
    params = {tv.name for tv in fn.type_params}
    found: dict[str, Type] = {}
    work = list(hints)
    while work:
        pattern, actual = work.pop()
        if isinstance(pattern, TypeVar):
            if pattern.name in params and pattern.name not in found:
                closed = in_scope(actual, scope)
                if closed is not None:
                    found[pattern.name] = closed
        elif isinstance(pattern, TupleType) and isinstance(actual, TupleType):
            if len(pattern.fields) == len(actual.fields):
                work.extend(zip(pattern.fields, actual.fields, strict=True))
        elif isinstance(pattern, FuncType) and isinstance(actual, FuncType):
            if len(pattern.arg_types) == len(actual.arg_types):
                work.extend(zip(pattern.arg_types, actual.arg_types, strict=True))
                work.append((pattern.ret_type, actual.ret_type))
        elif isinstance(pattern, TypeCall) and isinstance(actual, TypeCall):
            if pattern.func.name == actual.func.name and len(pattern.args) == len(actual.args):
                work.extend(zip(pattern.args, actual.args, strict=True))
        elif isinstance(pattern, RefType) and isinstance(actual, RefType):
            work.append((pattern.value, actual.value))
    if not (mentioned & params) <= found.keys():
        return None
    # The parameters nothing determined (and the body does not annotate
    # with) are unknown in the copy's inferred types.
    return {name: found.get(name, IncompleteType()) for name in params}


def in_scope(t: Type, scope: Mapping[str, TypeVar]) -> Type | None:
    """``t`` with its type variables as the scope's binders (inference
    re-creates type variables by name), or None when it has an unknown part
    or a type variable the scope does not bind."""
    for node in pre_order(t):
        if isinstance(node, IncompleteType):
            return None
        if isinstance(node, TypeVar) and node.name not in scope:
            return None
    return map_type(t, lambda n: scope[n.name] if isinstance(n, TypeVar) else None)


def mentioned_type_vars(fn: Function) -> frozenset[str]:
    """The names of the type variables ``fn``'s body mentions (annotations
    of its bindings, its closures' parameters and results)."""
    return frozenset(n.name for n in pre_order(fn.body) if isinstance(n, TypeVar))


def instance(
    fn: Function, types: Mapping[str, Type], dims: Mapping[str, Dim] | None = None
) -> Function:
    """A copy of ``fn`` with fresh binders, its type parameters replaced by
    ``types`` and its symbolic dimensions by ``dims`` (a global function's
    own, bound at the call: ``bind_dims``; None for a local function, whose
    dimensions are its caller's) in its annotations and inferred types."""
    copy = fresh_binders(fn)
    assert isinstance(copy, Function)
    if not types and not dims:
        return copy
    # The parameters too: a call in the copy learns its callee's sizes
    # from its arguments' types.
    renamed = _Instance(types, dims or {}, bound_vars(copy)).mutate(copy)
    assert isinstance(renamed, Function)
    return renamed


class _Instance(Mutator):
    """Type variables and dimensions replaced in annotations; the variables
    the copy binds (its own, fresh) and its compound expressions (the
    copy's own too) get their inferred types replaced as well."""

    binders = True
    types = True

    def __init__(self, types: Mapping[str, Type], dims: Mapping[str, Dim], own: set[Var]) -> None:
        super().__init__()
        self.by_name = dict(types)
        self.dims = dims
        self.own = own

    def retype(self, t: Type) -> Type:
        by_name, dims = self.by_name, self.dims

        def leaf(node: Type) -> Type | None:
            if isinstance(node, TypeVar):
                return by_name.get(node.name)
            if isinstance(node, TensorType) and dims:
                return substitute_dims(node, dims)
            return None

        return map_type(t, leaf)

    @on(TypeVar)
    def _type_var(self, new: Node, old: Node) -> Node:
        assert isinstance(old, TypeVar)
        return self.by_name.get(old.name, new)

    @on(TensorType)
    def _tensor(self, new: Node, old: Node) -> Node:
        assert isinstance(new, TensorType)
        return substitute_dims(new, self.dims)

    @on(Var)
    def _var(self, new: Node, old: Node) -> Node:
        assert isinstance(old, Var) and isinstance(new, Var)
        if old not in self.own:  # a captured variable
            return old
        if old.has_type:
            new.set_checked_type(self.retype(old.checked_type))
        return new

    @on(Call, Tuple, TupleGetItem, If, Match, Function, Let, RefCreate, RefRead, RefWrite)
    def _compound(self, new: Node, old: Node) -> Node:
        assert isinstance(old, Expr) and isinstance(new, Expr)
        if old.has_type:
            new.set_checked_type(self.retype(old.checked_type))
        return new
