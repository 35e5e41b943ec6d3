"""Pass infrastructure: passes with invariants, sequences of passes, and a
context that instruments and verifies them.

A ``Pass`` is a function ``IRModule -> IRModule`` with a kebab-case name and
the invariants it ``requires`` of its input and ``establishes`` in its
output. Invariants are named properties with a checker each (``INVARIANTS``):
``anf`` (A-normal form), ``bbnf`` (basic-block normal form), ``gnf``
(graph normal form), ``a2`` (no global state is read or written: a
state-passing program). Before a pass runs, its requirements are checked and
an unmet one is a ``PassError`` that says which pass would establish it; so a
pipeline in the wrong order fails at once, naming the pass and the
invariant, instead of producing a wrong program.

A ``PassContext`` holds the optimisation level, the instruments (per-pass
timing; printing the program before or after each pass, or only after the
passes that changed it, as MLIR's ``print-ir-after-change``) and whether to
verify after each pass. Verification type-checks the output (well-formedness
first) and, once the program is A2, runs the linearity verifier; a failure
names the pass that broke the invariant. Tests run with verification on;
``effir opt`` too unless asked not to. It costs about one type check per
pass: ``check`` remembers the module it checked last, so a pass that checks
its input right after verification finds it done, and the verdicts on one
pass's output (A2? linear?) serve again for the next pass's input.

``Sequential`` runs passes in order and is itself a pass. Passes are
registered by name (``register_pass``); ``effir.passes.pipeline`` turns a
text such as ``explicate,state-passing,dce`` into a ``Sequential``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from ..ir.collector import COLLECTOR_THRESHOLD, collector_paced  # noqa: F401
from ..ir.diagnostics import Error, LinearityError, TypeCheckError, WellFormedError
from ..ir.expr import Call, Expr, Function, GlobalVar, Let, Op, RefRead, RefWrite, is_atom
from ..ir.module import IRModule
from ..ir.op import op_def
from ..ir.printer import astext
from ..ir.structural import structural_equal
from ..ir.visitor import pre_order
from .to_bbnf import bbnf_problem
from .to_gnf import gnf_problem

Transform = Callable[[IRModule], IRModule]
T = TypeVar("T")


class PassError(Error):
    """A pipeline problem: an unknown pass, an unmet requirement, or a pass
    whose output broke an invariant (a bug of that pass)."""

    kind = "pass error"


# ---------------------------------------------------------------- invariants
def anf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in A-normal form, or None."""
    for name, fn in module.functions.items():
        for node in pre_order(fn):
            if isinstance(node, Let) and isinstance(node.value, Let):
                return f"@{name} has a let whose value is a let"
            if isinstance(node, Call):
                for arg in node.args:
                    if not _is_atom_like(arg):
                        return f"@{name} has a call with a compound argument"
    return None


def a2_problem(module: IRModule) -> str | None:
    """Where ``module`` still reads or writes global state, or None."""
    cells = set(module.cells)
    for name, fn in module.functions.items():
        for node in pre_order(fn):
            if isinstance(node, RefRead | RefWrite) and isinstance(node.ref, GlobalVar):
                if node.ref.name in cells:
                    return f"@{name} reads or writes the global cell @{node.ref.name}"
            if isinstance(node, Call) and isinstance(node.callee, Op):
                definition = op_def(node.callee)
                if definition.effect in ("random", "state"):
                    return f"@{name} calls the effectful operator {definition.name}"
    return None


def _is_atom_like(expr: Expr) -> bool:
    """An atom, or a function literal (state passing gives loops literal bodies)."""
    return is_atom(expr) or isinstance(expr, Function)


INVARIANTS: dict[str, Callable[[IRModule], str | None]] = {
    "anf": anf_problem,
    "a2": a2_problem,
    "bbnf": bbnf_problem,
    "gnf": gnf_problem,
}
"""Each invariant's checker: a description of where it fails, or None."""


# -------------------------------------------------------------------- passes
@dataclass(frozen=True)
class Pass:
    """A named transformation with the invariants it needs and gives."""

    name: str
    transform: Transform
    requires: frozenset[str] = frozenset()
    establishes: frozenset[str] = frozenset()
    doc: str = ""

    def __call__(self, module: IRModule, context: PassContext | None = None) -> IRModule:
        return (context or PassContext.current()).run(self, module)


