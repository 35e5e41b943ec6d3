"""Compiled code refuses a tensor whose size the run chooses (a padded
``cf.while_loop``'s rows given at run time, ``dyn.zeros``' shape, the
length of ``dyn.arange``) past the size limit, as the interpreter does,
before it allocates anything (relax/dynamic.py [RULE LOWER-SIZE]).

The defect this guards against: TVM's VM multiplies a tensor's
dimensions and item size in 64 bits, so a padded loop of 2**62 rows of
float32 (a ``uint64`` limit of 2**64 - 1, capped) got a buffer of 0
bytes, which the loop then wrote past; the heap was corrupted and the
process died later, somewhere else (glibc's "corrupted double-linked
list", or a segfault in Python's garbage collector while the next program
was lowered). Each script calls the refused program again, collects
garbage and compiles and runs another program, so that a corrupted heap
fails the run. Compiled code runs in a subprocess (tests/support/isolated.py)."""

from __future__ import annotations

from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'

COMMON = r"""
import gc
import numpy as np
import effir


def error(run):
    try:
        run()
    except effir.EvalError as err:
        return str(err)
    return "no error"


def refused_alike(module, *args, calls=3):
    compiled = effir.compile(module)
    want = error(lambda: effir.interpret(module, *args))
    for _ in range(calls):
        got = error(lambda: compiled(*args))
        # the same operator at the same place, refused for its size (the
        # compiled message names the buffer it would allocate)
        assert got.split(": runtime error: ")[0] == want.split(": runtime error: ")[0], (got, want)
        assert "more than the limit of" in got and "more than the limit of" in want, (got, want)
    gc.collect()
    return got


def still_sound():
    text = HEADER + "def @main(%x: Tensor[(3), float32]) {\n  add(%x, %x)\n}\n"
    x = np.arange(3, dtype=np.float32)
    gc.collect()
    assert np.array_equal(effir.compile(effir.parse(text))(x), x + x)
    gc.collect()
"""


def padded_loop(dtype: str, out: str) -> str:
    return (
        HEADER + f"def @main(%x: Tensor[(2), float32], %bound: float32, %m: {dtype}) {{\n"
        "  let %c = fn (%s: (int32, Tensor[(2), float32])) { less(sum(%s.1), %bound) };\n"
        f"  let %b = fn (%s: (int32, Tensor[(2), float32])) {{ ({out}, (add(%s.0, 1), "
        "add(%s.1, %x))) };\n"
        "  cf.while_loop(%c, %b, (0, zeros(shape=[2])), %m, pad_outputs=True)\n"
        "}\n"
    )


def test_a_padded_loop_of_run_time_rows_past_the_limit_is_refused_before_it_runs() -> None:
    """2**64 - 1 rows (``uint64``, capped at 2**62: 2**64 bytes of float32,
    which wrapped to 0), 2**61 rows of 8 bytes (``int64``: the same wrap)
    and 10**9 rows of 8 bytes (8 GB, no wrap): each a located EvalError at
    the loop, call after call; the process goes on sound."""
    script = (
        f"HEADER = {HEADER!r}\n"
        + COMMON
        + f"""
x, bound = np.array([0.5, 0.25], np.float32), np.float32(30.0)
cases = [
    ({padded_loop("uint64", "sum(%s.1)")!r}, np.asarray(2**64 - 1, "uint64")),
    ({padded_loop("int64", "(%s.1, %s.0)")!r}, np.asarray(2**61, "int64")),
    ({padded_loop("int32", "%s.1")!r}, np.asarray(10**9, "int32")),
]
for text, m in cases:
    module = effir.check(effir.parse(text, source_name="w.effir"))
    print(refused_alike(module, x, bound, m).splitlines()[0])
    still_sound()
print("ok")
"""
    )
    out = run_isolated(script, timeout=240).check().stdout
    lines = out.splitlines()
    assert lines[-1] == "ok", out
    assert lines[:3] == [
        "w.effir:5:3: runtime error: cf.while_loop: a padded output of shape "
        "(4611686018427387904) and dtype float32 would take more than the limit of 4 GiB "
        "(set EFFIR_MAX_TENSOR_BYTES to allow more)",
        "w.effir:5:3: runtime error: cf.while_loop: a padded output of shape "
        "(2305843009213693952, 2) and dtype float32 would take more than the limit of 4 GiB "
        "(set EFFIR_MAX_TENSOR_BYTES to allow more)",
        "w.effir:5:3: runtime error: cf.while_loop: a padded output of shape "
        "(1000000000, 2) and dtype float32 would take more than the limit of 4 GiB "
        "(set EFFIR_MAX_TENSOR_BYTES to allow more)",
    ], out


