"""Defects the widened differential fuzzer found (fuzz/widened.py),
each as its smallest program, compiled in a subprocess (tests/support/isolated.py).
A defect not fixed yet is ``xfail(strict=True)`` with what it does, so the
fix turns it into a failure to remove the mark."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.isolated import run_isolated

REDUCE_OF_FOLDED_CHAIN = r'''
import json
import numpy as np
import effir

def program(n):
    return effir.check(effir.parse(f"""#[version = "0.0.5"]
def @main(%y: float32) {{
  add(max(add(multiply(ones(shape=[{n}], dtype="float32"), -3f), 1f)), %y)
}}
"""))
results = {}
# 2048 elements: past constant folding's limit, so -O2 compiles the chain too
for n in (8, 2048):
    for level in (0, 1, 2):
        try:
            got = float(effir.compile(program(n), opt_level=level)(np.float32(1)))
        except effir.Error as exc:
            got = f"{type(exc).__name__}: {exc.message[:300]}"
        results[f"{n} -O{level}"] = got
print(json.dumps(results))
'''


def test_a_reduction_of_a_constant_elementwise_chain_builds_at_every_level() -> None:
    result = run_isolated(REDUCE_OF_FOLDED_CHAIN).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == {f"{n} -O{level}": -1.0 for n in (8, 2048) for level in (0, 1, 2)}


# [RULE TE-CONSTLET]: a let bound to an expression of constants, however it got
# there, and a condition holding it (NaN-propagating max, where, relu, tanh's
# clamp, argmax, a whole loop's body).
CONSTANT_LETS = {
    "tanh": ("def @main(%y: float32) { add(tanh(2f), %y) }", "scalar"),
    "tanh_of_product": ("def @main(%y: float32) { add(tanh(multiply(2f, 3f)), %y) }", "scalar"),
    "maximum": (
        "def @main(%y: Tensor[(8,), float32]) { maximum(add(multiply(ONES, -3f), 1f), %y) }",
        "vector",
    ),
    "where": (
        "def @main(%y: Tensor[(8,), float32]) "
        "{ where(greater(add(multiply(ONES, -3f), 1f), %y), %y, negative(%y)) }",
        "vector",
    ),
    "relu": (
        "def @main(%y: Tensor[(8,), float32]) { add(nn.relu(add(multiply(ONES, -3f), 1f)), %y) }",
        "vector",
    ),
    "min": ("def @main(%y: float32) { add(min(add(multiply(ONES, -3f), 1f)), %y) }", "scalar"),
    "argmax": (
        "def @main(%y: Tensor[(8,), float32]) { argmax(multiply(%y, add(multiply(ONES, -3f), 1f))) }",
        "vector",
    ),
    "loop": (
        "def @main(%y: Tensor[(8,), float32]) {\n"
        "  let %r = cf.while_loop(fn (%s: (int32, Tensor[(8,), float32])) { less(%s.0, 3) },\n"
        "    fn (%s: (int32, Tensor[(8,), float32])) {\n"
        "      ((), (add(%s.0, 1), maximum(%s.1, add(multiply(ONES, tanh(2f)), 1f))))\n"
        "    }, (0, %y));\n"
        "  %r.1.1\n"
        "}",
        "vector",
    ),
}

CONSTANT_LETS_SCRIPT = r"""
import json
import numpy as np
import effir

cases = json.loads(CASES)
target = TARGET
args = {"scalar": np.float32(1.5), "vector": np.linspace(-4, 4, 8, dtype=np.float32)}
results = {}
for name, (text, kind) in cases.items():
    text = text.replace("ONES", 'ones(shape=[8], dtype="float32")')
    module = effir.check(effir.parse('#[version = "0.0.5"]\n' + text))
    try:
        compiled = effir.compile(module, opt_level=1, target=target)
        if target == "llvm":
            want = np.asarray(effir.interpret(module, args[kind]))
            got = np.asarray(compiled(args[kind]))
            results[name] = bool(np.allclose(got, want, rtol=1e-5)) or f"{got} != {want}"
        else:
            (spec,) = compiled.specialisations.values()
            results[name] = ".entry" in spec.ptx() or "no PTX"
    except effir.Error as exc:
        results[name] = f"{type(exc).__name__}: {exc.message[:300]}"
