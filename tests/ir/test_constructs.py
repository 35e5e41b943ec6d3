"""One test per construct: what the parser builds and how it prints."""

import numpy as np
import pytest

import effir
from effir.ir import (
    ANY,
    Call,
    Constant,
    Constructor,
    Function,
    FuncType,
    GlobalCell,
    GlobalVar,
    If,
    KeyType,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    TypeCall,
    TypeVar,
    Var,
)

H = '#[version = "0.0.5"]\n'


def expr(text: str):
    return effir.parse_expr(text)


def roundtrips(text: str) -> str:
    """Parse an expression, print it, and check the print reads back equal."""
    e = expr(text)
    printed = effir.astext(e)
    effir.assert_structural_equal(expr(printed), e)
    return printed.rstrip("\n")


def test_constant_literals():
    assert expr("1").data.dtype == np.int32
    assert expr("1f").data.dtype == np.float32
    assert expr("1.5").data.dtype == np.float32
    assert expr("2f64").data.dtype == np.float64
    assert expr("-3i64").data[()] == -3
    assert expr("True").data.dtype == np.bool_
    assert roundtrips("-0f") == "-0f"
    assert np.signbit(expr("-0f").data)


def test_call_with_attributes_and_defaults():
    call = expr("sum(1f, axis=[0], keepdims=True)")
    assert isinstance(call, Call) and isinstance(call.callee, Op)
    assert call.attrs["axis"] == (0,) and call.attrs["keepdims"] is True
    assert call.attrs["exclude"] is False  # defaults are filled in
    assert roundtrips("sum(1f, axis=[0], keepdims=True)") == "sum(1f, axis=[0], keepdims=True)"
    assert roundtrips("sum(1f, keepdims=False)") == "sum(1f)"  # defaults are not printed


def test_tuple_forms():
    assert expr("()").fields == ()
    assert len(expr("(1,)").fields) == 1
    assert isinstance(expr("(1)"), Constant)
    assert roundtrips("(1,)") == "(1,)"
    assert roundtrips("((1, 2), 3).0.1") == "((1, 2), 3).0.1"
    item = expr("(1, 2).1")
    assert isinstance(item, TupleGetItem) and item.index == 1


def test_let_and_sequencing():
    e = expr("let %x = 1; let %y: int32 = %x; %y")
    assert isinstance(e, Let) and isinstance(e.body, Let)
    assert e.body.var.type_annotation.dtype == "int32"
    seq = expr("1; 2")
    assert isinstance(seq, Let) and seq.var.name_hint == "_"
    assert roundtrips("1; 2") == "1;\n2"


def test_let_in_value_position_prints_as_a_block():
    assert (
        roundtrips("let %a = { let %b = 1; %b }; %a") == "let %a = {\n  let %b = 1;\n  %b\n};\n%a"
    )


def test_recursive_let_binds_the_variable_in_its_value():
    e = expr("let %f = fn (%n) { %f(%n) }; %f")
    assert e.value.body.callee is e.var


def test_function_with_type_params_and_attrs():
    f = expr("fn [A](%x: A, Primitive=1) -> A { %x }")
    assert isinstance(f, Function) and isinstance(f.type_params[0], TypeVar)
    assert f.params[0].type_annotation is f.type_params[0]
    assert f.attrs["Primitive"] == 1
    assert roundtrips("fn [A](%x: A, Primitive=1) -> A { %x }") == (
        "fn [A](%x: A, Primitive=1) -> A {\n  %x\n}"
    )


def test_if():
    e = expr("if (True) { 1 } else { 2 }")
    assert isinstance(e, If)
    assert roundtrips("if (True) { 1 } else { 2 }") == "if (True) {\n  1\n} else {\n  2\n}"


def test_refs():
    e = expr("let %r = ref(1); ref_write(%r, 2); ref_read(%r)")
    assert isinstance(e.value, RefCreate)
    assert isinstance(e.body.value, RefWrite)
    assert isinstance(e.body.body, RefRead)


