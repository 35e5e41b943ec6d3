"""The join of sizes [RULE TYPE-JOIN] (passes/analyses/type_solver.py, docs/semantics.md
§2.2): a value that is one of several (an ``if``'s branches, a ``match``'s
clauses, a loop's state on entry and after its body) has a size only where
they all have the same one, ``?`` elsewhere; unification (one value seen
twice) never narrows a variable's type. The properties check inferred
types against the interpreter's values, before and after the optimising
pipeline (partial evaluation folds loops and branches, and the result is
checked again). The compiled side is in
tests/backends/tvm/test_size_joins_compiled.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir import astext
from effir.passes.infra.pipeline import pipeline
from tests.support.type_mismatch import COMMON, type_mismatch

HEADER = '#[version = "0.0.5"]\n'
F32 = 'dtype="float32"'


def checked(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text))


def let_type(module: effir.IRModule, name: str) -> str:
    """The type of ``main``'s let-bound ``%name``."""
    expr = module["main"].body
    while isinstance(expr, effir.ir.Let):
        if expr.var.name_hint == name:
            return astext(expr.var.checked_type)
        expr = expr.body
    raise AssertionError(f"no let %{name}")


# --------------------------------------------------------------- branches
@pytest.mark.parametrize(
    ("then", "other", "joined"),
    [
        ("%a", f"zeros(shape=[0, 4], {F32})", "Tensor[(?, 4), float32]"),
        ("%b", f"zeros(shape=[2, 4], {F32})", "Tensor[(?, 4), float32]"),
        (f"zeros(shape=[3, 4], {F32})", f"zeros(shape=[2, 4], {F32})", "Tensor[(?, 4), float32]"),
        ("%b", "%b", "Tensor[(n, 4), float32]"),
        (f"zeros(shape=[2, 4], {F32})", f"ones(shape=[2, 4], {F32})", "Tensor[(2, 4), float32]"),
        ("(%a, %b)", "(%b, %b)", "(Tensor[(?, 4), float32], Tensor[(n, 4), float32])"),
    ],
)
def test_an_if_has_the_join_of_its_branches(then: str, other: str, joined: str) -> None:
    module = checked(
        f"""def @main(%a: Tensor[(?, 4), float32], %b: Tensor[(n, 4), float32], %c: bool) {{
          let %y = if (%c) {{ {then} }} else {{ {other} }};
          %y
        }}"""
    )
    assert let_type(module, "y") == joined


def test_a_match_has_the_join_of_its_clauses() -> None:
    module = checked(
        f"""type Box {{ Full(Tensor[(?, 4), float32]), Empty }}
        def @main(%x: Box) {{
          let %y = match (%x) {{
            Full(%v) => %v,
            Empty => zeros(shape=[0, 4], {F32}),
          }};
          %y
        }}"""
    )
    assert let_type(module, "y") == "Tensor[(?, 4), float32]"


def test_an_adt_is_joined_by_its_type_arguments() -> None:
    module = effir.parse(
        HEADER
        + f"""def @main(%a: Tensor[(?), float32], %c: bool) {{
          let %y = if (%c) {{ Some(%a) }} else {{ Some(zeros(shape=[0], {F32})) }};
          %y
        }}""",
        module=effir.prelude(),
    )
    effir.check(module)
    assert let_type(module, "y") == "Option[Tensor[(?), float32]]"


@pytest.mark.parametrize(
    ("other", "clash"),
    [
        ('zeros(shape=[3, 4], dtype="float64")', "dtype float32 vs float64"),
        (f"zeros(shape=[3], {F32})", "got Tensor[(3), float32]"),
    ],
)
def test_branches_of_another_dtype_or_rank_are_still_an_error(other: str, clash: str) -> None:
    with pytest.raises(effir.TypeError) as info:
        checked(
            f"""def @main(%a: Tensor[(?, 4), float32], %c: bool) {{
              if (%c) {{ %a }} else {{ {other} }}
            }}"""
        )
    message = info.value.errors[0].message
    assert message.startswith("type mismatch in the branches of if"), message
    assert clash in message


def test_a_branch_whose_type_is_known_later_is_joined_when_it_is() -> None:
    # The then branch's type waits for @g's inferred result [RULE TYPE-WAIT].
    module = checked(
        f"""def @main(%a: Tensor[(?, 4), float32], %c: bool) {{
          let %y = if (%c) {{ @g(%a) }} else {{ zeros(shape=[0, 4], {F32}) }};
          %y
        }}
        def @g(%x: Tensor[(?, 4), float32]) {{ %x }}"""
    )
    assert let_type(module, "y") == "Tensor[(?, 4), float32]"


