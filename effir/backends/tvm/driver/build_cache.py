"""A disk cache of builds: a new process that meets a shape some process
built before loads that build instead of lowering and compiling it again.

Why: a specialisation's first call costs its lowering (effir's ``te`` rules
and schedules), TVM's build and LLVM's code generation, about a second for
the GRU language model (docs/performance.md, "First-call latency"); a
cached build costs loading a shared library, a millisecond.

What an entry is keyed by (``Cache.key``): the SHA-256 of the optimised
program's canonical text (the printer's, metadata included: what is built)
and of its spans (the sites its run-time checks report: ``spans_digest``),
the entry function, the bound dimensions and the names left symbolic, the
target (its full text: kind, ``mcpu``, attributes), the size of TVM's
thread pool (a whole loop runs as many blocks of rows: loop/rows.py), the
size limit (the build checks sizes of the run against it: relax/dynamic.py
[RULE LOWER-SIZE]), TVM's version (and the size and time of its runtime and
compiler libraries: runtime/tvm_runtime.py ``identity``, read without TVM's
Python) and a digest of effir's own source files (a changed lowering is a new key, not a
stale hit). An entry is two files: ``<key>.<sha>.so``, the VM executable
with its kernels (``export_library``), named by its own SHA-256's first
16 digits, and ``<key>.json``, what the build was (its kernels and loops,
whether it recurses) and the library's name and SHA-256. The
dimensions a program's kernels need static are learnt by lowering
(driver/compile.py, ``NeedsStatic``); they are recorded per program and target
(``<program key>.static.json``) so that a new process finds the entry of
its first shape without lowering.

[RULE CACHE-ATOMIC] Files are written under a temporary name in the cache
directory and renamed into place (``os.replace``), the library before its
record: a reader sees a whole entry or none, whatever other processes do
at the same time. Two processes that build one entry at once both write
it; the later record wins, and it names its own library (a library is
named by its checksum, so one process's record never describes the other
process's library).

[RULE CACHE-BACKGROUND] A new build is written to the cache on a thread of its
own while the program runs from memory (``CompiledModule``), so a first
call costs what it costs without the cache. The writer links an
executable of its own (``Specialisation.exportable``: one no VM has run,
which TVM writes out as it was built) around the same kernel modules,
under ``MODULES`` (runtime/thread_vms.py). The process waits for the
writer before it exits; an export of the build waits for it and copies
the library written.

[RULE CACHE-NEVER-CRASH] A missing, unreadable, corrupt or stale entry (a record
that does not parse, a library whose checksum differs from its record's,
one TVM cannot load) is a miss: the program is built again and the entry
rewritten. Only a library whose checksum matches its record is loaded.
Any failure to write (a read-only directory, no linker) leaves the build
in memory, uncached.

Where: ``EFFIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/effir/builds``, else
``~/.cache/effir/builds``; ``EFFIR_CACHE_DIR=off`` (or empty) disables the
cache. The directory is read at each build. Nothing is ever evicted: delete
the directory to reclaim the space (a GRU build is about 200 KiB). Only CPU
(``llvm``) builds are cached; other targets build in memory as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....ir.diagnostics import Source
from ....ir.module import IRModule
from ....ir.visitor import pre_order
from ....runtime.limits import max_bytes
from ..runtime import tvm_runtime
from ..runtime.thread_vms import MODULES

FORMAT = 2
"""The layout of an entry; a change is a new key."""

DISABLED = {"", "0", "off", "none", "false"}


def cache_dir() -> Path | None:
    """The cache directory in use now, or None when the cache is off."""
    chosen = os.environ.get("EFFIR_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in DISABLED else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "effir" / "builds"


_EFFIR_DIGEST: str | None = None


def effir_digest() -> str:
    """SHA-256 of effir's Python sources (once per process): any change to
    the compiler makes new keys."""
    global _EFFIR_DIGEST
    if _EFFIR_DIGEST is None:
        root = Path(__file__).resolve().parents[3]  # effir/ (this is effir/backends/tvm/driver/)
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
        _EFFIR_DIGEST = digest.hexdigest()
    return _EFFIR_DIGEST


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _library_name(key: str, digest: str) -> str:
    """An entry's library, named by its checksum [RULE CACHE-ATOMIC]."""
    return f"{key}.{digest[:16]}.so"


@dataclass(frozen=True)
class Entry:
    """A cached build: the library and what the build was."""

    library: Path
    module: Any  # the loaded module (runtime/tvm_runtime.py)
    kernels: int
    loops: int
    recursive: bool


def environment(target: str, precision: str) -> list[str]:
    """What a build depends on besides its program: the cache's layout,
    TVM's and effir's versions, the target (its text: ``target_text``),
    the matrix products' precision, the size limit and TVM's thread pool.
    Every key of the cache holds it (the builds' and the whole programs':
    driver/program_cache.py); it is made without TVM's Python
    (runtime/tvm_runtime.py), so that a warm compile needs none."""
    return [
        f"effir-build-cache {FORMAT}",
        f"tvm {tvm_runtime.identity()}",
        f"effir {effir_digest()}",
        f"target {target}",
        f"precision {precision}",  # precision.py [RULE COMPILE-PRECISION]
        # run-time sizes are checked against the limit at build time (relax/dynamic.py)
        f"size limit {max_bytes()}",
        # a whole loop's row blocks are as many as the pool's threads (loop/rows.py)
        f"threads {tvm_runtime.num_threads()}",
    ]


