"""IRModule: the unit that is parsed, printed, checked and transformed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .diagnostics import WellFormedError
from .display import render
from .expr import Constructor, Function, GlobalCell, TypeData
from .names import EXPRESSION_WORDS, KEYWORDS, require_name
from .op import lookup_op
from .types import RESERVED_TYPE_NAMES


class IRModule:
    """Global functions, ADT definitions and global state cells, by name.

    A module is immutable: ``with_function`` and friends return a new module.
    Function, cell and ADT names share one namespace per kind: functions and
    cells are both ``@name`` and so must differ; constructors are global too.
    Definition order is kept and used by the printer.
    """

    __slots__ = ("_functions", "_type_defs", "_cells", "_constructors")

    def __init__(
        self,
        functions: Mapping[str, Function] | Iterable[tuple[str, Function]] = (),
        type_defs: Mapping[str, TypeData] | Iterable[tuple[str, TypeData]] = (),
        cells: Mapping[str, GlobalCell] | Iterable[tuple[str, GlobalCell]] = (),
    ) -> None:
        self._functions = dict(functions.items() if isinstance(functions, Mapping) else functions)
        self._type_defs = dict(type_defs.items() if isinstance(type_defs, Mapping) else type_defs)
        self._cells = dict(cells.items() if isinstance(cells, Mapping) else cells)
        for name in self._functions:
            require_name(name, "global name")
        for name in self._cells:
            require_name(name, "state cell name")
        for name in self._type_defs:
            require_name(name, "type name", RESERVED_TYPE_NAMES)
        for name, fn in self._functions.items():
            if not isinstance(fn, Function):
                raise WellFormedError(f"global @{name} must be a Function, got {type(fn).__name__}")
        for name in self._functions.keys() & self._cells.keys():
            raise WellFormedError(f"@{name} is defined both as a function and as a state cell")
        self._constructors: dict[str, Constructor] = {}
        for data in self._type_defs.values():
            for ctor in data.constructors:
                check_constructor_name(ctor.name)
                if ctor.name in self._constructors:
                    raise WellFormedError(f"constructor {ctor.name} is defined twice")
                self._constructors[ctor.name] = ctor

    @property
    def functions(self) -> Mapping[str, Function]:
        return MappingProxyType(self._functions)

    @property
    def type_defs(self) -> Mapping[str, TypeData]:
        return MappingProxyType(self._type_defs)

    @property
    def cells(self) -> Mapping[str, GlobalCell]:
        return MappingProxyType(self._cells)

    @property
    def constructors(self) -> Mapping[str, Constructor]:
        return MappingProxyType(self._constructors)

    def __getitem__(self, name: str) -> Function:
        name = name.removeprefix("@")
        try:
            return self._functions[name]
        except KeyError:
            raise WellFormedError(f"the module has no function @{name}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.removeprefix("@") in self._functions

    def _repr_html_(self) -> str | None:
        """Jupyter shows a module as its highlighted text (effir/highlight.py)."""
        return render("html", self)

    def with_function(self, name: str, fn: Function) -> IRModule:
        return IRModule({**self._functions, name: fn}, self._type_defs, self._cells)

    def with_type_def(self, data: TypeData) -> IRModule:
        return IRModule(self._functions, {**self._type_defs, data.name: data}, self._cells)

    def with_cell(self, cell: GlobalCell) -> IRModule:
        return IRModule(self._functions, self._type_defs, {**self._cells, cell.name: cell})

    def __str__(self) -> str:
        """The program in the text format (what ``print`` shows)."""
        text = render("text", self)
        return repr(self) if text is None else text

    def __repr__(self) -> str:
        """One line: what the module defines (``print(module)`` shows the text)."""
        parts = [", ".join("@" + name for name in self._functions) or "no function"]
        if self._cells:
            parts.append("cells " + ", ".join("@" + name for name in self._cells))
        if self._type_defs:
            parts.append("types " + ", ".join(self._type_defs))
        return f"<IRModule: {'; '.join(parts)}>"


def check_constructor_name(name: str) -> None:
    """A constructor name must read back as that constructor, not as a
    literal, a keyword or an operator."""
    require_name(name, "constructor name", EXPRESSION_WORDS | KEYWORDS)
    if lookup_op(name) is not None:
        raise WellFormedError(f"constructor name {name!r} is the name of an operator")
