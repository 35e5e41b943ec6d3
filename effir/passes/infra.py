"""Pass infrastructure: passes with invariants and options, sequences of
passes, the registry, and a per-thread context that instruments and
verifies them. The public face is ``effir.transform`` (docs/passes.md).

A ``Pass`` is a function ``IRModule -> IRModule`` with a kebab-case name and
the invariants it ``requires`` of its input and ``establishes`` in its
output. Invariants are named properties with a checker each (``INVARIANTS``):
``anf`` (A-normal form), ``bbnf`` (basic-block normal form), ``gnf``
(graph normal form), ``a2`` (no global state is read or written: a
state-passing program). Before a pass runs, its requirements are checked and
an unmet one is a ``PassError`` that says which pass would establish it; so a
pipeline in the wrong order fails at once, naming the pass and the
invariant, instead of producing a wrong program.

Passes are written as functions and registered where they are defined by
the decorators ``@module_pass(name=..., requires=..., establishes=...)``
and ``@function_pass(...)``: the function's parameters with defaults are
the pass's options (``fuse{max-fused-ops=32}`` in pipeline text), and it
may take the context (a function pass also the module). Registering a name
again from the same definition (module and qualified name: a re-run
notebook cell) replaces it; from another definition is an error naming
both. The built-in passes' modules are imported on the first look-up.

A ``PassContext`` holds the instruments (per-pass timing; printing the
program before or after each pass, or only after the passes that changed
it, as MLIR's ``print-ir-after-change``; your own ``Instrument``), options
per pass, the ``opt_level`` that selects the standard pipeline, and whether
to verify after each pass. Each thread has its own stack of entered
contexts (``threading.local``): a context entered in one thread is never
another thread's. Verification type-checks the output (well-formedness
first) and, once the program is A2, runs the linearity verifier; a failure
names the pass that broke the invariant, as does a pass that returns
something other than a module. What a pass declares is checked too: its
output must have every invariant it ``establishes``, and every one it
``preserves`` that its input had; a false declaration is a ``PassError``
located at the pass's definition. Tests run with verification on; ``effir
opt`` too unless asked not to. It costs about one type check per pass:
``check`` remembers the module it checked last, so a pass that checks its
input right after verification finds it done, and the verdicts on one
pass's output (A2? linear?) serve again for the next pass's input.

``Sequential`` runs passes in order and is itself a pass (nestable), with
requirements and guarantees derived from its members;
``effir.passes.pipeline`` turns a text such as ``explicate,state-passing,dce``
into one.

The invariants' checkers are in ``invariants.py``, the registry in
``registry.py``, the instruments in ``instruments.py``; every name is
importable from here as well.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..ir.collector import COLLECTOR_THRESHOLD, collector_paced  # noqa: F401
from ..ir.diagnostics import (
    LinearityError,
    PassError,
    Source,
    Span,
    TypeCheckError,
    WellFormedError,
)
from ..ir.expr import Function
from ..ir.module import IRModule
from ..ir.structural import structural_equal
from .instruments import Instrument, PrintIR, Timing  # noqa: F401  (re-exported)
from .invariants import (  # noqa: F401  (re-exported)
    INVARIANT_TEXT,
    INVARIANTS,
    a2_problem,
    anf_problem,
    bbnf_problem,
    gnf_problem,
    is_a2,
)
from .registry import (  # noqa: F401  (re-exported)
    BUILTIN_PASS_MODULES,
    BUILTIN_PASS_PACKAGES,
    RegistrationError,
    get_pass,
    lookup_pass,
    register_pass,
    registered_passes,
    unregister_pass,
)

Transform = Callable[[IRModule], IRModule]
T = TypeVar("T")


# ------------------------------------------------------------------- options
OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)
"""The types a pass option may have (pipeline text writes each as a word)."""


@dataclass(frozen=True)
class Option:
    """One option of a pass: a parameter of its function with a default
    (``max_fused_ops: int = 256``), written ``max-fused-ops=32`` in pipeline
    text. The decorators fill ``name``, ``type`` and ``default`` from the
    function's signature; give ``doc`` (and ``minimum``) in their
    ``options=`` mapping."""

    doc: str = ""
    minimum: int | float | None = None
    name: str = ""
    type: type = object
    default: Any = None

    @property
    def text_name(self) -> str:
        """The name pipeline text uses: kebab-case."""
        return self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """The value the word ``text`` denotes; ValueError says what was expected."""
        return self.validate(self._convert(text))

    def _convert(self, text: str) -> Any:
        if self.type is bool:
            if text.lower() in ("true", "1", "on"):
                return True
            if text.lower() in ("false", "0", "off"):
                return False
            raise ValueError(f"expected true or false, got {text!r}")
        try:
            return self.type(text) if self.type is not int else int(text, 10)
        except ValueError:
            expected = {int: "an integer", float: "a number"}.get(self.type, "a value")
            raise ValueError(f"expected {expected}, got {text!r}") from None

    def validate(self, value: Any) -> Any:
        """``value`` if it is one this option takes; ValueError otherwise."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ValueError(f"expected {self.type.__name__}, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got {value!r}")
        return value

    def describe(self) -> str:
        text = f"{self.text_name}={_word(self.default)} ({self.type.__name__})"
        return f"{text}: {self.doc}" if self.doc else text


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class _CallPlan:
    """How a pass's function is called: what its positional parameters
    after the module (or function) receive, each "module" or "context",
    and whether it takes ``context=`` by keyword."""

    positional: tuple[str, ...] = ()
    context_keyword: bool = False


