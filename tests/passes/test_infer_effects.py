"""Effect inference: direct effects, callees, closures, higher-order
arguments, control-flow operators, recursion, references passed around."""

import pytest

import effir
from effir.ir import Call, Function, post_order
from effir.passes.analyses.infer_effects import effect_text, infer_effects

HEADER = '#[version = "0.0.5"]\n'
CELLS = """
global @rng: Ref[Key] = ref(random.key(0));
global @bn: Ref[(Tensor[(4), float32], Tensor[(4), float32])] = ref((zeros(shape=[4]), ones(shape=[4])));
global @count: Ref[int32] = ref(0);
"""


def effects(text: str) -> dict[str, str]:
    module = effir.parse(HEADER + CELLS + text)
    info = infer_effects(module)
    return {name: effect_text(e) for name, e in info.functions.items()}


def test_pure_functions():
    assert effects("def @f(%x: int32) { %x + 1 }") == {"f": "pure"}


def test_direct_reads_and_writes():
    got = effects(
        """
        def @get() { ref_read(@count) }
        def @set(%v: int32) { ref_write(@count, %v) }
        """
    )
    assert got == {"get": "read @count", "set": "write @count"}


def test_effectful_operators_read_and_write_their_cell():
    got = effects(
        """
        def @drop(%x: Tensor[(4), float32]) { nn.dropout(%x, @rng, rate=0.5) }
        def @train(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32]) {
          nn.batch_norm(%x, %g, %g, @bn, training=True)
        }
        def @infer(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32]) {
          nn.batch_norm(%x, %g, %g, @bn, training=False)
        }
        def @show(%x: int32) { debug.print(%x) }
        """
    )
    assert got == {
        "drop": "read @rng, write @rng",
        "train": "read @bn, write @bn",
        "infer": "read @bn",
        "show": "io",
    }


def test_effects_flow_through_callees_and_recursion():
    got = effects(
        """
        def @tick() { ref_write(@count, ref_read(@count) + 1) }
        def @loop(%n: int32) -> () { if (%n == 0) { () } else { @tick(); @loop(%n - 1) } }
        def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
        def @odd(%n: int32) -> bool { if (%n == 0) { debug.print(False) } else { @even(%n - 1) } }
        """
    )
    assert got["loop"] == "read @count, write @count"
    assert got["even"] == got["odd"] == "io"


def test_a_closure_is_effectful_only_when_called():
    got = effects(
        """
        def @make() { fn () { ref_read(@count) } }
        def @use() { let %f = @make(); %f() }
        """
    )
    assert got == {"make": "pure", "use": "read @count"}


def test_higher_order_arguments():
    got = effects(
        """
        def @apply(%f: fn () -> int32) -> int32 { %f() }
        def @main() { @apply(fn () { ref_read(@count) }) }
        def @other() { @apply(fn () { 1 }) }
        """
    )
    # 0-CFA merges the two closures that reach %f: sound, not precise.
    assert got["main"] == "read @count"
    assert got["apply"] == "read @count"


def test_dropout_inside_a_foreach_body_names_the_prng_cell():
    module = effir.parse(
        HEADER
        + CELLS
        + """
        def @main(%xs: Tensor[(t, 4), float32]) {
          let %body = fn (%x: Tensor[(4), float32], %s: Tensor[(4), float32]) {
            let %d = nn.dropout(%x, @rng, rate=0.1);
            (%d, %s + %d)
          };
          cf.foreach(%body, %xs, zeros(shape=[4]))
        }
        """
    )
    info = infer_effects(module)
    assert effect_text(info.of("main")) == "read @rng, write @rng"
    closure = next(n for n in post_order(module["main"]) if isinstance(n, Function) and n.params)
    assert effect_text(info.of(closure)) == "read @rng, write @rng"
    foreach = next(
        n
        for n in post_order(module["main"])
        if isinstance(n, Call) and getattr(n.callee, "name", "") == "cf.foreach"
    )
    assert effect_text(info.of(foreach)) == "read @rng, write @rng"


def test_cells_passed_as_references():
    got = effects(
        """
        def @bump(%r: Ref[int32]) { ref_write(%r, 1) }
        def @main() { @bump(@count) }
        def @local() { let %mine = ref(0); @bump(%mine); ref_read(%mine) }
        """
    )
    assert got["main"] == "write @count"
    # @bump may write @count (it is called with it somewhere): sound.
    assert got["bump"] == "write @count"


def test_references_stored_in_data_structures():
    got = effects(
        """
        def @main() {
          let %box = ref(@count);
          let %r = ref_read(%box);
          ref_read(%r)
        }
        def @tuple() { let %t = (1, @count); ref_read(%t.1) }
        """
    )
    assert got == {"main": "read @count", "tuple": "read @count"}


def test_gru_example_effects():
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "gru_lm.effir"
    module = effir.parse(path.read_text(), source_name=str(path))
    info = infer_effects(module)
    assert effect_text(info.of("main")) == "io, read @bn, read @rng, write @bn, write @rng"
    assert effect_text(info.of("gru_cell")) == "pure"


# ------------------------------------------------------------ annotations
def annotated(text: str):
    module = effir.parse(HEADER + CELLS + text, source_name="t.effir")
    effir.check(module)
    return module


def test_effect_annotations_that_hold():
    from effir.passes.analyses.infer_effects import check_effects

    check_effects(
        annotated(
            """
            def @main() {
              let %f: fn () -> {read @count} int32 = fn () { ref_read(@count) };
              let %g: fn () -> {} int32 = fn () { 1 };
              let %h: fn () -> {random} Key = fn () {
                let %k = ref_read(@rng); ref_write(@rng, %k); %k
              };
              (%f(), %g(), %h())
            }
            """
        )
    )


def test_effect_annotation_violations_are_located_errors():
    from effir.passes.analyses.infer_effects import check_effects

    module = annotated(
        """
        def @apply(%f: fn () -> {} int32) -> int32 { %f() }
        def @main() {
          @apply(fn () { ref_read(@count) })
        }
        """
    )
    with pytest.raises(effir.EffectError) as info:
        check_effects(module)
    err = info.value
    assert err.line == 7  # the annotated parameter %f
    assert "%f allows the effects {}, but a function (defined at t.effir:9:" in err.message
    assert "has read @count besides" in err.message


def test_random_allows_key_cells_only():
    from effir.passes.analyses.infer_effects import check_effects

    module = annotated(
        """
        def @main() {
          let %f: fn () -> {random} int32 = fn () { ref_read(@count) };
          %f()
        }
        """
    )
    with pytest.raises(effir.EffectError, match="has read @count besides"):
        check_effects(module)
