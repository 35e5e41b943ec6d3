"""Type inference agrees with the interpreter.

For random well-typed programs (``typed_programs.py``): every sub-expression
of ``main`` gets the type the generator built it to have (up to ``?`` dims,
see ``as_precise_as``), and the value ``effir.interpret`` returns for
``main`` has the type ``effir.check`` inferred for it (``type_mismatch``).
Programs with one deliberate type error are rejected with an
``effir.TypeError`` located inside ``main``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import effir
from effir.ir import (
    ANY,
    Call,
    Constructor,
    Expr,
    FuncType,
    GlobalTypeVar,
    IRModule,
    KeyType,
    Op,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    astext,
    is_atom,
    post_order,
    structural_diff,
)
from effir.runtime.values import ADTValue, PRNGKey, RefValue
from tests.support.type_mismatch import COMMON, type_mismatch

from .typed_programs import HELPERS, TypedProgram, ill_typed_programs, typed_programs


def value_matches_type(
    value: Any, ty: Type, module: IRModule = HELPERS, dims: dict[str, int] | None = None
) -> bool:
    """Whether ``value`` (as the interpreter represents it) has type ``ty``."""
    return type_mismatch(value, ty, module, dims) is None


# ------------------------------------------------------------- properties
def _check_parsed(program: TypedProgram) -> tuple[IRModule, str]:
    """Print and parse back (so that nodes have spans), checking the round trip."""
    text = effir.astext(program.module)
    module = effir.parse(text, source_name="main.effir")
    problem = structural_diff(module, program.module)
    assert problem is None, f"round trip: {problem}\n{text}"
    return module, text


def as_precise_as(inferred: Type, built: Type) -> bool:
    """``inferred`` is ``built``, except that some dims may be ``?``.

    Not exact equality: inference binds a variable still unknown to the first
    type it meets, and if that is a ``?`` annotation the variable stays ``?``
    when its static type arrives later (sound, less precise; see
    ``test_any_annotation_does_not_loosen_an_unknown_variable``)."""
    work = [(inferred, built)]
    while work:
        a, b = work.pop()
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            if a.dtype != b.dtype or len(a.shape) != len(b.shape):
                return False
            if any(x != y and x != ANY for x, y in zip(a.shape, b.shape, strict=True)):
                return False
            continue
        if type(a) is not type(b):
            return False
        if isinstance(a, TensorType | TupleType | FuncType | RefType | TypeCall | KeyType):
            if isinstance(a, TypeCall) and a.func.name != b.func.name:  # type: ignore[union-attr]
                return False
            ca = [c for c in a.children() if isinstance(c, Type)]
            cb = [c for c in b.children() if isinstance(c, Type)]
            if len(ca) != len(cb):
                return False
            work.extend(zip(ca, cb, strict=True))
        elif astext(a) != astext(b):
            return False
    return True


def _assert_typed_as_built(program: TypedProgram) -> None:
    """Every sub-expression of main has a type, the one it was built to have."""
    nodes = list(post_order(program.module["main"]))
    # Named callees (operators, globals) and constructors (also those in
    # patterns) are not values: inference gives them no type of their own.
    callees = {id(n.callee) for n in nodes if isinstance(n, Call) and is_atom(n.callee)}
    for node in nodes:
        if isinstance(node, Expr) and not isinstance(node, Constructor | Op):
            if id(node) not in callees:
                assert node.has_type, f"untyped: {astext(node)[:400]}\n{program!r}"
    in_main = {id(node) for node in nodes}
    for expr, built_as in program.expected:
        if id(expr) not in in_main:
            continue  # built, then dropped by a production that gave up
        assert as_precise_as(expr.checked_type, built_as), (
            f"inferred {astext(expr.checked_type)} for {astext(expr)[:400]}, "
            f"built as {astext(built_as)}\n{program!r}"
        )


@settings(max_examples=300, **COMMON)
@given(typed_programs())
def test_inferred_type_of_main_matches_the_interpreted_value(program: TypedProgram) -> None:
    effir.check(program.module)
    _assert_typed_as_built(program)
    # The value of main, run from the printed text, has main's type.
    module, text = _check_parsed(program)
    effir.check(module)
    inferred = module["main"].body.checked_type
    assert as_precise_as(inferred, program.result_type), (
        f"inferred {astext(inferred)}, built as {astext(program.result_type)}\n{text}"
    )
    value = effir.interpret(module, *program.args)
    problem = type_mismatch(value, inferred, module, {"n": program.n_size})
    assert problem is None, f"{problem}\n{text}"


@settings(max_examples=150, **COMMON)
@given(ill_typed_programs())
def test_programs_with_a_type_error_are_rejected_with_a_location(program: TypedProgram) -> None:
    module, text = _check_parsed(program)
    with pytest.raises(effir.TypeError) as info:
        effir.check(module)
    main = module["main"]
    assert main.span is not None
    for error in info.value.errors:  # errors[0] first: the one users see first
        assert error.span is not None, f"{program.mutation}: {error.message} has no span\n{text}"
        assert main.span.start <= error.span.start < main.span.end, (
            f"{program.mutation}: {error} is not inside @main\n{text}"
        )


# ------------------------------------------------- value_matches_type itself
def test_value_matches_type_accepts_matching_values() -> None:
    f32 = np.zeros((2, 3), np.float32)
    assert value_matches_type(f32, TensorType((2, 3), "float32"))
    assert value_matches_type(f32, TensorType((ANY, "n"), "float32"))
    pair = (f32, np.zeros((3, 2), np.float32))
    two = (TensorType(("n", "m"), "float32"), TensorType(("m", "n"), "float32"))
    assert value_matches_type(pair, TupleType(two))
    option = TypeCall(GlobalTypeVar("Option"), (TensorType((2, 3), "float32"),))
    assert value_matches_type(ADTValue("Some", (f32,)), option)
    assert value_matches_type(ADTValue("None"), option)
    assert value_matches_type(RefValue(PRNGKey([1, 2])), RefType(KeyType()))


def test_value_matches_type_rejects_mismatches() -> None:
    f32 = np.zeros((2, 3), np.float32)
    t = TensorType((2, 3), "float32")
    assert not value_matches_type(np.zeros((3, 2), np.float32), t)  # shape
    assert not value_matches_type(np.zeros((2, 3), np.int32), t)  # dtype
    assert not value_matches_type(np.zeros((2, 3, 1), np.float32), t)  # rank
    assert not value_matches_type((f32, f32), TupleType((t,)))  # tuple arity
    assert not value_matches_type((f32,), TupleType((t, t)))
    assert not value_matches_type(f32, TupleType((t,)))
    # one size per symbolic dim, also against sizes known from the arguments
    sym = TensorType(("n", "n"), "float32")
    assert not value_matches_type(f32, sym)
    assert not value_matches_type(np.zeros((3, 3), np.float32), sym, dims={"n": 2})
    assert not value_matches_type(PRNGKey([1, 2]), t)
    assert not value_matches_type(f32, KeyType())
    option = TypeCall(GlobalTypeVar("Option"), (t,))
    assert not value_matches_type(ADTValue("Some", (np.zeros(3, np.float32),)), option)
    assert not value_matches_type(ADTValue("Cons", (f32, ADTValue("Nil"))), option)
    assert not value_matches_type(ADTValue("Some", ()), option)
    assert not value_matches_type(RefValue(f32), RefType(KeyType()))
    assert not value_matches_type(f32, FuncType((), t))
    assert type_mismatch(np.zeros((3, 2), np.float32), t, HELPERS) is not None


# ------------------------------------- what the properties found, pinned down
HEADER = '#[version = "0.0.5"]\n'


def test_rule_d_renames_the_dims_of_an_inferred_result_type() -> None:
    """[RULE TYPE-CALLDIMS] also when the callee's result type is inferred, not annotated:
    the caller must see its own dims, never the callee's ``n``."""
    module = effir.parse(
        HEADER
        + """
        def @rowsum(%x: Tensor[(n, m), float32]) { sum(%x, axis=[1]) }
        def @main(%a: Tensor[(2, 3), float32]) { @rowsum(%a) }
        """
    )
    effir.check(module)
    assert astext(module["main"].body.checked_type) == "Tensor[(2), float32]"
    value = effir.interpret(module, np.ones((2, 3), np.float32))
    assert value_matches_type(value, module["main"].body.checked_type)


def test_any_annotation_does_not_loosen_an_unknown_variable() -> None:
    """Annotating ``%y`` with a ``?`` dim should not change the type of ``%p``."""
    module = effir.parse(
        HEADER
        + """
        def @main(%a: Tensor[(2), float32]) {
          let %f = fn (%p) { let %y: Tensor[(?), float32] = %p; %p };
          %f(%a)
        }
        """
    )
    effir.check(module)
    assert astext(module["main"].body.checked_type) == "Tensor[(2), float32]"
