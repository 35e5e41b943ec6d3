"""ADTs from Python (effir/frontend/adts.py, script_match.py): ``@effir.adt``
types, constructors called eagerly and while building, Python's ``match``
in ``@effir.script`` (class patterns, keywords, captures, ``_``, nesting,
tuples, ``as``; exhaustiveness reported at the line), ``effir.match`` in
the builder and traced code, the prelude's List and Option by name, ADT
arguments under the input contract; and a property test: a random
``match`` scripted runs as Python runs it, and is refused as not
exhaustive exactly when Python would run no case for some tree."""

import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir import Tensor

from .helpers import define, marked_line

F32 = "float32"
VEC = Tensor[(2,), F32]


@effir.adt
class Shape:
    """A tree of vectors."""

    class Leaf:
        value: Tensor[(2,), F32]

    class Node:
        left: "Shape"
        right: "Shape"


@effir.adt(type_params=("A",))
class Pair:
    class Both:
        first: "A"  # noqa: F821  (the type's parameter)
        second: "A"  # noqa: F821

    class Neither:
        pass


def leaf(a: float, b: float) -> Shape.Leaf:
    return Shape.Leaf(np.array([a, b], F32))


TREE = Shape.Node(Shape.Node(leaf(1, 2), leaf(3, 4)), leaf(-1, 0.5))


def test_a_declared_type_prints_as_the_ir_type():
    module = effir.IRModule((), {"Shape": Shape.__effir_adt__.data()})
    assert effir.astext(module).split("\n", 1)[1].strip() == (
        "type Shape {\n  Leaf(Tensor[(2), float32]),\n  Node(Shape, Shape),\n}"
    )
    generic = effir.IRModule((), {"Pair": Pair.__effir_adt__.data()})
    assert "type Pair[A] {\n  Both(A, A),\n  Neither,\n}" in effir.astext(generic)
    assert effir.astext(effir.ModuleBuilder().get()) is not None
    assert str(Pair[VEC]) == "Pair[Tensor[(2), float32]]"
    assert str(effir.List[VEC]) == "List[Tensor[(2), float32]]"


def test_values_are_instances_with_named_fields():
    node = Shape.Node(left=leaf(1, 2), right=leaf(3, 4))
    assert isinstance(node, Shape.Node) and not isinstance(node, Shape.Leaf)
    assert isinstance(node, effir.runtime.values.ADTValue)
    np.testing.assert_array_equal(node.left.value, [1, 2])
    assert repr(Pair.Neither()) == "Pair.Neither()"
    match node:
        case Shape.Node(Shape.Leaf(a), right=Shape.Leaf(b)):
            np.testing.assert_array_equal(a + b, [4, 6])
        case _:
            raise AssertionError("Python's match did not match")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Shape.Leaf(), r"Shape.Leaf\(value\) is missing value"),
        (lambda: Shape.Leaf(1, 2), r"Shape.Leaf\(value\) takes 1 field\(s\), got 2"),
        (lambda: Shape.Leaf(val=1), r"Shape.Leaf\(value\) has no field 'val'"),
        (lambda: Shape.Node(1, 2, left=3), r"got two values for 'left'"),
    ],
)
def test_constructor_arguments_are_checked(make, message):
    with pytest.raises(effir.FrontendError, match=message):
        make()


def test_declarations_that_are_refused():
    with pytest.raises(effir.FrontendError, match="declares no constructor"):

        @effir.adt
        class Empty:
            pass

    with pytest.raises(effir.FrontendError, match="may not be named fields"):

        @effir.adt
        class Bad:
            class One:
                fields: VEC

    @effir.adt
    class Broken:
        class One:
            x: "NoSuchType"  # noqa: F821

    with pytest.raises(effir.FrontendError, match="cannot evaluate the annotation 'NoSuchType'"):
        Broken.__effir_adt__.data()
    with pytest.raises(effir.FrontendError, match="the type Pair takes 1 type argument"):
        effir.frontend.as_type(Pair)


