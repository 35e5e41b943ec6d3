"""Type and shape inference: every construct, polymorphism, symbolic
dimensions, deferred operator relations, and located error messages."""

import re

import pytest

import effir
from effir.ir import (
    Constructor,
    FuncType,
    Let,
    Op,
    TensorType,
    TupleType,
    TypeCall,
    post_order,
)
from effir.ir.expr import Expr
from effir.passes.analyses.call_graph import definition_order

HEADER = '#[version = "0.0.5"]\n'


def check(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="t.effir"))


def main_type(text: str) -> str:
    module = check(text)
    return effir.astext(module["main"].body.checked_type)


def type_errors(text: str) -> list[effir.TypeError]:
    with pytest.raises(effir.TypeError) as info:
        check(text)
    return list(info.value.errors)


def test_every_expression_gets_a_type():
    module = check(
        """
        type List[A] { Cons(A, List[A]), Nil }
        def @main(%x: Tensor[(2, 3), float32], %k: Key) {
          let %r = ref(%x);
          let %f = fn (%y: Tensor[(2, 3), float32]) { %y * %y };
          ref_write(%r, %f(ref_read(%r)));
          let %l = Cons(%x, Nil);
          let %s = match (%l) { Cons(%h, _) => %h, Nil => %x };
          (%s, random.split(%k), if (True) { 1 } else { 2 })
        }
        """
    )
    fn = module["main"]
    for node in post_order(fn):
        # Operators and constructors are polymorphic and shared between uses:
        # their type is per call, read from the Call.
        if isinstance(node, Expr) and not isinstance(node, Op | Constructor):
            assert node.has_type, node
    assert effir.astext(fn.body.checked_type).startswith("(Tensor[(2, 3), float32], (Key, Key)")


def test_tensor_literals_and_arithmetic():
    assert main_type("def @main() { 1f + 2f }") == "float32"
    assert main_type("def @main() { 7i64 * 2i64 }") == "int64"
    assert main_type("def @main() { 1 < 2 }") == "bool"


def test_polymorphic_globals_are_instantiated_per_use():
    text = """
    def @id[A](%x: A) -> A { %x }
    def @main(%x: Tensor[(3), float32]) { (@id(%x), @id(1), @id(@id)) }
    """
    module = check(text)
    t = module["main"].body.checked_type
    assert isinstance(t, TupleType)
    assert effir.astext(t.fields[0]) == "Tensor[(3), float32]"
    assert effir.astext(t.fields[1]) == "int32"
    assert isinstance(t.fields[2], FuncType)


def test_adt_constructors_and_match():
    t = main_type(
        """
        type Option[A] { Some(A), None }
        def @main(%x: Tensor[(2), int32]) {
          match (Some(%x)) { Some(%y) => %y, None => %x }
        }
        """
    )
    assert t == "Tensor[(2), int32]"


def test_a_constructor_used_as_a_value_is_instantiated_per_use():
    """A constructor is one node shared by all its uses: its type as a value
    is fresh at each, not the first use's (here float32 then int32)."""
    module = check(
        """
        type List[A] { Cons(A, List[A]), Nil }
        def @apply[A, B](%f: fn(A, B) -> B, %x: A, %y: B) -> B { %f(%x, %y) }
        def @main() { (@apply(Cons, 1f, Nil), @apply(Cons, 2, Nil)) }
        """
    )
    t = module["main"].body.checked_type
    assert effir.astext(t) == "(List[float32], List[int32])"


def test_adt_value_type():
    module = check(
        """
        type List[A] { Cons(A, List[A]), Nil }
        def @main() { Cons(1f, Nil) }
        """
    )
    t = module["main"].body.checked_type
    assert isinstance(t, TypeCall) and t.func.name == "List"
    assert effir.astext(t) == "List[float32]"


def test_unannotated_closure_learns_its_parameter_type_from_its_use():
    module = check(
        """
        def @main(%x: Tensor[(4), float32]) {
          let %f = fn (%y) { %y + %y };
          %f(%x)
        }
        """
    )
    let = module["main"].body
    assert isinstance(let, Let)
    assert effir.astext(let.value.params[0].checked_type) == "Tensor[(4), float32]"


