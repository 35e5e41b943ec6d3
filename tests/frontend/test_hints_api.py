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


def _eager_and_traced(fn, *types, args=None) -> np.ndarray:
    """``fn`` traced and interpreted, checked to agree with its eager run."""
    traced = effir.trace(fn, *types)
    args = args if args is not None else [N if t is not V else X for t in types]
    got = traced.interpret(*args)
    np.testing.assert_allclose(np.asarray(traced(*args)), np.asarray(got), rtol=1e-6)
    return np.asarray(got)


def test_numpy_call_form_hint() -> None:
    err = _error(effir.trace, lambda x: np.sum(x, 0), V)
    assert err.message == "np.sum is converted only as np.sum(x, axis=..., keepdims=...)"
    assert (
        err.hint
        == "write np.sum(x, axis=..., keepdims=...), or effir.op.sum with keyword attributes"
    )
    np.testing.assert_allclose(_eager_and_traced(lambda x: np.sum(x, axis=0), V), X.sum(0))
    got = _eager_and_traced(lambda x: effir.op.sum(x, axis=[0], keepdims=True), V)
    np.testing.assert_allclose(got, X.sum(0, keepdims=True))


def test_numpy_function_without_operator_hint() -> None:
    err = _error(effir.trace, lambda x: np.ptp(x, axis=0), V)
    assert err.message == "np.ptp is not supported on effir values"
    assert err.hint == "write it with the effir.op functions (help(effir.op) lists them)"
    assert {"max", "min"} <= set(dir(effir.op))
    got = _eager_and_traced(lambda x: effir.op.max(x, axis=0) - effir.op.min(x, axis=0), V)
    np.testing.assert_allclose(got, np.ptp(X, axis=0))


def test_slice_step_hint() -> None:
    err = _error(effir.trace, lambda x: x[::2], V)
    assert err.message == "a slice with a step"
    assert err.hint == "x[a:b]"
    np.testing.assert_array_equal(_eager_and_traced(lambda x: x[0:1], V), X[::2])


def test_float_of_a_value_hint() -> None:
    err = _error(effir.trace, lambda x: x * float(np.sum(x)), V)
    assert err.message == "float() of an effir value: its value is known only when the program runs"
    assert err.hint == "keep it an effir value (effir.op.cast for dtypes)"
    got = _eager_and_traced(lambda x: x * np.sum(x), V)
    np.testing.assert_allclose(got, X * X.sum(), rtol=1e-6)
    got = _eager_and_traced(lambda n: effir.op.cast(np.sum(n), dtype="float32") * 0.5, INT)
    np.testing.assert_allclose(got, np.float32(N.sum()) * 0.5)


def test_ufunc_method_hint() -> None:
    err = _error(effir.trace, lambda x: np.add.reduce(x), V)
    assert err.message == "np.add.reduce is not supported on effir values"
    assert err.hint == "write the reduction with effir.op (effir.op.sum, effir.op.max...)"
    got = _eager_and_traced(lambda x: effir.op.sum(x, axis=0), V)
    np.testing.assert_allclose(got, np.add.reduce(X))


def test_numpy_array_of_a_value_hint() -> None:
    err = _error(effir.trace, lambda n: np.float32(n) * 0.5, INT)
    assert err.message == (
        "a numpy array of an effir value: its value is known only when the program runs"
    )
    assert err.hint == (
        "keep it an effir value: numpy functions on it become effir.op calls; for a cast write "
        'effir.op.cast(x, dtype="float32") (np.float32(x) is one only in @effir.script)'
    )
    got = _eager_and_traced(lambda n: effir.op.cast(n, dtype="float32") * 0.5, INT)
    np.testing.assert_array_equal(got, N.astype(F32) * 0.5)


def test_float_with_an_int_tensor_hint() -> None:
    err = _error(effir.trace, lambda n: n * 0.5, INT)
    assert err.message == (
        "multiply: a float (a Python float or a float counter) with a int32 tensor: "
        "effir does not promote tensors implicitly"
    )
    assert err.hint == (
        'cast the tensor: effir.op.cast(x, dtype="float32") (np.float32(x) in @effir.script), '
        "or write an int (int32)"
    )
    got = _eager_and_traced(lambda n: effir.op.cast(n, dtype="float32") * 0.5, INT)
    np.testing.assert_array_equal(got, N * np.float32(0.5))
    got = _eager_and_traced(lambda n: n * 2, INT)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, N * 2)


