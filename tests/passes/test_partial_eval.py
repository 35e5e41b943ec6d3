"""partial-eval preserves meaning (random typed programs, random A1 programs
with global cells, local references, closures and loops, random A2
programs), terminates on recursion, stays within its size budget, keeps one
read and one write of a cell per block, and unrolls only short static
loops."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.expr import RefRead, RefWrite
from effir.ir.visitor import pre_order
from effir.passes.transforms.explicate import explicate
from effir.passes.transforms.partial_eval import MAX_UNROLL, partial_eval
from effir.passes.transforms.state_passing import state_passing
from tests.support.state_passing_observation import observe, parse_a1
from tests.support.typed_program_checks import SETTINGS, assert_same

from .a1_programs import A1Program, a1_programs
from .typed_programs import TypedProgram, typed_programs

A2_SETTINGS = dict(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(**SETTINGS)
@given(typed_programs())
def test_partial_eval_preserves_typed_programs(program: TypedProgram) -> None:
    after = effir.check(partial_eval(program.module))
    assert_same(program, after)


@settings(**A2_SETTINGS)
@given(a1_programs())
def test_partial_eval_preserves_a2_programs(program: A1Program) -> None:
    a1 = parse_a1(program)
    a2 = state_passing(a1)
    after = effir.check(partial_eval(a2))
    expected = observe(interpret_a2, a2, program, a1)
    got = observe(interpret_a2, after, program, a1)
    assert (problem := expected.difference(got)) is None, problem


@settings(**A2_SETTINGS)
@given(a1_programs())
def test_partial_eval_preserves_a1_programs(program: A1Program) -> None:
    """The store: reads, writes, escapes and unknown calls of effectful
    programs before state passing, with and without explicate."""
    a1 = parse_a1(program)
    expected = observe(effir.interpret, a1, program, a1)
    for before in (a1, explicate(a1)):
        after = effir.check(partial_eval(before))
        got = observe(effir.interpret, after, program, a1)
        assert (problem := expected.difference(got)) is None, problem


def count(module: effir.IRModule, kind: type) -> int:
    return sum(isinstance(n, kind) for fn in module.functions.values() for n in pre_order(fn))


def test_a_cell_is_read_once_and_written_once_per_block():
    layers = "".join(f"let %h{i} = nn.dropout(%h{i - 1}, @rng, rate=0.5f);\n" for i in range(1, 9))
    text = f"""#[version = "0.0.5"]
    global @rng: Ref[Key] = ref(random.key(3));
    def @main(%h0: Tensor[(8), float32]) {{ {layers} %h8 }}
    """
    module = effir.parse(text)
    a1 = explicate(module)
    assert count(a1, RefRead) == 8 and count(a1, RefWrite) == 8
    after = effir.check(partial_eval(a1))
    assert count(after, RefRead) == 1 and count(after, RefWrite) == 1
    x = np.arange(8, dtype="float32")
    first, second = effir.State(module, seed=0), effir.State(module, seed=0)
    want = effir.interpret(module, x, state=first)
    got = effir.interpret(after, x, state=second)
    assert np.array_equal(want, got)
    assert np.array_equal(first.values()["rng"], second.values()["rng"])


def test_unknown_calls_invalidate_only_the_cells_they_touch():
    text = """#[version = "0.0.5"]
    global @c: Ref[float32] = ref(0f);
    global @d: Ref[float32] = ref(0f);
    def @count_d(%n: int32) -> () {
      if (%n == 0) { () } else { ref_write(@d, add(ref_read(@d), 1f)); @count_d(%n - 1) }
    }
    def @main(%x: float32, %n: int32) {
      ref_write(@c, %x);
      @count_d(%n);
      @count_d(%n);
      ref_write(@c, add(ref_read(@c), 1f));
      (ref_read(@c), ref_read(@d))
    }
    """
    module = effir.parse(text)
    after = effir.check(partial_eval(module))
    main = effir.astext(after["main"])
    assert main.count("ref_read(@c)") == 0 and main.count("ref_write(@c") == 1
    assert main.count("ref_read(@d)") >= 1  # @count_d writes @d: read again
    state = effir.State(module)
    got = effir.interpret(after, np.float32(2), np.int32(3), state=state)
    assert float(got[0]) == 3.0 and float(got[1]) == 6.0


def test_only_short_static_loops_unroll():
    def program(steps: int) -> effir.IRModule:
        return effir.parse(f"""#[version = "0.0.5"]
        def @main(%xs: Tensor[({steps}, 2), float32], %h: Tensor[(2), float32]) {{
          cf.foreach(fn (%x: Tensor[(2), float32], %s: Tensor[(2), float32]) {{
            let %n = tanh(add(%s, %x));
            (%n, %n)
          }}, %xs, %h)
        }}""")

    for steps, unrolled in ((1, True), (MAX_UNROLL, True), (MAX_UNROLL + 1, False)):
        module = program(steps)
        after = effir.check(partial_eval(module))
        text = effir.astext(after)
        assert ("cf.foreach" not in text) == unrolled, text
        assert text.count("tanh(") == (steps if unrolled else 1)
        xs = np.random.default_rng(steps).standard_normal((steps, 2)).astype("float32")
        h = np.ones(2, "float32")
        want, got = effir.interpret(module, xs, h), effir.interpret(after, xs, h)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


def test_a_loop_nest_unrolls_only_when_its_steps_are_few():
    """Short loops nested in a short loop (a checkpointed gradient's
    segments) run the product of their steps: a nest of more than
    ``MAX_UNROLL`` steps keeps its outer loop, whose body's inner loop
    unrolls; a nest within the limit unrolls whole."""

    def program(outer: int, inner: int) -> effir.IRModule:
        return effir.parse(f"""#[version = "0.0.5"]
        def @main(%xs: Tensor[({outer}, {inner}, 2), float32], %h: Tensor[(2), float32]) {{
          cf.foreach(fn (%seg: Tensor[({inner}, 2), float32], %s: Tensor[(2), float32]) {{
            let %r = cf.foreach(fn (%x: Tensor[(2), float32], %t: Tensor[(2), float32]) {{
              let %n = tanh(add(%t, %x));
              (%n, %n)
            }}, %seg, %s);
            (%r.0, %r.1)
          }}, %xs, %h)
        }}""")

    for outer, inner, loops in ((4, 6, 1), (2, 3, 0), (1, MAX_UNROLL, 0), (2, MAX_UNROLL, 1)):
        module = program(outer, inner)
        after = effir.check(partial_eval(module))
        text = effir.astext(after)
        assert text.count("cf.foreach") == loops, text
        assert text.count("tanh(") == (inner if loops else outer * inner), text
        xs = np.random.default_rng(inner).standard_normal((outer, inner, 2)).astype("float32")
        h = np.ones(2, "float32")
        want, got = effir.interpret(module, xs, h), effir.interpret(after, xs, h)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


def test_an_inner_loop_over_a_tuple_unrolls_in_an_outer_loop_that_stays():
    """An inner loop over a tuple of sequences (Python's ``zip`` of two
    tensors) unrolls inside an outer loop that stays a loop: its steps are
    taken field by field, as the loop's checked type says, though the
    sequence is then the outer body's unannotated parameter, which the
    evaluator's copy leaves untyped (a checkpointed gradient's segments of
    a ``zip``)."""
    module = effir.parse("""#[version = "0.0.5"]
    def @main(%xs: Tensor[(4, 6, 2), float32], %ys: Tensor[(4, 6, 2), float32],
              %h: Tensor[(2), float32]) {
      let %body = fn (%seg, %s) {
        let %r = cf.foreach(fn (%xy: (Tensor[(2), float32], Tensor[(2), float32]),
                                %t: Tensor[(2), float32]) {
          let %n = tanh(add(add(%t, %xy.0), %xy.1));
          (%n, %n)
        }, %seg, %s);
        (%r.0, %r.1)
      };
      cf.foreach(%body, (%xs, %ys), %h)
    }""")
    after = effir.check(partial_eval(module))
    text = effir.astext(after)
    assert text.count("cf.foreach") == 1 and text.count("tanh(") == 6, text
    rs = np.random.default_rng(3)
    xs, ys = (rs.standard_normal((4, 6, 2)).astype("float32") for _ in range(2))
    h = np.ones(2, "float32")
    want, got = effir.interpret(module, xs, ys, h), effir.interpret(after, xs, ys, h)
    assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


def test_a_while_loop_unrolls_only_as_many_steps_as_its_nested_loops_allow():
    """A while_loop whose body holds a short foreach unrolls while its steps
    times the foreach's stay within ``MAX_UNROLL``."""

    def program(bound: int) -> effir.IRModule:
        return effir.parse(f"""#[version = "0.0.5"]
        def @main(%xs: Tensor[(4, 2), float32], %x: Tensor[(2), float32]) {{
          cf.while_loop(fn (%s: (int32, Tensor[(2), float32])) {{ less(%s.0, {bound}) }},
            fn (%s: (int32, Tensor[(2), float32])) {{
              let %r = cf.foreach(fn (%a: Tensor[(2), float32], %t: Tensor[(2), float32]) {{
                let %n = tanh(add(%t, %a));
                (%n, %n)
              }}, %xs, %s.1);
              (%r.1, (add(%s.0, 1), %r.1))
            }}, (0, %x))
        }}""")

    x = np.array([0.5, -1.0], "float32")
    xs = np.random.default_rng(0).standard_normal((4, 2)).astype("float32")
    for bound, unrolled in ((2, True), (3, False)):
        module = effir.check(program(bound))
        after = effir.check(partial_eval(module))
        text = effir.astext(after)
        assert ("cf.while_loop" not in text) == unrolled, text
        assert text.count("tanh(") == (4 * bound if unrolled else 4), text
        want, got = effir.interpret(module, xs, x), effir.interpret(after, xs, x)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1][1], got[1][1])


