"""Pass infrastructure: passes as declared objects, sequences of passes,
and a per-thread context that instruments and verifies them. The public
face is ``effir.transform`` (docs/passes.md).

A pass is a frozen dataclass, as xDSL writes its ``ModulePass``: its
fields are its options (``fuse{max-fused-ops=32}`` in pipeline text sets
the field ``max_fused_ops``; ``options.py``), and what it is, as class
variables: its kebab-case ``name``, a ``doc`` line, and the invariants it
``requires`` of its input, ``establishes`` in its output and
``preserves`` (holds after it when it held before). Invariants are named
properties with a checker each (``INVARIANTS``): ``anf`` (A-normal form),
``bbnf`` (basic-block normal form), ``gnf`` (graph normal form), ``a2``
(no global state is read or written: a state-passing program). Subclass
``ModulePass`` (``transform(module, context)``) or ``FunctionPass``
(``transform_function(function, module, context)``, applied to each
global function). The registry checks the declaration when it registers
the class (``registry.py``): known invariants, nothing both required and
established (a pass that needs an invariant and keeps it ``preserves``
it), nothing both established and preserved, an option of an option type
with a default.

The decorators ``@module_pass(name=..., requires=..., ...)`` and
``@function_pass(...)`` are sugar: they make such a class of a function
(its parameters with defaults become the fields), register it where it is
defined and return the function unchanged, its pass as ``f.effir_pass``.
Registering a name again from the same definition (module and qualified
name: a re-run notebook cell) replaces it; from another definition is an
error naming both.

Before a pass runs, its requirements are checked and an unmet one is a
``PassError`` that says which pass would establish it; so a pipeline in the
wrong order fails at once, naming the pass and the invariant, instead of
producing a wrong program. A pass whose requirements some passes can
always establish names them as its ``prelude`` (pipeline text): the
context runs them first when the input lacks one (``grad`` needs an A2
program in A-normal form, whatever the user gives it).

A ``PassContext`` holds the instruments (per-pass timing; printing the
program before or after each pass, or only after the passes that changed
it, as MLIR's ``print-ir-after-change``; your own ``Instrument``, which may
skip a pass with ``should_run`` and hear the context entered and exited,
as TVM's instruments do), options per pass, the ``opt_level`` that selects
the standard pipeline, and whether to verify after each pass. Each thread
has its own stack of entered contexts (``threading.local``): a context
entered in one thread is never another thread's. Verification type-checks
the output (well-formedness first) and, once the program is A2, runs the
linearity verifier; a failure names the pass that broke the invariant, as
does a pass that returns something other than a module. What a pass
declares is checked too: its output must have every invariant it
``establishes``, and every one it ``preserves`` that its input had; a
false declaration is a ``PassError`` located at the pass's definition.
Tests run with verification on; ``effir opt`` too unless asked not to. It
costs about one type check per pass: ``check`` remembers the module it
checked last, so a pass that checks its input right after verification
finds it done, and the verdicts on one pass's output (A2? linear?) serve
again for the next pass's input.

``Sequential`` runs passes in order and is itself a pass (nestable), with
requirements and guarantees derived from its members;
``effir.passes.infra.pipeline`` turns a text such as ``explicate,state-passing,dce``
into one.

The invariants' checkers are in ``invariants.py``, the options in
``options.py``, the registry (and its table of the built-in passes) in
``registry.py``; every name is importable from here as well. The
``Instrument`` hooks are defined here, beside the context that calls
them; the instruments effir gives (``Timing``, ``PrintIR``) are in
``instruments.py``, which builds on this module.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

from effir.ir.collector import COLLECTOR_THRESHOLD, collector_paced  # noqa: F401
from effir.ir.diagnostics import (
    LinearityError,
    PassError,
    Source,
    Span,
    TypeCheckError,
    WellFormedError,
)
from effir.ir.expr import Function
from effir.ir.module import IRModule
from effir.ir.structural import structural_equal
from effir.passes.analyses.infer_type import check
from effir.passes.analyses.verify_linear import linearity_errors
from effir.passes.infra.invariants import (  # noqa: F401  (re-exported)
    INVARIANT_TEXT,
    INVARIANTS,
    a2_problem,
    anf_problem,
    bbnf_problem,
    gnf_problem,
    is_a2,
)
from effir.passes.infra.options import OPTION_KEY, OPTION_TYPES, Option, option, options_of, word  # noqa: F401  (option re-exported)
from effir.passes.infra.registry import (  # noqa: F401  (re-exported)
    BUILTIN_PASSES,
    RegistrationError,
    Registry,
)

T = TypeVar("T")
INVARIANT_KINDS = ("requires", "establishes", "preserves")
"""The class variables of a pass that name invariants."""


# ------------------------------------------------------------- where defined
def definition_span(definition: Any) -> Span | None:
    """Where a pass is defined (its decorator's or class's first line), for
    errors about the pass; None when its source cannot be read."""
    try:
        if isinstance(definition, type):
            lines, line = inspect.getsourcelines(definition)
            filename = inspect.getsourcefile(definition) or ""
        else:
            code = inspect.unwrap(definition).__code__
            filename, line = code.co_filename, code.co_firstlineno
        with open(filename, encoding="utf-8") as handle:
            text = handle.read()
    except (AttributeError, OSError, TypeError, UnicodeDecodeError, ValueError):
        return None
    return line_span(Source(filename, text), line)


def line_span(source: Source, line: int) -> Span | None:
    """The text of one line of ``source`` (without its indentation)."""
    lines = source.text.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        return None
    start = sum(len(t) for t in lines[: line - 1])
    content = lines[line - 1].rstrip("\r\n")
    indent = len(content) - len(content.lstrip())
    return Span(source, start + indent, start + max(len(content), indent + 1))


def _where(definition: Any) -> str:
    """A function's or class's defining location: its module and qualified name."""
    module = getattr(definition, "__module__", None) or "?"
    name = getattr(definition, "__qualname__", None) or repr(definition)
    return f"{module}.{name}"


def first_line(doc: str | None) -> str:
    """The first paragraph of a docstring on one line, without markup."""
    text = inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " ").replace("``", "")
    return text.strip()


def invariant_set(declared: str | Iterable[str]) -> frozenset[str]:
    """The invariants a declaration names: a string names one (``"anf"``, as
    a class variable or a decorator's argument), not its letters."""
    return frozenset((declared,) if isinstance(declared, str) else declared)


# -------------------------------------------------------------------- passes
@dataclass(frozen=True)
class Pass:
    """A named transformation ``IRModule -> IRModule`` with the invariants
    it needs and gives (class variables) and its options (fields).

    ``values`` are the options given (constructor, ``with_options``,
    pipeline text), by field name. Calling a pass runs it in a context:
    ``p(module)`` (the current one) or ``p(module, context)``."""

    name: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    establishes: ClassVar[frozenset[str]] = frozenset()
    preserves: ClassVar[frozenset[str]] = frozenset()
    prelude: ClassVar[str] = ""
    """Pipeline text that establishes ``requires`` from any input: run
    first when the input lacks one of them (empty: an unmet requirement is
    an error)."""
    defined_at: ClassVar[str] = ""
    """The definition's module and qualified name, for errors about it."""
    definition: ClassVar[Any] = None
    """The class or function that defines the pass (for its source line)."""

    # The option fields given explicitly (by field name), not defaulted.
    _given: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attribute in INVARIANT_KINDS:
            value = cls.__dict__.get(attribute)
            if value is not None:
                setattr(cls, attribute, invariant_set(value))
        if "defined_at" not in cls.__dict__:
            cls.defined_at = _where(cls)
        if "definition" not in cls.__dict__:
            cls.definition = cls
        if "doc" not in cls.__dict__:
            cls.doc = first_line(cls.__dict__.get("__doc__"))

    def __post_init__(self) -> None:
        try:
            specs = self.options
        except TypeError as err:  # a field that cannot be an option
            raise PassError(f"pass {self.name} ({self.defined_at}): {err}") from None
        given = set()
        for spec in specs:
            value = getattr(self, spec.name)
            if value != spec.default or type(value) is not type(spec.default):
                given.add(spec.name)
            try:
                object.__setattr__(self, spec.name, spec.validate(value))
            except ValueError as err:
                raise PassError(f"option {spec.text_name} of pass {self.name}: {err}") from None
        object.__setattr__(self, "_given", frozenset(given))

    @property
    def options(self) -> tuple[Option, ...]:
        """The pass's options: its dataclass fields (``options.py``)."""
        return options_of(type(self))

    @property
    def values(self) -> tuple[tuple[str, Any], ...]:
        """The options given explicitly, by field name, in field order."""
        return tuple((o.name, getattr(self, o.name)) for o in self.options if o.name in self._given)

    def __call__(self, module: IRModule, context: PassContext | None = None) -> IRModule:
        return (context or PassContext.current()).run(self, module)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spelled()}>"

    def spelled(self) -> str:
        """The pass as pipeline text writes it: ``fuse{max-fused-ops=32}``."""
        if not self.values:
            return self.name
        given = " ".join(f"{n.replace('_', '-')}={word(v)}" for n, v in self.values)
        return f"{self.name}{{{given}}}"

    def option(self, name: str) -> Option:
        """The option ``name`` (kebab-case or a field's name)."""
        for spec in self.options:
            if name in (spec.name, spec.text_name):
                return spec
        known = ", ".join(o.text_name for o in self.options) or "none"
        raise PassError(f"pass {self.name} has no option {name!r} (its options: {known})")

    def with_options(self, **values: Any) -> Pass:
        """This pass with options set (by field name, or kebab-case); a
        PassError names an unknown option or a bad value."""
        fields = {self.option(name).name: value for name, value in values.items()}
        made = replace(self, **fields)
        object.__setattr__(made, "_given", self._given | made._given | frozenset(fields))
        return made

    def apply(self, module: IRModule, context: PassContext) -> Any:
        """The transformation itself, with its options: no requirement check,
        no instrument, no verification (``context.run`` does those)."""
        raise PassError(f"pass {self.name} ({self.defined_at}) defines no transformation")

    def describe(self) -> str:
        """One paragraph for ``effir opt --list-passes``."""
        lines = [f"{self.name}: {self.doc}" if self.doc else self.name]
        for attribute in INVARIANT_KINDS:
            held = getattr(self, attribute)
            if held:
                lines.append(f"    {attribute} {', '.join(sorted(held))}")
        lines += [f"    option {o.describe()}" for o in self.options]
        return "\n".join(lines)