# ---------------------------------------------------------- no narrowing
def test_a_variable_is_not_narrowed_by_a_parameter_it_is_passed_to() -> None:
    """Passing ``%y`` (of a data-dependent size) to a ``(3)`` parameter in one
    branch says nothing of ``%y`` elsewhere: before, ``%y`` became ``(3)``
    and compiled ``shape_of(%y)`` said 3 where the interpreter said 4."""
    module = checked(
        """def @g3(%v: Tensor[(3), float32]) { sum(%v) }
        def @main(%x: Tensor[(5), float32], %m: Tensor[(5), bool], %c: bool) {
          let %y = boolean_mask(%x, %m);
          let %s = if (%c) { @g3(%y) } else { 0f };
          (%s, shape_of(%y))
        }"""
    )
    assert let_type(module, "y") == "Tensor[(?), float32]"


def test_an_annotation_does_not_loosen_the_type_of_the_value() -> None:
    module = checked(
        """def @main(%a: Tensor[(2), float32]) {
          let %f = fn (%p) { let %y: Tensor[(?), float32] = %p; %p };
          %f(%a)
        }"""
    )
    assert astext(module["main"].body.checked_type) == "Tensor[(2), float32]"


def test_a_cell_has_its_declared_type_not_its_initial_values() -> None:
    module = checked(
        f"""global @acc: Ref[Tensor[(?), float32]] = ref(zeros(shape=[0], {F32}));
        def @main(%x: Tensor[(?), float32]) {{
          ref_write(@acc, concatenate((ref_read(@acc), %x)));
          let %now = ref_read(@acc);
          %now
        }}"""
    )
    assert let_type(module, "now") == "Tensor[(?), float32]"


# ------------------------------------------------------------------ loops
GROWING = f"""def @main(%k: int32) {{
  cf.while_loop(fn (%s: STATE) {{ less(sum(shape_of(%s)), %k) }},
    fn (%s: STATE) {{ ((), concatenate((%s, ones(shape=[1], {F32})))) }},
    zeros(shape=[0], {F32}))
}}"""


def test_a_loop_state_keeps_its_declared_unknown_size() -> None:
    """The user's ``?`` does not lose to the initial value's 0."""
    module = checked(GROWING.replace("STATE", "Tensor[(?), float32]"))
    assert astext(module["main"].body.checked_type) == "((), Tensor[(?), float32])"
    _, state = effir.interpret(module, np.int32(3))
    np.testing.assert_array_equal(state, np.ones(3, np.float32))


def test_an_unannotated_loop_state_that_grows_asks_for_its_type() -> None:
    text = GROWING.replace("%s: STATE", "%s")
    with pytest.raises(effir.TypeError) as info:
        checked(text)
    assert info.value.errors[0].message == (
        "cf.while_loop: the loop state is Tensor[(0), float32] on entry and "
        "Tensor[(1), float32] after the body; give the body's state parameter a type "
        "that holds both, Tensor[(?), float32]"
    )


def test_a_foreach_state_is_the_join_of_its_initial_and_new_values() -> None:
    module = checked(
        f"""def @main(%xs: Tensor[(t, 2), float32]) {{
          cf.foreach(fn (%x: Tensor[(2), float32], %s: Tensor[(?), float32]) {{
            (sum(%x), concatenate((%s, %x)))
          }}, %xs, zeros(shape=[0], {F32}))
        }}"""
    )
    assert astext(module["main"].body.checked_type) == (
        "(Tensor[(t), float32], Tensor[(?), float32])"
    )


# ------------------------------------------------------------- properties
# Each branch is one of these expressions, of these types: data-dependent,
# symbolic, static (zero rows included), and a loop that partial evaluation
# folds to a (0, 4) constant or that runs %w times.
BRANCHES = {
    "%a": "(?, 4)",
    "%b": "(n, 4)",
    f"zeros(shape=[0, 4], {F32})": "(0, 4)",
    f"ones(shape=[2, 4], {F32})": "(2, 4)",
    "boolean_mask(%b, greater(sum(%b, axis=[1]), 0f))": "(?, 4)",
    "concatenate((%a, %b))": "(?, 4)",
    (
        "cf.while_loop(fn (%s: int32) { less(%s, 0) }, fn (%s: int32) "
        f"{{ (ones(shape=[4], {F32}), add(%s, 1)) }}, 0).0"
    ): "(?, 4)",
    (
        "cf.while_loop(fn (%s: int32) { less(%s, %w) }, fn (%s: int32) "
        f"{{ (ones(shape=[4], {F32}), add(%s, 1)) }}, 0).0"
    ): "(?, 4)",
}
O2 = "explicate,state-passing,partial-eval,simplify,cse,dce"