def test_while_loops_unroll_only_when_every_condition_is_static():
    def program(bound: int, limit: str = "") -> effir.IRModule:
        return effir.parse(f"""#[version = "0.0.5"]
        def @main(%x: Tensor[(2), float32]) {{
          cf.while_loop(fn (%s: (int32, Tensor[(2), float32])) {{ less(%s.0, {bound}) }},
            fn (%s: (int32, Tensor[(2), float32])) {{
              let %y = tanh(%s.1);
              (%y, (add(%s.0, 1), %y))
            }}, (0, %x){limit})
        }}""")

    cases = [(0, "", 0), (3, "", 3), (MAX_UNROLL, "", MAX_UNROLL), (5, ", max_iterations=2", 2)]
    x = np.array([0.5, -1.0], "float32")
    for bound, limit, steps in [*cases, (MAX_UNROLL + 1, "", None)]:
        module = effir.check(program(bound, limit))  # zero steps need the types
        after = effir.check(partial_eval(module))
        text = effir.astext(after)
        assert ("cf.while_loop" in text) == (steps is None), text
        if steps is not None:
            assert text.count("tanh(") == steps
        want, got = effir.interpret(module, x), effir.interpret(after, x)
        assert want[0].shape == got[0].shape and np.array_equal(want[0], got[0])
        assert np.array_equal(want[1][1], got[1][1])


