"""Expressions of ``@effir.script``: operators, comparisons, calls (scripted
functions, closures, ``effir.op``, numpy spellings, ``print``), names
(locals, globals, cells) and the refused expressions with their hints."""

from __future__ import annotations

import ast
import builtins
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.diagnostics import Error, FrontendError
from ..ir.expr import Expr, Var
from ..ir.types import TensorType, TupleType
from . import builder as B
from . import numpy_spellings
from .script_values import Collector, EmptyList, GlobalCallable, StackedList, Staged
from .spans import span_scope
from .values import Cell

BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.MatMult: operator.matmul,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,  # on bool tensors: logical_and
    ast.BitOr: operator.or_,
}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


REFUSED_EXPRS = {
    ast.ListComp: ("a list comprehension", "write a for loop that appends to a list"),
    ast.SetComp: ("a set comprehension", "write a for loop"),
    ast.DictComp: ("a dict comprehension", "use tuples"),
    ast.GeneratorExp: ("a generator expression", "write a for loop that appends to a list"),
    ast.Yield: ("yield (a generator)", "return the stacked outputs of a loop"),
    ast.YieldFrom: ("yield from (a generator)", "return the stacked outputs of a loop"),
    ast.Dict: ("a dict", "use a tuple"),
    ast.Set: ("a set", "use a tuple"),
    ast.JoinedStr: ("an f-string", 'print("label", value) prints a value with a label'),
    ast.NamedExpr: ("an assignment expression (:=)", "assign in a statement first"),
    ast.Starred: ("a starred expression", "pass the arguments one by one"),
}