def test_a_declaration_under_postponed_annotations():
    # ``from __future__ import annotations`` makes every annotation a
    # string, a quoted one a quoted string: both name the type
    ns = define(
        """
        from __future__ import annotations
        from effir import Tensor
        @effir.adt
        class Rope:
            class Piece:
                text: Tensor[(2,), "float32"]
            class Join:
                left: "Rope"
                right: Rope
        """
    )
    data = ns["Rope"].__effir_adt__.data()
    assert [effir.astext(t) for t in data.constructors[0].inputs] == ["Tensor[(2), float32]"]
    assert [effir.astext(t) for t in data.constructors[1].inputs] == ["Rope", "Rope"]


def test_the_prelude_list_and_option_by_name():
    xs = effir.Cons(np.float32(1), effir.Cons(np.float32(2), effir.Nil()))
    assert isinstance(xs, effir.List.Cons) and isinstance(xs.tail.tail, effir.Nil)
    assert isinstance(effir.Option.None_(), effir.Option.None_)
    ns = define(
        """
        from effir import Tensor
        @effir.script
        def total(xs: effir.List[Tensor[(), "float32"]]) -> Tensor[(), "float32"]:
            match xs:
                case effir.Cons(head, tail):
                    return head + total(tail)
                case effir.Nil():
                    return np.float32(0)

        @effir.script
        def first(xs: effir.List[Tensor[(), "float32"]]) -> effir.Option[Tensor[(), "float32"]]:
            match xs:
                case effir.Cons(head, _):
                    return effir.Some(head)
                case _:
                    return effir.Option.None_()
        """
    )
    assert effir.interpret(ns["total"], xs) == 3
    assert ns["total"](xs) == 3
    got = effir.interpret(ns["first"], xs)
    assert isinstance(got, effir.Some) and got.value == 1
    assert isinstance(effir.interpret(ns["first"], effir.Nil()), effir.Option.None_)
    module = ns["first"].module
    assert set(module.type_defs) == {"List", "Option"}
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)


SCRIPTED = """
from effir import Tensor
from tests.frontend.test_adts import Shape, Pair, VEC

@effir.script
def total(t: Shape) -> VEC:
    match t:
        case Shape.Leaf(v):
            return v
        case Shape.Node(left, right):
            return total(left) + total(right)

@effir.script
def shallow(t: Shape, x: VEC) -> VEC:
    match t:
        case Shape.Node(Shape.Leaf(a), right=Shape.Leaf(value=b)):
            y = a * b
        case Shape.Node(Shape.Node(_, _), _) as whole:
            y = total(whole) * 2.0
        case Shape.Node(left=l):
            y = -total(l)
        case leaf:
            y = total(leaf) + x
    return y + 1.0

@effir.script
def pairs(p: Pair[VEC], q: (VEC, VEC)) -> VEC:
    match (q):
        case (a, b):
            s = a - b
    match p:
        case Pair.Both(first, second):
            return first * second + s
        case Pair.Neither():
            return s

@effir.script
def mirror(t: Shape) -> Shape:
    match t:
        case Shape.Leaf(v):
            return Shape.Leaf(-v)
        case Shape.Node(l, r):
            return Shape.Node(mirror(r), mirror(l))

@effir.script
def count_in_loop(xs: Tensor[("n", 2), "float32"], t: Shape) -> VEC:
    acc = np.zeros((2,), "float32")
    for x in xs:
        match t:
            case Shape.Leaf(v):
                acc = acc + v * x
            case _:
                acc = acc - x
    return acc
"""


@pytest.fixture(scope="module")
def scripted():
    return define(SCRIPTED)


