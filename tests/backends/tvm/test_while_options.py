"""Compiled ``cf.while_loop`` with ``max_iterations`` known at run time (the
fourth argument, of any integer dtype) and with padded outputs
(relax/loops.py [RULE LOOP-PAD]) against the interpreter: random loops drawn
by Hypothesis (state, per-step outputs, the limit's form and dtype,
padding), each built once and called with limits and trip counts of 0, a
few, past the buffers' first capacity (16) and past the limit. A negative
limit is the interpreter's located EvalError, and so is a padded loop of
2**64 - 1 rows (past the size limit: relax/dynamic.py [RULE LOWER-SIZE]). CUDA builds the same loops
(PTX by nvcc); running them needs a GPU. Compiled code runs in a
subprocess (tests/support/isolated.py)."""

from __future__ import annotations

import os
import shutil

import pytest
import tvm

import effir
from tests.support.isolated import run_isolated

EXAMPLES = int(os.environ.get("EFFIR_WHILE_EXAMPLES", "8"))

GENERATOR = r'''
from hypothesis import strategies as st

HEADER = '#[version = "0.0.5"]\n'
DTYPES = ("int8", "uint8", "int32", "int64", "uint64")


@st.composite
def while_programs(draw):
    """(text, the limit's dtype or None): a while_loop over (counter,
    vector) running while sum(vector) < %bound, stepping the vector by %x;
    its outputs none, one tensor or a tuple; its limit none, the attribute
    or the fourth argument; padded where a limit is given."""
    out = draw(st.sampled_from(["()", "sum(%s.1)", "(%s.1, %s.0)"]))
    form = draw(st.sampled_from(["none", "attribute", "argument"]))
    dtype = draw(st.sampled_from(DTYPES)) if form == "argument" else None
    pad = form != "none" and draw(st.booleans())
    limit = {"none": "", "attribute": f", max_iterations={draw(st.integers(0, 20))}"}.get(
        form, ", %m"
    )
    if pad:
        limit += ", pad_outputs=True"
    state = "(int32, Tensor[(2), float32])"
    params = "%x: Tensor[(2), float32], %bound: float32" + (f", %m: {dtype}" if dtype else "")
    text = (
        HEADER + f"def @main({params}) {{\n"
        f"  let %c = fn (%s: {state}) {{ less(sum(%s.1), %bound) }};\n"
        f"  let %b = fn (%s: {state}) {{ ({out}, (add(%s.0, 1), add(%s.1, %x))) }};\n"
        f"  cf.while_loop(%c, %b, (0, zeros(shape=[2])){limit})\n"
        "}\n"
    )
    return text, dtype
'''

PROPERTY = (
    GENERATOR
    + r"""
import numpy as np
from hypothesis import HealthCheck, given, settings
import effir
from tests.support.compiled_runs import assert_close


def runs(dtype):
    x = np.array([0.5, 0.25], np.float32)
    for bound in (0.0, 2.0, 30.0):  # 0, 3 and 40 steps
        limits = (0, 2, 25, 100) if dtype else (None,)
        for m in limits:
            yield (x, np.float32(bound)) + ((np.asarray(m, dtype),) if dtype else ())
    if dtype == "uint64":  # past int64: capped, never negative (padded: past the size limit)
        yield x, np.float32(30.0), np.asarray(2**64 - 1, dtype)


def outcome(run):
    try:
        return run()
    except effir.EvalError as err:
        return err


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(while_programs())
def compiled_equals_interpreted(program):
    text, dtype = program
    module = effir.check(effir.parse(text, source_name="w.effir"))
    compiled = effir.compile(module)
    for args in runs(dtype):
        got = outcome(lambda: compiled(*args))
        want = outcome(lambda: effir.interpret(module, *args))
        if isinstance(want, effir.EvalError):  # 2**62 padded rows: refused by both, located
            assert isinstance(got, effir.EvalError), (got, want)
            for message in (str(got), str(want)):
                assert message.startswith("w.effir:5:3: runtime error: cf.while_loop: "), message
                assert "more than the limit of 4 GiB" in message, message
        else:
            assert_close(got, want)
    if dtype is not None and dtype.startswith("int"):
        bad = args[:2] + (np.asarray(-3, dtype),)
        got = []
        for run in (lambda: compiled(*bad), lambda: effir.interpret(module, *bad)):
            try:
                run()
                got.append("no error")
            except effir.EvalError as err:
                got.append(str(err))
        assert got[0] == got[1], got
        assert "w.effir:5:3: runtime error: cf.while_loop: max_iterations must be >= 0, " \
            "got -3" in got[0], got


compiled_equals_interpreted()
print("ok")
"""
)