def test_run_time_limits_and_padded_while_loops_unroll_as_the_operator_runs():
    """A max_iterations argument that is a constant unrolls as the
    attribute would (one that is not keeps the loop); padded outputs
    unroll to the rows run followed by zeros, with the count."""

    def program(bound: int, limit: str, params: str = "") -> effir.IRModule:
        return effir.parse(f"""#[version = "0.0.5"]
        def @main(%x: Tensor[(2), float32]{params}) {{
          let %m = 3i64;
          cf.while_loop(fn (%s: (int32, Tensor[(2), float32])) {{ less(%s.0, {bound}) }},
            fn (%s: (int32, Tensor[(2), float32])) {{
              let %y = tanh(%s.1);
              ((%y, %s.0), (add(%s.0, 1), %y))
            }}, (0, %x){limit})
        }}""")

    x = np.array([0.5, -1.0], "float32")
    cases = [
        (5, ", %m", 3, ()),
        (2, ", %m", 2, ()),
        (5, ", %m, pad_outputs=True", 3, ()),
        (1, ", %m, pad_outputs=True", 1, ()),
        (0, ", max_iterations=4, pad_outputs=True", 0, ()),
        (2, ", max_iterations=4, pad_outputs=True", 2, ()),
        (2, ", %n", None, (np.int64(5),)),
    ]
    for bound, limit, steps, more in cases:
        params = ", %n: int64" if more else ""
        module = effir.check(program(bound, limit, params))
        after = effir.check(partial_eval(module))
        text = effir.astext(after)
        assert ("cf.while_loop" in text) == (steps is None), text
        if steps is not None:
            assert text.count("tanh(") == steps
        want, got = effir.interpret(module, x, *more), effir.interpret(after, x, *more)
        assert_same_values(want, got)