def test_match_patterns():
    mod = effir.parse(
        H
        + "type T { A(int32, T), B }\n"
        + "def @f(%t: T) { match? (%t, %t) { (A(%x, _), B) => %x, (%y, _) => 1 } }\n"
    )
    m = mod["f"].body
    assert isinstance(m, Match) and not m.complete
    first = m.clauses[0].pattern
    assert isinstance(first, PatternTuple)
    assert isinstance(first.patterns[0], PatternConstructor)
    assert isinstance(first.patterns[0].patterns[1], PatternWildcard)
    assert isinstance(m.clauses[1].pattern.patterns[0], PatternVar)
    assert first.patterns[0].constructor is mod.constructors["A"]


def test_constructors_and_adts():
    mod = effir.parse(H + "type List[A] { Cons(A, List[A]), Nil }\ndef @f() { Cons(1, Nil) }\n")
    data = mod.type_defs["List"]
    assert [c.name for c in data.constructors] == ["Cons", "Nil"]
    cons = data.constructors[0]
    assert isinstance(cons, Constructor) and cons.adt == "List"
    assert isinstance(cons.inputs[1], TypeCall) and cons.inputs[1].args[0] is data.type_params[0]
    call = mod["f"].body
    assert call.callee is cons
    assert call.args[1].callee is data.constructors[1] and call.args[1].args == ()


def test_global_cells_and_globals():
    mod = effir.parse(H + "global @rng: Ref[Key] = ref(random.key(0));\ndef @f() { @rng }\n")
    cell = mod.cells["rng"]
    assert isinstance(cell, GlobalCell) and isinstance(cell.type, RefType)
    assert isinstance(cell.type.value, KeyType)
    assert isinstance(cell.init, Call) and cell.init.callee.name == "random.key"
    assert isinstance(mod["f"].body, GlobalVar) and mod["f"].body.name == "rng"


def test_types():
    f = expr(
        "fn (%a: Tensor[(n, ?, 3), float16], %b: (int32, Key), %c: fn [B](B) -> {io} B, %d: uint8) { %a }"
    )
    a, b, c, d = (p.type_annotation for p in f.params)
    assert isinstance(a, TensorType) and a.shape == ("n", ANY, 3) and a.dtype == "float16"
    assert not a.is_static
    assert isinstance(b, TupleType) and isinstance(b.fields[1], KeyType)
    assert isinstance(c, FuncType) and c.effects == ("io",) and len(c.type_params) == 1
    assert isinstance(d, TensorType) and d.shape == () and d.dtype == "uint8"


def test_effect_sets_are_canonical():
    f = expr("fn (%c: fn () -> {write @b, io, read @a, io} ()) { %c }")
    assert f.params[0].type_annotation.effects == ("io", "read @a", "write @b")


def test_graph_bindings_share_one_object():
    e = expr("%0 = add(1, 2); (%0, %0)")
    assert isinstance(e, Tuple) and e.fields[0] is e.fields[1]
    assert roundtrips("%0 = add(1, 2); (%0, %0)") == "%0 = add(1, 2);\n(%0, %0)"


def test_printer_names_are_unique_and_stable():
    x1, x2 = Var("x"), Var("x")
    e = Let(x1, Constant(np.array(1, "int32")), Let(x2, x1, x2))
    assert effir.astext(e).rstrip() == "let %x = 1;\nlet %x_1 = %x;\n%x_1"
    odd = Var("3 weird-name")
    assert effir.astext(Function((odd,), odd)).startswith("fn (%v3_weird_name)")


def test_metadata_constants():
    e = Tuple(
        (
            Constant(np.arange(6, dtype="float32").reshape(2, 3)),
            Constant(np.array(np.nan, "float32")),
        )
    )
    text = effir.astext(e)
    assert "meta[relay.Constant][0]" in text and "meta[relay.Constant][1]" in text
    assert "#[metadata]" in text
    back = effir.parse_expr(text)
    effir.assert_structural_equal(back, e)


