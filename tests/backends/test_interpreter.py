"""The reference interpreter: every construct, deep recursion, state cells,
printing, and located run-time errors."""

from pathlib import Path

import numpy as np
import pytest

import effir
from effir.runtime.values import ADTValue, PRNGKey, RefValue

HEADER = '#[version = "0.0.5"]\n'
PRELUDE = (Path(effir.__file__).parent / "std" / "prelude.rly").read_text()


def module(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="t.effir"))


def run(text: str, *args, **kwargs):
    return effir.interpret(module(text), *args, **kwargs)


def to_list(values) -> ADTValue:
    result = ADTValue("Nil")
    for v in reversed(values):
        result = ADTValue("Cons", (np.asarray(v, dtype=np.int32), result))
    return result


def from_list(value: ADTValue) -> list:
    out = []
    while value.constructor == "Cons":
        head, value = value.fields
        out.append(head.tolist() if isinstance(head, np.ndarray) else head)
    assert value.constructor == "Nil"
    return out


# ---------------------------------------------------------------- prelude
def prelude_main(body: str, params: str = "%xs: List[int32]") -> effir.IRModule:
    return effir.check(
        effir.parse(PRELUDE + f"\ndef @main({params}) {{ {body} }}\n", source_name="prelude")
    )


DATA = [3, 1, 4, 1, 5, 9, 2, 6]


def test_prelude_map():
    mod = prelude_main("@map(fn (%x: int32) { %x * 2 }, %xs)")
    assert from_list(effir.interpret(mod, to_list(DATA))) == [2 * x for x in DATA]


def test_prelude_foldl_and_foldr():
    mod = prelude_main("@foldl(fn (%acc: int32, %x: int32) { %acc * 10 + %x }, 0, %xs)")
    assert int(effir.interpret(mod, to_list([1, 2, 3]))) == 123
    mod = prelude_main("@foldr(fn (%x: int32, %acc: int32) { %acc * 10 + %x }, 0, %xs)")
    assert int(effir.interpret(mod, to_list([1, 2, 3]))) == 321


def test_prelude_filter_rev_length():
    mod = prelude_main("@filter(fn (%x: int32) { %x > 2 }, %xs)")
    assert from_list(effir.interpret(mod, to_list(DATA))) == [x for x in DATA if x > 2]
    mod = prelude_main("@rev(%xs)")
    assert from_list(effir.interpret(mod, to_list(DATA))) == DATA[::-1]
    mod = prelude_main("@length(%xs)")
    assert int(effir.interpret(mod, to_list(DATA))) == len(DATA)


def test_prelude_zip():
    mod = prelude_main("@zip(%xs, @rev(%xs))")
    pairs = from_list(effir.interpret(mod, to_list(DATA)))
    assert [(int(a), int(b)) for a, b in pairs] == list(zip(DATA, DATA[::-1], strict=True))


def test_prelude_on_a_long_list():
    n = 10_000
    mod = prelude_main("@length(@map(fn (%x: int32) { %x + 1 }, %xs))")
    assert int(effir.interpret(mod, to_list(list(range(n))))) == n


# --------------------------------------------------------------- recursion
def test_ten_thousand_deep_recursion_at_the_default_limit():
    import sys

    assert sys.getrecursionlimit() <= 1000
    text = """
    def @count(%n: int32) -> int32 { if (%n == 0) { 0 } else { 1 + @count(%n - 1) } }
    def @main(%n: int32) { @count(%n) }
    """
    assert int(run(text, 10_000)) == 10_000


def test_mutual_recursion_ten_thousand_deep():
    text = """
    def @even(%n: int32) -> bool { if (%n == 0) { True } else { @odd(%n - 1) } }
    def @odd(%n: int32) -> bool { if (%n == 0) { False } else { @even(%n - 1) } }
    def @main(%n: int32) { (@even(%n), @odd(%n)) }
    """
    even, odd = run(text, 10_001)
    assert (bool(even), bool(odd)) == (False, True)