def test_run_time_limits_and_padding_compiled_equal_the_interpreter() -> None:
    code = f"EXAMPLES = {EXAMPLES}\n" + PROPERTY
    run_isolated(code, timeout=1800).check()


def padded_program() -> str:
    namespace: dict = {}
    exec(GENERATOR, namespace)  # the test's own generator text
    return (
        namespace["HEADER"] + "def @main(%x: Tensor[(2), float32], %bound: float32, %m: int32) {\n"
        "  let %c = fn (%s: (int32, Tensor[(2), float32])) { less(sum(%s.1), %bound) };\n"
        "  let %b = fn (%s: (int32, Tensor[(2), float32])) {\n"
        "    ((%s.1, %s.0), (add(%s.0, 1), add(%s.1, %x)))\n"
        "  };\n"
        "  cf.while_loop(%c, %b, (0, zeros(shape=[2])), %m, pad_outputs=True)\n"
        "}\n"
    )


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_padded_loop_with_a_run_time_limit_builds_for_cuda() -> None:
    """No GPU here: the loop builds for CUDA, its step kernels compile to
    PTX, and the limit's check runs on the host (the VM), never in device
    code."""
    module = effir.check(effir.parse(padded_program(), source_name="w.effir"))
    compiled = effir.compile(module, target="cuda")
    (spec,) = compiled.specialisations.values()
    host = spec.program.module.script()
    assert "cf.while_loop: max_iterations must be >= 0" in host
    assert '"effir.check"' in host
    assert "assert" not in spec.source("cuda").lower()
    assert ".entry" in spec.ptx()


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="needs a GPU (a lent GPU machine runs it)")
def test_a_padded_loop_with_a_run_time_limit_runs_on_the_gpu() -> None:
    run_isolated(
        f"""
        import numpy as np, effir
        from tests.support.compiled_runs import assert_close
        module = effir.check(effir.parse({padded_program()!r}))
        compiled = effir.compile(module, target="cuda")
        x = np.array([0.5, 0.25], np.float32)
        for bound in (0.0, 2.0, 30.0):
            for m in (0, 2, 25):
                args = (x, np.float32(bound), np.int32(m))
                assert_close(compiled(*args), effir.interpret(module, *args))
        print("ok")
        """
    ).check()


EFFECTFUL = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32], %m: int64) {
  let %cond = fn (%s: Tensor[(4), float32]) {
    let %d = nn.dropout(%s, @rng);
    debug.print(%d, label="test");
    less(sum(%d), 12f)
  };
  let %body = fn (%s: Tensor[(4), float32]) {
    let %y = nn.dropout(%s, @rng, rate=0.25f);
    (%y, add(%y, 1f))
  };
  cf.while_loop(%cond, %body, %x, %m, pad_outputs=True)
}
"""


def test_a_condition_that_draws_under_a_run_time_limit_compiles_as_interpreted() -> None:
    """State passing moves the drawing condition into the step, tested
    only below the run-time limit; compiled, the results, the key and the
    prints are the interpreter's, call after call from one State."""
    run_isolated(
        f"""
        import numpy as np, effir
        from tests.support.compiled_runs import assert_same_run
        module = effir.check(effir.parse({EFFECTFUL!r}))
        x = np.linspace(-1, 1, 4, dtype=np.float32)
        for m in (0, 1, 3, 20):
            assert_same_run(module, x, np.int64(m), steps=2)
        print("ok")
        """
    ).check()
