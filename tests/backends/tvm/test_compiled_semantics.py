"""Compiled code has the interpreter's semantics: integer
arithmetic wraps bit for bit as numpy's does for every integer dtype
(te_ops [RULE TE-WRAP]), and where the interpreter fails, compiled code
fails with the same ``effir.EvalError`` (te_ops [RULE RUNTIME-CHECK]). Compiled
runs go through ``tests/support/isolated.py``: a trap (a division by zero) would
kill the process."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from tests.support.isolated import run_isolated
from tests.support.tiers import suite_and_nightly

HEADER = '#[version = "0.0.5"]\n'
INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
# The 32- and 64-bit dtypes are the ones LLVM and TVM's simplifier got wrong;
# the narrow ones run nightly.
TIERED_INTS = suite_and_nightly(INTS[4:], INTS[:4])


def _suffix(dtype: str) -> str:
    return ("u" if dtype[0] == "u" else "i") + dtype.lstrip("uint")


def _lit(value: int, dtype: str) -> str:
    return f"{value}{_suffix(dtype)}"


def _wrapped(value: int, dtype: str) -> int:
    return int(np.array(value, np.int64 if value < 0 else np.uint64).astype(dtype))


def int_sweep(dtype: str) -> list[str]:
    """Every elementwise integer operator (and the reductions and casts
    built on them) over all pairs of ``dtype``'s boundary values, compiled
    and interpreted: the mismatches, described."""
    import effir
    from effir.backends.tvm.driver.compile import compile as compile_module

    warnings.simplefilter("ignore")
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    base = [0, 1, 2, 7, -7, -1, -2, hi, hi - 1, lo, lo + 1]
    vals = np.array(sorted({_wrapped(v, dtype) for v in base}), dtype)
    n = len(vals)
    nonzero = vals[vals != 0]
    exponents = np.array([0, 1, 2, 3, 7, hi], dtype)
    # floats whose truncation is in range (exact in float32 too)
    drop = {8: 0, 16: 0, 32: 8, 64: 40}[info.bits]
    floats = np.array([0.0, 1.0, 2.9, float(lo), float(hi >> drop << drop), -1.9 if lo else 1.9])
    t = dtype
    outs = [
        "add(%x, %y)",
        "subtract(%x, %y)",
        "multiply(%x, %y)",
        "maximum(%x, %y)",
        "minimum(%x, %y)",
        "negative(%x)",
        "divide(%x, %z)",
        "power(%x, %e)",
        f"subtract({_lit(0, t)}, %x)",
        f"add(%x, {_lit(hi, t)})",
        f"subtract(%x, {_lit(lo, t)})",
        f"add(%x, {_lit(lo, t)})",
        f"multiply(%x, {_lit(hi, t)})",
        f"multiply(%x, {_lit(_wrapped(-1, t), t)})",
        f"divide(%x, {_lit(_wrapped(-1, t), t)})",
        f"negative({_lit(lo, t)})",
        f"equal(add(%x, {_lit(1, t)}), {_lit(lo, t)})",
        f"greater(add(%x, {_lit(1, t)}), %x)",
        f"less(subtract(%x, {_lit(1, t)}), %x)",
        "sum(multiply(%x, %y), axis=[1])",
        "prod(add(%x, %y), axis=[1])",
        "max(%x, axis=[0])",
        "min(%x, axis=[0])",
        "argmax(%y, axis=[1])",
        f"argmax(minimum(%y, {_lit(lo, t)}), axis=[1])",
        f"argmax(maximum(%y, {_lit(hi, t)}), axis=[1], select_last_index=True)",
        *(f'cast(%x, dtype="{d}")' for d in INTS),
        f'cast(%f, dtype="{t}")',
        f'cast(cast(%f, dtype="float32"), dtype="{t}")',
        'cast(%x, dtype="float64")',
        'cast(%x, dtype="float32")',
    ]
    src = (
        f"{HEADER}def @main(%x: Tensor[({n}, 1), {t}], %y: Tensor[(1, {n}), {t}], "
        f"%z: Tensor[(1, {len(nonzero)}), {t}], %e: Tensor[(1, 6), {t}], "
        f"%f: Tensor[(6), float64]) {{\n  ({', '.join(outs)})\n}}\n"
    )
    module = effir.check(effir.parse(src, source_name="sweep.effir"))
    args = (vals.reshape(n, 1), vals.reshape(1, n), nonzero.reshape(1, -1), exponents.reshape(1, 6))
    args = (*args, floats)
    ref = effir.interpret(module, *args)
    out = compile_module(module)(*args)
    bad = []
    for text, r, o in zip(outs, ref, out, strict=True):
        r, o = np.asarray(r), np.asarray(o)
        if r.dtype != o.dtype or r.shape != o.shape or r.tobytes() != o.tobytes():
            bad.append(f"{t} {text}: values {vals.tolist()}: want {r.tolist()}, got {o.tolist()}")
    return bad


@pytest.mark.parametrize("dtypes", TIERED_INTS)
def test_integer_ops_wrap_as_the_interpreter_at_boundary_values(dtypes: list[str]) -> None:
    """Found: negative and subtract(0u32, x) of unsigned gave 0, add(x,
    4294967295u32) gave 4294967295, x - INT_MIN kept INT_MIN, and
    ``x + 1 == INT_MIN`` folded to false."""
    code = (
        "import json\n"
        "from tests.backends.tvm.test_compiled_semantics import int_sweep\n"
        f"print(json.dumps([p for d in {dtypes!r} for p in int_sweep(d)]))\n"
    )
    run = run_isolated(code).check()
    problems = json.loads(run.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)


ERROR_CASES = [
    (
        "%x: Tensor[(3), uint8], %y: Tensor[(3), uint8]",
        "divide(%x, %y)",
        "[1, 2, 3]",
        "[1, 0, 3]",
        "uint8",
    ),
    (
        "%x: Tensor[(4), int32], %y: Tensor[(4), int32]",
        "divide(%x, %y)",
        "[1, 2, 3, 4]",
        "[1, 0, 3, 1]",
        "int32",
    ),
    (
        "%x: Tensor[(4), int64], %y: Tensor[(4), int64]",
        "power(%x, %y)",
        "[1, 2, 3, 4]",
        "[1, 2, -1, 1]",
        "int64",
    ),
    (
        "%x: Tensor[(4), int32], %y: Tensor[(2), int32]",
        'take(%x, %y, axis=0, mode="fast")',
        "[1, 2, 3, 4]",
        "[1, 7]",
        "int32",
    ),
    (
        "%x: Tensor[(0), int32], %y: Tensor[(2), int32]",
        "take(%x, %y, axis=0)",
        "[]",
        "[1, 0]",
        "int32",
    ),
    (
        "%x: Tensor[(2, 0), float32], %y: Tensor[(1), float32]",
        "max(%x, axis=[1])",
        "[[], []]",
        "[0]",
        "float32",
    ),
    (
        "%x: Tensor[(2, 0), int32], %y: Tensor[(1), int32]",
        "min(%x, axis=[1])",
        "[[], []]",
        "[0]",
        "int32",
    ),
    (
        "%x: Tensor[(2, 0), float32], %y: Tensor[(1), float32]",
        "argmax(%x, axis=[1])",
        "[[], []]",
        "[0]",
        "float32",
    ),
]


def test_compiled_code_fails_as_the_interpreter_with_operator_and_location() -> None:
    """Found returning 0: integer division by zero, a negative integer
    power, take mode="fast" out of range, take from an empty axis, max/min/
    argmax over an empty axis. Each now raises the interpreter's EvalError
    (same text: operator, message, location)."""
    lines = [
        "import numpy as np, effir",
        "from effir.backends.tvm.driver.compile import compile as C",
    ]
    for params, body, x, y, dtype in ERROR_CASES:
        src = f"{HEADER}def @main({params}) {{\n  {body}\n}}\n"
        lines += [
            f"m = effir.check(effir.parse({src!r}, source_name='e.effir'))",
            f"args = (np.array({x}, '{dtype}').reshape({'(2, 0)' if x == '[[], []]' else '-1'}), np.array({y}, 'int32' if 'take' in {body!r} else '{dtype}'))",
            "got = []",
            "for f in (lambda: effir.interpret(m, *args), lambda: C(m)(*args)):",
            "    try:",
            "        f(); got.append('no error')",
            "    except Exception as e:",
            "        got.append(f'{type(e).__name__}: {e}')",
            "print(repr(got[0])); print(repr(got[1]))",
            "assert got[0] == got[1] and got[0].startswith('EvalError'), got",
        ]
    run_isolated("\n".join(lines)).check()


def test_small_compiled_differences() -> None:
    """random.split(num=0) failed to compile (AttributeError); a print
    label with a lone surrogate raised UnicodeEncodeError."""
    code = f"""
