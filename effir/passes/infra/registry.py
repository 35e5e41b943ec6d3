"""The registry of passes by name, and its table of the built-in passes.

``BUILTIN_PASSES`` lists every built-in pass, by name, with the
definition that makes it (``module:attribute``, a decorated function or a
pass class): one table to read, instead of registration scattered across
imports. A look-up of a built-in name imports only its module; the
registry registers a pass class there itself, and a decorated function has
registered its own pass when its module was imported (the decorator is
sugar for that). ``tests/passes/test_registry_table.py`` checks that the
table and the definitions agree.

``register_pass`` checks what a pass declares before it takes it: known
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
from typing import TYPE_CHECKING, Any

from effir.ir.diagnostics import PassError
from effir.passes.infra.invariants import INVARIANTS
from effir.passes.infra.options import options_of

if TYPE_CHECKING:
    from effir.passes.infra.transform import Pass


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

_REGISTRY: dict[str, Pass] = {}
_registry_lock = threading.RLock()
_PASS_CLASSES: dict[str, type] = {}
"""``Pass`` and ``Sequential``, given by transform.py (``register_pass_classes``),
which builds on this module and so cannot be imported by it."""


def register_pass_classes(base: type, sequential: type) -> None:
    """Tell the registry the classes of passes it checks declarations against."""
    _PASS_CLASSES.update(base=base, sequential=sequential)


def register_pass(p: Any) -> Any:
    """Register a pass (an instance, or a pass class: its instance with the
    default options) under its name, once its declaration is checked (see
    the module's docstring). Returns ``p``, so that it decorates a class."""
    cls = p if isinstance(p, type) else type(p)
    if not issubclass(cls, _PASS_CLASSES["base"]):
        raise RegistrationError(f"{p!r} is not a pass: give a Pass subclass or instance")
    _check_declaration(p)
    made = p() if isinstance(p, type) else p
    with _registry_lock:
        known = _REGISTRY.get(made.name)
        if known is not None and known.defined_at != made.defined_at:
            raise RegistrationError(
                f"pass {made.name} is already registered, by {known.defined_at}; "
                f"{made.defined_at} defines another pass of that name"
            )
        _REGISTRY[made.name] = made
    return p


def _check_declaration(p: type[Pass] | Pass) -> None:
    """What the pass class ``p`` declares (or a ``Sequential``, the pass
    ``p``) is consistent (the module's docstring)."""
    cls = p if isinstance(p, type) else type(p)
    where = f"pass {p.name or '?'} ({p.defined_at})"
    if not p.name:
        raise RegistrationError(f"{where}: a pass class needs a name (a class variable)")
    params = cls.__dict__.get("__dataclass_params__")
    if not isinstance(p, _PASS_CLASSES["sequential"]) and (params is None or not params.frozen):
        raise RegistrationError(f"{where}: a pass class must be a @dataclass(frozen=True)")
    for attribute in ("requires", "establishes", "preserves"):
        for invariant in getattr(p, attribute):
            if invariant not in INVARIANTS:
                raise RegistrationError(
                    f"pass {p.name}: unknown invariant {invariant!r} (known: "
                    + ", ".join(sorted(INVARIANTS))
                    + ")"
                )
    if isinstance(p, _PASS_CLASSES["sequential"]):
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


def unregister_pass(name: str) -> None:
    """Remove a registered pass (a test's, a notebook's)."""
    with _registry_lock:
        _REGISTRY.pop(name, None)


def _load_builtin(name: str) -> None:
    """Make the built-in pass ``name`` registered: import the module that
    defines it, and register it there if it is a class (a decorated
    function registered its pass as its module was imported)."""
    module_name, _, attribute = BUILTIN_PASSES[name].partition(":")
    definition = getattr(importlib.import_module(module_name), attribute)
    if isinstance(definition, type) and issubclass(definition, _PASS_CLASSES["base"]):
        with _registry_lock:
            if name not in _REGISTRY:
                register_pass(definition)


def registered_passes() -> dict[str, Pass]:
    """Every registered pass by name, the built-in ones included."""
    for name in BUILTIN_PASSES:
        if name not in _REGISTRY:
            _load_builtin(name)
    with _registry_lock:
        return dict(sorted(_REGISTRY.items()))


def lookup_pass(name: str) -> Pass:
    """The pass registered as ``name``; PassError lists the known ones."""
    if name in BUILTIN_PASSES and name not in _REGISTRY:
        _load_builtin(name)
    with _registry_lock:
        found = _REGISTRY.get(name)
    if found is None:
        known = ", ".join(sorted(set(_REGISTRY) | set(BUILTIN_PASSES)))
        raise PassError(f"unknown pass {name!r} (known passes: {known})")
    return found


__all__ = [
    "BUILTIN_PASSES",
    "RegistrationError",
    "lookup_pass",
    "register_pass",
    "register_pass_classes",
    "registered_passes",
    "unregister_pass",
]
