"""The converter of one scripted function: its parameters, its body
(statements and expressions: script_stmts.py, script_exprs.py), its
locations in the Python file."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from ..ir.diagnostics import FrontendError, Span
from ..ir.expr import Expr, Function, Tuple, Var
from ..ir.types import Type
from . import builder as B
from .blocks import NotedCell
from .promotion import is_number
from .script_exprs import ExpressionConverter
from .script_match import MatchConverter
from .script_stmts import StatementConverter
from .script_values import (
    GlobalCallable,
    Return,
    Scripted,
    Scripts,
    StackedList,
    Staged,
    fill_slots,
)
from .spans import python_span, span_scope
from .values import as_type, to_expr


class Converter(StatementConverter, ExpressionConverter, MatchConverter):
    """Converts one scripted function."""

    def __init__(self, sf: Scripted, context: Scripts) -> None:
        self.sf = sf
        self.context = context
        fn = sf.fn
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as err:
            raise FrontendError(
                f"the source of {sf.name} is not available ({err})",
                hint="define the function in a file (or register its source in linecache)",
            ) from None
        self.filename = fn.__code__.co_filename
        self.first_line = first
        text = "".join(lines)
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        tree = ast.parse(textwrap.dedent(text))
        node = tree.body[0]
        if not isinstance(node, ast.FunctionDef):
            raise self.error(node, f"{sf.name} is not a def", "script a function defined with def")
        self.node = node
        self.globals = dict(fn.__globals__)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
                try:
                    self.globals[name] = cell.cell_contents
                except ValueError:  # an empty cell: the name is unbound yet
                    pass

    # -------------------------------------------------------- locations
    def span(self, node: ast.AST) -> Span | None:
        line = getattr(node, "lineno", None)
        if line is None:
            return None
        end_col = None
        if getattr(node, "end_lineno", None) == line:
            end_col = node.end_col_offset + self.indent
        return python_span(
            self.filename, line + self.first_line - 1, node.col_offset + self.indent, end_col
        )

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> FrontendError:
        return FrontendError(message, self.span(node), hint=hint)

    def annotation(self, node: ast.expr) -> Type:
        try:
            value = eval(  # the user's own annotation, as Python evaluates it
                compile(ast.Expression(node), self.filename, "eval"), self.globals
            )
        except Exception as err:
            raise self.error(node, f"cannot evaluate this annotation ({err})") from None
        with span_scope(self.span(node)):
            return as_type(value)

    # -------------------------------------------------------- functions
    def convert(self) -> tuple[Function, dict[str, NotedCell]]:
        node = self.node
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(
                node,
                "*args, **kwargs, keyword-only or default parameters",
                "list each parameter with its type annotation",
            )
        params = []
        for a in args.args:
            if a.annotation is None:
                raise self.error(
                    a,
                    f"parameter {a.arg} has no type annotation",
                    f'write {a.arg}: effir.Tensor[(n, 8), "float32"] (or effir.Key, ...)',
                )
            params.append(Var(a.arg, self.annotation(a.annotation), span=self.span(a)))
        ret = self.annotation(node.returns) if node.returns is not None else None
        env: dict[str, Any] = {p.name_hint: p for p in params}
        with span_scope(self.span(node)), B._block(new_root=True) as block:
            for p in params:
                block.root.names.add(p.name_hint)
            result = self.block(node.body, env, set())
            if not isinstance(result, Return):
                raise self.error(
                    node.body[-1],
                    f"{self.sf.name} does not return a value on every path: "
                    "it can end after this statement",
                    "end every path with `return value`",
                )
            body = B._close(block, self.value_expr(result.value, result.node or node))
            cells = dict(block.root.cells)
            self.adts = dict(block.root.adts)
            slots = block.root.slots
        if slots:
            body = fill_slots(body)
        return Function(tuple(params), body, ret, span=self.span(node)), cells

    def value_expr(self, value: Any, node: ast.AST) -> Expr:
        with span_scope(self.span(node)):
            if isinstance(value, Staged):
                return value.closure()
            if isinstance(value, GlobalCallable):
                return value.gv
            if isinstance(value, StackedList):  # the tuple of its stacked fields
                value = value.fields
            if isinstance(value, tuple | list):
                return Tuple(tuple(self.value_expr(v, node) for v in value), span=self.span(node))
            if value is None:
                raise self.error(node, "None is not an effir value", "return a value")
            try:
                expr = to_expr(value)
            except FrontendError as err:
                raise self.error(node, err.message, err.hint) from None
            if is_number(value):
                B.mark_weak(expr)  # still the Python number it is eagerly
            return expr