def assert_same_values(want, got) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for w, g in zip(want, got, strict=True):
            assert_same_values(w, g)
        return
    want, got = np.asarray(want), np.asarray(got)
    assert (want.dtype, want.shape) == (got.dtype, got.shape) and np.array_equal(want, got)


def size(module: effir.IRModule) -> int:
    return sum(1 for fn in module.functions.values() for _ in pre_order(fn))


def test_recursion_is_residualised_and_inlining_is_bounded():
    text = """#[version = "0.0.5"]
    def @fact(%n: int32) -> int32 { if (%n == 0) { 1 } else { %n * @fact(%n - 1) } }
    def @twice(%x: float32) -> float32 { %x + %x }
    def @main(%x: float32) {
      let %a = @twice(@twice(@twice(@twice(%x))));
      (@fact(5), %a)
    }
    """
    module = effir.parse(text)
    after = effir.check(partial_eval(module))
    assert size(after) <= 11 * size(module)
    assert "@fact(" in effir.astext(after["main"])  # the recursive call stays a call
    assert "@twice(" not in effir.astext(after["main"])  # the others are inlined
    result = effir.interpret(after, np.float32(1.5))
    assert int(result[0]) == 120 and float(result[1]) == 24.0


def test_deep_programs(default_recursion_limit):
    n = 20_000
    lets = "".join(f"let %v{i} = add(%v{i - 1}, 1f);\n" for i in range(1, n))
    chain = effir.parse(f'#[version = "0.0.5"]\ndef @main(%v0: float32) {{\n{lets}%v{n - 1}\n}}')
    assert float(effir.interpret(partial_eval(chain), np.float32(0))) == n - 1
    d = 2_000
    ifs = "if (%c) { " * d + "add(%x, 1f)" + " } else { %x }" * d
    nested = effir.parse(f'#[version = "0.0.5"]\ndef @main(%c: bool, %x: float32) {{ {ifs} }}')
    assert float(effir.interpret(partial_eval(nested), True, np.float32(1))) == 2.0


def test_write_backs_come_in_a_fixed_order():
    """The write-backs at the end of a branch follow the order in which the
    references were created, in every run: the store kept after an earlier
    branch used to be rebuilt in the order of a set of references (hashed
    by identity), so the output varied from run to run."""
    text = """#[version = "0.0.5"]
    def @main(%c: bool, %x: float32) {
      let %r1 = ref(%x);
      let %r2 = ref(%x);
      let %a = if (%c) { 0f } else { 1f };
      let %b = if (%c) {
        ref_write(%r1, 1f); ref_write(%r2, 2f); 0f
      } else {
        ref_write(%r1, 3f); ref_write(%r2, 4f); 1f
      };
      (%a, %b, ref_read(%r1), ref_read(%r2))
    }
    """
    outputs = {effir.astext(partial_eval(effir.parse(text))) for _ in range(30)}
    assert len(outputs) == 1
    (output,) = outputs
    assert output.index("ref_write(%r1, 1f)") < output.index("ref_write(%r2, 2f)")
    assert output.index("ref_write(%r1, 3f)") < output.index("ref_write(%r2, 4f)")


def test_a_chain_of_500_inlined_calls_needs_no_python_recursion(default_recursion_limit):
    """``benchmarks/effect_passes.py``'s 500 functions calling each other:
    each call inlined into the previous one, 500 deep. The evaluator used
    to nest a ``yield from`` chain per inlined call, which resumes through
    C recursion: RecursionError."""
    n = 500
    cells = "global @rng: Ref[Key] = ref(random.key(0));\n"
    defs = "".join(
        f"def @f{i}(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {{\n"
        f"  @f{i + 1}(nn.dropout(%x, @rng, rate=0.1f))\n}}\n"
        for i in range(n)
    )
    defs += f"def @f{n}(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {{ %x }}\n"
    text = (
        '#[version = "0.0.5"]\n' + cells + defs + "def @main(%x: Tensor[(4), float32]) { @f0(%x) }"
    )
    module = effir.parse(text)
    after = effir.check(partial_eval(module))
    assert "@f1(" not in effir.astext(after["main"])  # the whole chain inlined
    x = np.ones(4, np.float32)
    assert np.array_equal(effir.interpret(module, x), effir.interpret(after, x))


# ------------------------------------------------- polymorphic functions
# Inlining a function with type parameters copies its body into a function
# where those parameters mean nothing: the copy must be the instance used
# at the call site (a closure it makes, a let it annotates), or the
# residual program uses type variables outside their binder's scope.