def test_the_limit_in_force_at_the_build_bounds_a_padded_loop() -> None:
    """Under ``EFFIR_MAX_TENSOR_BYTES=64K`` a padded loop of 16384 float32
    rows (64 KiB) runs as the interpreter runs it; 20000 rows are refused
    by both."""
    script = (
        f"HEADER = {HEADER!r}\n"
        + COMMON
        + f"""
import os
os.environ["EFFIR_MAX_TENSOR_BYTES"] = "64K"
module = effir.check(effir.parse({padded_loop("int32", "sum(%s.1)")!r}, source_name="w.effir"))
x, bound = np.array([0.5, 0.25], np.float32), np.float32(30.0)
compiled = effir.compile(module)
fits = (x, bound, np.asarray(16384, "int32"))
got, want = compiled(*fits), effir.interpret(module, *fits)
assert got[0].shape == (16384,) and np.array_equal(got[0], want[0]) and got[2] == want[2] == 40
print(refused_alike(module, x, bound, np.asarray(20000, "int32")).splitlines()[0])
print("ok")
"""
    )
    out = run_isolated(script, timeout=240).check().stdout
    assert out.splitlines() == [
        "w.effir:5:3: runtime error: cf.while_loop: a padded output of shape (20000) and "
        "dtype float32 would take more than the limit of 64 KiB (set EFFIR_MAX_TENSOR_BYTES "
        "to allow more)",
        "ok",
    ], out


def test_dynamic_shapes_past_the_limit_are_refused_and_never_wrap() -> None:
    """``dyn.zeros`` of 2**62 + 1 elements (2**64 + 4 bytes, which wrapped
    to 4) and of (2**31, 2**31, 4) (2**64 elements, which wrapped to 0),
    ``dyn.arange`` of 2**62 int64 values: refused as the interpreter
    refuses them. ``dyn.reshape`` of no elements into (2**32, 2**32),
    whose 64-bit product is 0 too, is refused as the interpreter refuses
    it, not made a view of 2**64 elements over an empty buffer."""
    zeros = HEADER + 'def @main(%s: Tensor[(R), int64]) {\n  dyn.zeros(%s, dtype="float32")\n}\n'
    arange = HEADER + "def @main(%n: int64) {\n  dyn.arange(0i64, %n, 1i64)\n}\n"
    reshape = (
        HEADER + "def @main(%x: Tensor[(?), float32], %s: Tensor[(2), int64]) {\n"
        "  dyn.reshape(%x, %s)\n}\n"
    )
    script = (
        f"HEADER = {HEADER!r}\n"
        + COMMON
        + f"""
for shape in ([2**62 + 1], [2**31, 2**31, 4]):
    text = {zeros!r}.replace("R", str(len(shape)))
    zeros = effir.check(effir.parse(text, source_name="d.effir"))
    print(refused_alike(zeros, np.array(shape, np.int64)).splitlines()[0])
    still_sound()
arange = effir.check(effir.parse({arange!r}, source_name="d.effir"))
print(refused_alike(arange, np.int64(2**62)).splitlines()[0])
still_sound()
reshape = effir.check(effir.parse({reshape!r}, source_name="d.effir"))
empty, shape = np.zeros(0, np.float32), np.array([2**32, 2**32], np.int64)
compiled = effir.compile(reshape)
for _ in range(3):
    got = error(lambda: compiled(empty, shape))
    assert got == error(lambda: effir.interpret(reshape, empty, shape)), got
print(got.splitlines()[0])
still_sound()
print("ok")
"""
    )
    out = run_isolated(script, timeout=240).check().stdout
    limit = "would take more than the limit of 4 GiB (set EFFIR_MAX_TENSOR_BYTES to allow more)"
    assert out.splitlines() == [
        "d.effir:3:3: runtime error: dyn.zeros: the result of shape (4611686018427387905) "
        f"and dtype float32 {limit}",
        "d.effir:3:3: runtime error: dyn.zeros: the result of shape (2147483648, 2147483648, "
        f"4) and dtype float32 {limit}",
        f"d.effir:3:3: runtime error: dyn.arange: the result of shape (4611686018427387904) "
        f"and dtype int64 {limit}",
        "d.effir:3:3: runtime error: dyn.reshape: cannot reshape 0 elements into shape "
        "(4294967296, 4294967296)",
        "ok",
    ], out
