"""The hints of the Python API (effir.trace, the builder, effir.match and
@effir.adt, operators on values being built, numpy on them), applied: each
test makes the error as a user would, checks the message and the hint, then
writes what the hint says and runs it (interpreted, against numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from tests.frontend.helpers import define

F32 = "float32"
V = effir.Tensor[(2, 3), F32]
X = np.array([[-2.0, 0.25, 3.0], [0.5, -0.75, 1.5]], F32)
N = np.arange(6, dtype=np.int32).reshape(2, 3)
FRONTEND = "effir/frontend/{}.py: {}"


def _error(make, *args, **kwargs) -> effir.FrontendError:
    with pytest.raises(effir.FrontendError) as err:
        make(*args, **kwargs)
    return err.value


def _traced(fn, *types) -> np.ndarray:
    """``fn`` traced and interpreted on X (and N for an int32 parameter)."""
    traced = effir.trace(fn, *types)
    values = [N if t is not V else X for t in types]
    got = traced.interpret(*values)
    np.testing.assert_array_equal(np.asarray(traced(*values)), np.asarray(got))
    return np.asarray(got)


INT = effir.Tensor[(2, 3), "int32"]


@effir.adt
class Tree:
    class Leaf:
        value: effir.Tensor[(2, 3), F32]

    class Node:
        left: Tree
        right: Tree


def test_type_arguments_hint() -> None:
    err = _error(lambda: effir.List[V, V])
    assert err.message == "the type List takes 1 type argument(s), got 2"
    assert err.hint == "write List[A]"
    first = effir.trace(
        lambda xs: effir.match(xs, {effir.Cons: lambda h, t: h * 2.0}, default=lambda: xs),
        effir.List[V],
    )
    assert first.module is not None


def test_no_constructor_hint() -> None:
    err = _error(define, "@effir.adt\nclass Empty:\n    pass\n")
    assert err.message == "the type Empty declares no constructor"
    assert err.hint.startswith("declare each constructor as a nested class with its fields: ")
    written = err.hint.split(": ", 1)[1]  # class Leaf: value: effir.Tensor[(4,), 'float32']
    head, field = written.split(": ", 1)
    fixed = define(f"@effir.adt\nclass Full:\n    {head}:\n        {field}\n")["Full"]
    v = np.arange(4, dtype=F32)
    got = effir.trace(
        lambda t: effir.match(fixed.Leaf(t), {fixed.Leaf: lambda value: value + 1.0}),
        effir.Tensor[(4,), F32],
    ).interpret(v)
    np.testing.assert_array_equal(got, v + 1)


def test_reserved_field_hint() -> None:
    source = "@effir.adt\nclass Box:\n    class Full:\n        fields: effir.Tensor[(2, 3), F32]\n"
    err = _error(define, source)
    assert "a field may not be named fields" in err.message
    assert err.hint == "rename the field"
    box = define(source.replace("fields:", "content:"))["Box"]
    got = _traced(lambda x: effir.match(box.Full(x), {box.Full: lambda content: content}), V)
    np.testing.assert_array_equal(got, X)


def test_match_takes_a_dict_hint() -> None:
    err = _error(effir.trace, lambda x: effir.match(Tree.Leaf(x), [lambda v: v]), V)
    assert err.message == "effir.match takes the value and a dict from constructors to functions"
    assert err.hint == (
        "effir.match(t, {Tree.Leaf: lambda value: ..., Tree.Node: lambda l, r: ...})"
    )
    got = _traced(
        lambda x: effir.match(
            Tree.Leaf(x), {Tree.Leaf: lambda value: value * 2.0, Tree.Node: lambda l, r: x}
        ),
        V,
    )
    np.testing.assert_array_equal(got, X * 2)


def test_match_keys_hint() -> None:
    err = _error(effir.trace, lambda x: effir.match(Tree.Leaf(x), {"Leaf": lambda v: v}), V)
    assert err.message == "effir.match: 'Leaf' is not an effir constructor"
    assert err.hint == "key the cases by constructor classes: Tree.Leaf, effir.List.Cons"
    got = _traced(
        lambda x: effir.match(Tree.Leaf(x), {Tree.Leaf: lambda v: v}, default=lambda: x), V
    )
    np.testing.assert_array_equal(got, X)


def test_match_missing_case_hint() -> None:
    err = _error(effir.trace, lambda x: effir.match(Tree.Leaf(x), {Tree.Leaf: lambda v: v}), V)
    assert err.message == "effir.match is not exhaustive: no case for Tree.Node"
    assert err.hint == "add Tree.Node: lambda left, right: ..., or default=lambda: ..."
    got = _traced(
        lambda x: effir.match(
            Tree.Leaf(x), {Tree.Leaf: lambda v: v + 1.0, Tree.Node: lambda left, right: x}
        ),
        V,
    )
    np.testing.assert_array_equal(got, X + 1)


def test_emit_outside_a_function_hint() -> None:
    x = effir.var("x", V)
    err = _error(effir.emit, x * 2.0)
    assert err.message == "emit outside a function being built"
    assert err.hint == "call it inside `with builder.function(...)`, effir.trace or @effir.script"
    got = effir.trace(lambda x: effir.emit(x * 2.0), V).interpret(X)
    np.testing.assert_array_equal(got, X * 2)


def test_operator_arity_hint() -> None:
    err = _error(effir.trace, lambda x: effir.op.add(x), V)
    assert err.hint == "add(x0, x1, attr=...)"
    got = _traced(lambda x: effir.op.add(x, x), V)
    np.testing.assert_array_equal(got, X + X)


def test_pad_outputs_hint() -> None:
    def body(s):
        return s * 2.0, s + 1.0

    def cond(s):
        return effir.op.sum(s) < 10.0

    err = _error(effir.trace, lambda x: effir.while_loop(cond, body, x, pad_outputs=True), V)
    assert "pad_outputs=True pads the stacked outputs" in err.message
    assert err.hint == (
        "effir.while_loop(cond, body, init, max_iterations=n, outputs=True, pad_outputs=True)"
    )
    got = effir.trace(
        lambda x: effir.while_loop(cond, body, x, max_iterations=4, outputs=True, pad_outputs=True),
        V,
    ).interpret(X)
    outs, final, count = got
    assert int(count) == 2  # sum(x) is 2.5; each step adds 6
    np.testing.assert_array_equal(final, X + 2)
    np.testing.assert_array_equal(outs[:2], [X * 2, (X + 1) * 2])
    np.testing.assert_array_equal(outs[2:], np.zeros((2, 2, 3), F32))


HINTS_APPLIED = {
    FRONTEND.format("adts", "write {}[{}]"): test_type_arguments_hint,
    FRONTEND.format(
        "adts",
        "declare each constructor as a nested class with its fields: "
        "class Leaf: value: effir.Tensor[(4,), 'float32']",
    ): test_no_constructor_hint,
    FRONTEND.format("adts", "rename the field"): test_reserved_field_hint,
    FRONTEND.format(
        "adts", "effir.match(t, {Tree.Leaf: lambda value: ..., Tree.Node: lambda l, r: ...})"
    ): test_match_takes_a_dict_hint,
    FRONTEND.format(
        "adts", "key the cases by constructor classes: Tree.Leaf, effir.List.Cons"
    ): test_match_keys_hint,
    FRONTEND.format(
        "adts", "add {}.{}: lambda {}: ..., or default=lambda: ..."
    ): test_match_missing_case_hint,
    FRONTEND.format(
        "builder", "call it inside `with builder.function(...)`, effir.trace or @effir.script"
    ): test_emit_outside_a_function_hint,
    FRONTEND.format("builder", "{}({}, attr=...)"): test_operator_arity_hint,
    FRONTEND.format(
        "builder",
        "effir.while_loop(cond, body, init, max_iterations=n, outputs=True, pad_outputs=True)",
    ): test_pad_outputs_hint,
}