def _plan(
    transform: Callable[..., Any], per_function: bool, docs: Mapping[str, str | Option] | None
) -> tuple[_CallPlan, tuple[Option, ...]]:
    """What ``transform``'s signature says: how to call it, and its options
    (the parameters after the first that have a default of an option type).
    A parameter named ``module`` or ``context`` receives that; others
    without a default receive, in order, the module (a function pass) and
    the context."""
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):  # a builtin without a signature: f(module)
        return _CallPlan(), ()
    try:
        hints = typing.get_type_hints(transform)
    except Exception:  # an annotation that does not resolve: use the defaults' types
        hints = {}
    params = list(signature.parameters.values())[1:]
    slots = ["module", "context"] if per_function else ["context"]
    positional: list[str] = []
    keyword, options = False, []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        wanted = param.name if param.name in slots else None
        if wanted is None and param.default is param.empty:
            wanted = next((slot for slot in slots if slot not in positional), None)
            if wanted is None or param.kind == param.KEYWORD_ONLY:
                raise PassError(
                    f"{_where(transform)}: parameter {param.name!r} needs a default to be an "
                    "option of the pass"
                )
        if wanted is not None:
            if param.kind == param.KEYWORD_ONLY:
                if wanted != "context":
                    raise PassError(f"{_where(transform)}: {param.name!r} must be positional")
                keyword = True
            else:
                positional.append(wanted)
            continue
        kind = hints.get(param.name, type(param.default))
        if kind not in OPTION_TYPES:
            kind = type(param.default)
        if kind not in OPTION_TYPES:
            continue  # not an option: left at its default
        given = (docs or {}).get(param.name)
        spec = given if isinstance(given, Option) else Option(doc=given or "")
        options.append(replace(spec, name=param.name, type=kind, default=param.default))
    unknown = set(docs or ()) - {o.name for o in options}
    if unknown:
        raise PassError(
            f"{_where(transform)}: options= names {', '.join(sorted(unknown))}, which "
            "are not parameters with a default"
        )
    return _CallPlan(tuple(positional), keyword), tuple(options)


def definition_span(transform: Callable[..., Any]) -> Span | None:
    """Where a pass's function is defined (its ``def`` line), for errors
    about the pass; None when its source cannot be read."""
    try:
        code = inspect.unwrap(transform).__code__
        with open(code.co_filename, encoding="utf-8") as handle:
            text = handle.read()
    except (AttributeError, OSError, UnicodeDecodeError, ValueError):
        return None
    return line_span(Source(code.co_filename, text), code.co_firstlineno)


