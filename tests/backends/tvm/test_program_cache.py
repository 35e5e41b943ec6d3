"""Whole compiled programs in the build cache (effir/backends/tvm/driver/
program_cache.py, [RULE CACHE-PROGRAM]): a process that compiles a program an earlier process
compiled skips the pipeline and gives the same results and the same
located errors; a record is reused only for the same source, spans and
options; a binding the cache lacks runs the skipped pipeline then; a
malformed record is a miss. Processes that load compiled code run through
tests/support/isolated.py, each with its own cache directory."""

from __future__ import annotations

import json
from pathlib import Path

import effir
from effir.backends.tvm.driver import program_cache
from effir.backends.tvm.runtime import tvm_runtime
from effir.passes.infra.transform import PassContext
from tests.support.artifact_programs import HEADER
from tests.support.artifact_programs import PROGRAM as ARTIFACT_PROGRAM
from tests.support.compiled_adt_programs import LIST
from tests.support.isolated import run_isolated

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(n, 3), float32], %i: int32) {
  take(tanh(%x) * 2f, %i, axis=0, mode="fast")
}
"""

SCRIPT = """
import json, sys
import numpy as np
import effir
options = json.loads(sys.argv[1])
module = effir.parse(options.pop("text"), source_name=options.pop("name"))
compiled = effir.compile(module, **options)
x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
result = np.asarray(compiled(x, np.int32(2)))
np.testing.assert_allclose(result, effir.interpret(module, x, np.int32(2)), rtol=1e-5)
try:
    compiled(x, np.int32(7))
    error = "no error"
except effir.EvalError as err:
    error = str(err)
try:
    compiled(x, entry="other")
except effir.Error as err:
    unknown = str(err)
