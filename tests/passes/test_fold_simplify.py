"""fold-constant and simplify: each rule, the numeric edge cases, what must
not happen, deep programs, and random typed programs through both passes.

The golden cases are in ``transforms/fold_constant.effir`` and
``transforms/simplify.effir``; importing the pass modules here registers
the passes for them too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
import effir.passes.transforms.fold_constant  # registers the pass
import effir.passes.transforms.simplify  # registers the pass
from effir.backends.interpreter import interpret_a2
from effir.ir.expr import Call, Constant, Expr, Function, Let, Tuple, Var, const
from effir.ir.module import IRModule
from effir.ir.op import call_op
from effir.ir.structural import structural_equal
from effir.ir.types import TensorType
from effir.passes.infra.pipeline import pipeline, run_pipeline
from effir.passes.infra.transform import PassContext, anf_problem, lookup_pass
from effir.passes.transforms.anf import to_anf
from effir.passes.transforms.fold_constant import fold_constant
from effir.passes.transforms.simplify import simplify
from tests.support.kept_types import assert_types_kept
from tests.support.state_passing_observation import observe, parse_a1
from tests.support.typed_program_checks import SETTINGS, assert_same

from .a1_programs import A1Program, a1_programs
from .equivalence import assert_same_run
from .typed_programs import TypedProgram, typed_programs

HEADER = '#[version = "0.0.5"]\n'


def parse(text: str) -> effir.IRModule:
    return effir.parse(HEADER + text)


def body_text(module: effir.IRModule, name: str = "main") -> str:
    """The printed body of a function, without its signature line."""
    lines = effir.astext(module[name]).splitlines()
    return "\n".join(line.strip() for line in lines[1:-1])


def run(module: effir.IRModule, *args: Any) -> Any:
    effir.check(module)
    return effir.interpret(module, *args)


def assert_bits(a: Any, b: Any) -> None:
    """Same dtype, shape and bits (NaN payloads and zero signs included)."""
    x, y = np.asarray(a), np.asarray(b)
    assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
    assert x.tobytes() == y.tobytes(), (x, y)


def folded_value(text: str) -> Constant:
    """What ``@main``'s body (a call on constants) folds to."""
    after = fold_constant(parse(text))
    body = after["main"].body
    assert isinstance(body, Constant), effir.astext(after)
    return body


# ------------------------------------------------------------- registry
def test_both_passes_are_registered():
    assert lookup_pass("fold-constant").definition is fold_constant
    assert lookup_pass("simplify").definition is simplify
    assert lookup_pass("fold-constant").doc and lookup_pass("simplify").doc


# --------------------------------------------------------- fold-constant
@pytest.mark.parametrize(
    "expr",
    [
        "add(2147483647, 1)",  # int32 wraps
        "multiply(100i8, 3i8)",  # int8 wraps
        "negative(-128i8)",  # the most negative int maps to itself
        "subtract(0u8, 1u8)",  # uint wraps
        "divide(-7, 2)",  # truncates toward zero
        "divide(-2147483648, -1)",  # INT_MIN / -1 = INT_MIN
        "divide(1f, 0f)",  # inf
        "divide(0f, 0f)",  # NaN, with numpy's sign bit
        "multiply(-0f, 1f)",  # -0.0 stays -0.0
        "add(-0f, 0f)",  # +0.0
        "sqrt(-1f)",
        "exp(100f16)",  # float16 overflow
        'cast(300, dtype="uint8")',
        'cast(-1.5f, dtype="int32")',
        "power(2, 31)",
        'sum(ones(shape=[3, 4], dtype="int8"))',
        "argmax(ones(shape=[2, 2]))",
        "shape_of(ones(shape=[2, 5]))",
        "less(0f, -0f)",
        "maximum(1f, divide(0f, 0f))",
    ],
)
def test_folding_matches_the_interpreter_bit_for_bit(expr):
    text = f"def @main() {{ {expr} }}"
    expected = run(parse(text))
    value = folded_value(text)
    assert_bits(value.data, expected)
    assert_bits(run(fold_constant(parse(text))), expected)


