"""Control flow in compiled code (relax/loops.py, relax/lower.py's calls)
against the interpreter: every form of ``cf.foreach`` (map, scan, both;
one or several sequences and states; static, symbolic and ``?`` lengths;
a whole TIR loop or a VM loop) and of ``cf.while_loop`` (with and without
per-step outputs, one or several states, with and without
``max_iterations``), and loops and recursion 10,000 deep (in a
subprocess, so that a crash is a reported failure).

Each program holds every form of one grid row, so that one build serves
several cases; the builds run with small ``LOOP_CHUNK`` and loop levels,
so that short runs cross the chunk and level boundaries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import effir
from effir.backends.tvm.driver.compile import compile as compile_module
from effir.backends.tvm.relax import loops as relax_loops
from effir.backends.tvm.runtime.stack import MAX_DEPTH
from effir.ir.diagnostics import EvalError
from tests.support.compiled_runs import assert_close
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'
LENGTHS = {"static": "6", "symbolic": "t", "unknown": "?"}
RUNS = {"static": (6,), "symbolic": (0, 3, 11), "unknown": (0, 3, 11)}
FORMS = ("map", "scan", "both")
ARITIES = (1, 2)
BODIES = ("kernel", "vm")  # a whole TIR loop, or a VM loop (an `if` in the body)


def parse(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="control.effir"))


def _foreach(form: str, arity: int, body: str) -> str:
    """One cf.foreach over %xs (and %ys when ``arity`` is 2)."""
    if arity == 1:
        x_param, seqs, unpack = "%x: Tensor[(2), float32]", "%xs", ""
        h_type, init, new_h = "Tensor[(2), float32]", "zeros(shape=[2])", "add(%h, %g)"
    else:
        x_param = "%p: (Tensor[(2), float32], Tensor[(3), float32])"
        seqs, unpack = "(%xs, %ys)", "let %x = %p.0; let %y = %p.1;"
        h_type, init = "(Tensor[(2), float32], float32)", "(zeros(shape=[2]), 0f)"
        new_h = "(add(%h.0, %g), add(%h.1, sum(%y)))"
    g = (
        "let %g = if (greater(sum(%x), 100f)) { negative(%x) } else { multiply(%x, 0.5f) };"
        if body == "vm"
        else "let %g = multiply(%x, 0.5f);"
    )
    if form == "map":
        h_type, init, result = "()", "()", "(tanh(%g), ())"
    elif form == "scan":
        result = f"((), {new_h})"
    else:
        result = f"((tanh(%g), sum(%g)), {new_h})"
    return f"cf.foreach(fn ({x_param}, %h: {h_type}) {{ {unpack} {g} {result} }}, {seqs}, {init})"


def foreach_program(length: str, body: str) -> effir.IRModule:
    n = LENGTHS[length]
    loops = ", ".join(_foreach(form, arity, body) for form in FORMS for arity in ARITIES)
    return parse(
        f"def @main(%xs: Tensor[({n}, 2), float32], %ys: Tensor[({n}, 3), float32]) {{ ({loops}) }}"
    )


@pytest.fixture(scope="module")
def small_levels() -> Any:
    """Chunks of 4 steps, loop levels of 2 steps, 2 levels: a few steps
    cross every boundary of [RULE LOOP-CHUNK] and [RULE LOOP-LEVELS]."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(relax_loops, "LOOP_CHUNK", 4)
        patch.setattr(relax_loops, "LEVEL_STEPS", 2)
        patch.setattr(relax_loops, "LEVELS", 2)
        yield