import numpy as np, effir
from effir.runtime.values import PRNGKey
from effir.backends.tvm.driver.compile import compile as C
m = effir.check(effir.parse({HEADER!r} + 'def @main(%k: Key) {{ (random.split(%k, num=0), random.split(%k, num=1)) }}'))
k = PRNGKey(np.array([1, 2], np.uint32))
assert repr(C(m)(k)) == repr(effir.interpret(m, k))
src = {HEADER!r} + 'def @main(%x: Tensor[(2), float32]) {{ debug.print(%x, label="a\\\\ud800b") }}'
m = effir.check(effir.parse(src))
seen, ref = [], []
C(m)(np.ones(2, np.float32), sink=lambda label, v: seen.append(label))
effir.interpret(m, np.ones(2, np.float32), sink=lambda label, v: ref.append(label))
assert seen == ref == ["a\\ud800b"], (seen, ref)
"""
    run_isolated(code).check()


DYNAMIC_CASES = [
    ("%x: Tensor[(?), float32]", "reshape(%x, newshape=[2, 3])", "np.ones(5, 'float32'),"),
    (
        "%x: Tensor[(6), float32], %s: Tensor[(2), int64]",
        "dyn.reshape(%x, %s)",
        "np.ones(6, 'float32'), np.array([4, 2])",
    ),
    (
        "%x: Tensor[(?), float32], %m: Tensor[(?), bool]",
        "boolean_mask(%x, %m)",
        "np.ones(4, 'float32'), np.array([True, False, True])",
    ),
    ("%s: Tensor[(2), int64]", 'dyn.zeros(%s, dtype="float32")', "np.array([2, -3]),"),
]


def test_shape_errors_of_dynamic_operators_are_the_interpreters() -> None:
    """Found as RuntimeError, `ValueError: Check failed` or
    `InternalError: std::bad_alloc`: a bad reshape of a `?` dimension, a bad
    dyn.reshape, a boolean_mask of the wrong shape, dyn.zeros([2, -3]).
    Also: dyn.reshape's special values 0 and -1 compile, and allowzero."""
    lines = [
        "import numpy as np, effir",
        "from effir.backends.tvm.driver.compile import compile as C",
    ]
    for params, body, args in DYNAMIC_CASES:
        src = f"{HEADER}def @main({params}) {{\n  {body}\n}}\n"
        lines += [
            f"m = effir.check(effir.parse({src!r}, source_name='d.effir'))",
            f"args = ({args})",
            "got = []",
            "for f in (lambda: effir.interpret(m, *args), lambda: C(m)(*args)):",
            "    try:",
            "        f(); got.append('no error')",
            "    except Exception as e:",
            "        got.append(f'{type(e).__name__}: {e}')",
            "assert got[0] == got[1] and got[0].startswith('EvalError'), got",
        ]
    src = f"{HEADER}def @main(%x: Tensor[(2, 6), float32], %s: Tensor[(3), int64]) {{ dyn.reshape(%x, %s) }}"
    lines += [
        f"m = effir.check(effir.parse({src!r}))",
        "c = C(m)",
        "x = np.arange(12, dtype=np.float32).reshape(2, 6)",
        "for s in ([0, -1, 2], [-1, 3, 1], [0, 0, -1]):",
        "    s = np.array(s)",
        "    assert np.array_equal(c(x, s), effir.interpret(m, x, s)), s",
    ]
    # allowzero: a 0 is a size (a shape read from an empty tensor)
    src = f"{HEADER}def @main(%x: Tensor[(?), float32], %s: Tensor[(2), int64]) {{ dyn.reshape(%x, %s, allowzero=True) }}"
    lines += [
        f"m = effir.check(effir.parse({src!r}))",
        "c = C(m)",
        "e, x = np.zeros(0, np.float32), np.arange(6, dtype=np.float32)",
        "for v, s in ((e, [0, 0]), (e, [0, 5]), (x, [2, 3]), (x, [-1, 3])):",
        "    s = np.array(s)",
        "    assert c(v, s).shape == effir.interpret(m, v, s).shape, s",
        "    assert np.array_equal(c(v, s), effir.interpret(m, v, s)), s",
        "for v, s in ((x, [6, 0]), (e, [-1, 0])):",
        "    got = []",
        "    for f in (lambda: effir.interpret(m, v, np.array(s)), lambda: c(v, np.array(s))):",
        "        try:",
        "            f(); got.append('no error')",
        "        except Exception as e:",
        "            got.append(f'{type(e).__name__}: {e}')",
        "    assert got[0] == got[1] and 'cannot reshape' in got[0], got",
    ]
    run_isolated("\n".join(lines)).check()