def test_folding_keeps_dtype_and_rank():
    value = folded_value("def @main() { add(1, 2) }")
    assert value.data.dtype == np.int32 and value.data.shape == ()
    value = folded_value('def @main() { add(ones(shape=[2, 1], dtype="int64"), 2i64) }')
    assert value.data.dtype == np.int64 and value.data.shape == (2, 1)


def test_folding_a_tuple_result():
    after = fold_constant(parse("def @main() { split(ones(shape=[4]), indices_or_sections=2) }"))
    assert effir.astext(after["main"].body).startswith("(meta[relay.Constant][0], meta")
    expected = run(parse("def @main() { split(ones(shape=[4]), indices_or_sections=2) }"))
    for got, want in zip(run(after), expected, strict=True):
        assert_bits(got, want)


def test_folding_through_lets_and_tuples():
    after = fold_constant(
        parse(
            """def @main() {
              let %a = (1, 2);
              let %b = %a;
              let %c = stack(%b);
              sum(%c)
            }"""
        )
    )
    assert body_text(after) == "3"


def test_max_elements_is_a_parameter():
    text = "def @main() { ones(shape=[4, 4]) }"
    assert isinstance(fold_constant(parse(text))["main"].body, Constant)
    assert isinstance(fold_constant(parse(text), max_elements=15)["main"].body, Call)
    assert isinstance(fold_constant(parse(text), max_elements=16)["main"].body, Constant)
    assert isinstance(
        fold_constant(parse("def @main() { zeros(shape=[1000, 1000]) }"))["main"].body, Call
    )


def test_a_failing_call_stays_and_fails_at_run_time():
    module = parse("def @main() { divide(1, 0) }")
    after = fold_constant(module)
    assert after is module
    with pytest.raises(effir.EvalError, match="integer division by zero"):
        run(after)


@pytest.mark.parametrize(
    "text",
    [
        "def @main() { random.key(0) }",
        "def @main() { random.uniform(random.key(0), shape=[2]) }",
        "def @main() { random.split(random.key(0)) }",
        "def @main() { debug.print(1) }",
        # A dynamic shape: the constant's static type would be more precise.
        "def @main() { boolean_mask(ones(shape=[3]), less(ones(shape=[3]), 2f)) }",
    ],
)
def test_not_folded(text):
    module = parse(text)
    body = fold_constant(module)["main"].body
    assert isinstance(body, Call) and body.callee is module["main"].body.callee


def test_debug_print_of_a_constant_still_prints():
    module = parse('def @main() { debug.print(add(1, 2), label="x") }')
    after = fold_constant(module)
    printed: list = []
    effir.interpret(after, sink=lambda label, v: printed.append((label, v)))
    assert [(label, int(v)) for label, v in printed] == [("x", 3)]


def test_if_on_a_constant_keeps_the_taken_branch():
    text = "def @main(%x: float32) { if (%c) { negative(%x) } else { %x } }"
    for cond, expected in (("True", "negative(%x)"), ("False", "%x")):
        after = fold_constant(parse(text.replace("%c", cond)))
        assert body_text(after) == expected


def test_a_shared_block_is_not_flattened():
    # Graph form: %0 is one block used twice. Moving its let before %y's
    # would bind %k twice (the second use still holds it).
    module = parse(
        """global @rng: Ref[Key] = ref(random.key(7));
        def @main(%x: float32) -> Key {
          %0 = {
            let %k: Key = ref_read(@rng);
            ref_read(@rng)
          };
          let %y: Key = if (logical_not(False)) { %0 } else { %0 };
          %0
        }"""
    )
    after = fold_constant(module)
    assert "let %y: Key = %0;" in effir.astext(after)
    assert fold_constant(after) is after