def test_scripted_match_equals_python(scripted):
    x = np.array([0.5, -2], F32)
    np.testing.assert_array_equal(effir.interpret(scripted["total"], TREE), [3, 6.5])
    for t in (TREE, TREE.left, leaf(1, 1), Shape.Node(TREE, TREE), Shape.Node(leaf(0, 1), TREE)):
        got = effir.interpret(scripted["shallow"], t, x)
        np.testing.assert_allclose(got, scripted["shallow"](t, x), rtol=1e-6)
    both = Pair.Both(np.ones(2, F32), np.full(2, 3, F32))
    q = (np.ones(2, F32), np.zeros(2, F32))
    np.testing.assert_array_equal(effir.interpret(scripted["pairs"], both, q), [4, 4])
    np.testing.assert_array_equal(effir.interpret(scripted["pairs"], Pair.Neither(), q), [1, 1])
    xs = np.arange(6, dtype=F32).reshape(3, 2)
    for t in (leaf(2, 3), TREE):
        np.testing.assert_array_equal(
            effir.interpret(scripted["count_in_loop"], xs, t), scripted["count_in_loop"](xs, t)
        )


def test_scripted_constructors_build_values(scripted):
    got = effir.interpret(scripted["mirror"], TREE)
    want = scripted["mirror"](TREE)
    assert repr(got) == repr(want)
    assert isinstance(got, Shape.Node) and isinstance(got.left, Shape.Leaf)
    module = scripted["mirror"].module
    assert list(module.type_defs) == ["Shape"]
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)


def test_a_python_tree_is_a_constant(scripted):
    ns = define(
        """
        from tests.frontend.test_adts import Shape, TREE, VEC
        @effir.script
        def fixed(x: VEC) -> Shape:
            return Shape.Node(TREE, Shape.Leaf(x))
        """
    )
    x = np.array([5, 6], F32)
    assert repr(effir.interpret(ns["fixed"], x)) == repr(ns["fixed"](x))