def test_recursive_local_closure():
    text = """
    def @main(%n: int32) {
      let %fact = fn (%k: int32) -> int32 { if (%k == 0) { 1 } else { %k * %fact(%k - 1) } };
      %fact(%n)
    }
    """
    assert int(run(text, 10)) == 3628800


# ---------------------------------------------------------------- closures
def test_closures_capture_their_environment():
    text = """
    def @adder(%a: int32) -> fn (int32) -> int32 { fn (%b: int32) { %a + %b } }
    def @main() { let %add3 = @adder(3); let %add5 = @adder(5); (%add3(1), %add5(1)) }
    """
    assert tuple(int(v) for v in run(text)) == (4, 6)


def test_constructors_as_functions():
    text = """
    type Box[A] { Box(A) }
    def @apply[A, B](%f: fn (A) -> B, %x: A) -> B { %f(%x) }
    def @main() { @apply(Box, 7) }
    """
    value = run(text)
    assert value.constructor == "Box" and int(value.fields[0]) == 7


def test_global_function_values():
    text = """
    def @twice(%x: int32) -> int32 { %x * 2 }
    def @apply(%f: fn (int32) -> int32, %x: int32) -> int32 { %f(%x) }
    def @main() { @apply(@twice, 21) }
    """
    assert int(run(text)) == 42


# --------------------------------------------------------------- ADTs, match
def test_incomplete_match_failure_is_an_eval_error():
    text = """
    type Option[A] { Some(A), None }
    def @main(%flag: bool) {
      let %o = if (%flag) { Some(1) } else { None };
      match? (%o) { Some(%x) => %x }
    }
    """
    assert int(run(text, True)) == 1
    with pytest.raises(effir.EvalError, match=r"no clause of this match\? matches the value None"):
        run(text, False)


def test_tuple_patterns_and_wildcards():
    text = """
    def @main() { match ((1, (2, 3))) { (%a, (_, %c)) => %a + %c } }
    """
    assert int(run(text)) == 4


# --------------------------------------------------------------------- refs
def test_refs_alias_by_identity():
    text = """
    def @main() {
      let %r = ref(1);
      let %alias = %r;
      let %other = ref(1);
      ref_write(%alias, 5);
      (ref_read(%r), ref_read(%other))
    }
    """
    assert tuple(int(v) for v in run(text)) == (5, 1)


def test_refs_shared_between_closures():
    text = """
    def @main() {
      let %counter = ref(0);
      let %tick = fn () { ref_write(%counter, ref_read(%counter) + 1) };
      %tick(); %tick(); %tick();
      ref_read(%counter)
    }
    """
    assert int(run(text)) == 3


# ------------------------------------------------------------------- state
STATEFUL = """
global @count: Ref[int32] = ref(0);
def @main(%x: int32) -> int32 {
  ref_write(@count, ref_read(@count) + %x);
  ref_read(@count)
}
"""


def test_state_cells_start_from_their_declarations():
    mod = module(STATEFUL)
    assert int(effir.interpret(mod, 5)) == 5
    assert int(effir.interpret(mod, 5)) == 5  # a fresh state per call without `state`


def test_explicit_state_is_updated_in_place():
    mod = module(STATEFUL)
    state = effir.State(mod)
    assert int(effir.interpret(mod, 2, state=state)) == 2
    assert int(effir.interpret(mod, 3, state=state)) == 5
    assert int(state["count"]) == 5
    assert isinstance(state.cells["count"], RefValue)


def test_seed_replaces_key_cells():
    mod = module("global @rng: Ref[Key] = ref(random.key(0));\ndef @main() { ref_read(@rng) }")
    default = effir.interpret(mod)
    assert isinstance(default, PRNGKey)
    assert effir.interpret(mod, state=effir.State(mod, seed=0)) == default
    assert effir.interpret(mod, state=effir.State(mod, seed=1)) != default


# ------------------------------------------------------------------- print
def test_debug_print_writes_to_the_sink():
    printed = []
    text = 'def @main(%x: int32) { debug.print(%x * 2, label="twice") + 1 }'
    result = run(text, 4, sink=lambda label, value: printed.append((label, int(value))))
    assert int(result) == 9
    assert printed == [("twice", 8)]