def line_span(source: Source, line: int) -> Span | None:
    """The text of one line of ``source`` (without its indentation)."""
    lines = source.text.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        return None
    start = sum(len(t) for t in lines[: line - 1])
    content = lines[line - 1].rstrip("\r\n")
    indent = len(content) - len(content.lstrip())
    return Span(source, start + indent, start + max(len(content), indent + 1))


def _where(transform: Callable[..., Any]) -> str:
    """A function's defining location: its module and qualified name."""
    module = getattr(transform, "__module__", None) or "?"
    name = getattr(transform, "__qualname__", None) or repr(transform)
    return f"{module}.{name}"


# -------------------------------------------------------------------- passes
@dataclass(frozen=True, eq=False)
class Pass:
    """A named transformation with the invariants it needs and gives.

    ``transform`` is ``f(module) -> IRModule`` (or, with ``per_function``,
    ``f(function) -> Function`` applied to each global function). It may take
    more: a module pass ``f(module, context)``, a function pass
    ``f(function, module, context)``; parameters with a default of type
    bool, int, float or str are its ``options``. ``values`` are the
    options given (``with_options``, pipeline text). ``preserves``: the
    invariants that hold after the pass when they held before it (for
    ``Sequential``'s guarantees). Calling a pass runs it in a context:
    ``p(module)`` (the current one) or ``p(module, context)``."""

    name: str
    transform: Callable[..., Any]
    requires: frozenset[str] = frozenset()
    establishes: frozenset[str] = frozenset()
    doc: str = ""
    preserves: frozenset[str] = frozenset()
    options: tuple[Option, ...] | None = None
    values: tuple[tuple[str, Any], ...] = ()
    per_function: bool = False
    defined_at: str = ""
    _call: _CallPlan = field(default=_CallPlan(), repr=False)

    def __post_init__(self) -> None:
        for attribute in ("requires", "establishes", "preserves"):
            value = getattr(self, attribute)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, attribute, frozenset(value))
        if self.options is None:
            call, options = _plan(self.transform, self.per_function, None)
            object.__setattr__(self, "options", options)
            object.__setattr__(self, "_call", call)
        if not self.defined_at:
            object.__setattr__(self, "defined_at", _where(self.transform))

    def __call__(self, module: IRModule, context: PassContext | None = None) -> IRModule:
        return (context or PassContext.current()).run(self, module)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spelled()}>"

    def spelled(self) -> str:
        """The pass as pipeline text writes it: ``fuse{max-fused-ops=32}``."""
        if not self.values:
            return self.name
        given = " ".join(f"{n.replace('_', '-')}={_word(v)}" for n, v in self.values)
        return f"{self.name}{{{given}}}"

    def option(self, name: str) -> Option:
        """The option ``name`` (kebab-case or a parameter's name)."""
        for option in self.options or ():
            if name in (option.name, option.text_name):
                return option
        known = ", ".join(o.text_name for o in self.options or ()) or "none"
        raise PassError(f"pass {self.name} has no option {name!r} (its options: {known})")

    def with_options(self, **values: Any) -> Pass:
        """This pass with options set (by parameter name); a PassError names
        an unknown option or a bad value."""
        given = dict(self.values)
        for name, value in values.items():
            option = self.option(name)
            try:
                given[option.name] = option.validate(value)
            except ValueError as err:
                raise PassError(f"option {option.text_name} of pass {self.name}: {err}") from None
        return replace(self, values=tuple(given.items()))

    def apply(self, module: IRModule, context: PassContext) -> Any:
        """The transformation itself, with its options: no requirement check,
        no instrument, no verification (``context.run`` does those)."""
        options = dict(self.values)
        given = {"module": module, "context": context}
        extra = tuple(given[slot] for slot in self._call.positional)
        keywords = {"context": context} if self._call.context_keyword else {}
        if not self.per_function:
            return self.transform(module, *extra, **keywords, **options)
        functions = {
            name: self.transform(fn, *extra, **keywords, **options)
            for name, fn in module.functions.items()
        }
        for name, fn in functions.items():
            if not isinstance(fn, Function):
                raise PassError(
                    f"pass {self.name} returned {type(fn).__name__} for @{name}, not a "
                    f"Function ({self.defined_at})"
                )
        if all(functions[n] is fn for n, fn in module.functions.items()):
            return module
        return IRModule(functions, module.type_defs, module.cells)

    def describe(self) -> str:
        """One paragraph for ``effir opt --list-passes``."""
        lines = [f"{self.name}: {self.doc}" if self.doc else self.name]
        if self.requires:
            lines.append(f"    requires {', '.join(sorted(self.requires))}")
        if self.establishes:
            lines.append(f"    establishes {', '.join(sorted(self.establishes))}")
        lines += [f"    option {o.describe()}" for o in self.options or ()]
        return "\n".join(lines)