def test_callers_see_callees_inferred_result_whatever_the_order():
    text = """
    def @caller(%x: Tensor[(2), float32]) { @callee(%x) }
    def @callee(%x: Tensor[(2), float32]) { %x + %x }
    def @main(%x: Tensor[(2), float32]) { @caller(%x) }
    """
    module = check(text)
    assert definition_order(module) == ["callee", "caller", "main"]
    assert effir.astext(module["main"].body.checked_type) == "Tensor[(2), float32]"


def test_mutual_recursion():
    t = main_type(
        """
        def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
        def @odd(%n: int32) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }
        def @main() { @even(10) }
        """
    )
    assert t == "bool"


def test_symbolic_dims_are_renamed_at_calls():
    text = """
    def @double(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] { %x + %x }
    def @main(%a: Tensor[(3, 4), float32], %b: Tensor[(m, 4), float32],
              %c: Tensor[(?, 4), float32]) {
      (@double(%a), @double(%b), @double(%c))
    }
    """
    assert main_type(text) == (
        "(Tensor[(3, 4), float32], Tensor[(m, 4), float32], Tensor[(?, 4), float32])"
    )


def test_symbolic_dim_bound_twice_is_an_error():
    errors = type_errors(
        """
        def @pair(%x: Tensor[(n), float32], %y: Tensor[(n), float32]) { %x + %y }
        def @main(%a: Tensor[(3), float32], %b: Tensor[(4), float32]) { @pair(%a, %b) }
        """
    )
    assert "dimension n is both 3 and 4" in errors[0].message


def test_rigid_symbolic_dims_do_not_equal_constants():
    errors = type_errors(
        """
        def @main(%x: Tensor[(b, 64), float32]) -> Tensor[(b, 64), float32] {
          zeros(shape=[1, 64])
        }
        """
    )
    assert "expected Tensor[(b, 64), float32], got Tensor[(1, 64), float32]" in errors[0].message


def test_unknown_dim_matches_anything():
    assert (
        main_type("def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(3, 4), float32]) { %x + %y }")
        == "Tensor[(3, 4), float32]"
    )


def test_refs_and_keys():
    assert main_type("def @main(%k: Key) { let %r = ref(%k); ref_read(%r) }") == "Key"
    assert main_type("def @main(%k: Key) { let %r = ref(%k); ref_write(%r, %k) }") == "()"


def test_state_cells_have_ref_types():
    module = check(
        """
        global @rng: Ref[Key] = ref(random.key(0));
        def @main() { ref_read(@rng) }
        """
    )
    assert effir.astext(module["main"].body.checked_type) == "Key"


def test_state_cell_annotation_must_match_its_initialiser():
    errors = type_errors(
        """
        global @rng: Ref[Key] = ref(1f);
        def @main() { ref_read(@rng) }
        """
    )
    assert "the initial value of @rng" in errors[0].message
    assert errors[0].line == 3


def test_foreach_body_types_flow_from_the_operator():
    module = check(
        """
        def @main(%xs: Tensor[(t, 3), float32], %h: Tensor[(3), float32]) {
          let %body = fn (%x, %s) { let %n = %x + %s; (%n, %n) };
          cf.foreach(%body, %xs, %h)
        }
        """
    )
    assert effir.astext(module["main"].body.checked_type) == (
        "(Tensor[(t, 3), float32], Tensor[(3), float32])"
    )


def test_while_loop_output_has_unknown_length():
    t = main_type(
        """
        def @main(%n: int32) {
          let %cond = fn (%i: int32) { %i < %n };
          let %body = fn (%i: int32) { (%i * 2, %i + 1) };
          cf.while_loop(%cond, %body, 0, max_iterations=100)
        }
        """
    )
    assert t == "(Tensor[(?), int32], int32)"