def test_debug_print_default_sink_is_stdout(capsys):
    run('def @main() { debug.print(3, label="x") }')
    assert capsys.readouterr().out == "x: int32 3\n"


# ---------------------------------------------------------- runtime errors
def test_shape_check_of_annotated_parameters():
    text = "def @main(%x: Tensor[(n, 2), float32], %y: Tensor[(n), float32]) { %y }"
    mod = module(text)
    assert effir.interpret(mod, np.zeros((3, 2), np.float32), np.zeros(3, np.float32)).shape == (3,)
    with pytest.raises(effir.EvalError, match=r"shape check failed: parameter %y of @main"):
        effir.interpret(mod, np.zeros((3, 2), np.float32), np.zeros(4, np.float32))
    with pytest.raises(effir.EvalError, match=r"expects Tensor\[\(n, 2\), float32\]"):
        effir.interpret(mod, np.zeros((3, 2), np.float64), np.zeros(3, np.float32))


def test_operator_failures_name_the_operator_and_location():
    text = """
    def @main(%x: Tensor[(5), float32], %i: int32) {
      take(%x, %i, axis=0, mode="fast")
    }
    """
    mod = module(text)
    assert float(effir.interpret(mod, np.arange(5, dtype=np.float32), 2)) == 2.0
    with pytest.raises(effir.EvalError) as info:
        effir.interpret(mod, np.arange(5, dtype=np.float32), 7)
    assert info.value.message.startswith("take:")
    assert info.value.line == 4


def test_unknown_entry_and_wrong_argument_count():
    mod = module("def @main(%x: int32) { %x }")
    with pytest.raises(effir.EvalError, match=r"no function @nope"):
        effir.interpret(mod, 1, entry="nope")
    with pytest.raises(effir.EvalError, match=r"@main takes 1 argument\(s\), got 0"):
        effir.interpret(mod)


# ------------------------------------------------------------ control flow
def test_foreach_scan_and_map_forms():
    text = """
    def @main(%xs: Tensor[(4, 2), float32]) {
      let %cumsum = fn (%x: Tensor[(2), float32], %s: Tensor[(2), float32]) {
        let %n = %s + %x; (%n, %n)
      };
      cf.foreach(%cumsum, %xs, zeros(shape=[2]))
    }
    """
    xs = np.arange(8, dtype=np.float32).reshape(4, 2)
    outs, final = run(text, xs)
    np.testing.assert_array_equal(outs, np.cumsum(xs, axis=0))
    np.testing.assert_array_equal(final, xs.sum(axis=0))


def test_foreach_over_an_empty_sequence():
    text = """
    def @main(%xs: Tensor[(t, 2), float32]) {
      let %f = fn (%x: Tensor[(2), float32], %s: float32) { (%x * 2f, %s + 1f) };
      cf.foreach(%f, %xs, 0f)
    }
    """
    outs, final = run(text, np.zeros((0, 2), np.float32))
    assert outs.shape == (0, 2) and float(final) == 0.0


def test_while_loop_runs_a_data_dependent_number_of_times():
    text = """
    def @main(%limit: int32) {
      let %cond = fn (%i: int32) { %i < %limit };
      let %body = fn (%i: int32) { (%i * %i, %i + 1) };
      cf.while_loop(%cond, %body, 0)
    }
    """
    outs, final = run(text, 5)
    np.testing.assert_array_equal(outs, [0, 1, 4, 9, 16])
    assert int(final) == 5
    outs, final = run(text, 0)
    assert outs.shape == (0,) and int(final) == 0


def test_while_loop_stops_at_max_iterations():
    text = """
    def @main() {
      let %cond = fn (%i: int32) { True };
      let %body = fn (%i: int32) { (%i, %i + 1) };
      cf.while_loop(%cond, %body, 0, max_iterations=3)
    }
    """
    outs, final = run(text)
    np.testing.assert_array_equal(outs, [0, 1, 2])
    assert int(final) == 3


