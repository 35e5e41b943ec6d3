"""Types as an importer builds them: the list type of sequences, and the
join of two types, which is how values of different shapes become one
type (``if`` branches, loop states, list elements)."""

from __future__ import annotations

from ...ir.types import (
    ANY,
    GlobalTypeVar,
    IncompleteType,
    KeyType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
)

LIST = "List"
"""The ADT of sequences: the prelude's ``List[A] { Cons(A, List[A]), Nil }``."""


def list_type(element: Type) -> TypeCall:
    """``List[element]`` (``element`` an ``IncompleteType`` while unknown)."""
    return TypeCall(GlobalTypeVar(LIST), (element,))


def list_element(t: Type) -> Type | None:
    """The element type of a list type, or None for another type."""
    if isinstance(t, TypeCall) and t.func.name == LIST:
        return t.args[0]
    return None


def loose(t: TensorType) -> TensorType:
    """``t`` with every dimension ``?``: the elements of a list, whose
    shapes may differ one from the next, are typed by rank and dtype."""
    return TensorType((ANY,) * t.ndim, t.dtype)


class JoinError(Exception):
    """Two types that no type covers: different dtypes, ranks or kinds."""


def join(a: Type, b: Type) -> Type:
    """The most precise type both ``a`` and ``b`` have: dimensions that
    differ become ``?``; an unknown list element takes the other's."""
    if isinstance(a, IncompleteType):
        return b
    if isinstance(b, IncompleteType):
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype:
            raise JoinError(f"dtypes {a.dtype} and {b.dtype} differ")
        if a.ndim != b.ndim:
            raise JoinError(f"ranks {a.ndim} and {b.ndim} differ")
        return TensorType(
            tuple(x if x == y else ANY for x, y in zip(a.shape, b.shape, strict=True)), a.dtype
        )
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(join(x, y) for x, y in zip(a.fields, b.fields, strict=True)))
    ea, eb = list_element(a), list_element(b)
    if ea is not None and eb is not None:
        return list_type(join(ea, eb))
    if isinstance(a, KeyType) and isinstance(b, KeyType):
        return a
    raise JoinError(f"a {_kind(a)} and a {_kind(b)}")


def covers(general: Type, specific: Type) -> bool:
    """Whether ``general`` is already the join of the two (nothing to widen)."""
    try:
        return _same(join(general, specific), general)
    except JoinError:
        return False


def _same(a: Type, b: Type) -> bool:
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return a.shape == b.shape and a.dtype == b.dtype
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        return len(a.fields) == len(b.fields) and all(
            _same(x, y) for x, y in zip(a.fields, b.fields, strict=True)
        )
    ea, eb = list_element(a), list_element(b)
    if ea is not None and eb is not None:
        if isinstance(ea, IncompleteType) or isinstance(eb, IncompleteType):
            return isinstance(ea, IncompleteType) and isinstance(eb, IncompleteType)
        return _same(ea, eb)
    return type(a) is type(b)


def _kind(t: Type) -> str:
    if isinstance(t, TensorType):
        return "tensor"
    if list_element(t) is not None:
        return "sequence"
    if isinstance(t, TupleType):
        return "tuple"
    return type(t).__name__
