"""Passes as declared objects: a frozen dataclass whose fields are its
options and whose invariants are class variables checked at
registration; the explicit table of built-in passes; instruments that
skip passes and hear their context; a prelude that makes what a pass
requires."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import pytest

import effir
from effir.ir.expr import Function
from effir.ir.module import IRModule
from effir.transform import (
    BUILTIN_PASSES,
    FunctionPass,
    Instrument,
    ModulePass,
    PassContext,
    PassError,
    RegistrationError,
    Sequential,
    Timing,
    function_pass,
    lookup_pass,
    module_pass,
    option,
    pipeline,
    register_pass,
    registered_passes,
    unregister_pass,
)

A1 = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32]) {
  let %a = nn.dropout(%x, @rng);
  nn.dropout(add(%a, %a), @rng)
}
"""

SCALAR = """#[version = "0.0.5"]
def @main(%w: float32) -> float32 { multiply(%w, multiply(%w, %w)) }
"""


@dataclass(frozen=True)
class CountCalls(ModulePass):
    """Records how often it ran and with which options."""

    name = "count-calls"
    requires = {"anf"}
    preserves = {"anf", "a2"}

    times: int = option(1, "how often to count", minimum=1)
    label: str = "x"
    scale: float = 1.0

    def transform(self, module: IRModule, context: PassContext) -> IRModule:
        RUNS.append((self.times, self.label, self.scale))
        return module


RUNS: list[tuple[int, str, float]] = []


@pytest.fixture
def counting():
    RUNS.clear()
    register_pass(CountCalls)
    yield
    unregister_pass("count-calls")


def test_a_pass_class_takes_its_options_from_its_fields(counting):
    p = lookup_pass("count-calls")
    assert isinstance(p, CountCalls) and p.doc == "Records how often it ran and with which options."
    assert [(o.text_name, o.type, o.default) for o in p.options] == [
        ("times", int, 1),
        ("label", str, "x"),
        ("scale", float, 1.0),
    ]
    assert p.requires == {"anf"} and isinstance(CountCalls.requires, frozenset)
    module = effir.parse(SCALAR)
    seq = pipeline("to-anf,count-calls{times=3 label=y scale=2},count-calls")
    assert seq.spelled() == "to-anf,count-calls{times=3 label=y scale=2.0},count-calls"
    seq(module)
    assert RUNS == [(3, "y", 2.0), (1, "x", 1.0)]
    assert CountCalls(times=2).spelled() == "count-calls{times=2}"
    assert CountCalls(times=2) == lookup_pass("count-calls").with_options(times=2)
    # Pipeline text's errors are located, with the messages decorated passes give.
    with pytest.raises(PassError) as info:
        pipeline("count-calls{times=0}")
    assert info.value.message == "option times of pass count-calls: must be at least 1, got 0"
    assert info.value.column == 19
    with pytest.raises(PassError, match="has no option 'tims' \\(its options: times, label, scale"):
        pipeline("count-calls{tims=2}")
    with pytest.raises(PassError, match="option times of pass count-calls: expected int, got 'a'"):
        CountCalls(times="a")


def test_a_context_gives_a_pass_class_its_options_under_the_texts(counting):
    module = pipeline("to-anf")(effir.parse(SCALAR))
    with PassContext(options={"count-calls": {"times": 5, "label": "ctx"}}):
        pipeline("count-calls{label=text}")(module)
    assert RUNS == [(5, "text", 1.0)]


@dataclass(frozen=True)
class KeepFunctions(FunctionPass):
    name = "keep-functions"
    preserves = {"anf", "a2", "bbnf"}

    def transform_function(
        self, function: Function, module: IRModule, context: PassContext
    ) -> Function:
        return function


def test_a_function_pass_class_keeps_an_unchanged_module():
    module = effir.parse(SCALAR)
    assert KeepFunctions()(module) is module


def _refused(cls: type, match: str) -> None:
    with pytest.raises(RegistrationError, match=match):
        register_pass(cls)
    assert cls.name not in registered_passes()


def test_registration_checks_what_a_pass_declares():
    @dataclass(frozen=True)
    class NeedsAndMakes(ModulePass):
        name = "needs-and-makes"
        requires = {"anf"}
        establishes = {"anf", "a2"}

    _refused(NeedsAndMakes, "both requires and establishes anf: .* preserves it")

    @dataclass(frozen=True)
    class MakesAndKeeps(ModulePass):
        name = "makes-and-keeps"
        establishes = {"bbnf"}
        preserves = {"bbnf"}

    _refused(MakesAndKeeps, "both establishes and preserves bbnf")

    @dataclass(frozen=True)
    class Unknown(ModulePass):
        name = "unknown-invariant"
        preserves = {"sorted"}

    _refused(Unknown, "unknown invariant 'sorted' \\(known: a2, anf, bbnf, gnf\\)")

    class NotFrozen(ModulePass):
        name = "not-frozen"

    _refused(NotFrozen, "must be a @dataclass\\(frozen=True\\)")

    @dataclass(frozen=True)
    class NoDefault(ModulePass):
        name = "no-default"
        level: int

    with pytest.raises(TypeError):  # the dataclass cannot even be made without the option
        NoDefault()

    @dataclass(frozen=True)
    class ListOption(ModulePass):
        name = "list-option"
        items: tuple = ()

    _refused(ListOption, "option items is a tuple; an option is one of bool, int, float or str")

    @dataclass(frozen=True)
    class Nameless(ModulePass):
        pass

    _refused(Nameless, "a pass class needs a name")

    @dataclass(frozen=True)
    class PreludeForNothing(ModulePass):
        name = "prelude-for-nothing"
        prelude = "to-anf"

    _refused(PreludeForNothing, "has a prelude but requires nothing")


