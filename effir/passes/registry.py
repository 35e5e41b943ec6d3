"""The registry of passes by name: ``register_pass`` (which the
decorators of ``effir.passes.infra`` call where each pass is defined),
``lookup_pass`` and ``registered_passes``, which import the built-in
passes' modules on the first look-up."""

from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import TYPE_CHECKING

from ..ir.diagnostics import PassError
from .invariants import INVARIANTS

if TYPE_CHECKING:
    from .infra import Pass


class RegistrationError(PassError, ValueError):
    """Two different definitions of one pass name, or an unknown invariant."""


_REGISTRY: dict[str, Pass] = {}
_registry_lock = threading.RLock()
_loaded = False
_loading = False

BUILTIN_PASS_PACKAGES = ("effir.passes",)
"""Packages whose modules define the built-in passes (each registers its
own where it is defined)."""

BUILTIN_PASS_MODULES: list[str] = []
"""Modules above this layer that define passes, each named by the layer
that owns it (``register_pass_module``): the backends name the TVM
backend's (lower-tvm, which imports TVM only when it runs)."""


def register_pass_module(name: str) -> None:
    """Have the registry import module ``name`` (which registers passes) at
    its first look-up: how a layer above passes adds its passes without the
    registry naming it."""
    with _registry_lock:
        if name not in BUILTIN_PASS_MODULES:
            BUILTIN_PASS_MODULES.append(name)
        if _loaded:
            importlib.import_module(name)


def register_pass(p: Pass) -> Pass:
    """Register a pass under its name. Registering the name again from the
    same definition (a module and a qualified name: a re-run notebook
    cell, a reloaded module) replaces it; from a different one is an error
    that names both."""
    for invariant in p.requires | p.establishes | p.preserves:
        if invariant not in INVARIANTS:
            raise RegistrationError(
                f"pass {p.name}: unknown invariant {invariant!r} (known: "
                + ", ".join(sorted(INVARIANTS))
                + ")"
            )
    with _registry_lock:
        known = _REGISTRY.get(p.name)
        if known is not None and known.defined_at != p.defined_at:
            raise RegistrationError(
                f"pass {p.name} is already registered, by {known.defined_at}; "
                f"{p.defined_at} defines another pass of that name"
            )
        _REGISTRY[p.name] = p
    return p


def unregister_pass(name: str) -> None:
    """Remove a registered pass (a test's, a notebook's)."""
    with _registry_lock:
        _REGISTRY.pop(name, None)


def _load_builtins() -> None:
    """Import the modules that define the built-in passes, once (a look-up
    made while they are imported sees what is registered so far)."""
    global _loaded, _loading
    if _loaded:
        return
    with _registry_lock:  # another thread waits here until the modules are in
        if _loaded or _loading:  # _loading: this thread, importing them
            return
        _loading = True
        try:
            names = list(BUILTIN_PASS_MODULES)
            for package in BUILTIN_PASS_PACKAGES:
                paths = importlib.import_module(package).__path__
                names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(paths)]
            for name in sorted(names):
                importlib.import_module(name)
            _loaded = True
        finally:
            _loading = False


def registered_passes() -> dict[str, Pass]:
    """Every registered pass by name, the built-in ones included."""
    _load_builtins()
    with _registry_lock:
        return dict(sorted(_REGISTRY.items()))


def lookup_pass(name: str) -> Pass:
    """The pass registered as ``name``; PassError lists the known ones."""
    _load_builtins()
    with _registry_lock:
        found = _REGISTRY.get(name)
    if found is None:
        known = ", ".join(sorted(_REGISTRY))
        raise PassError(f"unknown pass {name!r} (known passes: {known})")
    return found


get_pass = lookup_pass


__all__ = [
    "BUILTIN_PASS_MODULES",
    "register_pass_module",
    "BUILTIN_PASS_PACKAGES",
    "RegistrationError",
    "get_pass",
    "lookup_pass",
    "register_pass",
    "registered_passes",
    "unregister_pass",
]