@dataclass(frozen=True)
class Sequential:
    """Passes run in order; itself usable wherever a pass is."""

    passes: tuple[Pass, ...]
    name: str = "sequential"

    def __call__(self, module: IRModule, context: PassContext | None = None) -> IRModule:
        context = context or PassContext.current()
        for p in self.passes:
            module = context.run(p, module)
        return module

    def __iter__(self) -> Iterator[Pass]:
        return iter(self.passes)


def function_pass(
    name: str,
    transform: Callable[[Function], Function],
    requires: Sequence[str] = (),
    establishes: Sequence[str] = (),
    doc: str = "",
) -> Pass:
    """A pass that rewrites each global function on its own."""

    def run(module: IRModule) -> IRModule:
        functions = {n: transform(fn) for n, fn in module.functions.items()}
        if all(functions[n] is fn for n, fn in module.functions.items()):
            return module
        return IRModule(functions, module.type_defs, module.cells)

    return Pass(name, run, frozenset(requires), frozenset(establishes), doc)


# ----------------------------------------------------------------- registry
_REGISTRY: dict[str, Pass] = {}


def register_pass(p: Pass) -> Pass:
    """Register a pass under its name (once)."""
    if p.name in _REGISTRY:
        raise ValueError(f"pass {p.name} is already registered")
    for invariant in p.requires | p.establishes:
        if invariant not in INVARIANTS:
            raise ValueError(f"pass {p.name}: unknown invariant {invariant!r}")
    _REGISTRY[p.name] = p
    return p


def registered_passes() -> dict[str, Pass]:
    return dict(_REGISTRY)


def lookup_pass(name: str) -> Pass:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise PassError(f"unknown pass {name!r} (known passes: {known})") from None


# --------------------------------------------------------------- instruments
class Instrument:
    """Hooks around each pass of a context.

    ``needs_changed``: whether ``after`` needs ``changed`` exactly, which
    costs a structural comparison of the whole program, about as much as a
    pass. When no instrument needs it, ``changed`` only says whether the pass
    returned a new module."""

    needs_changed: bool = True

    def before(self, p: Pass, module: IRModule) -> None:
        pass

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        pass


@dataclass
class Timing(Instrument):
    """Seconds spent in each pass, in order (a pass run twice appears twice)."""

    records: list[tuple[str, float]] = field(default_factory=list)
    needs_changed = False

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        self.records.append((p.name, seconds))

    def table(self) -> str:
        width = max([len("total")] + [len(n) for n, _ in self.records])
        lines = [f"{'pass':<{width}}  seconds"]
        lines += [f"{n:<{width}}  {s:.4f}" for n, s in self.records]
        lines.append(f"{'total':<{width}}  {sum(s for _, s in self.records):.4f}")
        return "\n".join(lines)


@dataclass
class PrintIR(Instrument):
    """Prints the program ``before`` each pass, ``after`` each pass, or only
    after the passes that changed it (``after-change``)."""

    when: str = "after"
    stream: TextIO | None = None

    def __post_init__(self) -> None:
        if self.when not in ("before", "after", "after-change"):
            raise ValueError(
                f"PrintIR: when must be before, after or after-change, not {self.when}"
            )

    @property
    def needs_changed(self) -> bool:  # type: ignore[override]
        return self.when == "after-change"

    def _print(self, header: str, module: IRModule) -> None:
        out = self.stream or sys.stderr
        out.write(f"// ----- {header} -----\n{astext(module)}")

    def before(self, p: Pass, module: IRModule) -> None:
        if self.when == "before":
            self._print(f"before {p.name}", module)

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        if self.when == "after" or (self.when == "after-change" and changed):
            self._print(f"after {p.name}", module)


# ------------------------------------------------------------------- context
_STACK: list[PassContext] = []