def test_a_loaded_artifact_fails_as_the_interpreter(tmp_path) -> None:
    """The artifact's call path turns a failed check into the same EvalError."""
    code = f"""
import numpy as np, effir
from effir.backends.tvm.driver.compile import compile as C
src = {HEADER!r} + 'def @main(%x: Tensor[(3), int32], %y: Tensor[(3), int32]) {{\\n  divide(%x, %y)\\n}}\\n'
m = effir.check(effir.parse(src, source_name='a.effir'))
C(m).export({str(tmp_path / "art")!r})
loaded = effir.load({str(tmp_path / "art")!r})
x, y = np.array([1, 2, 3], 'int32'), np.array([1, 0, 1], 'int32')
got = []
for f in (lambda: effir.interpret(m, x, y), lambda: loaded(x, y)):
    try:
        f(); got.append('no error')
    except Exception as e:
        got.append(f'{{type(e).__name__}}: {{e}}')
assert got[0] == got[1] and 'divide: integer division by zero' in got[0], got
"""
    run_isolated(code).check()


def test_reductions_over_an_axis_empty_only_at_run_time_fail_as_the_interpreter() -> None:
    """max/min/argmax of a boolean_mask result that is empty at run time
    (a symbolic axis): the interpreter's EvalError, not a value (found by
    the differential fuzzer)."""
    run_isolated(
        """
        import numpy as np, effir
        for op in ["min", "max", "argmax"]:
            m = effir.check(effir.parse(
                '#[version = "0.0.5"]\\ndef @main(%e: Tensor[(3,), float32]) {\\n'
                '  let %v = boolean_mask(%e, greater(%e, 0f));\\n'
                f'  {op}(%v, axis=[0])\\n}}\\n', source_name="e.effir"))
            c = effir.compile(m)
            for e in (np.array([1, -2, 3], np.float32), np.array([-1, -2, -3], np.float32)):
                got = []
                for f in (lambda: effir.interpret(m, e), lambda: c(e)):
                    try:
                        got.append(repr(f()))
                    except effir.EvalError as err:
                        got.append(str(err))
                assert got[0] == got[1], got
        print("ok")
        """
    ).check()