MATCH_ERRORS = [
    (
        """
        def f(t: Shape) -> VEC:
            match t:  # <-
                case Shape.Leaf(v):
                    return v
        """,
        "match is not exhaustive: no case matches Node(_, _)",
        "add a case for it, or end with `case _:`",
    ),
    (
        """
        def f(t: Shape) -> VEC:
            match t:  # <-
                case Shape.Node(Shape.Leaf(v), _):
                    return v
                case Shape.Leaf(v):
                    return v
        """,
        "no case matches Node(Node(_, _), _)",
        None,
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Leaf(v) if v > 0:  # <-
                    return v
                case _:
                    return x
        """,
        "a guard (case ... if ...) is not supported",
        "test the condition with an if inside the case",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Leaf(v) | Shape.Node(v, _):  # <-
                    return x
        """,
        "an or-pattern (|) is not supported",
        "write one case per constructor",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case 0:  # <-
                    return x
        """,
        "a literal or value pattern is not supported",
        "compare with if/elif",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Node(Shape.Leaf(v) as l, _):  # <-
                    return x
                case _:
                    return x
        """,
        "an `as` pattern inside another pattern is not supported",
        "name the part where it is",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case np.ndarray():  # <-
                    return x
        """,
        "np.ndarray is not the constructor of an effir type",
        "declare the type with @effir.adt",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Leaf(v, w):  # <-
                    return x
                case _:
                    return x
        """,
        "Shape.Leaf has 1 field(s), this pattern gives 2",
        "Shape.Leaf(value)",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Leaf(valu=v):  # <-
                    return x
                case _:
                    return x
        """,
        "Shape.Leaf has no field valu",
        "its fields: value",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Node(l, left=r):  # <-
                    return x
                case _:
                    return x
        """,
        "the field left of Shape.Node is matched twice",
        None,
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:
                case Shape.Leaf(v):  # <-
                    y = v
                case _:
                    return x
        """,
        "this case of the match does not return a value",
        "return in every case (or after the match)",
    ),
    (
        """
        def f(t: Shape, x: VEC) -> VEC:
            match t:  # <-
                case Shape.Leaf(v):
                    y = v
                case _:
                    pass
            return y
        """,
        "y is assigned in only some cases of this match and used after it",
        "give y a value before the match, or in every case",
    ),
]


@pytest.mark.parametrize(("source", "message", "hint"), MATCH_ERRORS)
def test_match_errors_point_at_the_line(source, message, hint):
    text = "from tests.frontend.test_adts import Shape, VEC\n@effir.script\n"
    text += textwrap.dedent(source).strip("\n") + "\n"
    ns = define(text)
    with pytest.raises(effir.FrontendError) as caught:
        _ = ns["f"].module
    err = caught.value
    assert message in err.message
    if hint is not None:
        assert hint in err.hint
    assert err.span.line == marked_line(text)


# --------------------------------------------------------- effir.match
def embed(t, w):
    return effir.match(
        t,
        {
            Shape.Leaf: lambda value: np.tanh(value * w),
            Shape.Node: lambda left, right: embed(left, w) + embed(right, w),
        },
    )


def test_effir_match_eagerly_and_built():
    w = np.array([0.5, 2.0], F32)
    eager = embed(TREE, w)
    mb = effir.ModuleBuilder()
    t, wv = effir.var("t", Shape), effir.var("w", VEC)
    # a recursive walk in the builder: a global function calling itself
    with mb.function("embed", [t, wv], ret_type=VEC):
        mb.ret(
            effir.match(
                t,
                {
                    Shape.Leaf: lambda value: effir.op.tanh(value * wv),
                    Shape.Node: lambda l, r: (
                        effir.call(mb.global_var("embed"), l, wv)
                        + effir.call(mb.global_var("embed"), r, wv)
                    ),
                },
            )
        )
    module = mb.get()
    assert list(module.type_defs) == ["Shape"]
    np.testing.assert_allclose(effir.interpret(module, TREE, w, entry="embed"), eager, rtol=1e-6)


def test_effir_match_in_traced_code_with_a_default():
    def head_or(xs, x):
        return effir.match(xs, {effir.Cons: lambda head, tail: head}, default=lambda: x)

    traced = effir.trace(head_or, effir.List[VEC], VEC)
    x = np.ones(2, F32)
    xs = effir.Cons(np.zeros(2, F32), effir.Nil())
    np.testing.assert_array_equal(effir.interpret(traced, xs, x), [0, 0])
    np.testing.assert_array_equal(effir.interpret(traced, effir.Nil(), x), x)
    np.testing.assert_array_equal(head_or(effir.Nil(), x), x)


@pytest.mark.parametrize(
    ("cases", "kwargs", "message"),
    [
        ({Shape.Leaf: lambda value: value}, {}, "no case for Shape.Node"),
        ({Shape.Leaf: lambda v: v, effir.Cons: lambda h, t: h}, {}, "mix the types Shape and List"),
        ({np.ndarray: lambda v: v}, {}, "is not an effir constructor"),
        ({}, {}, "takes the value and a dict from constructors to functions"),
        ({Shape.Leaf: 3}, {"default": lambda: 0}, "the case of Leaf is not a function"),
    ],
)
def test_effir_match_errors(cases, kwargs, message):
    with pytest.raises(effir.FrontendError, match=message):
        effir.match(TREE, cases, **kwargs)


# ------------------------------------------------- the input contract
def test_adt_arguments_are_converted_and_checked(scripted):
    # Python numbers in a field become the declared dtype
    got = effir.interpret(scripted["total"], Shape.Leaf([1.0, 2.0]))
    assert got.dtype == np.float32
    with pytest.raises(effir.ArgumentError, match="expects Shape, got a tuple"):
        effir.interpret(scripted["total"], (1, 2))
    with pytest.raises(effir.ArgumentError, match=r"expects Shape \(made by Leaf, Node\), got a "):
        effir.interpret(scripted["total"], effir.Nil())
    with pytest.raises(
        effir.ArgumentError,
        match=r"%t of @total, field 0 of Node, field 0 of Leaf expects Tensor\[\(2\), float32\], got Tensor\[\(2\), int32\]",
    ):
        effir.interpret(scripted["total"], Shape.Node(Shape.Leaf(np.ones(2, "int32")), TREE))
    with pytest.raises(effir.ArgumentError, match=r"expects Tensor\[\(2\), float32\], got"):
        effir.interpret(scripted["total"], Shape.Leaf(np.ones(3, F32)))
    plain = effir.runtime.values.ADTValue("Leaf", ())
    with pytest.raises(effir.ArgumentError, match=r"expects Shape: Leaf has 1 field\(s\), got 0"):
        effir.interpret(scripted["total"], plain)


def test_a_value_of_an_undeclared_type_is_not_a_constant():
    ns = define(
        """
        from tests.frontend.test_adts import VEC
        stray = effir.runtime.values.ADTValue("Stray", ())
        @effir.script
        def f(x: VEC):
            return x, stray
        """
    )
    with pytest.raises(effir.FrontendError, match="the constructor Stray whose type was not"):
        _ = ns["f"].module


# ------------------------------------------------------------- property
def _pattern(draw, depth: int, names: list[tuple[str, bool]], top: bool = False) -> str:
    """A pattern over Shape; each capture's name is appended to ``names``
    with whether it is a tree (else a vector). Irrefutable at the top only
    when ``top`` allows it (Python refuses a case after one)."""
    kinds = ["leaf", "node", "node_kw"] if depth < 2 else ["leaf"]
    if not top:
        kinds += ["wild", "capture"]
    kind = draw(st.sampled_from(kinds))
    if kind == "wild":
        return "_"
    if kind == "capture":
        names.append((f"v{len(names)}", True))
        return names[-1][0]
    if kind == "leaf":
        if draw(st.booleans()):
            return "Shape.Leaf(_)"
        names.append((f"v{len(names)}", False))
        return f"Shape.Leaf({names[-1][0]})"
    if kind == "node_kw":
        return f"Shape.Node(right={_pattern(draw, depth + 1, names)})"
    left = _pattern(draw, depth + 1, names)
    return f"Shape.Node({left}, {_pattern(draw, depth + 1, names)})"


@st.composite
def matches(draw) -> tuple[list[str], list[str]]:
    n = draw(st.integers(1, 4))
    last_irrefutable = draw(st.booleans())
    cases, bodies = [], []
    for k in range(n):
        names: list[tuple[str, bool]] = []
        if k == n - 1 and last_irrefutable:
            cases.append(draw(st.sampled_from(["_", "v0"])))
            names = [("v0", True)] if cases[-1] == "v0" else []
        else:
            cases.append(_pattern(draw, 0, names, top=True))
        terms = [
            f"{'total(' + v + ')' if tree else v} * {i + 2}.0" for i, (v, tree) in enumerate(names)
        ]
        bodies.append(" + ".join([*terms, f"ones * {k + 1}.0"]))
    return cases, bodies


def _trees(depth: int) -> list:
    """Every tree shape up to ``depth``: each witness a pattern of depth 2 can miss."""
    if depth == 0:
        return [leaf(1, -1)]
    smaller = _trees(depth - 1)
    return [leaf(2, 3)] + [Shape.Node(a, b) for a in smaller for b in smaller]


TREES = _trees(3)


@settings(max_examples=30)
@given(matches())
def test_a_scripted_match_runs_as_python_runs_it(drawn):
    cases, bodies = drawn
    lines = ["from tests.frontend.test_adts import Shape, VEC", "from effir import Tensor", ""]
    lines += ["@effir.script", "def total(t: Shape) -> VEC:", "    match t:"]
    lines += ["        case Shape.Leaf(v):", "            return v"]
    lines += ["        case Shape.Node(l, r):", "            return total(l) + total(r)", ""]
    lines += ["@effir.script", "def f(t: Shape, ones: VEC) -> VEC:", "    match t:"]
    for case, body in zip(cases, bodies, strict=True):
        lines += [f"        case {case}:", f"            return {body}"]
    lines += ["    return ones * -1000.0"]  # where Python runs no case
    ns = define("\n".join(lines) + "\n")
    ones = np.ones(2, F32)
    python = [ns["f"](t, ones) for t in TREES]
    falls_through = any(np.array_equal(p, -1000 * ones) for p in python)
    if falls_through:
        with pytest.raises(effir.FrontendError, match="match is not exhaustive"):
            _ = ns["f"].module
        return
    for t, want in zip(TREES, python, strict=True):
        np.testing.assert_allclose(effir.interpret(ns["f"], t, ones), want, rtol=1e-6)
