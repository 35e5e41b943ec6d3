"""partial-eval of polymorphic and ADT code stays well typed.

Two classes of defect made ``-O2`` (and ``effir.grad``, which partially
evaluates first) produce programs that no longer type-checked:

- A value whose type arguments its constructor does not fix (``B`` of
  ``T[X]``, ``Nil``) learnt them from the annotated parameter it was
  passed to; inlining the callee removed the parameter ("cannot infer the
  type of %b"). The residual binding now keeps the type (partial_eval
  ``underdetermined``; copies keep their expressions' types, and an
  instance substitutes its type parameters in them).
- An inlined polymorphic body shares atoms with its original: ``@id``
  used as a value in ``@iterate`` was typed once for both, with
  ``@iterate``'s rigid ``A`` ("expected fn (A) -> A, got fn (float32) ->
  float32"). A global function used as a value is now instantiated at each
  use, as a constructor is (infer_type ``_INSTANTIATED``).

The property runs random programs built from the prelude's list and tree
functions on known constructors and unknown values through
``partial-eval``: each result type-checks and computes what the program
computed. The compiled side is in
tests/backends/tvm/test_prelude_compiled.py."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.expr import Function, GlobalVar
from effir.ir.functor import pre_order
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.types import ANY, TensorType
from effir.passes.infra.pipeline import pipeline
from effir.passes.transforms.partial_eval import partial_eval
from effir.runtime.values import ADTValue
from tests.support.type_mismatch import COMMON

HEADER = '#[version = "0.0.5"]\n'
F = "Tensor[(), float32]"
O2 = "explicate,state-passing,partial-eval,simplify,cse,dce"

TUPLE_OF_ADTS = (
    HEADER
    + """type T[X] { A(X), B }
def @f(%p: (T[Tensor[(2), float32]], T[Tensor[(2), float32]])) -> Tensor[(2), float32] {
  match (%p) {
    (A(%a), %b) => %a,
    (B, _) => zeros(shape=[2], dtype="float32"),
  }
}
def @main(%x: Tensor[(2), float32]) {
  sum(multiply(@f((A(%x), B)), %x))
}
"""
)


def test_a_match_on_a_tuple_of_adts_whose_constructor_the_caller_knows() -> None:
    module = effir.check(effir.parse(TUPLE_OF_ADTS))
    x = np.array([1.0, -2.0], np.float32)
    optimised = effir.check(pipeline(O2)(module))
    assert effir.interpret(optimised, x) == effir.interpret(module, x) == np.float32(5.0)
    grads = effir.value_and_grad(module, wrt=["x"])
    value, (dx,) = effir.interpret(grads, x, entry="main_grad")
    assert value == np.float32(5.0)
    np.testing.assert_allclose(dx, 2 * x)


PRELUDE_RECURSION = (
    HEADER
    + f"""def @main(%x: {F}, %n: int32) {{
  let %f = fn (%y: {F}) {{ add(%y, 1f) }};
  let %t = Rose(%x, Cons(Rose(%x, Nil), Cons(Rose(%x, Nil), Nil)));
  let %u = @tmap(fn (%v: {F}) {{ multiply(%v, 2f) }}, %t);
  let %root = match (%u) {{ Rose(%v, _) => %v }};
  (@iterate(%f, %n)(%x), @size(%u), %root)
}}
"""
)


def test_recursive_prelude_functions_left_in_place_stay_well_typed() -> None:
    """``@iterate`` on an unknown count, ``@tmap`` and ``@size``: the
    recursion stays, the inlined first unfolding must type in ``@main``."""
    module = effir.check(effir.parse(PRELUDE_RECURSION, module=effir.prelude()))
    optimised = effir.check(pipeline(O2)(module))
    for n in (0, 3):
        args = (np.float32(1.5), np.int32(n))
        want = effir.interpret(module, *args)
        got = effir.interpret(optimised, *args)
        assert [float(v) for v in got] == [float(v) for v in want] == [1.5 + n, 3.0, 3.0]


def test_a_global_shared_by_two_functions_is_typed_at_each_use() -> None:
    """One ``@id`` node used as a value in two functions that instantiate
    it differently (what inlining a polymorphic body leaves)."""
    module = effir.parse(
        HEADER
        + f"""def @id[A](%x: A) -> A {{ %x }}