class ExpressionConverter:
    """The expression half of ``Converter`` (script_convert.py)."""

    def expr(self, node: ast.expr, env: dict[str, Any], lambda_slot: bool = False) -> Any:
        with span_scope(self.span(node)):
            try:
                return self._expr(node, env, lambda_slot)
            except FrontendError as err:
                if err.span is None:
                    raise self.error(node, err.message, err.hint) from None
                raise
            except Error:
                raise
            except (
                TypeError,
                ValueError,
                IndexError,
                KeyError,
                AttributeError,
                ZeroDivisionError,
            ) as err:
                raise self.error(node, f"this expression failed while converting: {err}") from None

    def _expr(self, node: ast.expr, env: dict[str, Any], lambda_slot: bool) -> Any:
        refused = REFUSED_EXPRS.get(type(node))
        if refused is not None:
            raise self.error(node, f"{refused[0]} is not supported in @effir.script", refused[1])
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, bool | int | float | str):
                return node.value
            raise self.error(node, f"the constant {node.value!r} is not supported")
        if isinstance(node, ast.Name):
            return self.name(node, env)
        if isinstance(node, ast.BinOp):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.error(
                    node,
                    f"the operator {type(node.op).__name__} is not supported",
                    "use + - * / @ ** or an effir.op function",
                )
            return self.binop(op, self.expr(node.left, env), self.expr(node.right, env), node)
        if isinstance(node, ast.UnaryOp):
            value = self.expr(node.operand, env)
            if isinstance(node.op, ast.USub):
                return -value
            if isinstance(node.op, ast.UAdd):
                return value
            if isinstance(node.op, ast.Not):
                return (
                    B.apply_op("logical_not", (value,), {})
                    if isinstance(value, Expr)
                    else not value
                )
            raise self.error(node, "the operator ~ is not supported", "use effir.op.logical_not")
        if isinstance(node, ast.Compare):
            return self.compare(node, env)
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v, env) for v in node.values]
            if not any(isinstance(v, Expr) for v in values):
                result = values[0]
                for v in values[1:]:
                    result = (result and v) if isinstance(node.op, ast.And) else (result or v)
                return result
            name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
            result = values[0]
            for v in values[1:]:
                result = B.apply_op(name, (result, v), {})
            return result
        if isinstance(node, ast.IfExp):
            pred = self.expr(node.test, env)
            if not isinstance(pred, Expr):
                return self.expr(node.body if pred else node.orelse, env)
            return B.cond(
                pred,
                lambda: self.value_expr(self.expr(node.body, env), node),
                lambda: self.value_expr(self.expr(node.orelse, env), node),
            )
        if isinstance(node, ast.Tuple | ast.List):
            return tuple(self.expr(e, env) for e in node.elts)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, env)
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, env)
            if isinstance(base, Expr | Staged | Collector | StackedList | tuple):
                err = numpy_spellings.attribute_error(node.attr)
                raise self.error(node, err.message, err.hint)
            try:
                return getattr(base, node.attr)
            except AttributeError:
                raise self.error(node, f"{base!r} has no attribute {node.attr}") from None
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, ast.Lambda):
            return self.staged(node, env)
        if isinstance(node, ast.Slice):
            return slice(
                *(
                    self.expr(p, env) if p is not None else None
                    for p in (node.lower, node.upper, node.step)
                )
            )
        raise self.error(
            node, f"a {type(node).__name__} expression is not supported in @effir.script"
        )

    def binop(self, op: Callable[[Any, Any], Any], a: Any, b: Any, node: ast.AST) -> Any:
        for v in (a, b):
            if isinstance(v, Staged | GlobalCallable | StackedList | str) or v is None:
                raise self.error(node, f"arithmetic on {_describe(v)}")
        return op(a, b)

    def compare(self, node: ast.Compare, env: dict[str, Any]) -> Any:
        left = self.expr(node.left, env)
        result = None
        for op_node, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.expr(right_node, env)
            if isinstance(op_node, ast.Eq | ast.NotEq):
                name = "equal" if isinstance(op_node, ast.Eq) else "not_equal"
                if isinstance(left, Expr) or isinstance(right, Expr):
                    value = B.apply_op(name, (left, right), {})
                else:
                    value = (left == right) if name == "equal" else (left != right)
            elif type(op_node) in _COMPARE:
                value = _COMPARE[type(op_node)](left, right)
            else:
                raise self.error(
                    node,
                    f"the comparison {type(op_node).__name__} is not supported",
                    "compare with < <= > >= == !=",
                )
            if result is None:
                result = value
            elif isinstance(result, Expr) or isinstance(value, Expr):
                result = B.apply_op("logical_and", (result, value), {})
            else:
                result = result and value
            left = right
        return result

    def subscript(self, node: ast.Subscript, env: dict[str, Any]) -> Any:
        base = self.expr(node.value, env)
        index = self.expr(node.slice, env)
        if isinstance(base, tuple):
            if not isinstance(index, int | slice):
                raise self.error(
                    node.slice, "a tuple index must be a Python int", "index tuples with constants"
                )
            return base[index]
        if isinstance(base, Expr | StackedList):
            if isinstance(index, tuple):
                raise self.error(
                    node.slice,
                    "multi-dimensional indexing",
                    "index one axis at a time, or use effir.op.strided_slice",
                )
            indexed: Any = base  # Expr's [] is installed by frontend/operators.py
            return indexed[index]
        raise self.error(node, f"indexing {_describe(base)}")

    def lookup(self, node: ast.Name, env: dict[str, Any]) -> Any:
        if node.id in env:
            return env[node.id]
        if node.id in self.globals:
            return self.globals[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise self.error(node, f"name {node.id} is not defined", "define it before this line")

    def name(self, node: ast.Name, env: dict[str, Any]) -> Any:
        value = self.lookup(node, env)
        if isinstance(value, EmptyList):
            raise self.error(
                node,
                f"{node.id} is an empty list here",
                f"append to {node.id} in a loop, then use it after the loop",
            )
        if isinstance(value, Collector):
            raise self.error(
                node, f"{node.id} is being built by this loop", f"read {node.id} after the loop"
            )
        called = self.context.called(value)  # a scripted function: a global
        if called is not None:
            return called
        if isinstance(value, Cell):
            B.note_cell(value)
            return value.global_var
        return value

    def call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error(kw, "**kwargs in a call", "pass keyword arguments by name")
        callee = self.expr(node.func, env)
        args = [self.expr(a, env) for a in node.args]
        kwargs = {kw.arg: self.expr(kw.value, env) for kw in node.keywords}
        if callee not in (len, zip):
            self.no_stacked_argument(node, [*args, *kwargs.values()])
        if callee is print:
            return self.print_call(node, args, kwargs)
        if isinstance(callee, Staged):
            if kwargs:
                raise self.error(
                    node, "keyword arguments to a nested function", "pass them by position"
                )
            var = callee.closure()
            result = B.call(var, *args)
            self.hint_call(callee, args, result)
            return result
        if isinstance(callee, GlobalCallable):
            if kwargs:
                raise self.error(
                    node, "keyword arguments to a scripted function", "pass them by position"
                )
            return callee(*args)
        if isinstance(callee, Expr):
            return B.call(callee, *args)
        if numpy_spellings.is_numpy(callee):
            return self.numpy_call(node, callee, args, kwargs)
        if callee in (range, len, float, int, bool, abs, min, max, sum, zip, enumerate):
            return self.builtin_call(node, callee, args, kwargs)
        if callable(callee):
            return callee(*args, **kwargs)
        raise self.error(node.func, f"{_describe(callee)} is not callable")

    def no_stacked_argument(self, node: ast.Call, args: list) -> None:
        """Refuse a list of per-step tuples as an argument: the callee would
        get the tuple of its stacked fields where, run eagerly, it gets the
        list (indexed by step)."""
        for arg in args:
            if isinstance(arg, StackedList):
                raise self.error(
                    node,
                    f"{arg.name} is a list of tuples a loop built: a function would get "
                    "the tuple of its stacked fields, not the list",
                    f"append each field to its own list and pass those, or index {arg.name} "
                    f"by step ({arg.name}[i])",
                )

    def hint_call(self, callee: Staged, args: list, result: Any) -> None:
        """The type hint of a closure call's result: its body converted once
        more, aside, on the arguments (not for a function already being
        looked at so: recursion)."""
        block = B.current_block()
        if block is None or not isinstance(result, Var) or callee.hinting:
            return
        root = block.root
        names, counters = set(root.names), dict(root.counters)
        callee.hinting = True
        try:
            with B._block():  # a throwaway block
                value = callee(*args)
                hint = B.type_hint(self.value_expr(value, callee.node))
        except Error:
            hint = None
        finally:
            callee.hinting = False
            root.names, root.counters = names, counters
        if hint is not None:
            root.hints[id(result)] = (result, hint)

    def print_call(self, node: ast.Call, args: list, kwargs: dict) -> Any:
        if kwargs:
            raise self.error(node, "print with keyword arguments", 'print("label", value)')
        label = ""
        if len(args) == 2 and isinstance(args[0], str):
            label, args = args[0].rstrip(": "), args[1:]
        if len(args) != 1 or isinstance(args[0], str):
            raise self.error(
                node,
                "print takes one value (after an optional label string)",
                'print("label", value)',
            )
        return B.apply_op("debug.print", (args[0],), {"label": label})

    def numpy_call(self, node: ast.Call, fn: Any, args: list, kwargs: dict) -> Any:
        """A numpy call: the operator the shared table (numpy_spellings.py,
        which effir.trace dispatches through too) says, Python numbers
        taking effir's dtypes; ``np.zeros``/``ones`` and scalar types,
        which take no array, here; anything else on constants only,
        computed now."""
        if numpy_spellings.converts(fn, args, kwargs):
            return self.numpy_operator(node, fn, args, kwargs)
        if fn in (np.zeros, np.ones) and len(args) == 1:
            name = "zeros" if fn is np.zeros else "ones"
            shape = args[0] if isinstance(args[0], tuple | list) else (args[0],)
            return B.apply_op(
                name, (), {"shape": list(shape), "dtype": kwargs.get("dtype", "float32")}
            )
        if isinstance(fn, type) and issubclass(fn, np.generic) and len(args) == 1:
            if isinstance(args[0], Expr):
                return B.apply_op("cast", (args[0],), {"dtype": np.dtype(fn).name})
            return fn(args[0])
        if not any(_holds_expr(a) for a in [*args, *kwargs.values()]):
            return fn(*args, **kwargs)  # numpy on constants: computed now
        return self.numpy_operator(node, fn, args, kwargs)

    def numpy_operator(self, node: ast.Call, fn: Any, args: list, kwargs: dict) -> Any:
        try:
            return numpy_spellings.convert(fn, args, kwargs)
        except FrontendError as err:
            if err.span is not None:
                raise
            raise self.error(node, err.message, err.hint) from None

    def builtin_call(self, node: ast.Call, fn: Any, args: list, kwargs: dict) -> Any:
        if all(not isinstance(a, Expr) for a in [*args, *kwargs.values()]) and fn is not range:
            if fn is len and args and isinstance(args[0], tuple | list):
                return len(args[0])
            if fn in (float, int, bool, abs, min, max):
                return fn(*args, **kwargs)
        if fn is len and len(args) == 1 and isinstance(args[0], StackedList):
            length = args[0].length()
            if length is not None:
                return length
        if fn is len and len(args) == 1 and isinstance(args[0], Expr):
            t = B.type_hint(args[0])
            if isinstance(t, TupleType):
                return len(t.fields)
            if isinstance(t, TensorType) and t.ndim and isinstance(t.shape[0], int):
                return t.shape[0]
        names = {
            range: "range outside a for loop",
            zip: "zip outside a for loop",
            enumerate: "enumerate",
            sum: "the builtin sum",
            min: "the builtin min",
            max: "the builtin max",
            len: "len of a value whose length is known only at run time",
            float: "float() of an effir value",
            int: "int() of an effir value",
            bool: "bool() of an effir value",
            abs: "abs",
        }
        hints = {
            range: "for i in range(n):",
            zip: "loop over it where it is made: for x, y in zip(xs, ys):",
            enumerate: "for i in range(n): x = xs[i]",
            sum: "effir.op.sum",
            min: "effir.op.minimum",
            max: "effir.op.maximum",
            len: "pass the length as an argument",
            float: 'effir.op.cast(x, dtype="float32")',
            int: 'effir.op.cast(x, dtype="int32")',
            bool: "compare: x != 0",
            abs: "effir.op.maximum(x, -x)",
        }
        raise self.error(node, f"{names[fn]} is not supported here", hints[fn])


def _holds_expr(value: Any) -> bool:
    """Whether ``value`` is an effir value or a list or tuple holding one."""
    if isinstance(value, tuple | list):
        return any(_holds_expr(v) for v in value)
    return isinstance(value, Expr)


def _describe(value: Any) -> str:
    if isinstance(value, Staged):
        return "a function"
    if isinstance(value, GlobalCallable):
        return f"the function {value.sf.name}"
    if isinstance(value, StackedList):
        return f"{value.name}, a list of tuples a loop built,"
    if value is None:
        return "None"
    return f"a Python {type(value).__name__}"
