"""Structural equality and hashing up to alpha-renaming."""

import numpy as np
import pytest

import effir
from effir.ir import (
    Call,
    Constant,
    Function,
    Let,
    StructuralMismatch,
    TensorType,
    Tuple,
    TypeVar,
    Var,
    get_op,
    lookup_op,
    structural_diff,
)

H = '#[version = "0.0.5"]\n'


def identity(name: str) -> Function:
    x = Var(name)
    return Function((x,), x)


def test_alpha_renamed_functions_are_equal_and_hash_equal():
    assert effir.structural_equal(identity("a"), identity("b"))
    assert effir.structural_hash(identity("a")) == effir.structural_hash(identity("b"))


def test_binding_structure_matters():
    x, y = Var("x"), Var("y")
    first = Function((x, y), x)
    second = Function((x := Var("x"), y := Var("y")), y)
    assert not effir.structural_equal(first, second)
    assert "bound differently" in structural_diff(first, second)


def test_free_variables_compare_by_identity_unless_mapped():
    a, b = Var("a"), Var("a")
    assert not effir.structural_equal(a, b)
    assert effir.structural_equal(a, b, map_free_vars=True)
    assert effir.structural_equal(a, a)


def test_constants_compare_bit_for_bit():
    nan1 = Constant(np.array(np.nan, dtype="float32"))
    nan2 = Constant(np.array(np.nan, dtype="float32"))
    assert effir.structural_equal(nan1, nan2)
    zero, negative_zero = Constant(np.array(0.0, "float32")), Constant(np.array(-0.0, "float32"))
    assert not effir.structural_equal(zero, negative_zero)
    assert not effir.structural_equal(
        Constant(np.array(1, "int32")), Constant(np.array(1, "int64"))
    )
    assert not effir.structural_equal(Constant(np.zeros((2, 3))), Constant(np.zeros((3, 2))))


def test_attributes_distinguish_bool_from_int():
    x = Var("x")
    sum_def = lookup_op("sum")
    a = Call(sum_def.op, (x,), sum_def.normalize_attrs({"axis": [1]}))
    b = Call(sum_def.op, (x,), sum_def.normalize_attrs({"axis": [2]}))
    assert not effir.structural_equal(a, b)
    assert "axis" in structural_diff(a, b) or "attrs" in structural_diff(a, b)


def test_sharing_does_not_matter():
    x = Var("x")
    add = get_op("add")
    shared = Call(add, (x, x))
    dag = Function((x,), Tuple((shared, shared)))
    y = Var("x")
    tree = Function((y,), Tuple((Call(add, (y, y)), Call(add, (y, y)))))
    assert effir.structural_equal(dag, tree)
    assert effir.structural_hash(dag) == effir.structural_hash(tree)


def test_type_variables_are_alpha_renamed():
    mod1 = effir.parse(H + "def @id[A](%x: A) -> A { %x }\n")
    mod2 = effir.parse(H + "def @id[B](%y: B) -> B { %y }\n")
    assert effir.structural_equal(mod1, mod2)
    assert effir.structural_hash(mod1) == effir.structural_hash(mod2)
    mod3 = effir.parse(H + "def @id[A, B](%x: A) -> B { %x }\n")
    assert not effir.structural_equal(mod1, mod3)


def test_assert_reports_the_path_of_the_first_difference():
    mod1 = effir.parse(H + "def @main(%x) {\n  let %y = add(%x, 1f);\n  multiply(%y, %y)\n}\n")
    mod2 = effir.parse(H + "def @main(%x) {\n  let %y = add(%x, 2f);\n  multiply(%y, %y)\n}\n")
    with pytest.raises(StructuralMismatch) as info:
        effir.assert_structural_equal(mod1, mod2)
    message = str(info.value)
    assert "@main.body.value.args[1]" in message
    assert "constant 1f vs constant 2f" in message
    assert isinstance(info.value, AssertionError) and isinstance(info.value, effir.Error)


def test_module_differences_name_the_definition():
    mod1 = effir.parse(H + "def @f() { 1 }\ndef @g() { 2 }\n")
    mod2 = effir.parse(H + "def @f() { 1 }\n")
    assert structural_diff(mod1, mod2) == "@g: defined on the left only"
    assert structural_diff(mod2, mod1) == "@g: defined on the right only"


def test_module_equality_ignores_definition_order():
    mod1 = effir.parse(H + "def @f() { 1 }\ndef @g() { 2 }\n")
    mod2 = effir.parse(H + "def @g() { 2 }\ndef @f() { 1 }\n")
    assert effir.structural_equal(mod1, mod2)
    assert effir.structural_hash(mod1) == effir.structural_hash(mod2)


def test_hash_is_stable_across_processes():
    import subprocess
    import sys

    code = (
        "import effir; print(effir.structural_hash(effir.parse("
        "'#[version = \"0.0.5\"]\\ndef @main(%x: Tensor[(n, 4), float32]) { nn.softmax(%x, axis=0) }\\n')))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1


def test_let_bound_names_do_not_matter_but_values_do():
    x = Var("x")
    v1, v2 = Var("a"), Var("b")
    add = get_op("add")
    e1 = Function((x,), Let(v1, Call(add, (x, x)), v1))
    e2 = Function((x,), Let(v2, Call(add, (x, x)), v2))
    e3 = Function((x,), Let(v2, Call(get_op("multiply"), (x, x)), v2))
    assert effir.structural_equal(e1, e2)
    assert not effir.structural_equal(e1, e3)


def test_type_annotations_are_compared():
    a = Function((Var("x", TensorType((1,), "float32")),), Tuple(()))
    b = Function((Var("x", TensorType((2,), "float32")),), Tuple(()))
    assert not effir.structural_equal(a, b)
    assert TypeVar("A") is not TypeVar("A")


def test_a_shared_binding_node_equals_its_unshared_copies():
    def closure():
        y = Var("y")
        return Function((y,), Call(get_op("exp"), (y,)))

    shared = closure()
    dag = Tuple((shared, shared))
    tree = Tuple((closure(), closure()))
    assert effir.structural_equal(dag, tree) and effir.structural_equal(tree, dag)
    assert effir.structural_hash(dag) == effir.structural_hash(tree)


def test_a_shared_polymorphic_type_round_trips():
    from effir.ir import FuncType, IRModule

    a = TypeVar("A")
    poly = FuncType((a,), a, (a,))
    f, g = Var("f", poly), Var("g", poly)
    mod = IRModule({"main": Function((f, g), Tuple((f, g)))})
    again = effir.parse(effir.astext(mod))
    effir.assert_structural_equal(again, mod)
    assert effir.structural_hash(again) == effir.structural_hash(mod)


def test_duplicate_binders_in_one_list_are_never_equal_to_distinct_ones():
    x, y, z = Var("x"), Var("y"), Var("z")
    assert not effir.structural_equal(Function((x, y), x), Function((z, z), z))


def test_a_free_variable_with_an_empty_hint_hashes_by_its_empty_name():
    # The hint chose between a Var's and a TypeVar's name by truthiness, so
    # an empty hint asked a Var for the TypeVar's ``name``.
    assert effir.structural_hash(Var("")) == effir.structural_hash(Var(""))
    assert effir.structural_hash(Var("")) != effir.structural_hash(Var("a"))
    assert effir.structural_hash(Tuple((Var(""),))) == effir.structural_hash(Tuple((Var(""),)))
