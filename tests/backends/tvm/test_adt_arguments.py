"""ADT values at the compiled boundary (runtime/signature.py
[RULE RUNTIME-ADTARG]): a compiled entry takes and returns ADT values, converted to and
from the VM's tagged tuples, with the interpreter's input contract (the
same conversions and ArgumentErrors); long lists without recursion; the
signature's type definitions through an export and ``effir.load``; a
type with a field no caller can give refused at compile time. Compiled
code runs in a subprocess (tests/support/isolated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.backends.tvm.runtime.signature import AdtSpec, Signature, TensorSpec, adt_defs
from tests.frontend.helpers import define
from tests.support.isolated import run_isolated

F32 = "float32"

SOURCE = """
from effir import Tensor

@effir.adt
class Expr:
    class Lit:
        value: Tensor[(2,), "float32"]
    class Add:
        left: "Expr"
        right: "Expr"
    class Scale:
        by: Tensor[(), "float32"]
        inner: "Expr"

@effir.script
def simplify(e: Expr) -> Expr:
    match e:
        case Expr.Add(Expr.Lit(a), Expr.Lit(b)):
            return Expr.Lit(a + b)
        case Expr.Add(l, r):
            return Expr.Add(simplify(l), simplify(r))
        case Expr.Scale(k, inner):
            return Expr.Scale(k, simplify(inner))
        case lit:
            return lit

@effir.script
def evaluate(e: Expr) -> Tensor[(2,), "float32"]:
    match e:
        case Expr.Lit(v):
            return v
        case Expr.Add(l, r):
            return evaluate(l) + evaluate(r)
        case Expr.Scale(k, inner):
            return evaluate(inner) * k

@effir.script
def total(xs: effir.List[Tensor[(), "float32"]], acc: Tensor[(), "float32"]) -> Tensor[(), "float32"]:
    match xs:
        case effir.Cons(h, t):
            return total(t, acc + h)
        case _:
            return acc

@effir.script
def pair_up(x: Tensor[(2,), "float32"]) -> (Expr, effir.Option[Tensor[(2,), "float32"]]):
    return Expr.Scale(np.float32(2), Expr.Lit(x)), effir.Some(x * 3.0)
"""


def _namespace() -> dict:
    return define(SOURCE)


def _sample(ns: dict) -> object:
    Expr = ns["Expr"]
    lit = lambda a, b: Expr.Lit(np.array([a, b], F32))  # noqa: E731
    return Expr.Scale(
        np.float32(0.5), Expr.Add(Expr.Add(lit(1, 2), lit(3, 4)), Expr.Add(lit(5, 6), lit(7, 0)))
    )


def check_values_cross_the_boundary() -> None:
    ns = _namespace()
    e = _sample(ns)
    compiled = effir.compile(ns["simplify"])
    got, want = compiled(e), effir.interpret(ns["simplify"], e)
    assert repr(got) == repr(want), (got, want)
    assert isinstance(got, ns["Expr"].Scale)
    np.testing.assert_array_equal(effir.compile(ns["evaluate"])(e), [8, 6])
    shape, option = effir.compile(ns["pair_up"])(np.array([1, 2], F32))
    assert isinstance(shape, ns["Expr"].Scale) and isinstance(option, effir.Some)
    np.testing.assert_array_equal(option.value, [3, 6])
    print("ok")


def check_long_lists_and_the_input_contract() -> None:
    ns = _namespace()
    xs = effir.Nil()
    for k in range(3000):  # converted with a stack: no Python recursion per link
        xs = effir.Cons(np.float32(k % 7), xs)
    compiled = effir.compile(ns["total"])
    assert compiled(xs, np.float32(0)) == effir.interpret(ns["total"], xs, np.float32(0))
    # Python numbers in fields are converted as the interpreter converts them
    assert compiled(effir.Cons(1.5, effir.Nil()), 0.0) == 1.5
    evaluate = effir.compile(ns["evaluate"])
    for bad in [(1, 2), effir.Nil(), ns["Expr"].Lit(np.ones(3, F32))]:
        messages = []
        for run in (evaluate, lambda v: effir.interpret(ns["evaluate"], v)):
            try:
                run(bad)
            except effir.ArgumentError as err:
                messages.append(err.message.split(": ", 1)[-1])
        assert len(messages) == 2 and messages[0] == messages[1], messages
    print("ok")


def check_export_and_load() -> None:
    import tempfile

    ns = _namespace()
    e = _sample(ns)
    compiled = effir.compile(ns["simplify"])
    want = compiled(e)
    with tempfile.TemporaryDirectory() as tmp:
        compiled.export(f"{tmp}/simplify")
        got = effir.load(f"{tmp}/simplify")(e)
    assert repr(got) == repr(want)
    print("ok")


CHECKS = [
    "check_values_cross_the_boundary",
    "check_long_lists_and_the_input_contract",
    "check_export_and_load",
]


@pytest.mark.parametrize("check", CHECKS)
def test_compiled(check: str) -> None:
    done = run_isolated(f"from tests.backends.tvm.test_adt_arguments import {check}; {check}()")
    assert done.check().stdout.strip().endswith("ok")


def test_the_signature_carries_its_types_through_json():
    ns = _namespace()
    module = effir.check(ns["simplify"].module)
    spec = AdtSpec("Expr")
    signature = Signature((("e", spec),), (), (), spec, adt_defs(module.type_defs, [spec]))
    back = Signature.from_json(signature.to_json(), "test")
    assert back.to_json() == signature.to_json()
    assert [c.name for c in back.types["Expr"].constructors] == ["Lit", "Add", "Scale"]
    plain = Signature((("x", TensorSpec((2,), F32)),), (), (), TensorSpec((2,), F32))
    assert "adts" not in plain.to_json()  # manifests without ADTs are unchanged


def test_a_field_no_caller_can_give_is_refused():
    module = effir.parse(
        """#[version = "0.0.5"]
type Holder { Holds(fn (float32) -> float32) }
def @main(%h: Holder, %x: float32) -> float32 {
  match (%h) { Holds(%f) => %f(%x) }
}
"""
    )
    with pytest.raises(effir.CompileError) as caught:
        effir.compile(module)
    assert "field 0 of Holds is fn (float32) -> float32" in caught.value.message
