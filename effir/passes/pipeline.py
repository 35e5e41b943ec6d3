"""Named passes and text pipelines (``explicate,state-passing,split-keys``).

Each pass is a function ``IRModule -> IRModule`` registered under its
kebab-case name, as MLIR names its passes; ``effir opt -p`` and the
transform tests run pipelines by name.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.diagnostics import Error
from ..ir.module import IRModule
from .anf import to_anf
from .explicate import explicate
from .split_keys import split_keys
from .state_passing import state_passing

ModulePass = Callable[[IRModule], IRModule]

PASSES: dict[str, ModulePass] = {
    "to-anf": to_anf,
    "explicate": explicate,
    "state-passing": state_passing,
    "split-keys": split_keys,
}


class PipelineError(Error):
    kind = "pipeline error"


def parse_pipeline(text: str) -> list[tuple[str, ModulePass]]:
    """The passes a pipeline text names, in order; PipelineError names an
    unknown one and lists the known ones."""
    names = [name.strip() for name in text.split(",")]
    if not text.strip() or any(not name for name in names):
        raise PipelineError(f"empty pass name in the pipeline {text!r}")
    passes = []
    for name in names:
        if name not in PASSES:
            known = ", ".join(sorted(PASSES))
            raise PipelineError(f"unknown pass {name!r} (known passes: {known})")
        passes.append((name, PASSES[name]))
    return passes


def run_pipeline(module: IRModule, text: str) -> IRModule:
    """``module`` after each pass of the pipeline ``text``, in order."""
    for _, run in parse_pipeline(text):
        module = run(module)
    return module
