"""Polymorphic global functions are differentiated per instantiation.

A cotangent's type depends on the value's type (``ct_type``): a value of a
type parameter ``A`` has none that fits every ``A`` (a float tensor's is
the tensor, an integer's ``()``, a ``List[...]``'s a generated cotangent
ADT). So ``@nth[A]`` called with a ``List[Tensor[(3), float64]]`` is
differentiated as a monomorphic copy, its type parameters replaced by the
call's types (``@nth_vjp`` for that instantiation; another instantiation
gets another copy). The copy's recursive calls are instantiated the same
way and so reach the same ``vjp`` global.
"""

from __future__ import annotations

from collections.abc import Sequence

from effir.passes.analyses.anf_sharing import fresh_binders

from ..ir import type_tree
from ..ir.expr import Expr, Function
from ..ir.functor import Mutator, on
from ..ir.node import Node
from ..ir.types import FuncType, TupleType, Type, TypeCall, TypeVar
from .adt import TypeKey, type_key


def instantiation(fn: Function, args: Sequence[Expr], result: Type) -> dict[str, Type] | None:
    """The types the call ``fn(args)`` (of type ``result``) gives ``fn``'s
    type parameters, by name; None when ``fn`` is not polymorphic or the
    call leaves one open (a type parameter of the caller)."""
    if not fn.type_params:
        return None
    mapping: dict[str, Type] = {}
    pairs = [(p.checked_type, a.checked_type) for p, a in zip(fn.params, args, strict=True)]
    pairs.append((fn.body.checked_type, result))
    names = {tv.name for tv in fn.type_params}
    for pattern, concrete in type_tree.corresponding(pairs):
        if isinstance(pattern, TypeVar) and pattern.name in names:
            mapping.setdefault(pattern.name, concrete)
    if set(mapping) != names or any(_open(t) for t in mapping.values()):
        return None
    return mapping


def instance_key(fn: Function, mapping: dict[str, Type]) -> TypeKey:
    return tuple(type_key(mapping[tv.name]) for tv in fn.type_params)


def _open(t: Type) -> bool:
    stack = [t]
    while stack:
        ty = stack.pop()
        if isinstance(ty, TypeVar):
            return True
        if isinstance(ty, TupleType):
            stack.extend(ty.fields)
        elif isinstance(ty, TypeCall):
            stack.extend(ty.args)
        elif isinstance(ty, FuncType):
            stack.extend(ty.arg_types)
            stack.append(ty.ret_type)
    return False


class _Substitute(Mutator):
    """Type parameters replaced (by name) in every type annotation."""

    types = True
    binders = True

    def __init__(self, mapping: dict[str, Type]) -> None:
        super().__init__()
        self.mapping = mapping

    @on(TypeVar)
    def _type_var(self, new: Node, old: Node) -> Node:
        assert isinstance(old, TypeVar)
        return self.mapping.get(old.name, new)


def instantiate(fn: Function, mapping: dict[str, Type]) -> Function:
    """A monomorphic copy of ``fn`` (new binders; to be type-checked)."""
    body = _Substitute(mapping).mutate(fresh_binders(fn))
    assert isinstance(body, Function)
    return Function(body.params, body.body, body.ret_type, (), body.attrs, span=fn.span)