def program_digest(program_text: str, spans: str, target: str, precision: str = "float32") -> str:
    """The key of an optimised program's builds: its text and its spans
    (``spans_digest``) in this environment, for the target of text ``target``
    (``str`` of TVM's target)."""
    lines = [*environment(target, precision), f"spans {spans}", program_text]
    return _sha256("\n".join(lines).encode())


def spans_digest(module: IRModule) -> str:
    """A digest of where ``module``'s nodes come from: each node's source
    name, start and end, and each source's text. The run-time checks
    compiled into a library carry their sites (runtime/errors.py
    [RULE RUNTIME-CHECK]), so the same program text at other source lines
    is another build."""
    digest = hashlib.sha256()
    sources: dict[int, Source] = {}
    for name in sorted(module.functions):
        digest.update(f"@{name}\n".encode())
        for node in pre_order(module.functions[name]):
            span = getattr(node, "span", None)
            if span is None:
                digest.update(b"-\n")
                continue
            sources.setdefault(id(span.source), span.source)
            digest.update(f"{span.source.name}:{span.start}:{span.end}\n".encode())
    for source in sorted(sources.values(), key=lambda s: s.name):
        text = hashlib.sha256(source.text.encode()).hexdigest()
        digest.update(f"source {source.name} {text}\n".encode())
    return digest.hexdigest()


class Cache:
    """The entries of one compiled program for one target, in ``root``;
    ``program``: the program's digest (``program_digest``)."""

    def __init__(self, root: Path, program: str) -> None:
        self.root = root
        self.program = program

    @staticmethod
    def open(
        program_text: str, spans: str, target: Any, precision: str = "float32"
    ) -> Cache | None:
        """The cache for this program (its text and ``spans_digest``), target
        (TVM's) and precision of its matrix products, or None when the cache
        is off or the target's builds are not cached."""
        digest = program_digest(program_text, spans, str(target), precision)
        return Cache.of(digest, target.kind.name)

    @staticmethod
    def of(program: str, kind: str) -> Cache | None:
        """The cache for the program of digest ``program`` (``program_digest``)
        built for a target of kind ``kind`` (``"llvm"``)."""
        root = cache_dir()
        if root is None or kind != "llvm":
            return None
        return Cache(root, program)

    def key(self, entry: str, bound: dict[str, int], symbolic: tuple[str, ...]) -> str:
        dims = ",".join(f"{d}={v}" for d, v in sorted(bound.items()))
        return _sha256(f"{self.program}\n{entry}\n{dims}\n{','.join(symbolic)}".encode())

    # ------------------------------------------------------------ static
    def static_dims(self, entry: str) -> set[str]:
        """The dimensions of ``entry`` a build of this program binds, as an
        earlier process learnt them (empty when unknown or unreadable)."""
        try:
            names = json.loads(self._path(f"{self.program}.static.json").read_text())[entry]
        except (OSError, ValueError, KeyError, TypeError):
            return set()
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return set()
        return set(names)

    def record_static(self, entry: str, names: set[str]) -> None:
        path = self._path(f"{self.program}.static.json")
        try:
            table = json.loads(path.read_text())
            if not isinstance(table, dict):
                table = {}
        except (OSError, ValueError):
            table = {}
        if set(table.get(entry, ())) == names:
            return
        table[entry] = sorted(names)
        self._write(path, json.dumps(table).encode())

    # ------------------------------------------------------------ entries
    def load(self, key: str) -> Entry | None:
        """The entry ``key`` loaded, or None (a miss) [RULE CACHE-NEVER-CRASH]."""
        try:
            record = json.loads(self._path(f"{key}.json").read_text())
            if not isinstance(record, dict) or record.get("format") != FORMAT:
                return None
            name = record["library"]
            if not isinstance(name, str) or name != _library_name(key, record["sha256"]):
                return None
            library = self._path(name)
            if _sha256(library.read_bytes()) != record["sha256"]:
                return None
            module = tvm_runtime.load_module(library)
            return Entry(
                library,
                module,
                int(record["kernels"]),
                int(record["loops"]),
                bool(record["recursive"]),
            )
        except Exception:  # unreadable, corrupt, foreign: a miss, rebuilt
            return None

    def store(self, key: str, executable: Any, kernels: int, loops: int, recursive: bool) -> Entry:
        """Export ``executable`` as the entry ``key`` [RULE CACHE-ATOMIC] and load
        it back (the loaded library is what runs, as on a hit). Raises
        OSError or TVM's error when it cannot be written."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".so")
        os.close(fd)
        try:
            with MODULES:  # runtime/thread_vms.py
                executable.export_library(temporary)
            digest = _sha256(Path(temporary).read_bytes())
            library = self._path(_library_name(key, digest))
            os.replace(temporary, library)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        record = {
            "format": FORMAT,
            "library": library.name,
            "sha256": digest,
            "kernels": kernels,
            "loops": loops,
            "recursive": recursive,
        }
        self._write(self._path(f"{key}.json"), json.dumps(record).encode())
        module = tvm_runtime.load_module(library)
        return Entry(library, module, kernels, loops, recursive)

    def _path(self, name: str) -> Path:
        return self.root / name

    def _write(self, path: Path, data: bytes) -> None:
        write_whole(self.root, path, data)


def write_whole(root: Path, path: Path, data: bytes) -> None:
    """``data`` as ``path`` in ``root``, whole or not at all [RULE CACHE-ATOMIC]."""
    root.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=root, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