def test_number_with_a_bool_tensor_hint() -> None:
    err = _error(effir.trace, lambda x: (x > 0.0) + 1, V)
    assert err.message == "add: a number with a bool tensor"
    assert err.hint == 'cast the tensor: effir.op.cast(x, dtype="int32")'
    got = _eager_and_traced(lambda x: effir.op.cast(x > 0.0, dtype="int32") + 1, V)
    np.testing.assert_array_equal(got, (X > 0).astype(np.int32) + 1)


def test_unknown_dtype_hint() -> None:
    err = _error(lambda: effir.Tensor[(2, 3), "float"])
    assert err.message == "unknown dtype 'float'"
    assert err.hint.startswith("one of ") and "float32" in err.hint.split(", ")
    got = _eager_and_traced(lambda x: x * 2.0, effir.Tensor[(2, 3), "float32"], args=[X])
    np.testing.assert_array_equal(got, X * 2)


def test_not_a_type_hint() -> None:
    err = _error(effir.trace, lambda x: x * 2.0, np.ndarray)
    assert err.message == "<class 'numpy.ndarray'> is not an effir type"
    assert err.hint == (
        'write effir.Tensor[(n, 8), "float32"], effir.Key, effir.Ref[T], a tuple of types '
        "or an @effir.adt type"
    )
    got = _eager_and_traced(lambda x: x * 2.0, effir.Tensor[(2, 3), "float32"], args=[X])
    np.testing.assert_array_equal(got, X * 2)


def test_not_an_effir_value_hint() -> None:
    err = _error(effir.cell, "scale", {"a": 2.0})
    assert err.message == "a Python dict cannot be used as an effir value"
    assert err.hint == "use numbers, numpy arrays, tuples, keys or effir values"
    scale = effir.cell("scale", (np.float32(2.0), np.ones(3, F32)))
    got = _eager_and_traced(lambda x: x * effir.read(scale)[0] + effir.read(scale)[1], V)
    np.testing.assert_array_equal(got, X * 2 + 1)


def test_traced_function_returning_none_hint() -> None:
    def f(x):
        x * 2.0

    err = _error(effir.trace, f, V)
    assert err.message == "f returned None"
    assert err.hint == "return the result"

    def fixed(x):
        return x * 2.0

    np.testing.assert_array_equal(_eager_and_traced(fixed, V), X * 2)


def test_trace_without_types_hint() -> None:
    def f(x):
        return x + 1.0

    err = _error(effir.trace, f)
    assert err.message == "parameter x of f has no type"
    assert err.hint == 'pass the types: effir.trace(f, effir.Tensor[(n, 8), "float32"], ...)'
    got = _eager_and_traced(f, effir.Tensor[(2, 3), "float32"], args=[X])
    np.testing.assert_array_equal(got, X + 1)


def test_function_without_result_hint() -> None:
    x = effir.var("x", V)
    mb = effir.ModuleBuilder()
    with pytest.raises(effir.FrontendError) as err, mb.function("main", [x]):
        effir.emit(x * 2.0)
    assert err.value.message == "@main has no result"
    assert err.value.hint == "call builder.ret(value)"
    with mb.function("main", [x]) as builder:
        builder.ret(effir.emit(x * 2.0))
    np.testing.assert_array_equal(effir.interpret(mb.get(), X), X * 2)


UNDEFINED_FIELD = """
@effir.adt
class Crate:
    class Full:
        inner: "Missing"
"""
MISSING = """
@effir.adt
class Missing:
    class Leaf:
        value: effir.Tensor[(2, 3), "float32"]
"""


def test_field_type_not_found_hint() -> None:
    crate = define(UNDEFINED_FIELD)["Crate"]
    err = _error(effir.trace, lambda x: crate.Full(x), V)
    assert err.message == (
        "cannot evaluate the annotation 'Missing' of a field of Crate.Full "
        "(name 'Missing' is not defined)"
    )
    assert err.hint == "name a type defined at module level, or the type itself in quotes"
    ns = define(MISSING + UNDEFINED_FIELD)
    crate, missing = ns["Crate"], ns["Missing"]

    def unpack(x):
        return effir.match(
            crate.Full(missing.Leaf(x)),
            {crate.Full: lambda inner: effir.match(inner, {missing.Leaf: lambda v: v * 2.0})},
        )

    np.testing.assert_array_equal(_traced(unpack, V), X * 2)