@pytest.fixture(scope="module")
def foreach_runs(small_levels: Any) -> dict[tuple[str, str], Any]:
    """Per (length, body): the compiled and the interpreted results of each run."""
    rng = np.random.default_rng(0)
    runs = {}
    for length in LENGTHS:
        for body in BODIES:
            module = foreach_program(length, body)
            try:
                compiled = compile_module(module)
                results = []
                for t in RUNS[length]:
                    xs = rng.standard_normal((t, 2)).astype(np.float32)
                    ys = rng.standard_normal((t, 3)).astype(np.float32)
                    results.append((compiled(xs, ys), effir.interpret(module, xs, ys)))
                runs[length, body] = results
            except Exception as err:  # reported by each case of this program
                runs[length, body] = err
    return runs


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("arity", ARITIES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("length", LENGTHS)
def test_every_form_of_foreach_runs_as_the_interpreter(
    foreach_runs: Any, length: str, form: str, arity: int, body: str
) -> None:
    index = FORMS.index(form) * len(ARITIES) + ARITIES.index(arity)
    runs = foreach_runs[length, body]
    if isinstance(runs, Exception):
        raise runs
    for out, ref in runs:
        assert_close(out[index], ref[index])


def test_a_foreach_over_a_data_dependent_length(small_levels: Any) -> None:
    module = parse(
        """
def @main(%x: Tensor[(7, 2), float32], %m: Tensor[(7), bool]) {
  let %xs = boolean_mask(%x, %m);
  (cf.foreach(fn (%r: Tensor[(2), float32], %h: float32) {
     (multiply(%r, %h), add(%h, sum(%r)))
   }, %xs, 1f),
   cf.foreach(fn (%r: Tensor[(2), float32], %h: ()) { (exp(%r), ()) }, %xs, ()))
}
"""
    )
    compiled = compile_module(module)
    x = np.random.default_rng(1).standard_normal((7, 2)).astype(np.float32)
    for mask in ([1, 0, 1, 1, 1, 1, 0], [0] * 7, [1] * 7):
        m = np.array(mask, bool)
        assert_close(compiled(x, m), effir.interpret(module, x, m))


def test_a_foreach_whose_per_step_output_has_a_data_dependent_size(small_levels: Any) -> None:
    """[RULE LOOP-VMSIZED] The steps' output of a size known once a step has run
    (sqrt checkpointing's segments of ceil(sqrt(T)) steps): its buffer is
    widened by the first step and grows as a while_loop's; before, a
    CompileError."""
    module = parse(
        """
def @main(%xs: Tensor[(t, 3), float32], %keep: Tensor[(3), bool]) {
  cf.foreach(fn (%x: Tensor[(3), float32], %s: float32) {
    (multiply(boolean_mask(%x, %keep), %s), add(%s, 1f))
  }, %xs, 1f)
}
"""
    )
    compiled = compile_module(module)
    rng = np.random.default_rng(2)
    for t, keep in [(3, [1, 0, 1]), (30, [0, 1, 1]), (5, [0, 0, 0]), (1, [1, 1, 1])]:
        xs = rng.standard_normal((t, 3)).astype(np.float32)
        k = np.array(keep, bool)
        assert_close(compiled(xs, k), effir.interpret(module, xs, k))


def test_sequences_of_different_lengths_are_an_eval_error() -> None:
    module = parse(
        """
def @main(%xs: Tensor[(?, 2), float32], %ys: Tensor[(?, 3), float32]) {
  cf.foreach(fn (%p: (Tensor[(2), float32], Tensor[(3), float32]), %h: float32) {
    (add(%p.0, 1f), add(%h, sum(%p.1)))
  }, (%xs, %ys), 0f)
}
"""
    )
    xs, ys = np.ones((3, 2), np.float32), np.ones((4, 3), np.float32)
    with pytest.raises(EvalError, match="different lengths") as interpreted:
        effir.interpret(module, xs, ys)
    where = interpreted.value.location  # the cf.foreach call
    with pytest.raises(EvalError, match=rf"{where}: .*cf\.foreach: .*different lengths") as got:
        compile_module(module)(xs, ys)
    # one message (runtime/errors.py [RULE RUNTIME-CHECK])
    assert str(got.value) == str(interpreted.value)


# ------------------------------------------------------------ while loops
def _while(form: str, arity: int, limit: str) -> str:
    if arity == 1:
        s_type, init, cond, new_s = "Tensor[(2), float32]", "%x", "sum(%s)", "add(%s, %x)"
    else:
        s_type, init = "(Tensor[(2), float32], int32)", "(%x, 0)"
        cond, new_s = "sum(%s.0)", "(add(%s.0, %x), add(%s.1, 1))"
    out = "()" if form == "none" else f"(sum({cond}), {cond})"
    return (
        f"cf.while_loop(fn (%s: {s_type}) {{ less({cond}, %limit) }}, "
        f"fn (%s: {s_type}) {{ ({out}, {new_s}) }}, {init}{limit})"
    )


WHILE_FORMS = ("none", "outputs")
WHILE_LIMITS = {"unlimited": "", "max_iterations": ", max_iterations=7"}


@pytest.fixture(scope="module")
def while_runs(small_levels: Any) -> list[tuple[Any, Any]]:
    loops = ", ".join(
        _while(form, arity, limit)
        for form in WHILE_FORMS
        for arity in ARITIES
        for limit in WHILE_LIMITS.values()
    )
    module = parse(f"def @main(%x: Tensor[(2), float32], %limit: float32) {{ ({loops}) }}")
    compiled = compile_module(module)
    x = np.ones(2, np.float32)
    # 0 steps, a few, and more than the buffers' first capacity (16)
    limits = [np.array(v, np.float32) for v in (0.0, 9.0, 60.0)]
    return [(compiled(x, v), effir.interpret(module, x, v)) for v in limits]


@pytest.mark.parametrize("limit", WHILE_LIMITS)
@pytest.mark.parametrize("arity", ARITIES)
@pytest.mark.parametrize("form", WHILE_FORMS)
def test_every_form_of_while_loop_runs_as_the_interpreter(
    while_runs: Any, form: str, arity: int, limit: str
) -> None:
    index = (WHILE_FORMS.index(form) * len(ARITIES) + ARITIES.index(arity)) * len(
        WHILE_LIMITS
    ) + list(WHILE_LIMITS).index(limit)
    for out, ref in while_runs:
        assert_close(out[index], ref[index])


WHILE_SIZED = """
import numpy as np, effir
from effir.backends.tvm.driver.compile import compile as compile_module
from tests.backends.tvm.test_compile import assert_close
module = effir.check(effir.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %keep: Tensor[(3), bool], %limit: float32) {
  cf.while_loop(fn (%s: float32) { less(%s, %limit) }, fn (%s: float32) {
    ((multiply(boolean_mask(%x, %keep), %s), add(%s, 2f)), add(%s, 1f))
  }, 0f)
}'''))
compiled = compile_module(module)
x = np.array([1, 2, 3], np.float32)
for keep, limit in [([1, 0, 1], 1), ([0, 1, 1], 5), ([1, 1, 1], 40), ([0, 0, 0], 3)]:
    args = (x, np.array(keep, bool), np.array(limit, np.float32))
    out, ref = compiled(*args), effir.interpret(module, *args)
    assert out[0][0].shape == (limit, sum(keep)), out[0][0].shape
    assert_close(out, ref)
print("same")
"""


def test_a_while_loop_whose_per_step_output_has_a_data_dependent_size() -> None:
    """[RULE LOOP-VMSIZED] A while_loop's per-step output of a size the step
    tells (ONNX Loop's scan outputs): its buffer is widened by the first
    step and grows as the loop runs past its capacity (16 rows), beside a
    static output; before, a CompileError."""
    assert run_isolated(WHILE_SIZED).check().stdout.split()[-1] == "same"


# ------------------------------------------------------------- deep runs
DEEP = """
import os, tempfile
import numpy as np, effir
from effir.backends.tvm.driver.compile import compile as compile_module
from tests.support.compiled_runs import assert_close
module = effir.check(effir.parse('''#[version = "0.0.5"]
def @count(%n: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else { add(@count(subtract(%n, 1)), 0.5f) }
}
def @main(%x: Tensor[(2), float32], %limit: float32, %xs: Tensor[(t, 2), float32], %n: int32) {
  (cf.while_loop(fn (%v: Tensor[(2), float32]) { less(sum(%v), %limit) },
                 fn (%v: Tensor[(2), float32]) { let %w = add(%v, 1f); (sum(%w), %w) }, %x),
   cf.foreach(fn (%r: Tensor[(2), float32], %h: Tensor[(2), float32]) {
     let %s = if (greater(sum(%r), 1000f)) { %h } else { add(%h, %r) };
     (sum(%s), %s)
   }, %xs, %x),
   @count(%n))
}'''))
compiled = compile_module(module)
args = (np.zeros(2, np.float32), np.array(20000, np.float32), np.ones((10000, 2), np.float32),
        np.array(10000, np.int32))
out = compiled(*args)
assert out[0][0].shape == (10000,) and out[1][0].shape == (10000,) and out[2] == 5000
assert_close(out, effir.interpret(module, *args))
with tempfile.TemporaryDirectory() as tmp:  # a loaded artifact runs as deep
    compiled.export(os.path.join(tmp, "deep"))
    assert_close(effir.load(os.path.join(tmp, "deep"))(*args), out)
print("same")
"""


def test_loops_and_recursion_ten_thousand_deep_run_as_the_interpreter() -> None:
    # The VM runs each call of a VM function as a native recursion: a loop
    # of 10,000 steps as one recursion overflowed the native stack
    # [RULE LOOP-LEVELS], and so did a recursion 10,000 deep [RULE RUNTIME-STACK].
    run_isolated(DEEP).check()


GUARD = """
import numpy as np, effir
from effir.backends.tvm.relax import lower as relax_lower
relax_lower.MAX_DEPTH = 300
from effir.backends.tvm.driver.compile import compile as compile_module
module = effir.check(effir.parse('''#[version = "0.0.5"]
def @count(%n: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else { add(@count(subtract(%n, 1)), 0.5f) }
}
def @walk(%n: int32, %one: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else {
    cf.while_loop(fn (%s: (int32, float32)) { less(%s.0, %one) },
                  fn (%s: (int32, float32)) {
                    ((), (add(%s.0, 1), add(%s.1, add(@walk(subtract(%n, 1), %one), 1f))))
                  }, (0, 0f)).1.1
  }
}
def @main(%n: int32, %m: int32, %k: int32, %one: int32) {
  let %f = fn (%i: int32) -> float32 {
    if (less_equal(%i, 0)) { 0f } else { add(%f(subtract(%i, 1)), 2f) }
  };
  (@count(%n), @walk(%m, %one), %f(%k))
}''', source_name="guard.effir"))
compiled = compile_module(module)
def run(n, m, k):
    return compiled(*[np.array(v, np.int32) for v in (n, m, k, 1)])
for args in [(6, 7, 8), (299, 1, 1), (1, 40, 1), (1, 1, 290)]:  # within the limit
    out = run(*args)
    if max(args) < 10:
        assert out == effir.interpret(module, *[np.array(v, np.int32) for v in (*args, 1)])
for args, name in [((310, 1, 1), "@count"), ((1, 60, 1), "@walk"), ((1, 1, 400), "%f")]:
    try:
        run(*args)
    except effir.EvalError as err:
        assert f"{name}: recursion deeper than 300 nested calls" in str(err), str(err)
        assert "guard.effir:" in str(err), str(err)
    else:
        raise AssertionError(f"{args} ran")
print("stopped")
"""


def test_a_recursion_past_the_depth_limit_is_an_eval_error_naming_the_function() -> None:
    # A global, a recursion through a VM loop (whose levels count as the
    # native calls they are), a let-bound closure: each stops at the limit
    # (300 here, MAX_DEPTH otherwise) with an EvalError instead of a crash.
    run_isolated(GUARD).check()


def test_only_recursive_programs_run_on_the_large_stack() -> None:
    recursive = parse(
        """
def @down(%n: int32) -> int32 {
  if (less_equal(%n, 0)) { debug.print(%n, label="bottom"); %n } else { @down(subtract(%n, 1)) }
}
def @main(%n: int32) { @down(%n) }
"""
    )
    compiled = compile_module(recursive)
    printed: list[str] = []
    compiled(np.array(3, np.int32), sink=lambda label, value: printed.append(label))
    assert printed == ["bottom"]  # prints on the worker thread reach the caller's sink
    assert all(s.program.recursive for s in compiled.specialisations.values())
    loop = foreach_program("static", "vm")
    assert not any(s.program.recursive for s in compile_module(loop).specialisations.values())


@pytest.mark.nightly  # about a minute
def test_a_recursion_to_the_depth_limit_fits_the_large_stack() -> None:
    # MAX_DEPTH nested calls fit STACK_BYTES: the real limit, not a patched one.
    code = GUARD.replace("relax_lower.MAX_DEPTH = 300", "")
    for small, large in [
        (
            "(299, 1, 1), (1, 40, 1), (1, 1, 290)",
            f"({MAX_DEPTH - 1}, 1, 1), (1, {MAX_DEPTH // 8}, 1)",
        ),
        ("(310, 1, 1)", f"({MAX_DEPTH + 10}, 1, 1)"),
        ("(1, 60, 1)", f"(1, {MAX_DEPTH // 6}, 1)"),
        ("(1, 1, 400)", f"(1, 1, {MAX_DEPTH + 10})"),
        ("deeper than 300", f"deeper than {MAX_DEPTH}"),
    ]:
        assert small in code
        code = code.replace(small, large)
    run_isolated(code, timeout=900).check()


def test_two_functions_of_one_signature_stay_two() -> None:
    # Each global was declared as a stub of its signature, and TVM's
    # BlockBuilder.add_func gives back an equal function it already has:
    # @half's calls ran @twice.
    module = parse(
        """
def @half(%n: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else { add(@half(subtract(%n, 1)), 0.5f) }
}
def @twice(%n: int32) -> float32 {
  if (less_equal(%n, 0)) { 0f } else { add(@twice(subtract(%n, 1)), 2f) }
}
def @main(%n: int32) { (@half(%n), @twice(%n)) }
"""
    )
    n = np.array(5, np.int32)
    assert_close(compile_module(module)(n), effir.interpret(module, n))


NESTED_BLOCKS = """
import sys
import effir
from tvm import relax
from effir.backends.tvm.relax.lower import lower_to_relax
from effir.backends.tvm.target import make_target

n = 400
ifs = "if (%c) { " * n + "%x" + " } else { %x }" * n
matches = "match (%o) { Some(%y) => " * n + "%y" + ", None => %x }" * n
option = "type Option[A] { Some(A), None }\\n"
for text in (
    f"def @main(%c: bool, %x: float32) {{ {ifs} }}",
    option + f"def @main(%o: Option[float32], %x: float32) {{ {matches} }}",
):
    module = effir.check(effir.parse('#[version = "0.0.5"]\\n' + text))
    sys.setrecursionlimit(1000)  # CPython's default
    program = lower_to_relax(module, "main", make_target("llvm"))
    sys.setrecursionlimit(10000)
    depth, seq = 0, program.module["main"].body
    while True:  # how deep the last If of each block nests (its true branch)
        ifs_here = [b.value for block in seq.blocks for b in block.bindings]
        ifs_here = [v for v in ifs_here if isinstance(v, relax.If)]
        if not ifs_here:
            break
        depth, seq = depth + 1, ifs_here[-1].true_branch
    print(depth)
deeper = "if (%c) { " * 800 + "%x" + " } else { %x }" * 800
module = effir.check(effir.parse('#[version = "0.0.5"]\\n' + f"def @main(%c: bool, %x: float32) {{ {deeper} }}"))
try:
    lower_to_relax(module, "main", make_target("llvm"))
except effir.CompileError as err:
    print("refused", err.span is not None, "native stack" in err.message)
"""


def test_nested_ifs_and_matches_lower_without_python_recursion() -> None:
    """relax/lower.py: the branches of an ``if`` and the clauses of a
    ``match`` are blocks built on the trampoline (Builder.nested), not a
    level of Python recursion each: 400 of them nested lower under
    CPython's default recursion limit (lowered to Relax, not built; on
    main 300 raised RecursionError). In a process of its own: TVM's own
    C++ recursion (``BlockBuilder.update_func``) overflows the 8 MB
    main-thread stack between 600 and 700 nested ``If``s, so 800 are a
    located CompileError (relax/builder.py ``MAX_NESTED_BLOCKS``), not a
    crash."""
    run = run_isolated(NESTED_BLOCKS)
    run.check()
    assert run.stdout.split() == ["400", "400", "refused", "True", "True"]


def test_an_error_in_a_nested_block_closes_every_block_it_opened() -> None:
    """relax/builder.py: ``Builder.nested`` closes its block when the
    computation inside raises, however deep, so the error propagates with
    no block left open."""
    from tvm import relax

    from effir.backends.tvm.relax.builder import Builder
    from effir.ir.trampoline import run

    bb = Builder()

    def failing(depth: int) -> Any:
        bb.emit(relax.const(np.float32(depth)))
        if depth == 0:
            raise ValueError("inside")
        return (yield bb.nested(failing(depth - 1)))

    with pytest.raises(ValueError, match="inside"):
        run(bb.nested(failing(50)))
    assert bb.open() == 1  # the first block open again: none was left