def test_if_whose_taken_branch_has_another_type_stays():
    # The if's type is the join of its branches', (?) [RULE TYPE-JOIN]: the then
    # branch alone would have a 3 where the program had a ? [RULE FOLD-TYPE].
    module = parse(
        """def @main(%x: Tensor[(?), float32], %y: Tensor[(3), float32]) {
          if (True) { %y } else { %x }
        }"""
    )
    assert fold_constant(module) is module


def test_if_whose_taken_branch_has_the_joined_type_folds():
    # [RULE TYPE-JOIN] a (?) branch and a (3) branch make a (?) if, not a (3) one:
    # the taken (?) branch has the if's type, so it replaces it.
    module = parse(
        """def @main(%x: Tensor[(?), float32], %y: Tensor[(3), float32]) {
          if (True) { %x } else { %y }
        }"""
    )
    assert body_text(fold_constant(module)) == "%x"


# [RULE PIN-CONTEXT] An `if` on a constant whose taken branch is `Nothing`: the other branch
# gave `Nothing` its type argument; folded, the type must stay (found by the
# differential fuzzer's prints group, seed 11: "cannot infer the type of %v").
CONTEXT_TYPED_IFS = """type Maybe[A] { Just(A), Nothing }
def @main(%x: Tensor[(3), float32]) {
  let %v = debug.print(if (greater(0, 1)) { Just(%x) } else { Nothing }, label="adt");
  let %c = greater(0, 1);
  let %r = if (%c) { Just(%x) } else { Nothing };
  let %s = debug.print(%r);
  (%v, %s, if (less(0, 1)) { Nothing } else { Just(%x) })
}"""


@pytest.mark.parametrize("passes", ["fold-constant", "simplify", "fold-constant,simplify"])
def test_folding_an_if_keeps_the_type_its_other_branch_gave(passes: str) -> None:
    module = parse(CONTEXT_TYPED_IFS)
    after = run_pipeline(module, passes, PassContext(verify=True))
    assert_types_kept(module, after)
    assert_same_run(module, after, (np.arange(3, dtype=np.float32),))
    if "fold" in passes:
        assert "if (" not in effir.astext(after["main"])


def test_projection_of_a_literal_keeps_effectful_fields():
    text = "def @main(%x: float32) { (debug.print(%x), 2).1 }"
    module = parse(text)
    assert fold_constant(module) is module
    after = fold_constant(parse("def @main(%x: float32) { (%x, debug.print(%x)).1 }"))
    assert body_text(after) == "debug.print(%x)"


def test_a_let_of_an_atom_is_substituted_inside_closures():
    after = fold_constant(
        parse(
            """def @main(%x: float32) {
              let %y = %x;
              let %f = fn (%z: float32) { add(%y, %z) };
              %f(%y)
            }"""
        )
    )
    assert "%y" not in effir.astext(after)
    assert run(after, np.float32(2)) == 4


def test_fold_constant_keeps_spans():
    module = effir.parse(HEADER + "def @main() {\n  add(1, 2)\n}\n", source_name="f.effir")
    span = module["main"].body.span
    body = fold_constant(module)["main"].body
    assert isinstance(body, Constant) and body.span == span and span is not None


def test_nothing_to_fold_returns_the_same_module():
    module = parse("def @main(%x: float32) { add(%x, 1f) }")
    assert fold_constant(module) is module
    assert simplify(module) is module


# -------------------------------------------------------------- simplify
def simplified(text: str) -> str:
    return body_text(simplify(parse(text)))