def @same[B](%f: fn (B) -> B) -> fn (B) -> B {{ @id }}
def @main(%f: fn ({F}) -> {F}) -> fn ({F}) -> {F} {{ @id }}
"""
    )
    shared = module["main"].body
    assert isinstance(shared, GlobalVar)
    same = module["same"]
    functions = dict(module.functions)
    functions["same"] = Function(same.params, shared, same.ret_type, same.type_params)
    effir.check(IRModule(functions, module.type_defs, module.cells))


def test_an_instance_keeps_the_types_of_its_expressions() -> None:
    """``@filter`` inlined on ``Nil``: the ``Nil`` its clause returns had
    its type only as an expression of ``@filter``'s body, in ``@filter``'s
    ``A``; the instance gives it ``@main``'s (before: "cannot infer the
    argument types of this call", at ``add``)."""
    module = effir.check(
        effir.parse(
            HEADER
            + f"""def @main(%x: {F}) {{
  let %r = @filter(fn (%e: {F}) {{ greater(%e, 0f) }}, Nil);
  let %t = (%r, Cons(%x, Nil));
  match (%t) {{ (Cons(%a, _), Cons(%b, _)) => add(%a, %b), (_, _) => %x }}
}}
""",
            module=effir.prelude(),
        )
    )
    after = effir.check(partial_eval(module))
    assert "@filter" not in effir.astext(after["main"])
    assert effir.interpret(after, np.float32(2)) == np.float32(2)


# ------------------------------------------------------------- property
# A program is made from a stream of choices: each list or scalar
# expression takes the next choice (and the streams' end gives a leaf).
LIST_LEAVES = ["Cons(%y, Nil)", "%l", "Cons(%x, Nil)"]
SCALAR_LEAVES = ["%x", "%y", "2f"]


class _Build:
    def __init__(self, choices: list[int]) -> None:
        self.choices = iter(choices)

    def pick(self) -> int | None:
        return next(self.choices, None)

    def lst(self, depth: int) -> str:
        c = self.pick() if depth > 0 else None
        if c is None:
            return LIST_LEAVES[depth % 3]
        d = depth - 1
        forms = [
            lambda: f"Cons({self.scalar(d)}, {self.lst(d)})",
            lambda: f"@rev({self.lst(d)})",
            lambda: f"@concat({self.lst(d)}, {self.lst(d)})",
            lambda: f"@map(fn (%e: {F}) {{ multiply(%e, {self.scalar(d)}) }}, {self.lst(d)})",
            lambda: f"@filter(fn (%e: {F}) {{ greater(%e, 0f) }}, {self.lst(d)})",
            lambda: (
                f"@map(fn (%p: ({F}, {F})) {{ add(%p.0, %p.1) }}, "
                f"@zip({self.lst(d)}, {self.lst(d)}))"
            ),
            lambda: (
                f"match (({self.lst(d)}, {self.lst(d)})) {{ (Cons(%a, %at), Cons(%b, _)) => "
                "Cons(add(%a, %b), %at), (_, %b) => %b, }"
            ),
            lambda: f"@foldl(@flip(Cons), Nil, {self.lst(d)})",
            lambda: (
                f"@iterate(fn (%q: List[{F}]) {{ Cons(%x, %q) }}, "
                f"{['%k', '1', '0'][depth % 3]})({self.lst(d)})"
            ),
        ]
        return forms[c % len(forms)]()

    def scalar(self, depth: int) -> str:
        c = self.pick() if depth > 0 else None
        if c is None:
            return SCALAR_LEAVES[depth % 3]
        d = depth - 1
        forms = [
            lambda: (
                f"@foldl(fn (%acc: {F}, %e: {F}) {{ add(%acc, multiply(%e, %e)) }}, "
                f"{self.scalar(d)}, {self.lst(d)})"
            ),
            lambda: f'cast(@length(Cons(%y, {self.lst(d)})), dtype="float32")',
            lambda: (
                f"match ((@tl(Cons(%y, {self.lst(d)})), {self.scalar(d)})) {{ "
                "(Cons(%a, _), %b) => multiply(%a, %b), (Nil, %b) => %b, }"
            ),
            lambda: f"@iterate(fn (%q: {F}) {{ multiply(%q, %x) }}, %k)({self.scalar(d)})",
            lambda: (
                f"@compose(fn (%q: {F}) {{ add(%q, %y) }}, "
                f"@id(fn (%q: {F}) {{ multiply(%q, %x) }}))({self.scalar(d)})"
            ),
            lambda: (
                f"cast(@size(@tmap(fn (%q: {F}) {{ %q }}, Rose({self.scalar(d)}, "
                'Cons(Rose(%x, Nil), Nil)))), dtype="float32")'
            ),
            lambda: (
                f"match (({self.lst(d)}, {self.lst(d)})) {{ (Cons(%a, _), Cons(%b, _)) => "
                f"add(%a, %b), (_, _) => {self.scalar(d)}, }}"
            ),
        ]
        return forms[c % len(forms)]()


def prelude_program(choices: list[int]) -> str:
    build = _Build(choices)
    start, items = build.scalar(2), build.lst(3)
    return (
        HEADER
        + f"""def @main(%x: {F}, %y: {F}, %l: List[{F}], %k: int32) {{
  @foldl(fn (%acc: {F}, %e: {F}) {{ add(%acc, %e) }}, {start}, {items})
}}
"""
    )


def _list(*values: float) -> Any:
    out = ADTValue("Nil", ())
    for v in reversed(values):
        out = ADTValue("Cons", (np.array(v, np.float32), out))
    return out


ARGS = (np.float32(0.7), np.float32(-1.2), _list(1.5, -0.5), np.int32(2))


