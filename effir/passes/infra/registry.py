"""The registry of passes by name, and its table of the built-in passes.

``BUILTIN_PASSES`` lists every built-in pass, by name, with the
definition that makes it (``module:attribute``, a decorated function or a
pass class): one table to read, instead of registration scattered across
imports. A look-up of a built-in name imports only its module; the
registry registers a pass class there itself, and a decorated function has
registered its own pass when its module was imported (the decorator is
sugar for that). ``tests/passes/test_pass_objects.py`` checks that the
table and the definitions agree.

The registry is a ``Registry`` of the pass class it is given: the class
``Pass`` builds on this module (its decorators register), so the one
registry is made in ``transform.py``, which exports its methods as
``register_pass``, ``lookup_pass``, ``registered_passes`` and
``unregister_pass``. ``register_pass`` checks what a pass declares before it takes it: known
invariants; nothing both required and established (a pass that needs an
invariant and keeps it ``preserves`` it); nothing both established and
preserved; a frozen dataclass whose fields are options of an option type
with a default. Registering a name again from the same definition (a
module and a qualified name: a re-run notebook cell, a reloaded module)
replaces it; from a different one is an error that names both.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Any, Generic, Protocol, TypeVar

from effir.ir.diagnostics import PassError
from effir.passes.infra.invariants import INVARIANTS
from effir.passes.infra.options import options_of


class Declared(Protocol):
    """What the registry reads of a pass: its name, where it is defined and
    what it declares. ``transform.Pass`` is one; it builds on this module
    (its decorators register), so this module names it by what it reads."""

    @property
    def name(self) -> str: ...
    @property
    def defined_at(self) -> str: ...
    @property
    def requires(self) -> frozenset[str]: ...
    @property
    def establishes(self) -> frozenset[str]: ...
    @property
    def preserves(self) -> frozenset[str]: ...
    @property
    def prelude(self) -> str: ...


P = TypeVar("P", bound=Declared)
T = TypeVar("T")


class RegistrationError(PassError, ValueError):
    """A pass whose declaration is wrong, or two definitions of one name."""


BUILTIN_PASSES: dict[str, str] = {
    "cse": "effir.passes.transforms.cse:cse",
    "dce": "effir.passes.transforms.dce:dce",
    "explicate": "effir.passes.transforms.explicate:explicate",
    "fold-constant": "effir.passes.transforms.fold_constant:fold_constant",
    "fuse": "effir.passes.transforms.fuse:fuse",
    "grad": "effir.autodiff.api:grad_pass",
    "lower-tvm": "effir.backends.tvm.driver.passes:lower_tvm",
    "partial-eval": "effir.passes.transforms.partial_eval:partial_eval",
    "simplify": "effir.passes.transforms.simplify:simplify",
    "specialise-dims": "effir.passes.transforms.specialise_dims:specialise_dims_pass",
    "specialise-function-arguments": "effir.autodiff.specialise:specialise_function_arguments",
    "split-keys": "effir.passes.transforms.split_keys:split_keys",
    "state-passing": "effir.passes.transforms.state_passing:state_passing",
    "to-anf": "effir.passes.transforms.anf:to_anf",
    "to-bbnf": "effir.passes.transforms.to_bbnf:to_bbnf",
    "to-gnf": "effir.passes.transforms.to_gnf:to_gnf",
}
"""Every built-in pass: its name and its definition, ``module:attribute``.
The modules of the TVM backend import TVM only when their pass runs, so
listing the passes imports no TVM."""


class Registry(Generic[P]):
    """The passes of the class ``base`` by name, the built-in ones imported
    at their first look-up. ``transform.py`` makes the one registry of
    ``Pass`` (``Sequential``: a pass whose declaration its members derive)
    and exports its methods as ``register_pass``, ``lookup_pass``,
    ``registered_passes`` and ``unregister_pass``."""

    def __init__(self, base: type[P], sequential: type[P]) -> None:
        self._base = base
        self._sequential = sequential
        self._passes: dict[str, P] = {}
        self._lock = threading.RLock()

    def register(self, p: T) -> T:
        """Register a pass (an instance, or a pass class: its instance with
        the default options) under its name, once its declaration is checked
        (see the module's docstring). Returns ``p``, so that it decorates a
        class."""
        cls = p if isinstance(p, type) else type(p)
        if not issubclass(cls, self._base):
            raise RegistrationError(f"{p!r} is not a pass: give a Pass subclass or instance")
        self._check_declaration(p)
        made: P = p() if isinstance(p, type) else p  # type: ignore[assignment]
        with self._lock:
            known = self._passes.get(made.name)
            if known is not None and known.defined_at != made.defined_at:
                raise RegistrationError(
                    f"pass {made.name} is already registered, by {known.defined_at}; "
                    f"{made.defined_at} defines another pass of that name"
                )
            self._passes[made.name] = made
        return p

    def _check_declaration(self, p: Any) -> None:
        """What the pass class ``p`` declares (or a ``Sequential``, the pass
        ``p``) is consistent (the module's docstring), before an instance is
        made (a wrong option would fail there without naming the pass)."""
        cls = p if isinstance(p, type) else type(p)
        where = f"pass {p.name or '?'} ({p.defined_at})"
        if not p.name:
            raise RegistrationError(f"{where}: a pass class needs a name (a class variable)")
        params = cls.__dict__.get("__dataclass_params__")
        sequence = isinstance(p, self._sequential)
        if not sequence and (params is None or not params.frozen):
            raise RegistrationError(f"{where}: a pass class must be a @dataclass(frozen=True)")
        for attribute in ("requires", "establishes", "preserves"):
            for invariant in getattr(p, attribute):
                if invariant not in INVARIANTS:
                    raise RegistrationError(
                        f"pass {p.name}: unknown invariant {invariant!r} (known: "
                        + ", ".join(sorted(INVARIANTS))
                        + ")"
                    )
        if sequence:
            return  # derived from its members, each checked when it was made
        both = sorted(p.requires & p.establishes)
        if both:
            raise RegistrationError(
                f"{where} both requires and establishes {', '.join(both)}: a pass that needs "
                "an invariant and keeps it declares that it preserves it"
            )
        both = sorted(p.establishes & p.preserves)
        if both:
            raise RegistrationError(
                f"{where} both establishes and preserves {', '.join(both)}: say one"
            )
        try:
            options_of(cls)
        except TypeError as err:
            raise RegistrationError(f"{where}: {err}") from None
        if p.prelude and not p.requires:
            raise RegistrationError(f"{where} has a prelude but requires nothing for it to make")
        fields = [f.name for f in dataclasses.fields(cls) if f.init]
        for name in ("name", "requires", "establishes", "preserves", "prelude", "doc"):
            if name in fields:
                raise RegistrationError(f"{where}: {name} is a class variable, not an option")

    def unregister(self, name: str) -> None:
        """Remove a registered pass (a test's, a notebook's)."""
        with self._lock:
            self._passes.pop(name, None)

    def _load_builtin(self, name: str) -> None:
        """Make the built-in pass ``name`` registered: import the module that
        defines it, and register it there if it is a class (a decorated
        function registered its pass as its module was imported)."""
        module_name, _, attribute = BUILTIN_PASSES[name].partition(":")
        definition = getattr(importlib.import_module(module_name), attribute)
        if isinstance(definition, type) and issubclass(definition, self._base):
            with self._lock:
                if name not in self._passes:
                    self.register(definition)

    def registered(self) -> dict[str, P]:
        """Every registered pass by name, the built-in ones included."""
        for name in BUILTIN_PASSES:
            if name not in self._passes:
                self._load_builtin(name)
        with self._lock:
            return dict(sorted(self._passes.items()))

    def lookup(self, name: str) -> P:
        """The pass registered as ``name``; PassError lists the known ones."""
        if name in BUILTIN_PASSES and name not in self._passes:
            self._load_builtin(name)
        with self._lock:
            found = self._passes.get(name)
        if found is None:
            known = ", ".join(sorted(set(self._passes) | set(BUILTIN_PASSES)))
            raise PassError(f"unknown pass {name!r} (known passes: {known})")
        return found


__all__ = ["BUILTIN_PASSES", "Declared", "RegistrationError", "Registry"]