@pytest.mark.parametrize(
    "expr, result",
    [
        ("multiply(%f, 1f)", "%f"),
        ("multiply(1f, %f)", "%f"),
        ("divide(%f, 1f)", "%f"),
        ("subtract(%f, 0f)", "%f"),
        ("add(%f, -0f)", "%f"),
        ("add(%f, 0f)", "add(%f, 0f)"),  # -0.0 + 0.0 = +0.0
        ("add(0f, %f)", "add(0f, %f)"),
        ("subtract(%f, -0f)", "subtract(%f, -0f)"),
        ("subtract(0f, %f)", "subtract(0f, %f)"),
        ("divide(1f, %f)", "divide(1f, %f)"),
        ("add(%i, 0)", "%i"),
        ("add(0, %i)", "%i"),
        ("subtract(%i, 0)", "%i"),
        ("multiply(%i, 1)", "%i"),
        ("divide(%i, 1)", "%i"),
        ("multiply(%i, 2)", "multiply(%i, 2)"),
        ("negative(negative(%i))", "%i"),
        ("negative(negative(%f))", "%f"),
        ("negative(%f)", "negative(%f)"),
        ('cast(%i, dtype="int32")', "%i"),
        ('cast(%i, dtype="int64")', 'cast(%i, dtype="int64")'),
    ],
)
def test_arithmetic_identities(expr, result):
    text = f"def @main(%f: Tensor[(5), float32], %i: Tensor[(5), int32]) {{ {expr} }}"
    assert simplified(text) == result
    # ...and the values agree bit for bit on the edge cases.
    f = np.array([-0.0, 0.0, np.nan, -np.inf, 1e-45], np.float32)
    i = np.array([-(2**31), 2**31 - 1, 0, -1, 7], np.int32)
    assert_bits(run(parse(text), f, i), run(simplify(parse(text)), f, i))


def test_x_plus_zero_for_floats_would_change_negative_zero():
    text = "def @main(%f: float32) { add(%f, 0f) }"
    assert np.signbit(run(parse(text), np.float32(-0.0))) == np.False_
    assert simplified(text) == "add(%f, 0f)"


def test_identities_that_broadcast_stay():
    zeros = Constant(np.zeros((2, 3), np.int32))
    ones = Constant(np.ones((2, 3), np.float32))
    i, f = Var("i", TensorType((), "int32")), Var("f", TensorType((3,), "float32"))
    fn = Function((i, f), Tuple((call_op("add", i, zeros), call_op("multiply", ones, f))))
    module = IRModule({"main": fn})
    assert simplify(module) is module


def test_identity_constant_through_a_variable():
    after = simplify(
        parse(
            """def @main(%f: Tensor[(2), float32]) {
              let %one: Tensor[(?), float32] = ones(shape=[2]);
              let %c: Tensor[(2), float32] = %one;
              multiply(%f, %c)
            }"""
        )
    )
    # ones(...) is a call, not a constant: simplify leaves it to fold-constant.
    assert body_text(after).endswith("multiply(%f, %c)")
    both = simplify(
        fold_constant(
            parse(
                """def @main(%f: Tensor[(2), float32]) {
          let %c = ones(shape=[2]);
          multiply(%f, %c)
        }"""
            )
        )
    )
    assert body_text(both) == "%f"