class Sequential(Pass):
    """Passes run in order; itself a pass (nestable). Members are passes,
    registered names (or pipeline text) or decorated functions. It requires
    of its input what a member requires that must come from the input (no
    earlier member establishes it, every earlier one ``preserves`` it), and
    establishes what its members establish and later members keep
    (establish again or preserve). Each member's own requirements are
    checked again when it runs."""

    passes: tuple[Pass, ...]
    requirers: dict[str, str]

    def __init__(
        self,
        passes: Iterable[Pass | str | Callable[..., Any]] = (),
        name: str = "sequential",
        doc: str = "",
    ) -> None:
        members = tuple(as_pass(p) for p in passes)
        requires: dict[str, str] = {}  # invariant: the first member requiring it
        held: set[str] = set()
        kept = set(INVARIANTS)
        from_input = set(INVARIANTS)  # what still holds if it held on the input
        for member in members:
            for invariant in member.requires & from_input:
                requires.setdefault(invariant, _requirer(member, invariant))
            from_input = (from_input & member.preserves) - member.establishes
            held = set(member.establishes) | (held & member.preserves)
            kept &= member.establishes | member.preserves
        super().__init__(
            name,
            _run_members,
            frozenset(requires),
            frozenset(held),
            doc or "runs " + ",".join(m.spelled() for m in members),
            frozenset(kept),
            options=(),
            defined_at=f"{__name__}.Sequential({name})",
        )
        object.__setattr__(self, "passes", members)
        object.__setattr__(self, "requirers", requires)

    def apply(self, module: IRModule, context: PassContext) -> IRModule:
        for member in self.passes:
            module = context.run(member, module)
        return module

    def with_options(self, **values: Any) -> Pass:
        raise PassError(f"{self.name} is a sequence of passes: give options to its members")

    def spelled(self) -> str:
        return ",".join(m.spelled() for m in self.passes)

    def __iter__(self) -> Iterator[Pass]:
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)


def _requirer(p: Pass, invariant: str) -> str:
    """The name of the (innermost) pass of ``p`` that requires ``invariant``."""
    return p.requirers.get(invariant, p.name) if isinstance(p, Sequential) else p.name


def _run_members(module: IRModule) -> IRModule:  # pragma: no cover  (Sequential.apply runs them)
    raise AssertionError("a Sequential runs its members")


# Pipeline text is read by effir.passes.pipeline, which builds on this module
# (it makes Sequentials of registered passes); it registers its reader here.
_PIPELINE_TEXT: list[Callable[[str], Sequential]] = []


def register_pipeline_reader(read: Callable[[str], Sequential]) -> None:
    """Let ``as_pass`` (and so ``Sequential``) read pipeline text with ``read``."""
    _PIPELINE_TEXT[:] = [read]


def as_pass(item: Pass | str | Callable[..., Any]) -> Pass:
    """A pass from a pass, a registered name, or a function a decorator made a pass."""
    if isinstance(item, Pass):
        return item
    if isinstance(item, str):
        if any(c in item for c in ",{") and _PIPELINE_TEXT:  # pipeline text
            passes = _PIPELINE_TEXT[0](item)
            return passes.passes[0] if len(passes) == 1 else passes
        return lookup_pass(item.strip())
    made = getattr(item, "effir_pass", None)
    if isinstance(made, Pass):
        return made
    raise PassError(
        f"{item!r} is not a pass: give a Pass, a registered pass name, or a function "
        "decorated with @module_pass or @function_pass"
    )