# ------------------------------------------------------------------ errors
def test_mismatch_names_expected_and_actual_with_location():
    errors = type_errors(
        """
        def @f(%x: Tensor[(3), float32]) { %x }
        def @main(%y: Tensor[(3), int32]) {
          @f(%y)
        }
        """
    )
    err = errors[0]
    assert err.line == 5
    assert "argument 1 of @f" in err.message
    assert "expected Tensor[(3), float32], got Tensor[(3), int32]" in err.message
    assert "t.effir:5:" in str(err) and "^" in str(err)


@pytest.mark.parametrize(
    "program, message",
    [
        (
            "def @main(%c: int32) { if (%c) { 1 } else { 2 } }",
            "type mismatch in the condition of if (a bool scalar): expected bool, got int32",
        ),
        (
            "def @main(%c: bool) { if (%c) { 1 } else { 2f } }",
            "type mismatch in the branches of if",
        ),
        ("def @f(%x: int32) { %x }\ndef @main() { @f(1, 2) }", "@f takes 1 argument(s), got 2"),
        ("def @main(%x: int32) { %x(1) }", "the called function is not a function"),
        (
            "def @main() { let %t = (1, 2); %t.2 }",
            "field index 2 is out of range for a tuple of 2 fields",
        ),
    ],
)
def test_error_messages(program, message):
    assert message in type_errors(program)[0].message


def test_operator_relation_errors_are_located():
    errors = type_errors(
        """
        def @main(%x: Tensor[(3), float32], %y: Tensor[(4), float32]) {
          %x + %y
        }
        """
    )
    assert errors[0].line == 4
    assert errors[0].message.startswith("add:")


def test_all_errors_are_reported_together():
    errors = type_errors(
        """
        def @f(%x: int32) -> float32 { %x }
        def @main(%c: int32) { if (%c) { 1 } else { 2 } }
        """
    )
    assert len(errors) == 2
    assert [e.line for e in errors] == [3, 4]


def test_one_mistake_is_reported_once():
    errors = type_errors(
        """
        def @main(%x: Tensor[(3), float32], %y: Tensor[(4), float32]) {
          let %z = %x + %y;
          let %w = %z * %z;
          %w - %z
        }
        """
    )
    assert len(errors) == 1


def test_unresolvable_parameter_asks_for_an_annotation():
    errors = type_errors("def @main() { let %f = fn (%x) { %x }; 0 }")
    assert "cannot infer the type of %x" in errors[0].message


def test_operator_used_as_a_value():
    errors = type_errors("def @id[A](%x: A) -> A { %x }\ndef @main() { @id(add) }")
    assert "operator add must be called" in errors[0].message


def test_type_error_is_an_effir_error():
    assert issubclass(effir.TypeError, effir.Error)
    assert effir.TypeError is effir.TypeCheckError


# ------------------------------------------------------------ deep programs
def test_deep_let_chain_and_nested_ifs_check_without_recursion():
    n = 10_000
    lets = "".join(f"let %v{i} = %v{i - 1} + 1f;\n" for i in range(1, n))
    check(f"def @main(%v0: float32) {{\n{lets}%v{n - 1}\n}}")
    ifs = "if (%c) { " * 2000 + "1" + " } else { 2 }" * 2000
    assert main_type(f"def @main(%c: bool) {{ {ifs} }}") == "int32"


def test_tensor_type_of_checked_vars():
    module = check("def @main(%x: Tensor[(2), float32]) { let %y = %x; %y }")
    let = module["main"].body
    assert isinstance(let.var.checked_type, TensorType)
    assert re.fullmatch(r"Tensor\[\(2\), float32\]", effir.astext(let.var.checked_type))


# ------------------------------------------------------------ exhaustiveness
ADTS = """
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
"""


@pytest.mark.parametrize(
    "clauses, missing",
    [
        ("Cons(%h, _) => 1", "Nil"),
        ("Nil => 1", "Cons(_, _)"),
        ("Cons(_, Nil) => 1, Nil => 2", "Cons(_, Cons(_, _))"),
        ("Cons(Some(_), _) => 1, Nil => 2", "Cons(None, _)"),
    ],
)
def test_non_exhaustive_match_names_a_missing_case(clauses, missing):
    errors = type_errors(
        ADTS + f"def @main(%l: List[Option[int32]]) {{ match (%l) {{ {clauses} }} }}"
    )
    assert errors[0].message.startswith(f"match is not exhaustive: no clause matches {missing}")