OPT_TEXT = """#[version = "0.0.5"]
type Opt { Some(Tensor[(2, 3), float32]), Nothing }
def @main(%x: Tensor[(2, 3), float32]) -> Opt { Some(%x) }
"""


def test_value_of_a_type_declared_in_text_hint() -> None:
    value = effir.interpret(effir.parse(OPT_TEXT), X)
    err = _error(effir.cell, "last", value)
    assert err.message == (
        "a value of the constructor Some whose type was not declared in Python cannot be used here"
    )
    assert err.hint == "declare the type with @effir.adt and build the value with its classes"
    opt = define(
        "@effir.adt\nclass Opt:\n    class Some:\n        value: effir.Tensor[(2, 3), F32]\n"
        "    class Nothing:\n        pass\n"
    )["Opt"]
    last = effir.cell("last", opt.Some(X))
    got = _traced(
        lambda x: effir.match(
            effir.read(last), {opt.Some: lambda v: v + x, opt.Nothing: lambda: x}
        ),
        V,
    )
    np.testing.assert_array_equal(got, X + X)


def test_every_key_is_a_cells_value() -> None:
    """A cell may hold any key (a split or folded one too): it is the key of
    an int64 seed, so no key needs a hint."""
    for key in (effir.random.fold_in(effir.random.key(0), 7), effir.random.key(np.int64(-1))):
        got = effir.trace(_reader(effir.cell("k", key)), V).interpret(X)[0]
        np.testing.assert_array_equal(got.data, key.data)


def _reader(cell):
    return lambda x: (effir.read(cell), x)


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
    FRONTEND.format(
        "numpy_spellings", "write {}, or effir.op.{} with keyword attributes"
    ): test_numpy_call_form_hint,
    FRONTEND.format(
        "numpy_spellings", "write it with the effir.op functions (help(effir.op) lists them)"
    ): test_numpy_function_without_operator_hint,
    FRONTEND.format("operators", "x[a:b]"): test_slice_step_hint,
    FRONTEND.format(
        "operators", "keep it an effir value (effir.op.cast for dtypes)"
    ): test_float_of_a_value_hint,
    FRONTEND.format(
        "operators", "write the reduction with effir.op (effir.op.sum, effir.op.max...)"
    ): test_ufunc_method_hint,
    FRONTEND.format(
        "operators",
        "keep it an effir value: numpy functions on it become effir.op calls; for a cast write "
        'effir.op.cast(x, dtype="float32") (np.float32(x) is one only in @effir.script)',
    ): test_numpy_array_of_a_value_hint,
    FRONTEND.format(
        "promotion",
        'cast the tensor: effir.op.cast(x, dtype="float32") (np.float32(x) in @effir.script), '
        "or write an int ({})",
    ): test_float_with_an_int_tensor_hint,
    FRONTEND.format(
        "promotion", 'cast the tensor: effir.op.cast(x, dtype="int32")'
    ): test_number_with_a_bool_tensor_hint,
    FRONTEND.format("values", "one of {}"): test_unknown_dtype_hint,
    FRONTEND.format(
        "values",
        'write effir.Tensor[(n, 8), "float32"], effir.Key, effir.Ref[T], a tuple of types or '
        "an @effir.adt type",
    ): test_not_a_type_hint,
    FRONTEND.format(
        "values", "use numbers, numpy arrays, tuples, keys or effir values"
    ): test_not_an_effir_value_hint,
    FRONTEND.format("trace", "return the result"): test_traced_function_returning_none_hint,
    FRONTEND.format(
        "trace", 'pass the types: effir.trace(f, effir.Tensor[(n, 8), "float32"], ...)'
    ): test_trace_without_types_hint,
    FRONTEND.format("module_builder", "call builder.ret(value)"): test_function_without_result_hint,
    FRONTEND.format(
        "adts", "name a type defined at module level, or the type itself in quotes"
    ): test_field_type_not_found_hint,
    FRONTEND.format(
        "adts", "declare the type with @effir.adt and build the value with its classes"
    ): test_value_of_a_type_declared_in_text_hint,
}
