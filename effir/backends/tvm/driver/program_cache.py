"""Whole compiled programs in the build cache: a process that compiles a
program some process compiled before skips the pipeline.

Why: a warm build cache (driver/build_cache.py) spares a process the
lowering and TVM's build of each specialisation, but ``effir.compile`` still
ran the whole pipeline (the effect passes, partial evaluation, fusion:
about half a second for a small MLP's gradient) to learn the optimised
program the builds are keyed by. A record of the compile keeps what a
process needs from the pipeline's output before its first call: the key of
the optimised program's builds, each entry's signature, and the report's
figures.

[RULE CACHE-PROGRAM] A record is keyed by what decides the pipeline's
output and its builds: the source program's canonical text (metadata
included) and its spans (each node's source name, start and end, and a
digest of each source's text: ``build_cache.spans_digest``), the entry, the
pipeline's text, the context's verification and pass options, and what
every build key holds (``build_cache.environment``: the versions, the
target, the precision, the size limit, the thread pool). The target is
keyed as the caller gave it, with the host CPU's name for a CPU target
(``target_key``: what TVM's target is made of, so a hit needs no TVM
Python; the record keeps TVM's text of it). A pipeline given as a
``Pass`` object, or a context with instruments (they observe the passes,
which a hit does not run), is never cached.

[RULE CACHE-LAZY] On a hit the optimised program is not made:
``CompiledModule.module`` runs the pipeline the first time something needs
it (a binding whose build is not in the cache, an entry without a recorded
signature, ``effir opt``'s view of it), in the context ``compile`` was
called in. The pipeline is deterministic, so what it gives then is what the
process that wrote the record had; its errors, which that process did not
meet, cannot arise.

A record is one JSON file, ``<key>.program.json``, written whole or not at
all ([RULE CACHE-ATOMIC]); an unreadable or malformed one is a miss
([RULE CACHE-NEVER-CRASH]), and the program is compiled as before."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from typing import Any

from ....ir.module import IRModule
from ....ir.printer import astext
from ....passes.infra.transform import PassContext
from ..runtime import tvm_runtime
from ..runtime.signature import Signature
from .build_cache import cache_dir, environment, spans_digest, write_whole

RECORD_FORMAT = 2
"""The layout of a record; a change is a new key."""


def target_key(target: Any) -> tuple[str, str] | None:
    """The kind of the target ``compile`` was given and its text for a key,
    made without TVM's Python: the spelling given (text or config) with,
    for a CPU target, LLVM's name of the host CPU (target.py gives
    ``"llvm"`` that ``mcpu``); a ``tvm.target.Target`` (TVM is imported:
    the caller made one) as TVM writes it. None when its kind, or the host
    CPU, cannot be read here (``make_target`` says why later)."""
    if isinstance(target, str) and target.split():
        kind, given = target.split()[0], json.dumps(target)
    elif isinstance(target, dict) and isinstance(target.get("kind"), str):
        kind, given = target["kind"], json.dumps(target, sort_keys=True, default=repr)
    elif "tvm" in sys.modules and isinstance(target, sys.modules["tvm"].target.Target):
        kind, given = str(target.kind.name), f"tvm {target}"
    else:
        return None
    if kind == "llvm":
        cpu = tvm_runtime.host_cpu()
        if cpu is None:  # no compiler library: the build says why
            return None
        given += f" host {cpu}"
    return kind, given


@dataclass(frozen=True)
class ProgramRecord:
    """What a process needs of a compiled program before its first call."""

    builds: str
    """The optimised program's digest: the key of its builds (build_cache.py)."""
    nodes_before: int
    nodes_after: int
    pipeline_seconds: float
    pipeline: str
    entries: tuple[str, ...]
    """The source's functions that were compiled: what a call may name."""
    signatures: dict[str, Signature]
    static_entry: bool
    """Whether the entry ``compile`` was given is built at compile time."""
    target: str
    """TVM's text of the target (``str(tvm.target.Target)``): the report's."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "builds": self.builds,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "pipeline_seconds": self.pipeline_seconds,
            "pipeline": self.pipeline,
            "entries": list(self.entries),
            "signatures": {n: s.to_json() for n, s in self.signatures.items()},
            "static_entry": self.static_entry,
            "target": self.target,
        }

    @staticmethod
    def from_json(data: Any) -> ProgramRecord:
        """The record ``data`` describes; ValueError when it is not one."""
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise ValueError("not a program record of this format")
        try:
            signatures = {
                str(n): Signature.from_json(s, f"@{n}") for n, s in data["signatures"].items()
            }
            return ProgramRecord(
                str(data["builds"]),
                int(data["nodes_before"]),
                int(data["nodes_after"]),
                float(data["pipeline_seconds"]),
                str(data["pipeline"]),
                tuple(str(n) for n in data["entries"]),
                signatures,
                bool(data["static_entry"]),
                str(data["target"]),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed program record ({err})") from None


def program_key(
    source: IRModule,
    entry: str,
    pipeline: str,
    context: PassContext,
    target: Any,
    precision: str,
) -> str | None:
    """The record's key [RULE CACHE-PROGRAM], or None when the program is not
    cached (the cache off, a target whose builds are not cached, a context
    with instruments). ``target``: as ``compile`` was given it."""
    if cache_dir() is None or context.instruments:
        return None
    keyed = target_key(target)
    if keyed is None or keyed[0] != "llvm":
        return None
    options = json.dumps(context.options, sort_keys=True, default=repr)
    text = "\n".join(
        [
            f"effir-program-cache {RECORD_FORMAT}",
            *environment(keyed[1], precision),
            f"entry {entry}",
            f"pipeline {pipeline}",
            f"verify {context.verify}",
            f"options {options}",
            f"spans {spans_digest(source)}",
            astext(source),
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def load(key: str) -> ProgramRecord | None:
    """The record ``key``, or None (a miss) [RULE CACHE-NEVER-CRASH]."""
    root = cache_dir()
    if root is None:
        return None
    try:
        return ProgramRecord.from_json(json.loads((root / f"{key}.program.json").read_text()))
    except (OSError, ValueError):  # absent, unreadable, malformed: compiled as before
        return None


def store(key: str, record: ProgramRecord) -> None:
    """Write ``record`` as ``key`` [RULE CACHE-ATOMIC]. Raises OSError when it
    cannot be written."""
    root = cache_dir()
    if root is None:
        return
    write_whole(root, root / f"{key}.program.json", json.dumps(record.to_json()).encode())