@pytest.mark.parametrize(
    "expr, result",
    [
        ("reshape(reshape(%x, newshape=[6, 4]), newshape=[24])", "reshape(%x, newshape=[24])"),
        (
            "reshape(reshape(%x, newshape=[6, 4]), newshape=[2, -1])",
            "reshape(%x, newshape=[2, -1])",
        ),
        ("reshape(reshape(%x, newshape=[6, 4]), newshape=[2, 3, 4])", "%x"),
        ("reshape(%x, newshape=[2, 3, -1])", "%x"),
        ("reshape(%x, newshape=[0, 0, 4])", "%x"),
        (
            "reshape(reshape(%x, newshape=[6, 4]), newshape=[0, 2, 2])",
            "reshape(reshape(%x, newshape=[6, 4]), newshape=[0, 2, 2])",
        ),
        ("transpose(transpose(%x))", "%x"),
        ("transpose(%x, axes=[0, 1, 2])", "%x"),
        ("transpose(%x, axes=[-3, -2, -1])", "%x"),
        ("transpose(%x)", "transpose(%x)"),
        (
            "transpose(transpose(%x, axes=[1, 0, 2]), axes=[0, 2, 1])",
            "transpose(%x, axes=[1, 2, 0])",
        ),
        ("transpose(transpose(%x, axes=[2, 0, 1]), axes=[1, 2, 0])", "%x"),
        ("squeeze(expand_dims(%x, axis=0))", "squeeze(expand_dims(%x, axis=0))"),
        ("squeeze(expand_dims(%x, axis=0), axis=[0])", "%x"),
        ("squeeze(expand_dims(%x, axis=3), axis=[-1])", "%x"),
        ("squeeze(expand_dims(%x, axis=1, num_newaxis=2), axis=[2, 1])", "%x"),
        (
            "squeeze(expand_dims(%x, axis=1, num_newaxis=2), axis=[1])",
            "squeeze(expand_dims(%x, axis=1, num_newaxis=2), axis=[1])",
        ),
    ],
)
def test_shape_rewrites(expr, result):
    text = f"def @main(%x: Tensor[(2, 3, 4), float32]) {{ {expr} }}"
    assert simplified(text) == result
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_bits(run(parse(text), x), run(simplify(parse(text)), x))


def test_transpose_composition_matches_numpy_for_every_pair():
    from itertools import permutations

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for p in permutations(range(3)):
        for q in permutations(range(3)):
            text = (
                "def @main(%x: Tensor[(2, 3, 4), float32]) { "
                f"transpose(transpose(%x, axes={list(p)}), axes={list(q)}) }}"
            )
            after = simplify(parse(text))
            assert body_text(after).count("transpose") <= 1
            assert_bits(run(after, x), np.transpose(np.transpose(x, p), q))


def test_a_rewrite_that_would_change_the_type_is_not_made():
    # (n, 4) -> (-1, 2) -> (-1, 4) has type (?, 4); reshape(%x, [-1, 4])
    # would have the more precise (n, 4) [RULE FOLD-TYPE].
    text = """def @main(%x: Tensor[(n, 4), float32]) {
      reshape(reshape(%x, newshape=[-1, 2]), newshape=[-1, 4])
    }"""
    after = simplify(parse(text))
    assert body_text(after) == "reshape(reshape(%x, newshape=[-1, 2]), newshape=[-1, 4])"


def test_tuple_of_projections():
    text = """def @main(%t: (float32, int32)) {
      let %a = %t.0;
      let %b = %t.1;
      let %u = ();
      ((%a, %b), (%t.0, %t.1), (%t.0,), (%t.1, %t.0), %u)
    }"""
    after = simplify(parse(text))
    assert body_text(after).endswith("(%t, %t, (%t.0,), (%t.1, %t.0), %u)")


def test_simplify_keeps_spans():
    module = effir.parse(
        HEADER + "def @main(%x: Tensor[(2, 3), float32]) {\n"
        "  transpose(transpose(%x, axes=[1, 0]))\n}\n",
        source_name="s.effir",
    )
    after = simplify(module)
    assert body_text(after) == "%x"
    module = effir.parse(
        HEADER + "def @main(%x: Tensor[(2, 3, 4), float32]) {\n"
        "  transpose(transpose(%x, axes=[1, 0, 2]), axes=[0, 2, 1])\n}\n",
        source_name="s.effir",
    )
    span = module["main"].body.span
    assert simplify(module)["main"].body.span == span and span is not None


def test_passes_verify_under_a_pass_context():
    module = parse(
        """def @main(%x: Tensor[(3), float32]) {
          let %a = multiply(%x, ones(shape=[3]));
          negative(negative(%a))
        }"""
    )
    with PassContext(verify=True):
        out = lookup_pass("simplify")(lookup_pass("fold-constant")(module))
    assert body_text(out) == "%x"