print(json.dumps(results))
"""


def _constant_lets(target: str) -> dict[str, object]:
    script = CONSTANT_LETS_SCRIPT.replace("CASES", repr(json.dumps(CONSTANT_LETS)))
    result = run_isolated(script.replace("TARGET", repr(target)), timeout=240).check()
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_lets_of_constants_build_and_agree_with_the_interpreter() -> None:
    assert _constant_lets("llvm") == dict.fromkeys(CONSTANT_LETS, True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_lets_of_constants_build_for_cuda() -> None:
    assert _constant_lets("cuda") == dict.fromkeys(CONSTANT_LETS, True)


ELEMENTWISE_CHAIN = r"""
import numpy as np
import effir

lets = "\n".join(
    f"  let %v{i + 1} = add(multiply(%v{i}, 0.5f), {i % 3}.0f);" for i in range(40)
)
module = effir.check(effir.parse(
    '#[version = "0.0.5"]\ndef @main(%v0: Tensor[(3,), float32]) {\n' + lets + "\n  tanh(%v40)\n}\n"
))
x = np.array([-2, 0.5, 3], np.float32)
got = effir.compile(module, opt_level=1)(x)
np.testing.assert_allclose(got, effir.interpret(module, x), rtol=1e-5)
print("built")
"""


def test_a_chain_of_forty_elementwise_lets_builds_at_o1() -> None:
    """[RULE TE-LETFLOAT]: each let inlined into the next one's value doubled
    TVM's build (12 lets: 17 s); floated, 40 build in about a second. A hang
    guard, not a speed target."""
    result = run_isolated(ELEMENTWISE_CHAIN, timeout=120).check()
    assert "built" in result.stdout


ADT_TUPLE_MATCH = r"""
import json
import numpy as np
import effir

module = effir.check(effir.parse('''#[version = "0.0.5"]
type Maybe[A] { Just(A), Nothing }
def @both(%a: Maybe[Tensor[(3,), float32]], %b: Maybe[Tensor[(3,), float32]]) {
  match ((%a, %b)) {
    (Just(%x), Just(%y)) => add(%x, %y),
    (Just(%x), Nothing) => tanh(%x),
    (Nothing, Just(%y)) => negative(%y),
    (Nothing, Nothing) => zeros(shape=[3], dtype="float32")
  }
}
def @main(%x: Tensor[(3,), float32], %c: bool) {
  @both(if (%c) { Just(%x) } else { Nothing }, Nothing)
}
'''))
x = np.array([-1, 0.5, 2], np.float32)
results = {}
for level in (0, 1, 2):
    compiled = effir.compile(module, opt_level=level)
    for c in (True, False):
        got = compiled(x, np.bool_(c))
        want = effir.interpret(module, x, np.bool_(c))
        results[f"-O{level} {c}"] = bool(np.allclose(got, want)) or f"{got} != {want}"
print(json.dumps(results))
"""


def test_a_tuple_of_a_known_and_an_unknown_adt_value_matches_compiled_at_o2() -> None:
    """[RULE LOWER-DEADCLAUSE]: at -O2 ``Nothing`` keeps its precise Relax
    type through the tuple; the clauses reading a ``Just``'s field of it
    failed TVM's build ("field_tokens.size() > tuple_item->index")."""
    result = run_isolated(ADT_TUPLE_MATCH).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == {f"-O{level} {c}": True for level in (0, 1, 2) for c in (True, False)}


NO_CLAUSE_FITS = r"""
import json
import numpy as np
import effir

module = effir.check(effir.parse('''#[version = "0.0.5"]
type Maybe[A] { Just(A), Nothing }
def @main(%x: Tensor[(3,), float32]) {
  let %n: Maybe[Tensor[(3,), float32]] = Nothing;
  match? ((%n, %x)) {
    (Just(%y), %z) => add(%y, %z),
  }
}
'''))
results = {}
for level in (0, 1, 2):
    try:
        effir.compile(module, opt_level=level)(np.ones(3, np.float32))
        results[level] = "ran"
    except effir.Error as exc:
        results[level] = f"{type(exc).__name__}: {exc.message[:200]}"
print(json.dumps(results))
"""


def test_a_match_none_of_whose_clauses_fits_a_known_value_fails_at_run_time() -> None:
    """[RULE LOWER-DEADCLAUSE]: every clause ruled out by the value's type; the
    build failed at every level, it now fails as the interpreter does."""
    result = run_isolated(NO_CLAUSE_FITS).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys("012", "EvalError: match?: no clause matches the value")


