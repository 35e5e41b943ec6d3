"""The registered passes and pipelines written as text.

Each pass module defines its transformation; here each is registered once
under its kebab-case name with the invariants it requires and establishes
(`infra.Pass`). ``pipeline("explicate,state-passing,split-keys")`` gives a
``Sequential``; ``effir opt -p`` and the transform tests use the same text.
A standard pipeline (``-O1``, ``-O2``) is a name for a text.
"""

from __future__ import annotations

from ..ir.module import IRModule
from .anf import to_anf
from .explicate import explicate
from .infra import Pass, PassContext, PassError, Sequential, lookup_pass, register_pass
from .split_keys import split_keys
from .state_passing import state_passing
from .to_bbnf import to_bbnf
from .to_gnf import to_gnf

# Passes that register themselves where they are defined.
from . import cse, dce, fold_constant, fuse, partial_eval, simplify  # noqa: E402, F401  isort: skip

register_pass(
    Pass(
        "to-anf",
        to_anf,
        establishes=frozenset({"anf", "bbnf"}),
        doc="every intermediate value bound by a let, in evaluation order",
    )
)
register_pass(
    Pass(
        "to-bbnf",
        to_bbnf,
        establishes=frozenset({"bbnf"}),
        doc="every block a let chain; sharing across blocks bound in their common block",
    )
)
register_pass(
    Pass(
        "to-gnf",
        to_gnf,
        establishes=frozenset({"gnf"}),
        doc="pure let-bound values written where they are used (graph form, for display)",
    )
)
register_pass(
    Pass(
        "explicate",
        explicate,
        establishes=frozenset({"anf"}),
        doc="effectful surface operators become reads and writes of their cells (A1)",
    )
)
register_pass(
    Pass(
        "state-passing",
        state_passing,
        establishes=frozenset({"anf", "a2"}),
        doc="global state becomes parameters and results (A1 -> A2)",
    )
)
register_pass(
    Pass(
        "split-keys",
        split_keys,
        requires=frozenset({"a2"}),
        doc="a chain of key splits in a block becomes one split (changes random values)",
    )
)

STANDARD_PIPELINES = {
    "O0": "",
    "O1": "explicate,state-passing",
    "O2": "explicate,state-passing,partial-eval,simplify,cse,dce",
}
"""What ``effir opt -O1``/``-O2`` run: the effect passes, then (-O2) partial
evaluation and the basic-block optimisations."""


def pipeline(text: str) -> Sequential:
    """The passes a pipeline text names, in order: pass names separated by
    commas, or a standard pipeline's name (``O2``). PassError names an
    unknown pass and lists the known ones."""
    text = text.strip()
    if text.lstrip("-") in STANDARD_PIPELINES:
        text = STANDARD_PIPELINES[text.lstrip("-")]
        if not text:
            return Sequential(())
    names = [name.strip() for name in text.split(",")]
    if not text or any(not name for name in names):
        raise PassError(f"empty pass name in the pipeline {text!r}")
    return Sequential(tuple(lookup_pass(name) for name in names))


def run_pipeline(module: IRModule, text: str, context: PassContext | None = None) -> IRModule:
    """``module`` after each pass of the pipeline ``text``, in order."""
    return pipeline(text)(module, context)
