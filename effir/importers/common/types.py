"""Types as an importer builds them: the list type of sequences, the
option type of optional values, and the join of two types, which is how values of different shapes become one
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


OPTION = "Option"
"""The ADT of optional values: the prelude's ``Option[A] { Some(A), None }``."""


def option_type(element: Type) -> TypeCall:
    """``Option[element]``."""
    return TypeCall(GlobalTypeVar(OPTION), (element,))


def option_element(t: Type) -> Type | None:
    """The type an option type holds, or None for another type."""
    if isinstance(t, TypeCall) and t.func.name == OPTION:
        return t.args[0]
    return None


def adts_in(t: Type) -> set[str]:
    """The ADTs (``List``, ``Option``) that ``t`` names, however deep: what
    the module must define for ``t`` to be a type of it."""
    found, stack = set(), [t]
    while stack:
        current = stack.pop()
        if isinstance(current, TypeCall):
            found.add(current.func.name)
            stack.extend(current.args)
        elif isinstance(current, TupleType):
            stack.extend(current.fields)
    return found


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
    oa, ob = option_element(a), option_element(b)
    if oa is not None or ob is not None:
        # a plain value joins an optional one as a present value (``Some``)
        return option_type(join(a if oa is None else oa, b if ob is None else ob))
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
    oa, ob = option_element(a), option_element(b)
    if oa is not None or ob is not None:
        return oa is not None and ob is not None and _same(oa, ob)
    return type(a) is type(b)


def _kind(t: Type) -> str:
    if isinstance(t, TensorType):
        return "tensor"
    if list_element(t) is not None:
        return "sequence"
    if option_element(t) is not None:
        return "optional"
    if isinstance(t, TupleType):
        return "tuple"
    return type(t).__name__
