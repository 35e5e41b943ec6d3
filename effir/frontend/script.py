"""``@effir.script``: converts a Python function's AST into effir.

The converter walks the statements once, keeping an environment from Python
names to values (effir expressions, Python constants, tuples), and builds
through the shared builder (builder.py), so every operator call is bound in
program order and carries the span of its Python expression. Control flow:

- ``if``/``elif``/``else`` becomes an ``if`` expression returning the names
  its branches assign that are live after it (liveness.py); an ``if`` whose
  branches ``return`` takes the rest of the block into each branch;
- ``for x in xs`` / ``for i in range(n)`` becomes ``cf.foreach`` (over
  ``arange(n)`` for a constant ``n``) and ``while`` (or a range with a
  run-time bound) ``cf.while_loop``, their state the carried variables and
  their outputs the lists built with ``.append``;
- calls of other scripted functions become calls of globals (recursion
  included), nested ``def``/``lambda`` closures, ``print`` ``debug.print``.

Anything else raises ``effir.FrontendError`` at the Python line and column
with a hint (docs/frontend.md lists them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends.interpreter import interpret
from ..ir.diagnostics import FrontendError
from ..ir.expr import GlobalVar
from ..ir.module import IRModule
from . import builder as B
from . import eager
from .module_builder import ModuleBuilder
from .script_convert import Converter
from .script_values import GlobalCallable


class ScriptFunction:
    """A Python function with its effir conversion. Calling it runs the
    Python function (eagerly, on numpy arrays); ``.module`` is the converted
    module (``@name`` plus the scripted functions it calls and the cells it
    uses), ``.interpret(*args)`` runs it through effir's interpreter."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._module: IRModule | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eagerly, the Python function; while a function is being built
        (``effir.trace``, the builder), a call of ``@name``."""
        if B.building() and not kwargs:
            return B.call_module_function(self.module, self.name, args)
        return eager.run(self.fn, args, kwargs)

    @property
    def module(self) -> IRModule:
        if self._module is None:
            self._module = convert_module(self)
        return self._module

    def __effir_program__(self) -> tuple[IRModule, str]:
        """The module and its entry, ``@name``: ``effir.compile(f)``,
        ``effir.interpret(f, ...)`` and ``effir.value_and_grad(f)`` take the
        function itself (ir/program.py)."""
        return self.module, self.name

    def interpret(self, *args: Any, **kwargs: Any) -> Any:
        return interpret(self.module, *args, entry=self.name, **kwargs)

    def __repr__(self) -> str:
        return f"<effir.script {self.name}>"


def script(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """``@effir.script``: convert a Python function to effir (lazily, on the
    first use of ``.module``). See docs/frontend.md for the subset."""
    if fn is None:
        return lambda f: ScriptFunction(f, name)
    return ScriptFunction(fn, name)


def convert_module(entry: ScriptFunction) -> IRModule:
    """``entry`` and every scripted function it reaches, as one module."""
    mb = ModuleBuilder()
    context = ModuleContext()
    context.need(entry)
    while context.pending:
        sf = context.pending.pop()
        converter = Converter(sf, context)
        fn, cells = converter.convert()
        mb.add_function(sf.name, fn)
        mb.add_cells_of(cells)
        mb.add_type_defs(converter.adts)
    return mb.get()


class ModuleContext:
    def __init__(self) -> None:
        self.known: dict[str, ScriptFunction] = {}
        self.pending: list[ScriptFunction] = []

    def need(self, sf: ScriptFunction) -> GlobalVar:
        other = self.known.get(sf.name)
        if other is None:
            self.known[sf.name] = sf
            self.pending.append(sf)
        elif other is not sf:
            raise FrontendError(
                f"two scripted functions are named {sf.name}",
                hint="give one another name with @effir.script(name=...)",
            )
        return GlobalVar(sf.name)

    def called(self, value: Any) -> GlobalCallable | None:
        """A scripted function read by converted code, as a global of the
        module (converted in turn); None for any other value."""
        return (
            GlobalCallable(self.need(value), value) if isinstance(value, ScriptFunction) else None
        )
