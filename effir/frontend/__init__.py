"""Frontends: Python to effir IR (docs/frontend.md).

- the builder (``effir.var``, ``effir.op``, ``effir.ModuleBuilder``,
  ``effir.cond``/``foreach``/``while_loop``): builder.py (on blocks.py), module_builder.py, values.py, opns.py;
- ``@effir.script``: AST conversion (script.py; the converter in
  script_convert.py, script_stmts.py, script_exprs.py, script_values.py;
  liveness.py);
- ``effir.trace``: records what a Python function does on placeholders (trace.py);
- the numpy spellings both convert, one table (numpy_spellings.py);
- ``@effir.adt`` types, their constructors and ``effir.match`` (adts.py),
  the prelude's ``List`` and ``Option``.
"""

from . import operators as _operators
from .adts import adt, match, prelude_adt
from .builder import (
    call,
    cond,
    emit,
    foreach,
    function,
    read,
    var,
    while_loop,
    write,
)
from .module_builder import ModuleBuilder
from .opns import build_namespace
from .script import ScriptFunction, script
from .trace import TracedFunction, trace
from .values import Cell, Key, Ref, Tensor, TupleOf, as_type, cell

_operators.install()
op = build_namespace()

List = prelude_adt("List", ("A",), {"Cons": ("head", "tail"), "Nil": ()})
Option = prelude_adt("Option", ("A",), {"Some": ("value",), "None": ()})
Cons, Nil = List.Cons, List.Nil  # type: ignore[attr-defined]
Some = Option.Some  # type: ignore[attr-defined]

__all__ = [
    "Cell",
    "Cons",
    "List",
    "Nil",
    "Option",
    "Some",
    "adt",
    "match",
    "Key",
    "ModuleBuilder",
    "Ref",
    "Tensor",
    "TupleOf",
    "as_type",
    "call",
    "cell",
    "cond",
    "emit",
    "foreach",
    "function",
    "op",
    "read",
    "script",
    "ScriptFunction",
    "trace",
    "TracedFunction",
    "var",
    "while_loop",
    "write",
]