def test_let_annotations_are_checked_at_run_time():
    text = """
    def @main(%x: Tensor[(?), float32]) {
      let %y: Tensor[(3), float32] = %x;
      %y
    }
    """
    mod = module(text)
    assert effir.interpret(mod, np.zeros(3, np.float32)).shape == (3,)
    with pytest.raises(effir.EvalError, match=r"shape check failed: %y expects"):
        effir.interpret(mod, np.zeros(5, np.float32))


def test_arguments_are_never_truncated():
    mod = module("def @main(%x: int32) { %x }")
    assert int(effir.interpret(mod, 7)) == 7
    with pytest.raises(effir.EvalError, match=r"argument %x of @main expects int32, got 2.7"):
        effir.interpret(mod, 2.7)
    with pytest.raises(effir.EvalError, match=r"expects int32"):
        effir.interpret(mod, np.float64(2.0))


def test_a_shared_sub_expression_runs_once():
    text = """
    global @count: Ref[int32] = ref(0);
    def @main(%c: bool) {
      %0 = debug.print(ref_read(@count), label="once");
      %1 = ref_write(@count, ref_read(@count) + 1);
      let %a = if (%c) { (%1, %0) } else { (%1, %0) };
      (%0, %0, %1, ref_read(@count))
    }
    """
    mod = module(text)
    printed = []
    first, second, _, count = effir.interpret(
        mod, True, sink=lambda label, value: printed.append(label)
    )
    assert printed == ["once"]
    assert int(count) == 1


def test_shared_sub_expressions_inside_a_function_run_once_per_call():
    text = """
    def @main() {
      let %f = fn (%x: int32) {
        %0 = debug.print(%x, label="call");
        %0 + %0
      };
      (%f(1), %f(2))
    }
    """
    printed = []
    a, b = run(text, sink=lambda label, value: printed.append(int(value)))
    assert (int(a), int(b)) == (2, 4)
    assert printed == [1, 2]


def test_kernels_run_in_place_of_their_functions():
    """A backend's compiled code replaces a function's body (called directly,
    and as a loop body), after the parameters' checks."""
    module = effir.parse(
        """#[version = "0.0.5"]
        def @main(%x) {
          let %f = fn (%p: Tensor[(3), float32], Primitive=1) -> Tensor[(3), float32] { add(%p, 1f) };
          let %y = %f(%x);
          let %g = fn (%x_t: float32, %s: float32) { (%x_t, add(%s, %x_t)) };
          let %r = cf.foreach(%g, %y, 0f);
          (%y, %r.1)
        }"""
    )
    main = module["main"]
    f = main.body.value
    g = main.body.body.body.value
    calls = []

    def kernel(x):
        calls.append(x.copy())
        return x + np.float32(10)

    def step(x_t, s):
        return x_t, np.asarray(s + 2 * x_t, dtype=np.float32)

    x = np.array([1, 2, 3], "float32")
    y, total = effir.interpret(module, x, kernels={f: kernel, g: step})
    assert np.array_equal(y, x + 10) and len(calls) == 1
    assert float(total) == 2 * float((x + 10).sum())
    with pytest.raises(effir.EvalError, match="parameter %p of f expects"):
        effir.interpret(module, np.zeros(4, "float32"), kernels={f: kernel})


def test_a_compiled_loop_runs_in_place_of_its_steps():
    module = effir.parse(
        """#[version = "0.0.5"]
        def @main(%xs: Tensor[(3), float32]) {
          let %g = fn (%x_t: float32, %s: float32) { (%x_t, add(%s, %x_t)) };
          cf.foreach(%g, %xs, 0f)
        }"""
    )
    loop = module["main"].body.body
    seen = []

    def whole_loop(body, xs, init):
        seen.append(body.function)
        return xs, np.asarray(xs.sum() + init, dtype=np.float32)

    xs = np.array([1, 2, 3], "float32")
    outs, total = effir.interpret(module, xs, kernels={loop: whole_loop})
    assert float(total) == 6.0 and np.array_equal(outs, xs)
    assert seen == [module["main"].body.value]