# ---------------------------------------------------------------- decorators
def module_pass(
    transform: Callable[..., Any] | str | None = None,
    /,
    *,
    name: str | None = None,
    requires: Iterable[str] = (),
    establishes: Iterable[str] = (),
    preserves: Iterable[str] = (),
    doc: str | None = None,
    options: Mapping[str, str | Option] | None = None,
) -> Any:
    """Registers ``f(module[, context], **options) -> IRModule`` as a pass
    where it is defined; use as ``@module_pass(name="my-pass", requires=...)``.

    ``name`` defaults to the function's name in kebab-case, ``doc`` to the
    first line of its docstring; ``options`` documents (``"text"`` or
    ``Option(doc, minimum=...)``) the parameters with defaults, which are
    the pass's options. The function is returned unchanged (calling it
    runs it bare); its pass is ``f.effir_pass`` (or ``get_pass(name)``)."""
    return _decorator(
        transform, name, requires, establishes, preserves, doc, options, per_function=False
    )


def function_pass(
    transform: Callable[..., Any] | str | None = None,
    legacy: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    requires: Iterable[str] = (),
    establishes: Iterable[str] = (),
    preserves: Iterable[str] = (),
    doc: str | None = None,
    options: Mapping[str, str | Option] | None = None,
) -> Any:
    """Registers ``f(function[, module[, context]], **options) -> Function``,
    applied to each global function, as a pass (as ``module_pass``); the
    module is rebuilt only when some function changed.

    ``function_pass("name", f)`` makes an unregistered ``Pass`` at once (a
    throwaway pass, as in tests)."""
    if isinstance(transform, str) and legacy is not None:
        return Pass(
            transform,
            legacy,
            frozenset(requires),
            frozenset(establishes),
            doc or "",
            frozenset(preserves),
            per_function=True,
        )
    return _decorator(
        transform, name, requires, establishes, preserves, doc, options, per_function=True
    )


def _decorator(
    transform: Callable[..., Any] | str | None,
    name: str | None,
    requires: Iterable[str],
    establishes: Iterable[str],
    preserves: Iterable[str],
    doc: str | None,
    options: Mapping[str, str | Option] | None,
    per_function: bool,
) -> Any:
    if isinstance(transform, str):  # @module_pass("name")
        name, transform = transform, None

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        call, declared = _plan(f, per_function, options)
        p = Pass(
            name or getattr(f, "__name__", "pass").replace("_", "-"),
            f,
            frozenset(requires),
            frozenset(establishes),
            doc if doc is not None else _first_line(getattr(f, "__doc__", None)),
            frozenset(preserves),
            options=declared,
            per_function=per_function,
            defined_at=_where(f),
            _call=call,
        )
        register_pass(p)
        with contextlib.suppress(AttributeError, TypeError):
            f.effir_pass = p  # type: ignore[attr-defined]
        return f

    return register if transform is None else register(transform)


def _first_line(doc: str | None) -> str:
    """The first sentence-line of a docstring, without markup."""
    text = inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " ").replace("``", "")
    return text.strip()


# ------------------------------------------------------------------- context
OPT_LEVELS = (0, 1, 2)
"""``opt_level`` selects a standard pipeline (effir.passes.pipeline):
0 none, 1 the effect passes, 2 and the optimisations."""

_contexts = threading.local()


def _stack() -> list[PassContext]:
    """This thread's stack of entered contexts (each thread has its own)."""
    stack = getattr(_contexts, "stack", None)
    if stack is None:
        stack = _contexts.stack = []
    return stack