@pytest.mark.parametrize(
    "clauses",
    [
        "Cons(_, _) => 1, Nil => 2",
        "Cons(Some(_), _) => 1, Cons(None, _) => 2, Nil => 3",
        "Cons(_, Nil) => 1, Cons(_, Cons(_, _)) => 2, Nil => 3",
        "_ => 1",
        "%x => 1",
    ],
)
def test_exhaustive_matches_are_accepted(clauses):
    check(ADTS + f"def @main(%l: List[Option[int32]]) {{ match (%l) {{ {clauses} }} }}")


def test_tuple_patterns_exhaustiveness():
    check(
        ADTS
        + "def @main(%p: (Option[int32], int32)) { match (%p) { (Some(_), _) => 1, (None, %y) => %y } }"
    )
    errors = type_errors(
        ADTS + "def @main(%p: (Option[int32], int32)) { match (%p) { (Some(_), _) => 1 } }"
    )
    assert "no clause matches (None, _)" in errors[0].message


def test_incomplete_match_is_not_checked_for_exhaustiveness():
    check(ADTS + "def @main(%o: Option[int32]) { match? (%o) { Some(%x) => %x } }")


@pytest.mark.parametrize("name", ["prelude", "prelude+nat"])
def test_relay_standard_library_type_checks(name):
    from tests.support.relay_std_programs import PROGRAMS

    module = effir.check(effir.parse(PROGRAMS[name](), source_name=name))
    assert effir.astext(module["map"].checked_type) == "fn [A, B](fn (A) -> B, List[A]) -> List[B]"


def test_gradient_cell_match_is_not_exhaustive():
    # Our copy of the gradient cell's addition leaves out (One, Raw) and
    # friends, which Relay's original covers with a final wildcard clause.
    from tests.support.relay_std_programs import PROGRAMS

    with pytest.raises(effir.TypeError) as info:
        effir.check(effir.parse(PROGRAMS["gradient_cell"](), source_name="gradient_cell"))
    assert "no clause matches (One(_), Raw(_))" in info.value.message


def test_infer_expr_types_a_closed_expression():
    from effir.passes.analyses.infer_type import infer_expr

    expr = effir.parse_expr("fn (%x: Tensor[(n, 3), float32]) { sum(%x, axis=[1]) }")
    assert effir.astext(infer_expr(expr)) == "fn (Tensor[(n, 3), float32]) -> Tensor[(n), float32]"
    with pytest.raises(effir.TypeError, match="condition of if"):
        infer_expr(effir.parse_expr("if (1) { 2 } else { 3 }"))


@pytest.mark.parametrize(
    "body, what",
    [
        ("let %f = fn (%g) { %g(%g) }; 0", "in a call"),
        # The occurs check goes on from the unknowns a type reached when it
        # was last walked (%s's type, walked when %s was bound, holds %y's):
        # it still finds %y in it when %y is unified with it.
        (
            "let %f = fn (%c: bool, %y) { let %t = ((%y, %y), %y); let %s = (%t, %t);"
            " if (%c) { %y } else { %s } }; 0",
            "in the branches of if",
        ),
        (
            "let %f = fn (%c: bool, %y) { let %t = ((%y, %y), %y); let %s = (%t, %t);"
            " let %u = (%s, 1f); if (%c) { %u } else { %y } }; 0",
            "in the branches of if",
        ),
    ],
)
def test_a_type_that_would_contain_itself_is_a_mismatch(body: str, what: str) -> None:
    module = effir.parse('#[version = "0.0.5"]\ndef @main() { ' + body + " }")
    with pytest.raises(effir.TypeCheckError, match=f"type mismatch {what}") as info:
        effir.check(module)
    assert len(info.value.errors) == 1