PRELUDE_MAIN = """#[version = "0.0.4"]
def @main(%x: Tensor[(), int32]) -> Tensor[(), int32] {
  let %xs = Cons(%x, Cons(%x + 1, Cons(%x * 2, Nil)));
  let %triple = fn (%v: Tensor[(), int32]) -> Tensor[(), int32] { %v * 3 };
  let %ys = @map(%triple, @rev(%xs));
  let %zs = @concat(%ys, @rev(@map(@id, %ys)));
  let %pairs = @zip(%zs, @rev(%zs));
  let %dot = fn (%a: Tensor[(), int32], %p: (Tensor[(), int32], Tensor[(), int32])) {
    %a + %p.0 * %p.1
  };
  let %sub = fn (%a: Tensor[(), int32], %b: Tensor[(), int32]) { %a - %b * 2 };
  let %g = @compose(%triple, fn (%v: Tensor[(), int32]) { @flip(%sub)(%v, %x) });
  let %acc = fn (%a: Tensor[(), int32], %v: Tensor[(), int32]) { (%a + %v, %a * %v) };
  let %scan = @map_accumr(%acc, 0, %xs);
  let %twice = @iterate(fn (%v: Tensor[(), int32]) { %v + 7 }, 2);
  @foldl(%dot, 0, %pairs) + %g(5) + @sum(%scan.1) + %twice(%x) + @nth(%zs, 2)
    + @length(@filter(fn (%v: Tensor[(), int32]) { %v > 4 }, %zs))
}
"""


def test_partial_eval_of_the_prelude_is_well_formed_and_means_the_same():
    module = effir.parse(PRELUDE_MAIN, module=effir.prelude())
    after = partial_eval(module)
    effir.check_well_formed(after)
    effir.check(after)
    for x in (0, 3, -2):
        arg = np.array(x, dtype="int32")
        expected = effir.interpret(module, arg)
        assert effir.interpret(after, arg) == expected, x


def test_an_inlined_polymorphic_function_returning_a_closure_is_its_instance():
    """@flip's closure annotates its parameters with @flip's type
    variables; inlined into @main, they become @main's types."""
    module = effir.parse(
        """#[version = "0.0.4"]
        def @flip[A, B, C](%f: fn(A, B) -> C) -> fn(B, A) -> C {
          fn (%b: B, %a: A) -> C { %f(%a, %b) }
        }
        def @twice[T](%x: T) -> (T, T) {
          let %y: (T, T) = (%x, %x);
          %y
        }
        def @main(%x: Tensor[(), float32], %y: Tensor[(), float32]) -> (Tensor[(), float32], (Tensor[(), float32], Tensor[(), float32])) {
          let %minus = fn (%a: Tensor[(), float32], %b: Tensor[(), float32]) { %a - %b };
          let %g = @flip(%minus);
          (%g(%x, %y), @twice(%x))
        }
        """
    )
    after = partial_eval(module)
    effir.check_well_formed(after)
    effir.check(after)
    x, y = np.array(5.0, dtype="float32"), np.array(2.0, dtype="float32")
    expected = effir.interpret(module, x, y)
    got = effir.interpret(after, x, y)
    assert float(got[0]) == float(expected[0]) == -3.0
    assert "@flip" not in effir.astext(after.functions["main"])  # inlined, not dodged


def test_grad_specialises_higher_order_prelude_code():
    """effir.grad's partial-eval removes the closures that @flip, @compose
    and @id pass around (their instances inlined), so the result
    differentiates: d/dx sum(2 (x - x^2) x) = 4x - 6x^2."""
    module = effir.parse(
        """#[version = "0.0.4"]
        def @main(%x: Tensor[(3), float32]) -> Tensor[(), float32] {
          let %f = @flip(fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32]) { %a - %b * %b });
          let %twice = fn (%v: Tensor[(3), float32]) { %v * 2f };
          let %g = @compose(%twice, @id(fn (%v: Tensor[(3), float32]) { %f(%v, %x) }));
          sum(%g(%x) * %x)
        }
        """,
        module=effir.prelude(),
    )
    x = np.array([1.0, 2.0, 3.0], dtype="float32")
    (dx,) = effir.interpret(effir.grad(module, specialise=True), x, entry="main_grad")
    np.testing.assert_allclose(dx, 4 * x - 6 * x * x)
