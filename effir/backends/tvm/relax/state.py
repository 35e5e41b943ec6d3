"""The state one lowering to Relax shares between its rule sets.

relax/lower.py's walk over the program hands this one object to the rule
sets it calls (relax/kernel_calls.py, loops.py, whole_loops.py,
dynamic.py, symbolic.py, adts.py, closures.py): every value more than one
of them reads or writes is a field here, declared with its type and what
it is for, and each rule set's constructor names the state and the other
rule sets it uses. ``Walk`` is what the rule sets call back into the walk
for: the values of atoms, the blocks of let chains, lifted closures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tvm import tirx

from ....ir.diagnostics import Span
from ....ir.expr import Expr, Function, Var
from ....ir.module import IRModule
from ....ir.trampoline import Computation
from .builder import Builder

if TYPE_CHECKING:
    from ..kernel.primitive import KernelIR


@dataclass
class LiftedFunction:
    """A lifted function literal: its Relax function and captured variables."""

    gv: Any
    captured: list[Var]
    deep: bool  # takes the depth of recursion first [RULE LOWER-DEPTH]


@dataclass
class LoweringState:
    """One lowering's shared state (one per ``lower_to_relax`` call)."""

    module: IRModule
    """The specialised program being lowered."""
    target: Any
    """The TVM target its kernels are compiled for (``llvm`` or ``cuda``)."""
    symbols: dict[str, tirx.Var] = field(default_factory=dict)
    """The entry's dimensions left symbolic, as shape variables."""
    bb: Builder = field(default_factory=Builder)
    """The Relax module being built, and its open block."""
    entry: str = ""
    """The entry function's name."""
    globals: dict[str, Any] = field(default_factory=dict)
    """The Relax function of each global function reached, by name."""
    recursive: set[str] = field(default_factory=set)
    """The globals on a cycle of calls: they take the depth first [RULE LOWER-DEPTH]."""
    depth: Any = None
    """The depth of recursion where code is being lowered (a Relax value), or None."""
    recursion: bool = False
    """Whether the program runs on a large stack (runtime/stack.py): recursion, ADT chains."""
    kernels: dict[str, tuple[str, KernelIR]] = field(default_factory=dict)
    """effir's kernels compiled so far, by text and types: symbol and lowering."""
    apart: dict[str, None] = field(default_factory=dict)
    """The symbols of the kernels compiled apart, in order [RULE LOWER-APART]."""
    executor_gvs: dict[str, Any] = field(default_factory=dict)
    """The executor's kernels added to the module (relax/dynamic.py), by key."""
    lifted: dict[tuple[int, bool], LiftedFunction] = field(default_factory=dict)
    """Lifted function literals, by identity and whether captured values come last."""
    constructor_functions: dict[str, Any] = field(default_factory=dict)
    """Functions made for constructors and globals used as values (relax/closures.py)."""
    loops: int = 0
    """Loops lowered so far: compiled loops counted, and unique function names."""
    host_level: Any = None
    """``(count, limit)``: the host's step count and the level's limit of the
    VM loop step being lowered [RULE LOOP-HOSTCOUNT], or None."""
    sites: dict[str, Span | None] = field(default_factory=dict)
    """The source of each Relax variable's value, by name (``RelaxProgram.sites``)."""


class Walk(Protocol):
    """What rule sets call back into relax/lower.py's walk for."""

    def atom(self, expr: Expr, env: dict[Var, Any]) -> Any:
        """The Relax value of a variable, constant, constructor or global."""
        ...

    def chain(self, expr: Expr, env: dict[Var, Any]) -> Computation[Any]:
        """The bindings of a let chain emitted in the open block, on the trampoline."""
        ...

    def drive(self, computation: Computation[Any]) -> Any:
        """A trampoline computation run to its value."""
        ...

    def lift(
        self, fn: Function, env: dict[Var, Any], name: str, captured_last: bool = False
    ) -> LiftedFunction:
        """A function literal as a private Relax function (lifted once)."""
        ...

    def calls_deeper(self, fn: Function, functions: dict[Var, Any]) -> bool:
        """Whether ``fn`` must pass the depth of recursion on [RULE LOWER-DEPTH]."""
        ...
