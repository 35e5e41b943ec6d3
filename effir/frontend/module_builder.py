"""``effir.ModuleBuilder``: a module of functions built with the builder,
the state cells they read and the definitions of the types they use."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from ..backends.interpreter import State
from ..ir.diagnostics import FrontendError
from ..ir.expr import Function, GlobalCell, GlobalVar, TypeData, Var
from ..ir.module import IRModule
from .adts import type_defs_for
from .blocks import NotedCell, _Root
from .builder import _block, _close, emit
from .spans import current_span
from .values import Cell, as_type, to_expr


class ModuleBuilder:
    """Builds an ``IRModule``: global functions, ``emit``-ed let-chains and
    state cells.

    >>> mb = ModuleBuilder()
    >>> rng = mb.add_cell("rng", effir.random.key(0))
    >>> x = effir.var("x", effir.Tensor[(4,), "float32"])
    >>> with mb.function("main", [x]):
    ...     mb.ret(effir.op.nn.dropout(x, rng, rate=0.5))
    """

    def __init__(self) -> None:
        self._functions: dict[str, Function] = {}
        self._cells: dict[str, NotedCell] = {}
        self._other_functions: dict[str, Function] = {}
        self._declarations: dict[str, GlobalCell] = {}
        self._adts: dict[str, TypeData] = {}
        self._ret: list[Any] = []

    def add_cell(self, name: str, value: Any, type: Any = None) -> Cell:
        """Declare ``@name`` holding ``value`` (no ``RefCreate`` needed)."""
        made = value if isinstance(value, Cell) else Cell(name, value, type)
        self._cells[name] = made
        return made

    def add_function(self, name: str, fn: Function) -> GlobalVar:
        self._functions[name] = fn
        return GlobalVar(name, span=current_span())

    def global_var(self, name: str) -> GlobalVar:
        """``@name``, for calls to a function defined (or to be defined) here."""
        return GlobalVar(name, span=current_span())

    @contextlib.contextmanager
    def function(
        self, name: str, params: list[Var] | tuple[Var, ...] = (), ret_type: Any = None
    ) -> Iterator[ModuleBuilder]:
        """Build ``@name``: ``emit`` and operators inside bind in order, and
        ``ret(value)`` gives the result."""
        span = current_span()
        with _block(new_root=True) as block:
            for p in params:
                block.root.names.add(p.name_hint)
            self._ret.append(_NO_RESULT)
            try:
                yield self
                result = self._ret[-1]
            finally:
                self._ret.pop()
            if result is _NO_RESULT:
                raise FrontendError(f"@{name} has no result", span, hint="call builder.ret(value)")
            body = _close(block, to_expr(result))
            self._cells.update(block.root.cells)
            self.add_globals(block.root)
        self._functions[name] = Function(
            tuple(params), body, as_type(ret_type) if ret_type is not None else None, span=span
        )

    def emit(self, value: Any, name: str | None = None) -> Any:
        return emit(value, name)

    def ret(self, value: Any) -> None:
        if not self._ret:
            raise FrontendError("ret outside builder.function(...)", current_span())
        self._ret[-1] = value

    def add_cells_of(self, cells: Mapping[str, NotedCell]) -> None:
        self._cells.update(cells)

    def add_globals(self, root: _Root) -> None:
        """The globals of the scripted/traced functions a built one calls,
        and the types it uses."""
        self._other_functions.update(root.functions)
        self._declarations.update(root.declarations)
        self._adts.update(root.adts)

    def add_type_defs(self, adts: dict[str, TypeData]) -> None:
        """Types the module's functions use (``@effir.adt`` declarations)."""
        self._adts.update(adts)

    def get(self) -> IRModule:
        """The module built so far, with the definitions of the types its
        functions use (frontend/adts.py)."""
        functions = {**self._other_functions, **self._functions}
        cells = {**self._declarations, **{n: c.declaration for n, c in self._cells.items()}}
        adts = type_defs_for(functions.values(), self._adts)
        return IRModule(functions, {d.name: d for d in adts}, cells)

    @property
    def module(self) -> IRModule:
        return self.get()

    def state(self) -> State:
        """A fresh interpreter ``State`` for the module's cells."""
        return State(self.get())


_NO_RESULT = object()