@dataclass(frozen=True)
class ModulePass(Pass):
    """A pass over the whole module: define ``transform(module, context)``."""

    def transform(self, module: IRModule, context: PassContext) -> IRModule:
        raise PassError(f"pass {self.name} ({self.defined_at}) defines no transform")

    def apply(self, module: IRModule, context: PassContext) -> Any:
        return self.transform(module, context)


@dataclass(frozen=True)
class FunctionPass(Pass):
    """A pass applied to each global function: define
    ``transform_function(function, module, context)``. The module is
    rebuilt only when some function changed."""

    def transform_function(
        self, function: Function, module: IRModule, context: PassContext
    ) -> Function:
        raise PassError(f"pass {self.name} ({self.defined_at}) defines no transform_function")

    def apply(self, module: IRModule, context: PassContext) -> Any:
        functions = {
            name: self.transform_function(fn, module, context)
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


class Sequential(Pass):
    """Passes run in order; itself a pass (nestable). Members are passes,
    registered names (or pipeline text) or decorated functions. It requires
    of its input what a member requires that must come from the input (no
    earlier member establishes it, every earlier one ``preserves`` it, and
    the member has no ``prelude`` to make it), and establishes what its
    members establish and later members keep (establish again or preserve).
    Each member's own requirements are checked again when it runs."""

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
            needed = frozenset() if member.prelude else member.requires
            for invariant in needed & from_input:
                requires.setdefault(invariant, _requirer(member, invariant))
            from_input = (from_input & member.preserves) - member.establishes
            # what a member required (met, or it would not have run) and keeps holds after it
            assured = member.requires & member.preserves
            held = set(member.establishes | assured) | (held & member.preserves)
            kept &= member.establishes | member.preserves
        declared = {
            "name": name,
            "requires": frozenset(requires),
            "establishes": frozenset(held),
            "preserves": frozenset(kept),
            "doc": doc or "runs " + ",".join(m.spelled() for m in members),
            "defined_at": f"{__name__}.Sequential({name})",
            "passes": members,
            "requirers": requires,
            "_given": frozenset(),
        }
        for attribute, value in declared.items():
            object.__setattr__(self, attribute, value)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

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


PASSES: Registry[Pass] = Registry(Pass, Sequential)
"""Every pass by name (``registry.py``): the decorators register here."""
register_pass = PASSES.register
lookup_pass = PASSES.lookup
registered_passes = PASSES.registered
unregister_pass = PASSES.unregister


def _requirer(p: Pass, invariant: str) -> str:
    """The name of the (innermost) pass of ``p`` that requires ``invariant``."""
    return p.requirers.get(invariant, p.name) if isinstance(p, Sequential) else p.name


# Pipeline text is read by effir.passes.infra.pipeline, which builds on this module
# (it makes Sequentials of registered passes); it registers its reader here.
_PIPELINE_TEXT: list[Callable[[str, str], Sequential]] = []


def register_pipeline_reader(read: Callable[[str, str], Sequential]) -> None:
    """Let ``as_pass`` (and so ``Sequential``) and a pass's ``prelude`` read
    pipeline text with ``read(text, name)``."""
    _PIPELINE_TEXT[:] = [read]


def _read_pipeline(text: str, name: str) -> Sequential:
    if not _PIPELINE_TEXT:  # only before effir's own import is complete
        raise PassError(f"no reader of pipeline text is registered to read {name}: import effir")
    return _PIPELINE_TEXT[0](text, name)


def as_pass(item: Pass | str | Callable[..., Any]) -> Pass:
    """A pass from a pass, a registered name (or pipeline text), or a
    function a decorator made a pass."""
    if isinstance(item, Pass):
        return item
    if isinstance(item, str):
        if any(c in item for c in ",{") and _PIPELINE_TEXT:  # pipeline text
            passes = _PIPELINE_TEXT[0](item, "pipeline")
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
    requires: str | Iterable[str] = (),
    establishes: str | Iterable[str] = (),
    preserves: str | Iterable[str] = (),
    doc: str | None = None,
    options: Mapping[str, str | Option] | None = None,
    prelude: str = "",
    register: bool = True,
) -> Any:
    """Makes ``f(module[, context], **options) -> IRModule`` a ``ModulePass``
    class and registers it where it is defined; use as
    ``@module_pass(name="my-pass", requires=...)``.

    ``name`` defaults to the function's name in kebab-case, ``doc`` to the
    first line of its docstring; the parameters with defaults of an option
    type become the class's fields, its options; ``options`` documents
    them (``"text"`` or ``Option(doc, minimum=...)``). The function is
    returned unchanged (calling it runs it bare); its pass is
    ``f.effir_pass`` (or ``lookup_pass(name)``). ``register=False`` makes
    the pass without registering it (a throwaway pass, as in tests)."""
    declared = _Declared(name, requires, establishes, preserves, doc, options, prelude, register)
    return _decorator(transform, declared, _CallsModule)