def test_a_string_declares_one_invariant_in_a_decorator_as_in_a_class():
    """``requires="anf"`` names the invariant anf, not the letters a, n, f:
    the decorators read a string as a class variable does."""

    @module_pass(name="string-needs-anf", requires="anf", preserves="anf", register=False)
    def needs_anf(module):
        return module

    @function_pass(name="string-makes-anf", establishes="anf", register=False)
    def makes_anf(function):
        return function

    @dataclass(frozen=True)
    class StringKeeps(ModulePass):
        name = "string-keeps"
        requires = "anf"
        preserves = "anf"

    for p in (needs_anf.effir_pass, StringKeeps()):
        assert (p.requires, p.establishes, p.preserves) == ({"anf"}, frozenset(), {"anf"})
    assert makes_anf.effir_pass.establishes == {"anf"}
    nested = effir.parse(SCALAR)
    with pytest.raises(PassError, match="pass string-needs-anf requires A-normal form: "):
        needs_anf.effir_pass(nested)
    flat = pipeline("to-anf")(nested)
    assert needs_anf.effir_pass(flat) is flat
    with pytest.raises(RegistrationError, match="unknown invariant 'anf,a2'"):
        module_pass(name="string-two", requires="anf,a2")(lambda module: module)
    assert "string-two" not in registered_passes()


def test_every_built_in_pass_is_in_the_table_and_the_table_is_true():
    """The table names each built-in pass's definition; importing every
    module that defines passes registers none the table does not list."""
    for name, where in BUILTIN_PASSES.items():
        module_name, _, attribute = where.partition(":")
        definition = getattr(importlib.import_module(module_name), attribute)
        p = lookup_pass(name)
        assert p.name == name and p.definition is definition, name
    for package in ("effir.passes", "effir.autodiff"):
        paths = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(paths, package + "."):
            importlib.import_module(info.name)
    built_in = {n for n, p in registered_passes().items() if p.defined_at.startswith("effir.")}
    assert built_in == set(BUILTIN_PASSES)


def test_every_built_in_pass_declares_what_it_preserves():
    kept_nothing = {n for n, p in registered_passes().items() if n in BUILTIN_PASSES}
    kept_nothing = {n for n in kept_nothing if not lookup_pass(n).preserves}
    assert kept_nothing == {"state-passing"}  # it rebuilds what touches state
    assert pipeline("O2").establishes == {"anf", "a2"}


class Skip(Instrument):
    """Skips the passes named, and records its context's entries and exits."""

    needs_changed = False

    def __init__(self, *names: str) -> None:
        self.names = names
        self.events: list[str] = []

    def enter_context(self, context: PassContext) -> None:
        self.events.append(f"enter {context.opt_level}")

    def exit_context(self) -> None:
        self.events.append("exit")

    def should_run(self, p, module) -> bool:
        return p.name not in self.names

    def after(self, p, module, changed, seconds) -> None:
        self.events.append(p.name)


def test_an_instrument_may_skip_a_pass_and_hears_its_context():
    skip, timing = Skip("dce"), Timing()
    with PassContext(opt_level=1, instruments=[skip, timing]):
        out = pipeline("to-anf,dce,cse")(effir.parse(SCALAR))
    assert skip.events == ["enter 1", "to-anf", "cse", "exit"]
    assert [n for n, _ in timing.records] == ["to-anf", "cse"]  # a skipped pass is not timed
    assert effir.interpret(out, 2.0) == 8.0


def test_an_instrument_that_fails_to_enter_leaves_the_context_not_entered():
    class Refuses(Instrument):
        def enter_context(self, context: PassContext) -> None:
            raise RuntimeError("no")

    first = Skip()
    context = PassContext(instruments=[first, Refuses()])
    with pytest.raises(RuntimeError, match="no"):
        context.__enter__()
    assert PassContext.current() is not context
    assert first.events == ["enter 2", "exit"]  # what was entered is exited again


def test_grad_names_its_prelude_and_the_context_runs_it():
    grad = lookup_pass("grad")
    assert grad.requires == {"anf", "a2"} and grad.prelude == "to-anf,explicate,state-passing"
    assert Sequential([grad]).requires == frozenset()  # the prelude makes them from any input
    timing = Timing()
    out = grad.with_options(wrt="x", value=False)(
        effir.parse(A1), PassContext(instruments=[timing])
    )
    assert [n for n, _ in timing.records] == ["to-anf", "explicate", "state-passing", "grad"]
    assert "main_grad" in out.functions
    # An input that already is A2 and in A-normal form runs no prelude.
    timing.records.clear()
    a2 = pipeline("state-passing")(effir.parse(A1))
    grad.with_options(wrt="x", value=False)(a2, PassContext(instruments=[timing]))
    assert [n for n, _ in timing.records] == ["grad"]


def test_a_sequence_is_registrable_under_its_name():
    effects = Sequential(["explicate", "state-passing"], name="my-effects")
    register_pass(effects)
    try:
        assert lookup_pass("my-effects") is effects
        out = pipeline("my-effects,split-keys")(effir.parse(A1))
        assert effir.transform.INVARIANTS["a2"](out) is None
    finally:
        unregister_pass("my-effects")


def test_a_pass_class_used_wrongly_is_a_pass_error_not_a_python_one():
    @dataclass(frozen=True)
    class Forgot(ModulePass):
        name = "forgot"

    with pytest.raises(PassError, match="pass forgot \\(.*Forgot\\) defines no transform"):
        Forgot()(effir.parse(SCALAR))

    @dataclass(frozen=True)
    class ListOption(ModulePass):
        name = "list-option"
        items: tuple = ()

    with pytest.raises(PassError, match="option items is a tuple; an option is one of bool"):
        ListOption()
