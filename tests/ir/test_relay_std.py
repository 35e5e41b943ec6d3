"""Programs of Relay's standard library (prelude: lists, options, trees;
naturals; the gradient cell) parse, check and round-trip."""

import pytest

import effir
from tests.support.relay_std_programs import PROGRAMS, STD


@pytest.mark.parametrize("name", PROGRAMS)
def test_relay_std_roundtrip(name):
    module = effir.parse(PROGRAMS[name](), source_name=name)
    effir.check_well_formed(module)
    text = effir.astext(module)
    again = effir.parse(text)
    effir.assert_structural_equal(again, module)
    assert effir.astext(again) == text
    assert effir.structural_hash(again) == effir.structural_hash(module)


def test_prelude_contents():
    module = effir.parse(PROGRAMS["prelude+nat"]())
    assert set(module.type_defs) == {"List", "Option", "Tree", "nat"}
    for name in (
        "map",
        "foldl",
        "foldr",
        "zip",
        "unfoldr",
        "tmap",
        "size",
        "iterate",
        "nat_iterate",
    ):
        assert name in module
    assert not module["hd"].body.complete  # match? stays incomplete
    assert [len(f.type_params) for f in (module["map"], module["compose"])] == [2, 3]


# ---------------------------------------------------------------- Relay text
# What Relay's parser accepts, effir accepts: `extern type` (Relay's
# core.rly), a module whose body is an expression (it becomes @main), and
# files that use the prelude without defining it (parsed into the prelude).


def test_extern_type_as_in_relays_core_rly():
    module = effir.parse(
        '#[version = "0.0.4"]\nextern type Storage\nextern type Pair[A, B]\n'
        "def @keep(%s: Storage, %p: Pair[float32, int32]) -> Storage { %s }\n"
    )
    assert module.type_defs["Storage"].constructors == ()
    assert len(module.type_defs["Pair"].type_params) == 2
    effir.check(module)
    text = effir.astext(module)
    assert "extern type Storage\n" in text and "extern type Pair[A, B]\n" in text
    effir.assert_structural_equal(effir.parse(text), module)


@pytest.mark.parametrize(
    "body, result",
    [
        ("fn (%x: float32) { multiply(%x, 2f) }", None),
        ("@twice(3f)", 6.0),
        ("let %y = 1f; add(%y, 2f)", 3.0),
    ],
)
def test_a_module_body_expression_becomes_main(body, result):
    text = '#[version = "0.0.5"]\ndef @twice(%x: float32) { multiply(%x, 2f) }\n' + body
    module = effir.check(effir.parse(text))
    assert list(module.functions)[0] == "main"
    if result is None:
        assert effir.interpret(module, 4.0) == 8.0
    else:
        assert effir.interpret(module) == result
    assert effir.interpret(effir.check(effir.parse('#[version = "0.0.5"]\n2f'))) == 2.0


def test_a_body_expression_and_a_main_are_refused():
    with pytest.raises(effir.ParseError, match="@main is already defined") as err:
        effir.parse('#[version = "0.0.5"]\ndef @main() { 1f }\n2f')
    assert err.value.line == 3


def test_relays_nat_rly_parses_into_the_prelude():
    nat = effir.parse((STD / "nat.rly").read_text(), module=effir.prelude(), source_name="nat.rly")
    effir.check(nat)
    assert {"List", "Option", "Tree", "nat"} <= set(nat.type_defs)
    assert "map" in nat and "nat_add" in nat
    # The prelude itself is untouched (a module is immutable).
    assert "nat_add" not in effir.prelude()
    # nat.rly's own definitions use the prelude's: two plus one is three.
    program = effir.parse(
        '#[version = "0.0.5"]\ndef @main() { @nat_add(succ(succ(zero)), succ(zero)) }',
        module=nat,
    )
    value = effir.interpret(effir.check(program))
    depth = 0
    while value.constructor == "succ":
        value, depth = value.fields[0], depth + 1
    assert depth == 3


def test_a_definition_already_in_the_module_is_refused():
    with pytest.raises(effir.ParseError, match="@map is already defined in the module"):
        effir.parse('#[version = "0.0.5"]\ndef @map() { 1f }', module=effir.prelude())
    with pytest.raises(effir.ParseError, match="type List is already defined in the module"):
        effir.parse('#[version = "0.0.5"]\ntype List { Foo }', module=effir.prelude())


# ------------------------------------------------- the prelude, implicitly
# Relay parsed its std files into a module that held the prelude: a text
# that uses the prelude's names without defining them (nat.rly uses List,
# Cons, @hd, @tl) is parsed into effir.prelude(); one that uses none of them
# is a module of its own.


def test_relays_nat_rly_parses_alone_into_the_prelude():
    """Before, "unknown type List"."""
    nat = effir.parse((STD / "nat.rly").read_text(), source_name="nat.rly")
    explicit = effir.parse((STD / "nat.rly").read_text(), module=effir.prelude())
    effir.assert_structural_equal(nat, explicit)
    effir.check(nat)
    assert "map" in nat and "nat_nth" in nat


@pytest.mark.parametrize(
    "use, value",
    [
        ("@hd(Cons(2f, Nil))", 2.0),  # a global and constructors
        ("match (Some(3f)) { Some(%v) => %v, None => 0f }", 3.0),  # constructors
        ("@sum_all(Cons(1f, Cons(4f, Nil)))", 5.0),  # a type, in the signature below
    ],
)
def test_a_text_that_uses_a_prelude_name_is_parsed_into_the_prelude(use, value):
    text = (
        '#[version = "0.0.5"]\n'
        "def @sum_all(%l: List[float32]) -> float32 { @foldl(fn (%a: float32, %b: float32) "
        "{ add(%a, %b) }, 0f, %l) }\n"
        f"def @main() {{ {use} }}\n"
    )
    module = effir.check(effir.parse(text))
    assert "foldl" in module and "List" in module.type_defs
    assert effir.interpret(module) == value


def test_a_text_that_uses_no_prelude_name_stays_its_own_module():
    module = effir.parse('#[version = "0.0.5"]\ndef @main(%x: float32) { %x }')
    assert list(module.functions) == ["main"] and not module.type_defs


def test_a_name_neither_defined_nor_the_preludes_is_still_an_error():
    with pytest.raises(effir.ParseError) as err:
        effir.parse('#[version = "0.0.5"]\ndef @f(%l: Lisst[float32]) { %l }', source_name="t")
    assert err.value.message == "unknown type Lisst" and err.value.line == 2


def test_a_text_that_redefines_a_prelude_name_and_uses_another_says_why():
    """Parsed into the prelude, its own @map clashes: the note says why the
    prelude was involved."""
    text = '#[version = "0.0.5"]\ndef @map(%x: float32) { %x }\ndef @g(%l: List[float32]) { %l }'
    with pytest.raises(effir.ParseError, match="@map is already defined in the module") as err:
        effir.parse(text)
    assert any("uses type List, which the prelude defines" in note for note in err.value.notes)
