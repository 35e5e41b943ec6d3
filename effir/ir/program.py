"""What the API's entry points take as a program: a module, or a function.

``effir.interpret``, ``effir.compile``, ``effir.grad`` and
``effir.value_and_grad`` run or transform one function of a module, their
*entry*. A user who wrote ``@effir.script def decode(...)`` holds a
function, not a module, and expects to hand it over as ``jax.jit(f)``
takes ``f``: anything with a ``__effir_program__()`` method (the
frontends' ``ScriptFunction`` and ``TracedFunction``, and ``Program``,
what ``effir.value_and_grad`` gives for a function) is accepted as the
module it returns, with its own function as the default entry. A module's
default entry is ``@main``. The protocol keeps this layer free of the
frontends: they implement the method, nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .diagnostics import Error
from .module import IRModule

DEFAULT_ENTRY = "main"
"""A module's entry when none is named."""


@dataclass(frozen=True)
class Program:
    """A module and the function of it to run: what ``effir.grad`` and
    ``effir.value_and_grad`` give for a function (``@f_grad``), so that
    ``effir.compile(effir.value_and_grad(f))`` runs the gradient."""

    module: IRModule
    entry: str

    @property
    def name(self) -> str:
        """The entry's name (as a scripted function's ``.name``)."""
        return self.entry

    def __effir_program__(self) -> tuple[IRModule, str]:
        return self.module, self.entry

    def __str__(self) -> str:
        return str(self.module)

    def __repr__(self) -> str:
        return f"<effir.Program @{self.entry} of {self.module!r}>"


def is_program(value: Any) -> bool:
    """Whether ``value`` is a module or something that gives one."""
    return isinstance(value, IRModule) or hasattr(type(value), "__effir_program__")


def resolve(program: Any, entry: str | None, error: type[Error], what: str) -> tuple[IRModule, str]:
    """The module ``program`` stands for and the entry to use: ``entry``
    when given (``"@f"`` or ``"f"``), else the program's own (a function's
    name, a module's ``@main``). ``error`` (the caller's error class) for
    something that is not a program, or an entry the module does not
    define: the message lists the functions it does define and says that
    ``entry=`` names one. ``what`` names the caller (``effir.compile``)."""
    method = getattr(type(program), "__effir_program__", None)
    if isinstance(program, IRModule):
        module, own = program, DEFAULT_ENTRY
    elif method is not None:
        module, own = method(program)
    else:
        raise error(
            f"{what} takes an effir.IRModule or a function made by @effir.script or "
            f"effir.trace, not {type(program).__name__}"
        )
    if entry is not None and not isinstance(entry, str):
        raise error(f"entry= names a function of the program, not {type(entry).__name__}")
    name = (own if entry is None else entry).removeprefix("@")
    if name not in module.functions:
        raise error(missing_entry(module.functions, name))
    return module, name


def missing_entry(functions: Iterable[str], name: str) -> str:
    """The message for an entry ``@name`` that is not among ``functions``:
    one wording for the interpreter, compiled code and loaded artifacts."""
    known = ", ".join("@" + n for n in functions) or "none"
    return (
        f"the program has no function @{name} (its functions: {known}); "
        "entry= names the function to run"
    )


__all__ = ["DEFAULT_ENTRY", "Program", "is_program", "missing_entry", "resolve"]
