"""A lowered specialisation as the driver keeps it: what relax/lower.py
makes, and what a build loaded from the cache is described by.

Apart from lower.py, which imports TVM: a program loaded from the build
cache (driver/program_cache.py) is described without it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ....ir.diagnostics import Span


@dataclass
class RelaxProgram:
    """A lowered specialisation: the Relax module (it calls no Python:
    every program exports)."""

    module: Any  # tvm.IRModule
    entry: str
    kernels: int = 0
    loops: int = 0
    recursive: bool = False  # runs on a large stack (runtime/stack.py [RULE RUNTIME-STACK])
    sites: dict[str, Span | None] = field(default_factory=dict)
    """The source of the value bound to each Relax variable, by name: where
    a failure of TVM's build that names one is reported (runtime/errors.py
    ``build_failure``)."""
    span: Span | None = None  # the entry's, where no site is named
    libraries: Any = None
    """Its kernels' modules, being built (relax/apart.py ``Pending``:
    [RULE APART-OVERLAP]); the executable imports them."""