# ---------------------------------------------------------- deep programs
def _chain(n: int, step) -> IRModule:
    """``def @main(%x: int32) { let %v1 = step(1, %x); ...; %vn }``."""
    x = Var("x", TensorType((), "int32"))
    vars_ = [x] + [Var(f"v{i}") for i in range(1, n + 1)]
    body: Expr = vars_[-1]
    for i in range(n, 0, -1):
        body = Let(vars_[i], step(i, vars_[i - 1]), body)
    return IRModule({"main": Function((x,), body)})


def _lets(expr):
    while isinstance(expr, Let):
        yield expr
        expr = expr.body


DEEP = 100_000


def test_deep_let_chain_folds(default_recursion_limit):
    # let %v(i) = add(%v(i-1), 1) from a constant: every binding folds and
    # is substituted into the next; int32 wraps the same way.
    module = _chain(DEEP, lambda i, prev: call_op("add", const(0) if i == 1 else prev, const(1)))
    after = fold_constant(module)
    body = after["main"].body
    assert isinstance(body, Constant) and body.data == DEEP and body.data.dtype == np.int32


def test_deep_let_chain_simplifies(default_recursion_limit):
    # let %v(i) = multiply(%v(i-1), 1) from %x: every binding goes.
    module = _chain(DEEP, lambda i, prev: call_op("multiply", prev, const(1)))
    after = simplify(module)
    assert after["main"].body is after["main"].params[0]


# --------------------------------------------------------- typed programs
PROPERTY = {**SETTINGS, "max_examples": 100}


def _idempotent(transform, module):
    once = transform(module)
    twice = transform(once)
    assert structural_equal(once, twice), (
        effir.astext(once) + "\n=== twice ===\n" + effir.astext(twice)
    )
    return once


@settings(**PROPERTY)
@given(typed_programs())
def test_fold_constant_preserves_meaning(program: TypedProgram) -> None:
    after = _idempotent(fold_constant, program.module)
    effir.check(after)
    assert_same(program, after)
    # A-normal form in, A-normal form out.
    anf = fold_constant(to_anf(program.module))
    assert anf_problem(anf) is None, effir.astext(anf)
    assert_same(program, anf)


@settings(**PROPERTY)
@given(typed_programs())
def test_simplify_preserves_meaning(program: TypedProgram) -> None:
    after = _idempotent(simplify, program.module)
    effir.check(after)
    assert_same(program, after)
    anf = simplify(to_anf(program.module))
    assert anf_problem(anf) is None, effir.astext(anf)
    assert_same(program, anf)


@settings(**PROPERTY)
@given(typed_programs())
def test_fold_then_simplify_preserves_meaning(program: TypedProgram) -> None:
    after = simplify(fold_constant(to_anf(program.module)))
    effir.check(after)
    assert anf_problem(after) is None, effir.astext(after)
    assert_same(program, after)


@settings(**{**SETTINGS, "max_examples": 40})
@given(
    a1_programs(), st.lists(st.sampled_from(["fold-constant", "simplify"]), min_size=1, max_size=3)
)
def test_state_passing_programs_stay_linear(program: A1Program, names: list[str]) -> None:
    # Verification after each pass includes the linearity verifier: a
    # projection of the world token left behind would be a second use [RULE FOLD-DEAD].
    a1 = parse_a1(program)
    context = PassContext(verify=True)
    a2 = run_pipeline(a1, "explicate,state-passing", context)
    optimised = effir.check(pipeline(",".join(names))(a2, context))
    expected = observe(interpret_a2, a2, program, a1)
    got = observe(interpret_a2, optimised, program, a1)
    assert (problem := expected.difference(got)) is None, problem


def test_dead_trivial_bindings_go_with_the_rewrite():
    after = simplify(
        parse(
            """def @main(%t: (float32, int32)) {
              let %a = %t.0;
              let %b = %t.1;
              (%a, %b)
            }"""
        )
    )
    assert body_text(after) == "%t"
