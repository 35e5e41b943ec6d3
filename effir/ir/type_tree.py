"""Tuple types as trees: the leaves of a (nested) tuple type, a value taken
apart along one, and a value built again from its leaves.

A value of type ``(Tensor, (Key, Tensor))`` is a tree whose leaves are the
values of the non-tuple types, in order. Every backend needs the same three
walks over it (a kernel takes its leaves as separate buffers, a loop
carries them, a result is rebuilt from the buffers a kernel wrote), so they
live here once. Each works for any representation of a tuple value: a
Python tuple, a Relax variable projected field by field, a TE tensor.
All are iterative (a type may nest deeply) and visit leaves left to right.
``corresponding`` walks two types of the same shape side by side (what a
call gives a function's type parameters or symbolic dimensions).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .types import FuncType, TupleType, Type, TypeCall

__all__ = ["corresponding", "flatten", "leaves", "map_leaves", "tuple_leaves", "unflatten"]


def leaves(t: Type) -> list[Type]:
    """The types of ``t``'s leaves (every field that is not a tuple), in order."""
    out: list[Type] = []
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TupleType):
            stack.extend(reversed(node.fields))
        else:
            out.append(node)
    return out


def flatten(
    t: Type,
    value: Any,
    project: Callable[[Any, int], Any] = operator.getitem,
    mismatch: Callable[[tuple[int, ...], TupleType, Any], Exception] | None = None,
) -> list[Any]:
    """The leaves of ``value``, a value of type ``t``, in order.

    ``project(v, i)`` gives field ``i`` of a tuple value (``v[i]`` by
    default); it is called once per field, in order, each field's subtree
    taken apart before the next field is projected (so a projection that
    emits code emits it in the order a recursive walk would). With
    ``mismatch``, a tuple value is first checked to be a Python tuple of as
    many fields as its type; where it is not, ``mismatch(path, type,
    value)`` is raised (``path``: the field indices from the root)."""
    out: list[Any] = []
    # (type, value or parent, field index to project from the parent, path)
    stack: list[tuple[Type, Any, int | None, tuple[int, ...]]] = [(t, value, None, ())]
    while stack:
        ty, v, index, path = stack.pop()
        if index is not None:
            v = project(v, index)
        if not isinstance(ty, TupleType):
            out.append(v)
            continue
        if mismatch is not None and (not isinstance(v, tuple) or len(v) != len(ty.fields)):
            raise mismatch(path, ty, v)
        for i in range(len(ty.fields) - 1, -1, -1):
            stack.append((ty.fields[i], v, i, (*path, i)))
    return out


def unflatten(
    t: Type,
    values: Iterable[Any],
    leaf: Callable[[Type, Any], Any] | None = None,
    make: Callable[[list[Any]], Any] = tuple,
) -> Any:
    """The value of type ``t`` whose leaves are the next of ``values``.

    ``leaf(type, value)`` turns each into the leaf's value (the value
    itself by default); ``make(fields)`` builds a tuple value from its
    fields' values (a Python tuple by default), called for inner tuples
    before the tuples holding them, as a recursive walk would."""
    items: Iterator[Any] = iter(values)
    results: list[Any] = []
    work: list[tuple[Type, bool]] = [(t, False)]
    while work:
        ty, ready = work.pop()
        if not isinstance(ty, TupleType):
            value = next(items)
            results.append(value if leaf is None else leaf(ty, value))
        elif ready:
            start = len(results) - len(ty.fields)
            fields = results[start:]
            del results[start:]
            results.append(make(fields))
        else:
            work.append((ty, True))
            work.extend((f, False) for f in reversed(ty.fields))
    return results[0]


def map_leaves(t: Type, f: Callable[[Type], Type]) -> Type:
    """``t`` with every leaf type ``leaf`` replaced by ``f(leaf)``."""
    return unflatten(t, leaves(t), lambda ty, _: f(ty), lambda fields: TupleType(tuple(fields)))


def tuple_leaves(value: Any) -> list[Any]:
    """The leaves of a value nested in Python tuples, in order (for values
    whose type is not at hand, such as a TE rule's result)."""
    out: list[Any] = []
    stack = [value]
    while stack:
        top = stack.pop()
        if isinstance(top, tuple):
            stack.extend(reversed(top))
        else:
            out.append(top)
    return out


def corresponding(pairs: Iterable[tuple[Type, Type]]) -> Iterator[tuple[Type, Type]]:
    """The parts of each ``(pattern, concrete)`` pair that stand in the same
    place: tuples, type calls and function types present in both are
    walked into, field by field; every other pair is yielded (a tensor type
    against what the other has there, a type variable against its
    instance). Iterative; the last pair given is walked first. What a
    polymorphic function's or a symbolic shape's call gives its parameters
    is read from these pairs."""
    stack = list(pairs)
    while stack:
        pattern, concrete = stack.pop()
        if isinstance(pattern, TupleType) and isinstance(concrete, TupleType):
            stack.extend(zip(pattern.fields, concrete.fields, strict=False))
        elif isinstance(pattern, TypeCall) and isinstance(concrete, TypeCall):
            stack.extend(zip(pattern.args, concrete.args, strict=False))
        elif isinstance(pattern, FuncType) and isinstance(concrete, FuncType):
            stack.extend(zip(pattern.arg_types, concrete.arg_types, strict=False))
            stack.append((pattern.ret_type, concrete.ret_type))
        else:
            yield pattern, concrete