INTEGER_DIVISION_BY_CONSTANT_ZERO = r"""
import json
import numpy as np
import effir

dtype = DTYPE
results = {}
for op in ("divide", "mod", "fmod"):
    for zero in (f'cast(0, dtype="{dtype}")', f'subtract(cast(3, dtype="{dtype}"), cast(3, dtype="{dtype}"))'):
        text = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(4,), {dtype}]) {{ {op}(%x, {zero}) }}'
        module = effir.check(effir.parse(text))
        for level in (0, 1, 2):
            try:
                effir.compile(module, opt_level=level)(np.arange(1, 5).astype(dtype))
                got = "ran"
            except effir.Error as exc:
                got = type(exc).__name__ + ("" if "by zero" in exc.message else exc.message[:200])
            results[f"{op} {zero} -O{level}"] = got
print(json.dumps(results))
"""

INTEGER_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_an_integer_division_by_a_constant_zero_fails_at_run_time(dtype: str) -> None:
    """docs/semantics.md: an integer division by zero is an EvalError, compiled
    code included, the zero literal or folded, at every level. Before
    [RULE TE-CONSTLET], a folded zero failed the build for int8, uint8,
    uint16 and uint64 ("conflicts with previous binding"); before
    [RULE TE-MASK], uint32's at -O1 ("Divide by zero": TVM's analysis of
    the 32-bit mask of the wrapping subtraction, in the zero check)."""
    script = INTEGER_DIVISION_BY_CONSTANT_ZERO.replace("DTYPE", repr(dtype))
    result = run_isolated(script, timeout=300).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(results.values()) == {"EvalError"}, results


FLOAT_DIVISION_BY_FOLDED_ZERO = r"""
import json
import numpy as np
import effir

dtype, suffix, target = DTYPE, SUFFIX, TARGET
module = effir.check(effir.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(3,), {dtype}]) {{
  (add(divide(0{suffix}, subtract(1.5{suffix}, 1.5{suffix})), %x),
   divide(%x, subtract(1.5{suffix}, 1.5{suffix})))
}}
'''))
x = np.array([1, -1, 0], dtype)


def same(got, want):  # bit for bit (zeros' and infinities' signs), any NaN for NaN
    nan = np.isnan(want)
    return bool((np.isnan(got) == nan).all()) and got[~nan].tobytes() == want[~nan].tobytes()


results = {}
for level in (0, 1, 2):
    try:
        compiled = effir.compile(module, opt_level=level, target=target)
        if target == "cuda":
            (spec,) = compiled.specialisations.values()
            results[level] = ".entry" in spec.ptx() or "no PTX"
            continue
        got, want = compiled(x), effir.interpret(module, x)
        results[level] = all(map(same, got, want)) or f"{got} != {want}"
    except effir.Error as exc:
        results[level] = f"{type(exc).__name__}: {exc.message[:200]}"
print(json.dumps(results))
"""