def test_relu_of_unsigned_integers_compiles_as_the_identity() -> None:
    """TVM's simplifier refused `x < 0u` ("negative uint") while compiling
    nn.relu of an unsigned tensor (found by the differential fuzzer)."""
    run_isolated(
        """
        import numpy as np, effir
        for dt in ["uint8", "uint16", "uint32", "uint64", "int8"]:
            m = effir.check(effir.parse(
                f'#[version = "0.0.5"]\\ndef @main(%x: Tensor[(4,), {dt}]) {{ nn.relu(%x) }}'))
            x = np.array([0, 1, 200, 255] if dt[0] == "u" else [-3, 0, 5, -128], dt)
            assert np.array_equal(effir.compile(m)(x), effir.interpret(m, x)), dt
        print("ok")
        """
    ).check()


def test_a_constant_with_no_elements_compiles() -> None:
    """A (3, 0) constant (what -O2 folds an empty slice's gradient to) was
    built, then failed to load at the first call ("Invalid DLTensor file
    format", relax/builder.py [RULE LOWER-EMPTY]); found by the property test of
    tests/backends/tvm/test_strided_compiled.py."""
    run_isolated(
        """
        import numpy as np, effir
        x = np.ones(3, np.float32)
        for body in ["(%x, zeros(shape=[3, 0]))", "(%x, ones(shape=[0, 2, 0], dtype=\\"int8\\"))"]:
            m = effir.check(effir.parse(
                '#[version = "0.0.5"]\\ndef @main(%x: Tensor[(3), float32]) { ' + body + ' }'))
            want = effir.interpret(m, x)
            for level in (0, 2):
                got = effir.compile(m, opt_level=level)(x)
                assert [a.shape for a in got] == [a.shape for a in want], (body, level)
                assert [a.dtype for a in got] == [a.dtype for a in want], (body, level)
        print("ok")
        """
    ).check()