def function_pass(
    transform: Callable[..., Any] | str | None = None,
    /,
    *,
    name: str | None = None,
    requires: str | Iterable[str] = (),
    establishes: str | Iterable[str] = (),
    preserves: str | Iterable[str] = (),
    doc: str | None = None,
    options: Mapping[str, str | Option] | None = None,
    prelude: str = "",
    register: bool = True,
) -> Any:
    """Makes ``f(function[, module[, context]], **options) -> Function``,
    applied to each global function, a ``FunctionPass`` class (as
    ``module_pass``)."""
    declared = _Declared(name, requires, establishes, preserves, doc, options, prelude, register)
    return _decorator(transform, declared, _CallsFunction)


@dataclass(frozen=True)
class _Declared:
    """What a decorator was given, its invariants as sets (``invariant_set``)."""

    name: str | None
    requires: str | Iterable[str]
    establishes: str | Iterable[str]
    preserves: str | Iterable[str]
    doc: str | None
    options: Mapping[str, str | Option] | None
    prelude: str
    register: bool

    def __post_init__(self) -> None:
        for attribute in INVARIANT_KINDS:
            object.__setattr__(self, attribute, invariant_set(getattr(self, attribute)))


@dataclass(frozen=True)
class _CallsModule(ModulePass):
    """The base of the classes ``@module_pass`` makes: calls the function."""

    function: ClassVar[Callable[..., Any]]
    slots: ClassVar[tuple[str, ...]] = ()  # what the positional parameters after the first get
    context_keyword: ClassVar[bool] = False

    def transform(self, module: IRModule, context: PassContext) -> IRModule:
        return _call(self, module, module, context)