print(json.dumps({
    "pipeline_cached": compiled.report.cached,
    "builds": [b.cached for b in compiled.report.builds],
    "result": result.tobytes().hex(),
    "error": error,
    "unknown": unknown,
    "pipeline_ran": compiled._module is not None,
    "tvm_imported": "tvm" in sys.modules,
}))
"""


def run(cache: Path, text: str = PROGRAM, name: str = "prog.effir", **options: object) -> dict:
    argument = json.dumps({"text": text, "name": name, **options})
    code = f"import sys; sys.argv = ['x', {argument!r}]\n" + SCRIPT
    result = run_isolated(code, env={"EFFIR_CACHE_DIR": str(cache)}).check()
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_warm_compile_skips_the_pipeline_with_the_same_results_and_errors(tmp_path):
    cold = run(tmp_path)
    assert cold["pipeline_cached"] is False and cold["pipeline_ran"] is True
    assert "prog.effir:3:3: runtime error: take: index 7 is out of range" in cold["error"]
    assert "@other" in cold["unknown"] and "@main" in cold["unknown"]
    (record,) = tmp_path.glob("*.program.json")

    warm = run(tmp_path)
    assert warm["pipeline_cached"] is True and warm["pipeline_ran"] is False
    assert warm["builds"] == [True]  # the binding's build came from the cache too
    # a hit runs on TVM's runtime alone (runtime/tvm_runtime.py); a build imports TVM
    assert warm["tvm_imported"] is False and cold["tvm_imported"] is True
    for field in ("result", "error", "unknown"):
        assert warm[field] == cold[field], field
    assert list(tmp_path.glob("*.program.json")) == [record]


def test_a_record_is_not_reused_for_other_sources_spans_or_options(tmp_path):
    run(tmp_path)
    # the same text elsewhere: its run-time errors must point there
    moved = run(tmp_path, text=PROGRAM.replace("\n", "\n\n", 1))
    assert moved["pipeline_cached"] is False
    assert "prog.effir:4:3: runtime error: take" in moved["error"]
    renamed = run(tmp_path, name="other.effir")
    assert renamed["pipeline_cached"] is False and "other.effir:3:3" in renamed["error"]
    changed = run(tmp_path, text=PROGRAM.replace("2f", "3f"))
    assert changed["pipeline_cached"] is False and changed["result"] != moved["result"]
    for options in ({"opt_level": 1}, {"precision": "tf32"}, {"pipeline": "O1,lower-tvm"}):
        assert run(tmp_path, **options)["pipeline_cached"] is False, options
    assert len(list(tmp_path.glob("*.program.json"))) == 7
    assert run(tmp_path, opt_level=1)["pipeline_cached"] is True


def test_a_binding_the_cache_lacks_runs_the_skipped_pipeline(tmp_path):
    """A hit whose binding was never built: the pipeline runs then, and the
    build is made and cached as on a miss."""
    run(tmp_path)
    code = (
        "import numpy as np, effir\n"
        f"module = effir.parse({PROGRAM!r}, source_name='prog.effir')\n"
        "compiled = effir.compile(module)\n"
        "assert compiled.report.cached and compiled._module is None\n"
        "x = np.ones((2, 3), np.float32)\n"
        "want = effir.interpret(module, x, np.int32(1))\n"
        "np.testing.assert_allclose(compiled(x, np.int32(1)), want, rtol=1e-5)\n"
        "assert compiled._module is not None, 'the pipeline ran'\n"
        "print(compiled.report.builds[-1].cached)\n"
    )
    result = run_isolated(code, env={"EFFIR_CACHE_DIR": str(tmp_path)}).check()
    assert result.stdout.split()[-1] in ("True", "False")  # n=2 shares n=4's build or not


def test_malformed_records_are_misses(monkeypatch, tmp_path):
    monkeypatch.setenv("EFFIR_CACHE_DIR", str(tmp_path))
    assert program_cache.load("absent") is None
    version = program_cache.RECORD_FORMAT
    for text in (
        "not json",
        "[]",
        f'{{"format": {version}}}',
        f'{{"format": {version}, "signatures": 3}}',
    ):
        (tmp_path / "bad.program.json").write_text(text)
        assert program_cache.load("bad") is None, text


def test_the_key_tells_targets_apart_without_tvm(monkeypatch, tmp_path):
    """[RULE CACHE-PROGRAM] The key holds the target as given and LLVM's name
    of the host CPU (what TVM's target is made of), read without TVM's
    Python; a target that is not cached, or not understood, has no key."""
    monkeypatch.setenv("EFFIR_CACHE_DIR", str(tmp_path))
    module = effir.parse(PROGRAM)
    context = PassContext.current()

    def key(target: object, precision: str = "float32") -> str | None:
        return program_cache.program_key(module, "main", "O2", context, target, precision)

    keys = [key("llvm"), key("llvm -mcpu=x86-64"), key({"kind": "llvm"}), key("llvm", "tf32")]
    assert None not in keys and len(set(keys)) == len(keys)
    assert key("llvm") == keys[0]
    assert key("cuda") is None and key(42) is None and key({"kind": 3}) is None
    monkeypatch.setattr(tvm_runtime, "host_cpu", lambda: "another-cpu")
    assert key("llvm") != keys[0]  # a cache directory another machine filled
    monkeypatch.setattr(tvm_runtime, "host_cpu", lambda: None)
    assert key("llvm") is None  # no compiler library to name the CPU: not cached


STATEFUL = (
    HEADER
    + LIST
    + ARTIFACT_PROGRAM
    + """
def @total(%xs: List[Tensor[(3), float32]]) -> Tensor[(3), float32] {
  match (%xs) {
    Cons(%x, %rest) => add(%x, @total(%rest)),
    Nil => zeros(shape=[3], dtype="float32"),
  }
}
"""
)
"""The program of exported artifacts (a key and a counter in cells, a
print, a symbolic dimension) with a recursive entry taking an ADT."""

EVERYTHING = """
import json, sys, threading
import numpy as np
import effir
from effir.runtime.values import ADTValue
module = effir.parse(sys.argv[1], source_name="stateful.effir")
compiled = effir.compile(module)
rng = np.random.default_rng(0)
w = rng.standard_normal((4, 4)).astype(np.float32)
xs = {n: rng.standard_normal((n, 4)).astype(np.float32) for n in (2, 5)}
out = {}
state, reference = compiled.new_state(), effir.State(module)
for n in (2, 5, 2):
    printed, expected = [], []
    got = compiled(xs[n], w, state=state, sink=lambda l, v: printed.append((l, v)))
    want = effir.interpret(module, xs[n], w, state=reference,
                           sink=lambda l, v: expected.append((l, v)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert [l for l, _ in printed] == ["total"]
    np.testing.assert_allclose(printed[0][1], expected[0][1], rtol=1e-5, atol=1e-5)
    out[f"main {n}"] = got.tobytes().hex()
assert np.array_equal(state["rng"].data, reference["rng"].data)
assert state["count"] == reference["count"] == 3
# a result left where it ran, and taken back as an argument
kept = compiled.on_device(xs[2], w, state=compiled.new_state())
assert isinstance(kept, effir.DeviceArray)
assert np.array_equal(np.asarray(kept), compiled(xs[2], w, state=compiled.new_state()))
np.testing.assert_array_equal(
    compiled(kept, w, state=compiled.new_state()),
    compiled(np.asarray(kept), w, state=compiled.new_state()),
)
# an ADT argument, through a recursive function (run on the large stack)
items = [np.full(3, i, np.float32) for i in range(4)]
value = ADTValue("Nil", ())
for item in items:
    value = ADTValue("Cons", (item, value))
total = compiled(value, entry="total")
np.testing.assert_allclose(total, effir.interpret(module, value, entry="total"))
out["total"] = total.tobytes().hex()
# calls from threads at once, each with its own State
results = {}
def call(k):
    results[k] = compiled(xs[5], w, state=compiled.new_state(seed=k))
threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
for t in threads: t.start()
for t in threads: t.join()
for k, got in results.items():
    want = effir.interpret(module, xs[5], w, state=effir.State(module, seed=k))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
out["tvm_after_calls"] = "tvm" in sys.modules
out["builds"] = [b.cached for b in compiled.report.builds]
# an export of what was loaded (writing imports TVM), loaded back
compiled.export(sys.argv[2])
loaded = effir.load(sys.argv[2])
np.testing.assert_allclose(loaded(xs[5], w, sink=lambda l, v: None),
                           compiled(xs[5], w, sink=lambda l, v: None))
print(json.dumps(out))
"""


def test_a_warm_process_runs_everything_on_tvms_runtime_alone(tmp_path):
    """State (a key, a counter), prints, a symbolic dimension at two sizes,
    device arrays, an ADT argument of a recursive entry and calls from
    threads, in a process whose compile hit the cache: the same results as
    the cold process and the interpreter, without TVM's Python
    (runtime/tvm_runtime.py); an export then imports it and works."""

    def run_everything(export: str) -> dict:
        argv = [STATEFUL, str(tmp_path / export)]
        code = f"import sys; sys.argv = ['x', *{argv!r}]\n" + EVERYTHING
        done = run_isolated(code, env={"EFFIR_CACHE_DIR": str(tmp_path / "cache")}).check()
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run_everything("cold")
    warm = run_everything("warm")
    assert cold["tvm_after_calls"] is True and warm["tvm_after_calls"] is False
    assert all(warm["builds"]) and not any(cold["builds"])
    for field in ("main 2", "main 5", "total"):
        assert warm[field] == cold[field], field
