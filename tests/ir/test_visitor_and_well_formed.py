"""Traversal, rewriting, and the well-formedness check."""

import numpy as np
import pytest

import effir
from effir.ir import (
    Call,
    Constant,
    Function,
    GlobalVar,
    IRModule,
    Let,
    Mutator,
    Tuple,
    Var,
    WellFormedError,
    get_op,
    lookup_op,
    on,
    post_order,
    pre_order,
)

H = '#[version = "0.0.5"]\n'


def test_orders_visit_shared_nodes_once():
    x = Var("x")
    shared = Call(get_op("exp"), (x,))
    root = Tuple((shared, shared))
    post = post_order(root)
    assert post[-1] is root and post.count(shared) == 1
    pre = list(pre_order(root))
    assert pre[0] is root and pre.count(shared) == 1


class DoubleConstants(Mutator):
    @on(Constant)
    def constant(self, new, old):
        return Constant(new.data * 2)


def test_mutator_rewrites_bottom_up_and_keeps_sharing():
    x = Var("x")
    shared = Call(get_op("add"), (x, Constant(np.array(1.0, "float32"))))
    fn = Function((x,), Tuple((shared, shared)))
    out = DoubleConstants().mutate(fn)
    assert out is not fn
    assert out.body.fields[0] is out.body.fields[1]
    assert float(out.body.fields[0].args[1].data) == 2.0
    assert out.params[0] is x


def test_mutator_keeps_identity_when_nothing_changes():
    mod = effir.parse(H + "def @main(%x) { let %y = add(%x, %x); (%y, %y) }\n")

    class EveryField(Mutator):
        binders = True
        types = True

    assert EveryField().mutate(mod["main"]) is mod["main"]


def test_well_formed_accepts_parsed_programs():
    mod = effir.parse(
        H + "type L { C(int32) }\ndef @main(%x) { match (C(1)) { C(%y) => add(%x, %y) } }\n"
    )
    effir.check_well_formed(mod)


def test_variable_used_out_of_scope():
    x, z, y = Var("x"), Var("z"), Var("y")
    fn = Function((z,), Let(y, z, z))
    escaped = Function((x,), Tuple((fn, y)))
    with pytest.raises(WellFormedError, match="used outside the scope"):
        effir.check_well_formed(escaped)


def test_variable_bound_twice():
    x = Var("x")
    fn = Function((x,), Let(x, Constant(np.array(1, "int32")), x))
    with pytest.raises(WellFormedError, match="bound more than once"):
        effir.check_well_formed(fn)


def test_undefined_global_and_bad_calls():
    x = Var("x")
    mod = IRModule({"main": Function((x,), Call(GlobalVar("missing"), (x,)))})
    with pytest.raises(WellFormedError, match="undefined global @missing"):
        effir.check_well_formed(mod)
    with pytest.raises(WellFormedError, match="add takes 2 argument"):
        effir.check_well_formed(Function((x,), Call(get_op("add"), (x,))))
    with pytest.raises(WellFormedError, match="not normalized"):
        effir.check_well_formed(
            Function((x,), Call(get_op("sum"), (x,), effir.ir.Attrs({"axis": None})))
        )
    attrs = lookup_op("sum").normalize_attrs({})
    with pytest.raises(WellFormedError, match="only operator calls take attributes"):
        effir.check_well_formed(Function((x,), Call(Function((), x), (), attrs)))


def test_module_rejects_name_clashes():
    from effir.ir import GlobalCell

    fn = Function((), Tuple(()))
    with pytest.raises(WellFormedError, match="both as a function and as a state cell"):
        IRModule({"f": fn}, cells={"f": GlobalCell("f", None, Tuple(()))})
    with pytest.raises(WellFormedError, match="has no function @g"):
        IRModule({"f": fn})["g"]


def test_errors_carry_the_source_location_when_known():
    mod = effir.parse(H + "def @main(%x) {\n  let %y = %x;\n  %y\n}\n", source_name="w.effir")
    body = mod["main"].body
    # Rebuild the function so that %y's use escapes the let that binds it.
    bad = Function(mod["main"].params, Tuple((body, body.var)), span=mod["main"].span)
    with pytest.raises(WellFormedError) as info:
        effir.check_well_formed(bad)
    assert str(info.value).startswith("w.effir:")


def test_free_vars_by_function_agrees_with_free_vars_of_each_function():
    from effir.ir.visitor import free_vars, free_vars_by_function, pre_order

    text = """#[version = "0.0.5"]
    type List[A] { Cons(A, List[A]), Nil }
    def @main(%x: float32, %xs: List[float32]) {
      let %a = %x + 1f;
      let %f = fn (%p: float32) {
        let %g = fn (%q: float32) { (%q, %p, %a, %x) };
        match (%xs) { Cons(%h, _) => %g(%h), Nil => %g(%p) }
      };
      let %k = fn () { fn (%r: float32) { %r + %a } };
      (%f(%x), %k()(%a))
    }
    """
    root = effir.parse(text)["main"]
    table = free_vars_by_function(root)
    functions = [n for n in pre_order(root) if isinstance(n, Function)]
    assert len(functions) == 5 and set(table) == set(functions)
    for fn in functions:
        assert table[fn] == free_vars(fn)  # the same variables, in the same order
    names = {tuple(v.name_hint for v in table[fn]) for fn in functions}
    assert names == {(), ("a", "x", "xs"), ("p", "a", "x"), ("a",)}