@dataclass(frozen=True)
class _CallsFunction(FunctionPass):
    """The base of the classes ``@function_pass`` makes: calls the function."""

    function: ClassVar[Callable[..., Any]]
    slots: ClassVar[tuple[str, ...]] = ()
    context_keyword: ClassVar[bool] = False

    def transform_function(
        self, function: Function, module: IRModule, context: PassContext
    ) -> Function:
        return _call(self, function, module, context)


def _call(p: _CallsModule | _CallsFunction, first: Any, module: IRModule, context: Any) -> Any:
    given = {"module": module, "context": context}
    extra = tuple(given[slot] for slot in p.slots)
    keywords = {"context": context} if p.context_keyword else {}
    options = {o.name: getattr(p, o.name) for o in p.options}
    return type(p).function(first, *extra, **keywords, **options)


def _decorator(
    transform: Callable[..., Any] | str | None,
    declared: _Declared,
    base: type[_CallsModule] | type[_CallsFunction],
) -> Any:
    if isinstance(transform, str):  # @module_pass("name")
        declared, transform = replace(declared, name=transform), None

    def make(f: Callable[..., Any]) -> Callable[..., Any]:
        cls = pass_class_of(f, declared, base)
        p = cls()
        if declared.register:
            register_pass(p)
        try:
            f.effir_pass = p  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            if not declared.register:
                raise PassError(f"{_where(f)} cannot carry its pass: decorate a function") from None
        return f

    return make if transform is None else make(transform)