@dataclass
class PassContext:
    """How passes run: optimisation level, instruments, verification.

    ``with PassContext(verify=True, instruments=[Timing()]):`` makes it the
    current context for the passes run inside."""

    opt_level: int = 2
    instruments: list[Instrument] = field(default_factory=list)
    verify: bool = True
    # What verification found out about the last program it looked at, by
    # question: the output of one pass is the input of the next.
    _last: dict[str, tuple[IRModule, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @staticmethod
    def current() -> PassContext:
        return _STACK[-1] if _STACK else PassContext()

    def __enter__(self) -> PassContext:
        _STACK.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _STACK.pop()

    def run(self, p: Pass, module: IRModule) -> IRModule:
        """Run one pass: requirements, instruments, verification."""
        for invariant in sorted(p.requires):
            problem = INVARIANTS[invariant](module)
            if problem is not None:
                makers = [q.name for q in _REGISTRY.values() if invariant in q.establishes]
                hint = f"; run {' or '.join(makers)} first" if makers else ""
                raise PassError(
                    f"pass {p.name} requires {_INVARIANT_TEXT[invariant]}: {problem}{hint}"
                )
        if self.verify:
            self._verify_input(module)
        for instrument in self.instruments:
            instrument.before(p, module)
        with collector_paced():
            start = time.perf_counter()
            result = p.transform(module)
            seconds = time.perf_counter() - start
        changed = result is not module
        if changed and any(i.needs_changed for i in self.instruments):
            changed = not structural_equal(result, module)
        if self.verify:
            self._verify(p, module, result)
        for instrument in self.instruments:
            instrument.after(p, result, changed, seconds)
        return result

    def _verify_input(self, module: IRModule) -> None:
        """A program no verified pass produced (the pipeline's input) is
        checked before the first pass, so that its own errors are reported
        as the input's, not as an invalid program the pass produced. The
        output of the pass before was checked already: nothing is repeated."""
        last = self._last.get("valid")
        if last is not None and last[0] is module:
            return
        from .infer_type import check

        check(module)  # raises the input's own located errors
        self._last["valid"] = (module, True)

    def _verify(self, p: Pass, before: IRModule, after: IRModule) -> None:
        """The output is well formed and well typed; a linear A2 input gives
        a linear output (key reuse the user wrote is the user's, not the
        pass's)."""
        from .infer_type import check

        try:
            check(after)
        except (WellFormedError, TypeCheckError) as err:
            raise PassError(
                f"pass {p.name} produced an invalid program ({err.kind}): {err.message}",
                err.span,
                err.notes,
            ) from None
        self._last["valid"] = (after, True)
        if not (self._is_a2(before) and self._is_a2(after)) or self._violations(before):
            return
        errors = self._violations(after)
        if errors:
            first = errors[0]
            raise PassError(
                f"pass {p.name} broke linearity: {first.message}",
                first.span,
                tuple(str(e) for e in errors[1:]),
            )

    def _violations(self, module: IRModule) -> list[LinearityError]:
        """The linearity errors of ``module`` that every pass must avoid.
        New state a pass drops cannot be told from state the program itself
        overwrites (dce removes the dead value): only keys, the world token
        and the state-passing signatures are invariants of every pass."""
        from .verify_linear import linearity_errors

        return self._remembered(
            "linearity", module, lambda m: [e for e in linearity_errors(m) if e.rule != "drop"]
        )

    def _is_a2(self, module: IRModule) -> bool:
        return self._remembered("a2", module, _is_a2)

    def _remembered(self, question: str, module: IRModule, answer: Callable[[IRModule], T]) -> T:
        """``answer(module)``, computed once for the last module asked about."""
        last = self._last.get(question)
        if last is not None and last[0] is module:
            return last[1]
        value = answer(module)
        self._last[question] = (module, value)
        return value


_INVARIANT_TEXT = {
    "anf": "A-normal form",
    "a2": "a state-passing program (A2)",
    "bbnf": "basic-block normal form",
    "gnf": "graph normal form",
}


def _is_a2(module: IRModule) -> bool:
    """A state-passing program: some function passes state, none touches a cell."""
    passes_state = any(fn.attrs.get("state_in") for fn in module.functions.values())
    return passes_state and a2_problem(module) is None
