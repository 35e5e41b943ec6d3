"""The disk cache of builds (effir/backends/tvm/driver/build_cache.py): a new
process loads what an earlier one built, with identical results; a corrupt
entry is built again, never loaded; the key follows the program, the target
and the versions; the cache can be turned off. Processes that load compiled
code run through tests/support/isolated.py."""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path

import pytest

import effir
from effir.backends.tvm.driver import build_cache
from effir.backends.tvm.driver.build_cache import Cache
from effir.backends.tvm.target import make_target
from tests.support.isolated import run_isolated

SCRIPT = """
import json, sys
import numpy as np
import effir
module = effir.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(8, 8), float32]) {
  tanh(nn.dense(%x, %w)) * 2f
}
''')
compiled = effir.compile(module)
rng = np.random.default_rng(0)
x = rng.standard_normal((5, 8), dtype=np.float32)
w = rng.standard_normal((8, 8), dtype=np.float32)
got = np.asarray(compiled(x, w))
want = np.asarray(effir.interpret(module, x, w))
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
if len(sys.argv) > 1:  # export what was built (from the cache on a hit)
    compiled.export(sys.argv[1])
    np.testing.assert_array_equal(np.asarray(effir.load(sys.argv[1])(x, w)), got)
print(json.dumps({"cached": [b.cached for b in compiled.report.builds],
                  "result": got.tobytes().hex()}))
"""


def run(cache: Path, *args: str) -> dict:
    code = f"import sys; sys.argv = ['x', *{list(args)!r}]\n" + SCRIPT
    result = run_isolated(code, env={"EFFIR_CACHE_DIR": str(cache)}).check()
    return json.loads(result.stdout.strip().splitlines()[-1])


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.so"))


def test_a_new_process_loads_the_build_and_a_corrupt_entry_is_rebuilt(effir_cache_dir, tmp_path):
    cold = run(effir_cache_dir)
    assert cold["cached"] == [False]
    (library,) = entries(effir_cache_dir)
    record = effir_cache_dir / (library.name.split(".")[0] + ".json")
    assert json.loads(record.read_text())["kernels"] >= 1
    assert not list(effir_cache_dir.glob(".tmp-*"))  # written whole, renamed into place

    warm = run(effir_cache_dir, str(tmp_path / "artifact"))  # and exports from the cache
    assert warm == {"cached": [True], "result": cold["result"]}

    # A library whose bytes differ from its record's checksum is never loaded.
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    library.write_bytes(bytes(data[: len(data) // 2 + 1]))
    rebuilt = run(effir_cache_dir)
    assert rebuilt == {"cached": [False], "result": cold["result"]}
    assert entries(effir_cache_dir) == [library]  # rewritten in place
    assert json.loads(record.read_text())["sha256"] == sha256(library.read_bytes()).hexdigest()


def test_records_that_do_not_describe_their_library_are_misses(effir_cache_dir):
    cache = Cache.open("def @main() { 1f }", "spans", make_target("llvm"))
    assert cache is not None
    effir_cache_dir.mkdir()
    digest = sha256(b"not a library").hexdigest()
    name = f"k.{digest[:16]}.so"
    (effir_cache_dir / name).write_bytes(b"not a library")
    record = effir_cache_dir / "k.json"
    good = {"format": build_cache.FORMAT, "kernels": 1, "loops": 0, "recursive": False}
    record.write_text("{not json")
    assert cache.load("k") is None
    record.write_text(json.dumps({**good, "library": name, "sha256": "0" * 64}))
    assert cache.load("k") is None  # another library's checksum
    record.write_text(json.dumps({**good, "library": "../x.so", "sha256": digest}))
    assert cache.load("k") is None  # not the entry's own library
    record.write_text(json.dumps({**good, "library": name, "sha256": digest}))
    assert cache.load("k") is None  # checked, but TVM cannot load it
    record.write_text(json.dumps({**good, "format": 0, "library": name, "sha256": digest}))
    assert cache.load("k") is None


def test_the_key_follows_the_program_target_dimensions_and_versions(monkeypatch, tmp_path):
    monkeypatch.setenv("EFFIR_CACHE_DIR", str(tmp_path))
    llvm = make_target("llvm")
    generic = make_target("llvm -mcpu=x86-64")
    a = Cache.open("def @main() { 1f }", "spans", llvm)
    assert a is not None
    key = a.key("main", {"n": 2}, ("t",))
    assert key == Cache.open("def @main() { 1f }", "spans", llvm).key("main", {"n": 2}, ("t",))
    assert key != Cache.open("def @main() { 2f }", "spans", llvm).key("main", {"n": 2}, ("t",))
    assert key != Cache.open("def @main() { 1f }", "spans", generic).key("main", {"n": 2}, ("t",))
    assert key != a.key("main", {"n": 3}, ("t",))
    assert key != a.key("main", {"n": 2}, ())
    assert key != a.key("other", {"n": 2}, ("t",))
    other_lines = Cache.open("def @main() { 1f }", "other spans", llvm)
    assert key != other_lines.key("main", {"n": 2}, ("t",))  # its checks name other lines
    monkeypatch.setattr(build_cache, "_EFFIR_DIGEST", "another effir")
    assert key != Cache.open("def @main() { 1f }", "spans", llvm).key("main", {"n": 2}, ("t",))


def test_the_digest_covers_every_source_file_of_effir(monkeypatch):
    """A change to the type checker or a pass changes what is built from one
    program text (its types are not in the text): the digest reads the whole
    package, not only the backend."""
    package = Path(effir.__file__).resolve().parent
    read: list[Path] = []
    original = Path.read_bytes

    def recording(path: Path) -> bytes:
        read.append(path)
        return original(path)

    monkeypatch.setattr(build_cache, "_EFFIR_DIGEST", None)
    monkeypatch.setattr(Path, "read_bytes", recording)
    build_cache.effir_digest()
    assert package / "passes" / "analyses" / "type_solver.py" in read
    assert set(read) == set(package.rglob("*.py"))


@pytest.mark.parametrize("value", ["off", "", "0"])
def test_the_cache_can_be_turned_off(monkeypatch, value):
    monkeypatch.setenv("EFFIR_CACHE_DIR", value)
    assert build_cache.cache_dir() is None
    assert Cache.open("def @main() { 1f }", "spans", make_target("llvm")) is None


def test_the_default_directory_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("EFFIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert build_cache.cache_dir() == tmp_path / "effir" / "builds"


def test_unreadable_static_records_are_ignored(effir_cache_dir):
    cache = Cache.open("def @main() { 1f }", "spans", make_target("llvm"))
    assert cache is not None
    assert cache.static_dims("main") == set()
    cache.record_static("main", {"b", "t"})
    assert cache.static_dims("main") == {"b", "t"}
    (effir_cache_dir / f"{cache.program}.static.json").write_text('{"main": [1, 2]}')
    assert cache.static_dims("main") == set()
    assert cache.load("no-such-key") is None


def test_processes_that_fill_one_entry_at_once_leave_a_whole_one(effir_cache_dir):
    """Two processes build the same entry at the same time; each renames a
    whole file into place: the library there is the one its record names."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: run(effir_cache_dir), range(2))
    assert first["result"] == second["result"]
    assert not list(effir_cache_dir.glob(".tmp-*"))
    (record_path,) = [
        p
        for p in effir_cache_dir.glob("*.json")
        if not p.name.endswith((".static.json", ".program.json"))
    ]
    record = json.loads(record_path.read_text())
    library = effir_cache_dir / record["library"]
    assert record["sha256"] == sha256(library.read_bytes()).hexdigest()