def pass_class_of(
    f: Callable[..., Any],
    declared: _Declared,
    base: type[_CallsModule] | type[_CallsFunction],
) -> type[Pass]:
    """The frozen dataclass a decorator makes of ``f``: one field per
    parameter with a default of an option type (after the module, or the
    function and the module); parameters named ``module`` or ``context``,
    and the others without a default in order, receive those."""
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):  # a builtin without a signature: f(module)
        signature = None
    try:
        hints = inspect.get_annotations(f, eval_str=True)
    except Exception:  # an annotation that does not resolve: use the defaults' types
        hints = {}
    per_function = issubclass(base, FunctionPass)
    slots = ["module", "context"] if per_function else ["context"]
    positional: list[str] = []
    keyword, fields = False, []
    params = list(signature.parameters.values())[1:] if signature is not None else []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        wanted = param.name if param.name in slots else None
        if wanted is None and param.default is param.empty:
            wanted = next((slot for slot in slots if slot not in positional), None)
            if wanted is None or param.kind == param.KEYWORD_ONLY:
                raise PassError(
                    f"{_where(f)}: parameter {param.name!r} needs a default to be an "
                    "option of the pass"
                )
        if wanted is not None:
            if param.kind == param.KEYWORD_ONLY:
                if wanted != "context":
                    raise PassError(f"{_where(f)}: {param.name!r} must be positional")
                keyword = True
            else:
                positional.append(wanted)
            continue
        kind = hints.get(param.name, type(param.default))
        if kind not in OPTION_TYPES:
            kind = type(param.default)
        if kind not in OPTION_TYPES:
            continue  # not an option: left at its default
        given = (declared.options or {}).get(param.name)
        spec = given if isinstance(given, Option) else Option(doc=given or "")
        metadata = {OPTION_KEY: spec}
        fields.append((param.name, kind, field(default=param.default, metadata=metadata)))
    unknown = set(declared.options or ()) - {name for name, _, _ in fields}
    if unknown:
        raise PassError(
            f"{_where(f)}: options= names {', '.join(sorted(unknown))}, which "
            "are not parameters with a default"
        )
    name = declared.name or getattr(f, "__name__", "pass").replace("_", "-")
    namespace = {
        "name": name,
        "doc": declared.doc if declared.doc is not None else first_line(f.__doc__),
        "requires": invariant_set(declared.requires),
        "establishes": invariant_set(declared.establishes),
        "preserves": invariant_set(declared.preserves),
        "prelude": declared.prelude,
        "defined_at": _where(f),
        "definition": staticmethod(f),  # a function, not a method of the pass
        "function": staticmethod(f),
        "slots": tuple(positional),
        "context_keyword": keyword,
        "__module__": getattr(f, "__module__", None) or __name__,
    }
    class_name = "".join(part.capitalize() for part in name.replace("_", "-").split("-"))
    return dataclasses.make_dataclass(
        (class_name or "Anonymous") + "Pass",
        fields,
        bases=(base,),
        namespace=namespace,
        frozen=True,
    )