@dataclass
class PassContext:
    """How passes run: instruments, verification, options per pass, and the
    optimisation level that selects the standard pipeline.

    ``with PassContext(verify=True, instruments=[Timing()]):`` makes it the
    current context of this thread for the passes run inside (another
    thread never sees it). ``options`` maps a pass name to its options by
    parameter name (``{"fuse": {"max_fused_ops": 32}}``); options given in
    pipeline text or ``with_options`` take precedence. ``opt_level`` (0, 1
    or 2) is the standard pipeline ``pipeline()`` and ``effir.compile``
    run when given none."""

    opt_level: int = 2
    instruments: list[Instrument] = field(default_factory=list)
    verify: bool = True
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What verification found out about the last program it looked at, by
    # question: the output of one pass is the input of the next.
    _last: dict[str, tuple[IRModule, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.opt_level not in OPT_LEVELS or isinstance(self.opt_level, bool):
            raise PassError(f"opt_level must be 0, 1 or 2, not {self.opt_level!r}")
        self.instruments = list(self.instruments)
        for instrument in self.instruments:
            if not isinstance(instrument, Instrument):
                raise PassError(f"{instrument!r} is not an Instrument")

    @staticmethod
    def current() -> PassContext:
        """This thread's innermost entered context (a default one if none)."""
        stack = _stack()
        return stack[-1] if stack else PassContext()

    def __enter__(self) -> PassContext:
        _stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()

    def run(self, p: Pass, module: IRModule) -> IRModule:
        """Run one pass: requirements, instruments, verification."""
        if not isinstance(module, IRModule):
            raise PassError(f"pass {p.name} was given a {type(module).__name__}, not an IRModule")
        for invariant in sorted(p.requires):
            problem = INVARIANTS[invariant](module)
            if problem is not None:
                makers = [
                    q.name for q in registered_passes().values() if invariant in q.establishes
                ]
                hint = f"; run {' or '.join(sorted(makers))} first" if makers else ""
                raise PassError(
                    f"pass {_requirer(p, invariant)} requires {INVARIANT_TEXT[invariant]}: "
                    f"{problem}{hint}"
                )
        if isinstance(p, Sequential):
            return p.apply(module, self)
        given = self.options.get(p.name)
        if given:  # the context's options, then the pass's own over them
            own = dict(p.values)
            p = replace(p, values=()).with_options(**given).with_options(**own)
        if self.verify:
            self._verify_input(module)
        for instrument in self.instruments:
            instrument.before(p, module)
        with collector_paced():
            start = time.perf_counter()
            result = p.apply(module, self)
            seconds = time.perf_counter() - start
        if not isinstance(result, IRModule):
            raise PassError(
                f"pass {p.name} returned {_kind(result)}, not an IRModule ({p.defined_at})"
            )
        changed = result is not module
        if changed and any(i.needs_changed for i in self.instruments):
            changed = not structural_equal(result, module)
        if self.verify:
            self._verify(p, module, result)
            self._verify_declared(p, module, result)
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

    def _verify_declared(self, p: Pass, before: IRModule, after: IRModule) -> None:
        """The output has what the pass declares: every invariant it
        ``establishes``, and every one it ``preserves`` that its input had.
        A later pass that requires one relies on the declaration, so a
        false one is reported here, naming the pass that made it, not there."""
        for invariant in sorted(p.establishes | p.preserves):
            if invariant not in p.establishes and self._problem(invariant, before) is not None:
                continue
            problem = self._problem(invariant, after)
            if problem is not None:
                verb = "establish" if invariant in p.establishes else "preserve"
                span = definition_span(p.transform)  # the declaration: the decorator's line
                raise PassError(
                    f"pass {p.name} broke {INVARIANT_TEXT[invariant]}, which it declares to "
                    f"{verb}: {problem}",
                    span,
                    () if span is not None else (f"the pass is {p.defined_at}",),
                )

    def _problem(self, invariant: str, module: IRModule) -> str | None:
        return self._remembered(f"invariant {invariant}", module, INVARIANTS[invariant])

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
        return self._remembered("a2", module, is_a2)

    def _remembered(self, question: str, module: IRModule, answer: Callable[[IRModule], T]) -> T:
        """``answer(module)``, computed once for the last module asked about."""
        last = self._last.get(question)
        if last is not None and last[0] is module:
            return last[1]
        value = answer(module)
        self._last[question] = (module, value)
        return value


def _kind(value: object) -> str:
    return "None" if value is None else f"a {type(value).__name__}"