def test_compiled_prints_give_the_sink_the_interpreters_values(tmp_path) -> None:
    """Found: a print of a tuple, an ADT value or ``()`` failed ("'Array'
    object has no attribute 'device'") and a key reached the sink as a
    uint32 array. Every kind of value (nested tuples, a key, ``()``, a
    list of 200 pairs, an Option of a key, a list of keys), from a compiled module at -O0
    and -O2 and a loaded artifact, as the interpreter's sink gets it
    (runtime/printing.py [RULE RUNTIME-PRINT])."""
    src = (
        HEADER + "type List[A] { Cons(A, List[A]), Nil }\n"
        "type Option[A] { Some(A), None }\n"
        "def @build(%n: int64, %x: Tensor[(2), float32], %acc: List[(Tensor[(2), float32], int64)])"
        " -> List[(Tensor[(2), float32], int64)] {\n"
        "  if (equal(%n, 0i64)) { %acc } else {\n"
        '    @build(subtract(%n, 1i64), %x, Cons((add(%x, cast(%n, dtype="float32")), %n), %acc))\n'
        "  }\n"
        "}\n"
        "def @main(%x: Tensor[(2), float32], %k: Key) {\n"
        '  let %a = debug.print(((%x, (%k,)), ()), label="nested");\n'
        '  let %b = debug.print((), label="unit");\n'
        '  let %c = debug.print(%k, label="key");\n'
        '  let %d = debug.print(@build(200i64, %x, Nil), label="list");\n'
        '  let %e = debug.print(Some(random.fold_in(%k, 3u32)), label="option");\n'
        '  let %f = debug.print(Cons(%k, Nil), label="keys");\n'
        '  debug.print(%x, label="tensor")\n'
        "}\n"
    )
    run_isolated(
        f"""
        import numpy as np, effir
        from effir.runtime.values import ADTValue, PRNGKey

        def plain(v):
            # (the recursion is the list's length, 200)
            if isinstance(v, ADTValue):
                return ("adt", v.constructor, tuple(plain(f) for f in v.fields))
            if isinstance(v, PRNGKey):
                return ("key", np.asarray(v.data).tolist())
            if isinstance(v, tuple):
                return ("tuple", tuple(plain(f) for f in v))
            assert isinstance(v, np.ndarray), type(v)
            return ("tensor", str(v.dtype), v.shape, v.tolist())

        import sys
        sys.setrecursionlimit(10000)
        module = effir.check(effir.parse({src!r}))
        args = (np.array([1, 2], np.float32), PRNGKey(np.array([0, 7], np.uint32)))

        def collect(run):
            got = []
            run(*args, sink=lambda label, value: got.append((label, plain(value))))
            return got

        want = collect(lambda *a, sink: effir.interpret(module, *a, sink=sink))
        assert [label for label, _ in want] == ["nested", "unit", "key", "list", "option",
                                                 "keys", "tensor"]
        for level in (0, 2):
            compiled = effir.compile(module, opt_level=level)
            assert collect(compiled) == want, level
        compiled.export({str(tmp_path / "m")!r})
        assert collect(effir.load({str(tmp_path / "m")!r})) == want
        print("ok")
        """
    ).check()