# ---------------------------------------------------------------- instruments
class Instrument:
    """Hooks around each pass of a context; subclass it for your own.

    ``needs_changed``: whether ``after`` needs ``changed`` exactly, which
    costs a structural comparison of the whole program, about as much as a
    pass. When no instrument needs it, ``changed`` only says whether the pass
    returned a new module."""

    needs_changed: bool = True

    def enter_context(self, context: PassContext) -> None:
        """Called when ``context``, which holds this instrument, is entered
        (``with``); an exception leaves the context not entered."""

    def exit_context(self) -> None:
        """Called when the context that holds this instrument is left."""

    def should_run(self, p: Pass, module: IRModule) -> bool:
        """Whether ``p`` runs on ``module``: a pass any instrument refuses is
        skipped (its input goes on unchanged, and no ``before``/``after``
        is called). A sequence is never skipped whole: ask of its members."""
        return True

    def before(self, p: Pass, module: IRModule) -> None:
        pass

    def after(self, p: Pass, module: IRModule, changed: bool, seconds: float) -> None:
        pass


# ------------------------------------------------------------------- context
OPT_LEVELS = (0, 1, 2)
"""``opt_level`` selects a standard pipeline (effir.passes.infra.pipeline):
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

    @staticmethod
    def entered() -> bool:
        """Whether this thread has entered a context (``current()`` is then
        one the caller made, not a default one)."""
        return bool(_stack())

    def __enter__(self) -> PassContext:
        _stack().append(self)
        entered: list[Instrument] = []
        try:
            for instrument in self.instruments:
                instrument.enter_context(self)
                entered.append(instrument)
        except BaseException:  # the context is not entered: undo what was
            self._exit_instruments(entered)
            _stack().pop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stack = _stack()
        if stack and stack[-1] is self:
            stack.pop()
            self._exit_instruments(self.instruments)

    @staticmethod
    def _exit_instruments(instruments: list[Instrument]) -> None:
        """Each instrument's ``exit_context``, in reverse order; every one
        runs even when an earlier one raises (the first error is raised)."""
        failure: BaseException | None = None
        for instrument in reversed(instruments):
            try:
                instrument.exit_context()
            except BaseException as err:  # raised once all have run
                failure = failure or err
        if failure is not None:
            raise failure

    def run(self, p: Pass, module: IRModule) -> IRModule:
        """Run one pass: requirements, instruments, verification."""
        if not isinstance(module, IRModule):
            raise PassError(f"pass {p.name} was given a {type(module).__name__}, not an IRModule")
        if not isinstance(p, Sequential) and not all(
            i.should_run(p, module) for i in self.instruments
        ):
            return module
        if p.prelude and any(self._problem(i, module) is not None for i in p.requires):
            module = self.run(_read_pipeline(p.prelude, f"{p.name}'s prelude"), module)
        for invariant in sorted(p.requires):
            problem = self._problem(invariant, module)  # a verdict on this module is reused
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
            p = type(p)().with_options(**given).with_options(**own)
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
        check(module)  # raises the input's own located errors
        self._last["valid"] = (module, True)

    def _verify(self, p: Pass, before: IRModule, after: IRModule) -> None:
        """The output is well formed and well typed; a linear A2 input gives
        a linear output (key reuse the user wrote is the user's, not the
        pass's)."""
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
                span = definition_span(p.definition)  # the declaration: the decorator's line
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
