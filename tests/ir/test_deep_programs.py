"""Deep programs print, parse, compare, hash, check and rewrite at Python's
default recursion limit (no recursion proportional to program size)."""

import pytest

import effir
from effir.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    Let,
    Mutator,
    TensorType,
    Tuple,
    Var,
    get_op,
    post_order,
)

VEC = TensorType((4,), "float32")


pytestmark = pytest.mark.usefixtures("default_recursion_limit")


class EveryField(Mutator):
    """A mutator that walks every field (binders and types too) and rewrites nothing."""

    binders = True
    types = True


def roundtrip_everything(mod: IRModule) -> None:
    text = effir.astext(mod)
    again = effir.parse(text)
    effir.assert_structural_equal(again, mod)
    assert effir.structural_hash(again) == effir.structural_hash(mod)
    assert effir.astext(again) == text
    effir.check_well_formed(again)
    rebuilt = EveryField().mutate(again["main"])
    assert rebuilt is again["main"]  # nothing to rewrite: identity is kept


def test_100k_binding_let_chain():
    x = Var("x", VEC)
    add = get_op("add")
    bindings = []
    previous = x
    for i in range(100_000):
        var = Var(f"v{i}")
        bindings.append((var, Call(add, (previous, previous))))
        previous = var
    body = previous
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    roundtrip_everything(IRModule({"main": Function((x,), body)}))


def test_10k_nested_ifs():
    x = Var("x", VEC)
    c = Var("c", TensorType((), "bool"))
    body = x
    for _ in range(10_000):
        body = If(c, body, x)
    roundtrip_everything(IRModule({"main": Function((x, c), body)}))


def test_10k_nested_ifs_in_the_else_branch():
    x = Var("x", VEC)
    c = Var("c", TensorType((), "bool"))
    body = x
    for _ in range(10_000):
        body = If(c, x, body)
    roundtrip_everything(IRModule({"main": Function((x, c), body)}))


def test_10k_nested_calls_in_argument_position():
    x = Var("x", VEC)
    y = Var("y")
    body = x
    for _ in range(10_000):
        body = Call(GlobalVar("f"), (body,))
    mod = IRModule({"f": Function((y,), y), "main": Function((x,), body)})
    roundtrip_everything(mod)


def test_10k_nested_operator_calls_and_infix_chain():
    x = Var("x", VEC)
    body = x
    for _ in range(10_000):
        body = Call(get_op("negative"), (body,))
    roundtrip_everything(IRModule({"main": Function((x,), body)}))
    # 10,000 infix operators in one expression are parsed by a loop, too.
    text = '#[version = "0.0.5"]\ndef @main(%x) {\n  %x' + " + %x" * 10_000 + "\n}\n"
    assert len(post_order(effir.parse(text)["main"])) > 10_000


def test_10k_element_tuple():
    x = Var("x", VEC)
    roundtrip_everything(IRModule({"main": Function((x,), Tuple((x,) * 10_000))}))


def test_10k_nested_closures():
    x = Var("x", VEC)
    body = x
    for i in range(10_000):
        body = Function((Var(f"p{i}"),), body)
    roundtrip_everything(IRModule({"main": Function((x,), body)}))