def test_parse_expr_with_a_module_context():
    mod = effir.parse(H + "type T { A }\ndef @f() { A }\n")
    e = effir.parse_expr("@f(A)", module=mod)
    assert e.args[0].callee is mod.constructors["A"]


def test_repr_is_the_text():
    assert repr(effir.parse_expr("add(1, 2)")) == "<Call: add(1, 2)>"


@pytest.mark.parametrize("text", ["%x", "@f", "Foo", "nope.op(1)"])
def test_unbound_names_in_parse_expr(text):
    with pytest.raises(effir.ParseError):
        effir.parse_expr(text)


def test_names_are_checked_when_nodes_are_built():
    from effir.ir import FuncType, IRModule, TypeData, WellFormedError

    x = Var("x")
    with pytest.raises(WellFormedError, match="not a valid name"):
        IRModule({"my-fn": Function((x,), x)})
    with pytest.raises(WellFormedError, match="reserved word"):
        IRModule(type_defs={"Key": TypeData("Key", (), ())})
    with pytest.raises(WellFormedError, match="name of an operator"):
        IRModule(type_defs={"T": TypeData("T", (), (Constructor("add", (), "T"),))})
    with pytest.raises(WellFormedError, match="bad dimension"):
        TensorType(("n+1",))
    with pytest.raises(WellFormedError, match="bad dimension"):
        TensorType((-1,))
    with pytest.raises(WellFormedError, match="unknown dtype"):
        TensorType((1,), "float128")
    with pytest.raises(WellFormedError, match="reserved word"):
        Function((x,), x, attrs=effir.ir.Attrs({"type": 1}))
    with pytest.raises(WellFormedError, match="bad effect"):
        FuncType((), TupleType(()), effects=("bogus",))
    assert FuncType((), TupleType(()), effects=("random", "io", "io")).effects == ("io", "random")


def test_integer_axis_means_a_list_of_one():
    assert expr("sum(1f, axis=0)").attrs["axis"] == (0,)


def test_a_shared_function_called_prints_without_parentheses():
    f = expr("fn (%a) { %a }")
    call = Call(f, (Constant(np.array(1, "int32")),))
    text = effir.astext(Tuple((call, f)))
    assert "%0(1)" in text and "(%0)" not in text


def test_a_bare_nullary_constructor_is_its_value_as_in_relay():
    mod = effir.parse(H + "type L { C(int32), N }\ndef @f() { (N, N(), C) }\n")
    bare, called, unary = mod["f"].body.fields
    nil = mod.constructors["N"]
    assert isinstance(bare, Call) and bare.callee is nil and bare.args == ()
    effir.assert_structural_equal(bare, called)
    assert unary is mod.constructors["C"]  # a constructor with fields stays a function
    assert effir.astext(mod).count("(N, N, C)") == 1


def test_a_bare_nullary_constructor_node_is_not_well_formed():
    from effir.ir import IRModule, TypeData, WellFormedError

    nil = Constructor("N", (), "L")
    mod = IRModule({"f": Function((), Tuple((nil,)))}, {"L": TypeData("L", (), (nil,))})
    with pytest.raises(WellFormedError, match="its value is the call N()"):
        effir.check_well_formed(mod)


def test_reprs_are_clean_and_str_is_the_text():
    module = effir.parse(
        H + "global @rng: Ref[Key] = ref(random.key(0));\n"
        "type T { A }\n"
        "def @f(%x: float32) { add(%x, 1f) }\n"
        "def @main() { @f(2f) }\n"
    )
    fn = module["f"]
    assert repr(fn.body) == "<Call: add(%x, 1f)>" and str(fn.body) == "add(%x, 1f)"
    assert repr(fn) == "<Function: fn (%x: float32) {\n  add(%x, 1f)\n}>"
    assert repr(fn.params[0]) == "<Var: %x>"
    assert repr(module) == "<IRModule: @f, @main; cells @rng; types T>"
    assert str(module) == effir.astext(module) and "\n" not in repr(module)
    assert repr(effir.IRModule()) == "<IRModule: no function>"