def _division_by_folded_zero(dtype: str, target: str) -> dict[str, object]:
    suffix = {"float16": "f16", "float32": "f", "float64": "f64"}[dtype]
    script = FLOAT_DIVISION_BY_FOLDED_ZERO.replace("DTYPE", repr(dtype))
    script = script.replace("SUFFIX", repr(suffix)).replace("TARGET", repr(target))
    result = run_isolated(script, timeout=300).check()
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_float_division_by_a_folded_zero_is_ieee_at_every_level(dtype: str) -> None:
    """numpy's ``0 / (1.5 - 1.5)`` is NaN and ``x / (1.5 - 1.5)`` is +-inf
    or NaN; at -O1 (the constants fused with the division) TVM's
    simplifier cancelled ``1.5 - 1.5`` to a literal 0 and its constant
    folding aborted the build ("Divide by zero": the fuzzer's const_fold
    group, seed 11). The divisor is opaque now [RULE TE-DIVISOR]."""
    assert _division_by_folded_zero(dtype, "llvm") == dict.fromkeys("012", True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_float_division_by_a_folded_zero_builds_for_cuda() -> None:
    assert _division_by_folded_zero("float32", "cuda") == dict.fromkeys("012", True)


FLOAT_CANCELLATION = r"""
import json
import numpy as np
import effir

module = effir.check(effir.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2,), float32]) {
  (add(subtract(divide(1f, 0f), divide(1f, 0f)), %x),
   add(subtract(add(100000000f, 1f), 100000000f), %x))
}
'''))
x = np.zeros(2, np.float32)
want = [w.tolist() for w in effir.interpret(module, x)]
results = {}
for level in (0, 1, 2):
    got = [g.tolist() for g in effir.compile(module, opt_level=level)(x)]
    results[level] = repr(got) == repr(want) or f"{got} != {want}"
print(json.dumps(results))
"""


def test_float_expressions_of_constants_are_not_cancelled_as_reals() -> None:
    """TVM's float cancellation rules (``x - x`` to 0, ``(x + y) - y`` to x)
    hold for finite values in exact arithmetic only; they applied to the
    program's constants fused at -O1 (-O2 folds them with numpy first):
    ``inf - inf`` was 0 (IEEE: NaN) and ``(1e8 + 1) - 1e8`` 1 (float32: 0).
    The kernel builder computes an elementwise call of constants with numpy
    now [RULE TE-FOLD] (tests/backends/tvm/test_float_folding.py)."""
    result = run_isolated(FLOAT_CANCELLATION).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys("012", True)


BOOLEAN_AT_VECTOR_TILE = r"""
import json
import numpy as np
import effir

# %s is uint64 arithmetic (emulated in 32-bit halves): too large to inline,
# so equal(%s, 0) is computed at where's vector tile, in a local buffer.
module = effir.check(effir.parse('''#[version = "0.0.5"]
def @main(%a: Tensor[(4,), uint64], %b: Tensor[(4,), uint64]) {
  let %q = divide(%b, where(equal(%a, 0u64), 1u64, %a));
  let %s = add(%q, subtract(%b, %a));
  divide(%b, where(equal(%s, 0u64), 1u64, %s))
}
'''))
a = np.array([0, 3, 7, 2**63], np.uint64)
b = np.array([5, 9, 2**64 - 1, 1], np.uint64)
want = effir.interpret(module, a, b).tolist()
results = {}
for level in (0, 1, 2):
    try:
        got = effir.compile(module, opt_level=level)(a, b).tolist()
        results[level] = got == want or f"{got} != {want}"
    except effir.Error as exc:
        results[level] = f"{type(exc).__name__}: {exc.message[:300]}"
print(json.dumps(results))
"""


def test_a_boolean_computed_at_a_vector_tile_builds() -> None:
    """A boolean producer too large to inline, computed at its consumer's
    vector tile, failed to build at -O1 and -O2 (the widened fuzzer's
    mixed-integer programs: "dtype mismatch on BufferStore" or a let's
    "value.ty() == var->ty" check): TVM's StorageRewrite made its local
    buffer of vector accesses one ``int8x4`` element without converting
    the accesses. It keeps a scalar loop now [RULE SCHED-BOOLVEC]."""
    result = run_isolated(BOOLEAN_AT_VECTOR_TILE).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys("012", True)


CLOSURE_RESULT_IN_LOOP_STATE = r"""
import json
import numpy as np
import effir

module = effir.check(effir.parse('''#[version = "0.0.5"]
def @cond(%s: (int32, Tensor[(3,), float32])) -> bool { less(%s.0, 4) }
def @body(%s: (int32, Tensor[(3,), float32])) -> (float32, (int32, Tensor[(3,), float32])) {
  let %y = tanh(add(%s.1, 0.5f));
  (sum(%y), (add(%s.0, 1), %y))
}
def @main(%x: Tensor[(3,), float32], %n: int32) {
  let %a = @iterate(fn (%y: Tensor[(3,), float32]) { tanh(add(%y, 1f)) }, %n)(%x);
  let %r = cf.while_loop(@cond, @body, (0, %a));
  (%a, %r.1.1)
}
'''))
x, n = np.array([0.1, -0.5, 2.0], np.float32), np.int32(2)
want = [w.tolist() for w in effir.interpret(module, x, n)]
results = {}
for level in (0, 1, 2):
    try:
        got = [g.tolist() for g in effir.compile(module, opt_level=level)(x, n)]
        results[level] = bool(np.allclose(got, want, rtol=1e-5)) or f"{got} != {want}"
    except effir.Error as exc:
        results[level] = f"{type(exc).__name__}: {exc.message[:300]}"
print(json.dumps(results))
"""


def test_a_closure_calls_tensor_result_passes_into_a_global_loop_body() -> None:
    """The tensor a function value returns (``@iterate(f, n)(x)``), put in
    the state of a ``cf.while_loop`` whose body is a global function, failed
    to build at -O0 and -O1 ("Argument 2 type mismatch ... given
    T.Tuple(R.Tensor((), dtype="int32"), R.Any)"; the widened fuzzer's
    prelude and global-body programs: seed 101, programs 22, 36 and 49): TVM types
    every ``invoke_closure`` ``Object`` whatever it asked for. Every result
    is asked for as an ``Object`` and cast back where it is bound."""
    result = run_isolated(CLOSURE_RESULT_IN_LOOP_STATE).check()
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == dict.fromkeys("012", True)