def joined_program(kind: str, parts: list[str]) -> str:
    if kind == "if":
        choice = f"if (%c) {{ {parts[0]} }} else {{ {parts[1]} }}"
    else:
        clauses = ",\n".join(
            f"{ctor} => {part}" for ctor, part in zip(["A", "B", "C"], parts, strict=False)
        )
        choice = f"match (if (%c) {{ A }} else {{ {'C' if len(parts) > 2 else 'B'} }}) {{\n{clauses},\n}}"
    ctors = "A, B, C" if kind == "match" and len(parts) > 2 else "A, B"
    return f"""type Pick {{ {ctors} }}
def @main(%a: Tensor[(?, 4), float32], %b: Tensor[(n, 4), float32], %c: bool, %w: int32) {{
  let %y = {choice};
  (%y, shape_of(%y), sum(%y))
}}"""


def assert_values_have_types(
    module: effir.IRModule, args: tuple[Any, ...], dims: dict[str, int]
) -> Any:
    value = effir.interpret(module, *args)
    problem = type_mismatch(value, module["main"].body.checked_type, module, dict(dims))
    assert problem is None, f"{problem}\n{astext(module)}"
    return value


@settings(max_examples=60, **COMMON)
@given(
    kind=st.sampled_from(["if", "match"]),
    parts=st.lists(st.sampled_from(sorted(BRANCHES)), min_size=2, max_size=3),
    rows=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    c=st.booleans(),
    w=st.integers(0, 2),
)
def test_joined_types_hold_the_values_before_and_after_optimisation(
    kind: str, parts: list[str], rows: tuple[int, int], c: bool, w: int
) -> None:
    if kind == "if":
        parts = parts[:2]
    text = joined_program(kind, parts)
    module = checked(text)
    rng = np.random.default_rng(len(text))
    a = rng.standard_normal((rows[0], 4)).astype(np.float32)
    b = rng.standard_normal((rows[1], 4)).astype(np.float32)
    args = (a, b, np.bool_(c), np.int32(w))
    want = assert_values_have_types(module, args, {"n": rows[1]})
    optimised = effir.check(pipeline(O2)(module))
    got = assert_values_have_types(optimised, args, {"n": rows[1]})
    for x, y in zip(want, got, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6)


@settings(max_examples=30, **COMMON)
@given(
    init=st.integers(0, 2),
    state=st.sampled_from(["Tensor[(?), float32]", "Tensor[(m), float32]"]),
    k=st.integers(0, 4),
)
def test_a_loop_state_holds_its_values_before_and_after_optimisation(
    init: int, state: str, k: int
) -> None:
    """A state of a declared ``?`` size (or the entry's own symbol ``m``,
    when it does not grow) keeps it, whatever the initial value's size."""
    grows = "?" in state
    step = f"concatenate((%s.1, ones(shape=[1], {F32})))" if grows else "add(%s.1, 1f)"
    module = checked(
        f"""def @main(%k: int32, %z: Tensor[(m), float32]) {{
          cf.while_loop(fn (%s: (int32, {state})) {{ less(%s.0, %k) }},
            fn (%s: (int32, {state})) {{ (sum(%s.1), (add(%s.0, 1), {step})) }},
            (0, %z))
        }}"""
    )
    args = (np.int32(k), np.zeros(init, np.float32))
    want = assert_values_have_types(module, args, {"m": init})
    got = assert_values_have_types(effir.check(pipeline(O2)(module)), args, {"m": init})
    np.testing.assert_allclose(want[0], got[0])
    np.testing.assert_allclose(want[1][1], got[1][1])


def test_the_gradient_through_a_joined_branch_has_the_branch_values_shape() -> None:
    """Before, the cotangent of a ``(?, 4)``/``(0, 4)`` ``if`` was made
    ``(0, 4)``: "multiply: shapes (0, 4) and (3, 4) do not broadcast"."""
    module = checked(
        f"""def @main(%x: Tensor[(?, 4), float32], %c: bool) {{
          let %y = if (%c) {{ %x }} else {{ zeros(shape=[0, 4], {F32}) }};
          sum(multiply(%y, %y))
        }}"""
    )
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for specialise in (True, False):
        grads = effir.value_and_grad(module, wrt=["x"], specialise=specialise)
        for c in (True, False):
            value, (dx,) = effir.interpret(grads, x, np.bool_(c), entry="main_grad")
            np.testing.assert_allclose(value, np.sum(x * x) if c else 0.0)
            np.testing.assert_allclose(dx, 2 * x if c else np.zeros_like(x))
