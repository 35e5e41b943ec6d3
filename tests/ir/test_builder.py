"""The let-builder and tuple layouts (effir/ir/builder.py)."""

from __future__ import annotations

import pytest

from effir.ir.builder import LetBuilder, TupleLayout, fresh_name
from effir.ir.diagnostics import Source, Span
from effir.ir.expr import Let, Tuple, TupleGetItem, Var
from effir.ir.printer import astext

SOURCE = Source("b.effir", "let %x = 1;\n")
SPAN = Span(SOURCE, 0, 4)
OTHER = Span(SOURCE, 4, 8)


def test_emit_and_finish_build_a_let_chain_in_order() -> None:
    b = LetBuilder()
    x = Var("x")
    one = b.emit(b.const(1), "one")
    two = b.emit(b.call_op("add", x, one), "two")
    body = b.finish(b.tuple([one, two]))
    assert isinstance(body, Let) and body.var is one
    assert isinstance(body.body, Let) and body.body.var is two
    assert isinstance(body.body.body, Tuple)
    assert "let %one = 1;" in astext(body)
    assert "add(%x, %one)" in astext(body)


def test_finish_without_bindings_is_the_result() -> None:
    b = LetBuilder()
    x = Var("x")
    assert b.finish(x) is x


def test_span_scope_locates_every_node_built_inside_and_is_restored() -> None:
    b = LetBuilder()
    with b.span(SPAN):
        v = b.emit(b.get(Var("t"), 0), "v")
        with b.span(OTHER):
            w = b.var("w")
        u = b.var("u")
    after = b.var("after")
    assert v.span is SPAN and b.bindings[0][1].span is SPAN
    assert w.span is OTHER and u.span is SPAN
    assert after.span is None
    let = b.finish(v)
    assert isinstance(let, Let) and let.span is SPAN  # a let carries its value's span
    assert b.child().current_span is None
    with b.span(SPAN):
        assert b.child().current_span is SPAN


def test_finish_builds_a_long_chain_without_recursion() -> None:
    b = LetBuilder()
    last = b.emit(b.const(0), "x")
    for _ in range(100_000):
        last = b.emit(b.call_op("negative", last), "x")
    chain = b.finish(last)
    depth = 0
    while isinstance(chain, Let):
        depth, chain = depth + 1, chain.body
    assert depth == 100_001


def test_pop_takes_back_the_last_binding() -> None:
    b = LetBuilder()
    b.emit(b.const(1), "a")
    var, value = b.pop()
    assert var.name_hint == "a" and len(b) == 0 and value.data == 1


def test_fresh_name() -> None:
    assert fresh_name("f", {"g"}) == "f"
    assert fresh_name("f", {"f", "f_1"}) == "f_2"


def test_tuple_layout_builds_and_reads_fields_by_name() -> None:
    layout = TupleLayout("state", "go", ("counter", 1), ("cells", 2))
    assert len(layout) == 5
    assert layout.index("go") == 1 and list(layout.positions("cells")) == [3, 4]
    b = LetBuilder()
    s, g, k, c1, c2 = (Var(n) for n in ("s", "g", "k", "c1", "c2"))
    value = layout.build(b, state=s, go=g, counter=[k], cells=[c1, c2])
    assert value.fields == (s, g, k, c1, c2)
    carry = Var("carry")
    go = layout.get(b, carry, "go")
    first, second = layout.get_group(b, carry, "cells", ["a", "b"])
    got = [value for _, value in b.bindings]
    assert all(isinstance(v, TupleGetItem) and v.tuple_value is carry for v in got)
    assert [v.index for v in got] == [1, 3, 4]
    assert (go.name_hint, first.name_hint, second.name_hint) == ("go", "a", "b")
    assert layout.item(b, carry, "state").index == 0


def test_tuple_layout_with_an_empty_group() -> None:
    layout = TupleLayout("state", ("counter", 0), ("cells", 1))
    b = LetBuilder()
    s, c = Var("s"), Var("c")
    assert layout.build(b, state=s, counter=[], cells=[c]).fields == (s, c)
    assert list(layout.positions("cells")) == [1]


def test_tuple_layout_refuses_misuse() -> None:
    layout = TupleLayout("state", ("cells", 2))
    b = LetBuilder()
    s = Var("s")
    with pytest.raises(KeyError):
        layout.index("cells")  # a group, not a field
    with pytest.raises(KeyError):
        layout.positions("state")
    with pytest.raises(KeyError):
        layout.index("nope")
    with pytest.raises(KeyError):
        layout.build(b, state=s)  # a field missing
    with pytest.raises(ValueError):
        layout.build(b, state=s, cells=[s])  # the group takes two
    with pytest.raises(ValueError):
        TupleLayout("a", "a")
