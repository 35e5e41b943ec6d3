"""``effir.trace`` (hybridize): run a Python function once on symbolic
placeholders and record what it builds. The same function runs eagerly on
numpy arrays, since ``effir.op`` functions and ``effir.cond``/``foreach``/
``while_loop`` work on both; a Python ``if``/``while`` on a traced value is
refused at its line (operators.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..backends.interpreter import interpret
from ..ir.diagnostics import FrontendError
from ..ir.expr import Function, Var
from ..ir.module import IRModule
from . import builder as B
from . import eager
from .module_builder import ModuleBuilder
from .operators import tracing_scope
from .spans import current_span
from .values import as_type, to_expr


class TracedFunction:
    """A function with its traced module: calling it runs the Python
    function (eagerly); ``.module`` holds ``@name`` as traced."""

    def __init__(self, fn: Callable[..., Any], module: IRModule, name: str) -> None:
        self.fn, self.module, self.name = fn, module, name
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eagerly, the Python function; while building, a call of ``@name``."""
        if B.building() and not kwargs:
            return B.call_module_function(self.module, self.name, args)
        return eager.run(self.fn, args, kwargs)

    def __effir_program__(self) -> tuple[IRModule, str]:
        """The module and its entry, ``@name`` (ir/program.py)."""
        return self.module, self.name

    def interpret(self, *args: Any, **kwargs: Any) -> Any:
        return interpret(self.module, *args, entry=self.name, **kwargs)


def trace(
    fn: Callable[..., Any],
    *types: Any,
    name: str | None = None,
    module: ModuleBuilder | None = None,
) -> TracedFunction:
    """Trace ``fn``: its parameters get ``types`` (or its annotations), its
    operators are recorded in order; the result is ``@name`` (default: the
    function's name) of a module that also holds the cells it used. With
    ``module``, the function is added to that builder."""
    name = name or (fn.__name__ if fn.__name__.isidentifier() else "main")
    params = _params(fn, types)
    mb = module if module is not None else ModuleBuilder()
    span = current_span()
    with tracing_scope(), B._block(new_root=True) as block:
        for p in params:
            block.root.names.add(p.name_hint)
        result = fn(*params)
        if result is None:
            raise FrontendError(f"{name} returned None", span, hint="return the result")
        body = B._close(block, to_expr(result))
        cells = dict(block.root.cells)
        mb.add_globals(block.root)
    mb.add_cells_of(cells)
    mb.add_function(name, Function(tuple(params), body, span=span))
    return TracedFunction(fn, mb.get(), name)


def _params(fn: Callable[..., Any], types: tuple[Any, ...]) -> list[Var]:
    signature = inspect.signature(fn)
    names = list(signature.parameters)
    if types:
        if len(types) != len(names):
            raise FrontendError(
                f"{fn.__name__} takes {len(names)} parameter(s), {len(types)} type(s) given",
                current_span(),
            )
        return [Var(n, as_type(t), span=current_span()) for n, t in zip(names, types, strict=True)]
    params = []
    for n, p in signature.parameters.items():
        ann = p.annotation
        if isinstance(ann, str):
            ann = eval(ann, fn.__globals__)  # the user's own annotation
        if ann is inspect.Parameter.empty:
            raise FrontendError(
                f"parameter {n} of {fn.__name__} has no type",
                current_span(),
                hint='pass the types: effir.trace(f, effir.Tensor[(n, 8), "float32"], ...)',
            )
        params.append(Var(n, as_type(ann), span=current_span()))
    return params
