"""The globals of a module being imported: its functions, the ADTs its
sequences use, its state cells, each under a name of its own."""

from __future__ import annotations

from ...ir.builder import fresh_name
from ...ir.diagnostics import Span
from ...ir.expr import Call, Constructor, Expr, Function, GlobalCell, GlobalVar
from ...ir.module import IRModule
from ...ir.names import is_identifier
from ...ir.types import RefType, Type
from .optionals import option_data, option_function
from .sequences import library_functions, list_data
from .types import LIST, OPTION


class ModuleParts:
    """What the import adds to the module, collected as it goes."""

    __slots__ = ("functions", "type_defs", "cells", "_names")

    def __init__(self) -> None:
        self.functions: dict[str, Function] = {}
        self.type_defs: dict = {}
        self.cells: dict[str, GlobalCell] = {}
        self._names: set[str] = {"main"}  # the entry's

    def fresh(self, base: str) -> str:
        """A global name not taken yet, from ``base`` made an identifier."""
        name = fresh_name(identifier(base, "g"), self._names)
        self._names.add(name)
        return name

    def add_function(self, base: str, fn: Function) -> GlobalVar:
        name = self.fresh(base)
        self.functions[name] = fn
        return GlobalVar(name)

    def library(self, name: str) -> GlobalVar:
        """The sequence function ``@name`` (common/sequences.py), added once
        with what it calls."""
        self.constructors()
        for fn_name, fn in library_functions(name).items():
            if fn_name not in self.functions:
                self._names.add(fn_name)
                self.functions[fn_name] = fn
        return GlobalVar(name)

    def constructors(self) -> tuple[Constructor, Expr]:
        """``Cons`` (a constructor, to call) and ``Nil()`` (the empty list)
        of ``List`` (the type added once)."""
        data = list_data()
        self.type_defs.setdefault(LIST, data)
        cons, nil = data.constructors
        return cons, Call(nil, ())

    def nil_constructor(self) -> Constructor:
        """``Nil`` itself (for patterns)."""
        self.constructors()
        return list_data().constructors[1]

    def option_constructors(self) -> tuple[Constructor, Constructor]:
        """``Some`` and ``None`` of ``Option`` (the type added once)."""
        data = option_data()
        self.type_defs.setdefault(OPTION, data)
        some, none = data.constructors
        return some, none

    def option_library(self, name: str) -> GlobalVar:
        """The option function ``@name`` (common/optionals.py), added once."""
        self.option_constructors()
        if name not in self.functions:
            self._names.add(name)
            self.functions[name] = option_function(name)
        return GlobalVar(name)

    def add_cell(self, base: str, init: Expr, content: Type, span: Span | None) -> GlobalVar:
        """A state cell holding ``init``'s value to begin with."""
        name = self.fresh(base)
        self.cells[name] = GlobalCell(name, RefType(content), init, span=span)
        return GlobalVar(name, span=span)

    def module(self, main: Function) -> IRModule:
        return IRModule({"main": main, **self.functions}, self.type_defs, self.cells)


def identifier(text: str, prefix: str) -> str:
    """``text`` as an identifier of the text format: other characters
    become ``_``, and a name that starts with a digit (or is empty) gets
    ``prefix``."""
    cleaned = "".join(c if c.isalnum() and c.isascii() or c == "_" else "_" for c in text)
    if not cleaned or not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = f"{prefix}_{cleaned}"
    return cleaned if is_identifier(cleaned) else prefix