@settings(max_examples=40, **COMMON)
@given(st.lists(st.integers(0, 20), max_size=14))
def test_partial_eval_of_prelude_code_is_well_typed_and_means_the_same(choices: list[int]) -> None:
    text = prelude_program(choices)
    module = effir.check(effir.parse(text, module=effir.prelude()))
    want = effir.interpret(module, *ARGS)
    after = effir.check(partial_eval(module))
    np.testing.assert_allclose(effir.interpret(after, *ARGS), want, rtol=1e-5)


# ------------------------------------------- symbolic dimensions inlined
# A global function's symbolic dimensions are its own, like implicit type
# parameters: inlined, its body must be the instance at the call site,
# written in the caller's sizes. Annotating the copy with the callee's
# checked types (the type of its ``Nil``, its closures' parameters) would
# name the callee's ``n`` in the caller, where it means nothing (or one of
# the caller's own dimensions of the same name) [RULE DIMS-BIND].

ROWS = """def @rows(%x: Tensor[(n, 3), float32]) {
  let %l = Nil;
  Cons(%x, %l)
}
def @scaled(%x: Tensor[(n, 3), float32]) {
  let %f = fn (%v: Tensor[(n, 3), float32]) { multiply(%v, 2f) };
  let %l: List[Tensor[(n, 3), float32]] = Nil;
  Cons(%f(%x), @rows(%x))
}
def @total(%l: List[Tensor[(n, 3), float32]]) -> Tensor[(), float32] {
  match (%l) { Cons(%h, _) => sum(%h), Nil => 0f }
}
"""

LEAK = HEADER + ROWS + "def @main(%x: Tensor[(2, 3), float32]) { @rows(%x) }\n"


def dims_named(node: Node) -> set[str]:
    """The symbolic dimensions ``node`` names in any type it holds."""
    return {
        d
        for n in pre_order(node)
        if isinstance(n, TensorType)
        for d in n.shape
        if isinstance(d, str) and d != ANY
    }


def assert_inlined_in_callers_dims(text: str, args: tuple[Any, ...]) -> None:
    """After partial-eval and -O2, @main has the type it had, names only its
    own dimensions, and computes what it computed."""
    module = effir.check(effir.parse(text))
    own = dims_named(module.functions["main"].checked_type)
    before = effir.astext(module.functions["main"].checked_type)
    want = effir.interpret(module, *args)
    for after in (partial_eval(module), pipeline(O2)(module)):
        effir.check(after)
        main = after.functions["main"]
        assert effir.astext(main.checked_type) == before
        assert dims_named(main) <= own, effir.astext(main)
        assert_same_value(effir.interpret(after, *args), want)


def assert_same_value(got: Any, want: Any) -> None:
    if isinstance(want, ADTValue):
        assert isinstance(got, ADTValue) and got.constructor == want.constructor
        assert len(got.fields) == len(want.fields)
        for g, w in zip(got.fields, want.fields, strict=True):
            assert_same_value(g, w)
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same_value(g, w)
    else:
        np.testing.assert_array_equal(got, want)


def test_an_inlined_list_of_rows_is_typed_in_the_callers_sizes() -> None:
    """The minimal program: @rows's ``Nil`` was pinned as
    ``List[Tensor[(n, 3), float32]]`` in @main."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_inlined_in_callers_dims(LEAK, (x,))


def test_a_callee_dimension_named_like_the_callers_is_still_the_callees() -> None:
    """@main's own ``n`` is not @rows's ``n``: the call on ``%y`` binds
    @rows's ``n`` to 2, the one on ``%x`` to @main's ``n``."""
    text = (
        HEADER
        + ROWS
        + """def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(2, 3), float32]) {
  (@scaled(%y), @total(@rows(%x)), @total(@scaled(%y)))
}
"""
    )
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.ones((2, 3), np.float32)
    assert_inlined_in_callers_dims(text, (x, y))


SIZED_ARGS = {"%s": (2, 3), "%p": ("n", 3), "%q": ("m", 3)}
CALLS = ["@rows({})", "@scaled({})", "@total(@rows({}))", "@total(@scaled({}))"]


@settings(max_examples=12, **COMMON)
@given(
    st.lists(
        st.tuples(st.sampled_from(CALLS), st.sampled_from(sorted(SIZED_ARGS))),
        min_size=1,
        max_size=4,
    )
)
def test_inlined_calls_of_dimension_polymorphic_functions(calls: list[tuple[str, str]]) -> None:
    params = ", ".join(
        f"{a}: Tensor[({', '.join(map(str, shape))}), float32]" for a, shape in SIZED_ARGS.items()
    )
    body = ", ".join(call.format(arg) for call, arg in calls)
    text = HEADER + ROWS + f"def @main({params}) {{ ({body},) }}\n"
    rng = np.random.default_rng(len(calls))
    args = tuple(
        rng.standard_normal(shape).astype(np.float32) for shape in [(2, 3), (4, 3), (1, 3)]
    )
    assert_inlined_in_callers_dims(text, args)
