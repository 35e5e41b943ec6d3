"""The block view of a let chain (effir/ir/block.py) and the loop it shares
with the let-builder (``let_chain``)."""

from __future__ import annotations

import dataclasses

import pytest

import effir
from effir.ir.block import Block
from effir.ir.builder import LetBuilder, let_chain
from effir.ir.expr import Call, Let, Tuple, Var
from effir.ir.op import call_op, get_op
from effir.ir.structural import structural_equal

TEXT = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %c: bool) {
  let %a = add(%x, %x);
  let %b = if (%c) { let %n = negative(%a); %n } else { %a };
  let %d = multiply(%a, %b);
  (%d, %a)
}
"""


def main_body():
    return effir.parse(TEXT)["main"].body


def test_a_block_is_its_lets_in_order_and_its_tail() -> None:
    body = main_body()
    block = Block.of(body)
    assert [let.var.name_hint for let in block.lets] == ["a", "b", "d"]
    assert len(block) == 3
    assert isinstance(block.tail, Tuple)
    assert block.expr is body
    assert block.bindings() == [(let.var, let.value) for let in block.lets]
    # The branch's let is a block of its own, not one of this block's lets.
    assert all(let.var.name_hint != "n" for let in block.lets)


def test_an_expression_that_is_not_a_let_is_a_block_without_bindings() -> None:
    x = Var("x")
    block = Block.of(x)
    assert block.lets == () and block.tail is x and block.expr is x
    assert block.rebuild([], x) is x


def test_until_ends_the_block_at_a_let_that_starts_its_own() -> None:
    body = main_body()
    third = body.body.body
    block = Block.of(body, until=lambda let: let is third)
    assert [let.var.name_hint for let in block.lets] == ["a", "b"]
    assert block.tail is third
    # ``until`` is not asked of the first let: a block has at least it.
    assert len(Block.of(body, until=lambda let: True)) == 1


def test_rebuilding_the_same_bindings_gives_back_the_same_node() -> None:
    body = main_body()
    block = Block.of(body)
    assert block.rebuild(block.bindings(), block.tail) is body


def test_rebuilding_keeps_the_unchanged_suffix_and_makes_the_rest_anew() -> None:
    body = main_body()
    block = Block.of(body)
    (a, a_value), b_binding, d_binding = block.bindings()
    changed = call_op("subtract", *a_value.args)
    rebuilt = block.rebuild([(a, changed), b_binding, d_binding], block.tail)
    assert isinstance(rebuilt, Let) and rebuilt is not body
    assert rebuilt.var is a and rebuilt.value is changed
    assert rebuilt.body is block.lets[1]  # the rest is the original chain
    assert rebuilt.span is changed.span  # a new let carries its value's span


def test_a_changed_tail_makes_every_let_anew() -> None:
    body = main_body()
    block = Block.of(body)
    tail = Tuple(block.tail.fields[::-1])
    rebuilt = block.rebuild(block.bindings(), tail)
    again = Block.of(rebuilt)
    assert again.tail is tail
    assert not any(new is old for new, old in zip(again.lets, block.lets, strict=True))
    assert [let.var for let in again.lets] == [let.var for let in block.lets]


def test_bindings_added_or_removed_rebuild_a_well_formed_chain() -> None:
    module = effir.parse(TEXT)
    block = Block.of(module["main"].body)
    (a, a_value), *rest = block.bindings()
    extra = Var("e")
    rebuilt = block.rebuild([(a, a_value), (extra, call_op("exp", a)), *rest], block.tail)
    assert [let.var.name_hint for let in Block.of(rebuilt).lets] == ["a", "e", "b", "d"]
    assert Block.of(rebuilt).lets[2] is block.lets[1]  # b and d are the originals
    fn = dataclasses.replace(module["main"], body=rebuilt)
    effir.check(effir.IRModule({"main": fn}))  # well formed and well typed
    removed = block.rebuild([(a, a_value), rest[1]], block.tail)  # %b was unused
    assert [let.var.name_hint for let in Block.of(removed).lets] == ["a", "d"]


def test_let_chain_is_what_finish_builds() -> None:
    b = LetBuilder()
    x = Var("x")
    one = b.emit(b.const(1), "one")
    two = b.emit(b.call_op("add", x, one), "two")
    tail = b.tuple([one, two])
    assert structural_equal(b.finish(tail), let_chain(b.bindings, tail))


@pytest.mark.usefixtures("default_recursion_limit")
def test_a_100k_binding_chain_is_read_and_rebuilt_by_loops() -> None:
    x = Var("x")
    negative = get_op("negative")
    bindings = []
    previous = x
    for i in range(100_000):
        var = Var(f"v{i}")
        bindings.append((var, Call(negative, (previous,))))
        previous = var
    chain = let_chain(bindings, previous)
    block = Block.of(chain)
    assert len(block) == 100_000 and block.tail is previous
    assert block.rebuild(block.bindings(), block.tail) is chain
    dropped = block.rebuild(block.bindings()[1:], block.tail)
    assert isinstance(dropped, Let) and dropped is block.lets[1]
