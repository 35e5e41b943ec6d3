"""Tuple types as trees (effir/ir/type_tree.py): leaves, flatten, unflatten."""

from __future__ import annotations

import sys

import pytest

from effir.ir import type_tree
from effir.ir.types import KeyType, TensorType, TupleType

A = TensorType((2,), "float32")
B = TensorType((3, 4), "int32")
K = KeyType()
NESTED = TupleType((A, TupleType((K, TupleType(()), B)), A))


def test_leaves_in_order_and_empty_tuples_have_none() -> None:
    assert type_tree.leaves(NESTED) == [A, K, B, A]
    assert type_tree.leaves(A) == [A]
    assert type_tree.leaves(TupleType(())) == []


def test_flatten_and_unflatten_are_inverse() -> None:
    value = ("a", ("k", (), "b"), "c")
    assert type_tree.flatten(NESTED, value) == ["a", "k", "b", "c"]
    assert type_tree.unflatten(NESTED, ["a", "k", "b", "c"]) == value
    # A shared iterator: each call takes only its own leaves.
    it = iter([1, 2, 3, 4, 5])
    assert type_tree.unflatten(TupleType((A, A)), it) == (1, 2)
    assert type_tree.unflatten(A, it) == 3


def test_projections_and_tuples_are_made_in_a_recursive_walks_order() -> None:
    """A projection or a tuple that emits code emits it as the recursive
    walks did: a field's subtree before the next field, inner tuples first."""
    log: list[str] = []

    def project(v: str, i: int) -> str:
        log.append(f"{v}.{i}")
        return f"{v}.{i}"

    leaves = type_tree.flatten(NESTED, "v", project)
    assert leaves == ["v.0", "v.1.0", "v.1.2", "v.2"]
    assert log == ["v.0", "v.1", "v.1.0", "v.1.1", "v.1.2", "v.2"]
    made: list[tuple] = []

    def make(fields: list) -> tuple:
        made.append(tuple(fields))
        return tuple(fields)

    type_tree.unflatten(NESTED, leaves, make=make)
    assert made == [(), ("v.1.0", (), "v.1.2"), ("v.0", ("v.1.0", (), "v.1.2"), "v.2")]


def test_a_value_that_does_not_nest_as_its_type_is_reported_with_its_path() -> None:
    def mismatch(path: tuple[int, ...], ty: TupleType, v: object) -> Exception:
        return ValueError(f"{path} {len(ty.fields)} {v!r}")

    with pytest.raises(ValueError, match=r"\(1,\) 3 \('k', \(\)\)"):
        type_tree.flatten(NESTED, ("a", ("k", ()), "c"), mismatch=mismatch)
    with pytest.raises(ValueError, match=r"\(\) 3 'x'"):
        type_tree.flatten(NESTED, "x", mismatch=mismatch)


def test_map_leaves_and_tuple_leaves() -> None:
    mapped = type_tree.map_leaves(NESTED, lambda t: K if t == A else t)
    assert type_tree.leaves(mapped) == [K, K, B, K]
    assert type_tree.tuple_leaves((1, (2, (), (3,)), 4)) == [1, 2, 3, 4]


def test_deep_nesting_needs_no_recursion() -> None:
    depth = sys.getrecursionlimit() * 2
    t: TupleType | TensorType = A
    value: object = "x"
    for _ in range(depth):
        t = TupleType((t,))
        value = (value,)
    assert type_tree.leaves(t) == [A]
    assert type_tree.flatten(t, value) == ["x"]
    rebuilt = type_tree.unflatten(t, ["x"])
    assert type_tree.tuple_leaves(rebuilt) == ["x"]  # (== on the tuples would recurse)
    for _ in range(depth):
        assert isinstance(rebuilt, tuple) and len(rebuilt) == 1
        rebuilt = rebuilt[0]
    assert rebuilt == "x"
