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

import ast
import builtins
import inspect
import operator
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.diagnostics import Error, FrontendError, Span
from ..ir.expr import Expr, Function, GlobalVar, Tuple, Var
from ..ir.module import IRModule
from ..ir.types import TensorType, TupleType, Type
from . import builder as B
from .liveness import (
    analyze_loop,
    append_target,
    branch_outputs,
    live_in,
    target_names,
)
from .spans import python_span, span_scope
from .values import Cell, as_type, to_expr

# numpy spellings users write, and the operator each stands for.
_NUMPY_UNARY = {
    np.tanh: "tanh",
    np.exp: "exp",
    np.log: "log",
    np.sqrt: "sqrt",
    np.negative: "negative",
    np.logical_not: "logical_not",
}
_NUMPY_BINARY = {
    np.add: "add",
    np.subtract: "subtract",
    np.multiply: "multiply",
    np.divide: "divide",
    np.power: "power",
    np.maximum: "maximum",
    np.minimum: "minimum",
    np.matmul: "nn.matmul",
    np.dot: "nn.matmul",
    np.equal: "equal",
    np.not_equal: "not_equal",
    np.less: "less",
    np.greater: "greater",
    np.logical_and: "logical_and",
    np.logical_or: "logical_or",
}
_NUMPY_REDUCE = {
    np.sum: "sum",
    np.mean: "mean",
    np.max: "max",
    np.min: "min",
    np.prod: "prod",
    np.argmax: "argmax",
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
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

_REFUSED_STMTS = {
    ast.Try: ("try/except", "check values with effir operators; errors stop the program"),
    ast.With: ("with", "move the with block outside the scripted function"),
    ast.Raise: ("raise", "effir programs stop on run-time errors of their operators"),
    ast.Global: ("global", "read module state through an effir.cell"),
    ast.Nonlocal: ("nonlocal", "return the new value instead"),
    ast.Delete: ("del", "leave the name unused"),
    ast.Import: ("import", "import at module level"),
    ast.ImportFrom: ("import", "import at module level"),
    ast.ClassDef: ("a class definition", "define classes outside the scripted function"),
    ast.Break: ("break", "write the loop as `while cond:` with the exit in its condition"),
    ast.Continue: ("continue", "use if/else inside the loop body"),
    ast.AsyncFunctionDef: ("async def", "use a plain def"),
    ast.AsyncFor: ("async for", "use a plain for"),
    ast.AsyncWith: ("async with", "move it outside the scripted function"),
    ast.Assert: ("assert", "check values before calling the program"),
}
if hasattr(ast, "Match"):
    _REFUSED_STMTS[ast.Match] = ("match", "use if/elif/else")

_REFUSED_EXPRS = {
    ast.ListComp: ("a list comprehension", "write a for loop that appends to a list"),
    ast.SetComp: ("a set comprehension", "write a for loop"),
    ast.DictComp: ("a dict comprehension", "use tuples"),
    ast.GeneratorExp: ("a generator expression", "write a for loop that appends to a list"),
    ast.Yield: ("yield (a generator)", "return the stacked outputs of a loop"),
    ast.YieldFrom: ("yield from (a generator)", "return the stacked outputs of a loop"),
    ast.Await: ("await", "effir programs are not coroutines"),
    ast.Dict: ("a dict", "use a tuple"),
    ast.Set: ("a set", "use a tuple"),
    ast.JoinedStr: ("an f-string", 'print("label", value) prints a value with a label'),
    ast.NamedExpr: ("an assignment expression (:=)", "assign in a statement first"),
    ast.Starred: ("a starred expression", "pass the arguments one by one"),
}


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
        return self.fn(*args, **kwargs)

    @property
    def module(self) -> IRModule:
        if self._module is None:
            self._module = convert_module(self)
        return self._module

    def interpret(self, *args: Any, **kwargs: Any) -> Any:
        from ..backends.interpreter import interpret

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
    mb = B.ModuleBuilder()
    context = _ModuleContext()
    context.need(entry)
    while context.pending:
        sf = context.pending.pop()
        fn, cells = _Converter(sf, context).convert()
        mb.add_function(sf.name, fn)
        mb.add_cells_of(cells)
    return mb.get()


class _ModuleContext:
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


class _Return:
    """A block that ended in ``return value`` (at ``node``)."""

    def __init__(self, value: Any, node: ast.AST | None = None) -> None:
        self.value = value
        self.node = node


class _Collector:
    """A list being appended to inside a loop body (one value per step)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Any = None


class _EmptyList:
    """``outs = []`` before a loop appends to it."""


class _Staged:
    """A nested ``def`` or ``lambda``: a Python callable that converts its
    body where it is called with values (inlined: for effir.cond/foreach
    bodies), and an effir closure, built at its definition, where it is used
    as a value or called from converted code."""

    def __init__(
        self, conv: _Converter, node: ast.FunctionDef | ast.Lambda, env: dict, slot: _Slot | None
    ) -> None:
        self.conv, self.node, self.env, self.slot = conv, node, env, slot
        self.var: Var | None = None

    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in args.args]

    def __call__(self, *values: Any) -> Any:
        names = self.params()
        if len(values) != len(names):
            raise self.conv.error(
                self.node, f"this function takes {len(names)} argument(s), got {len(values)}"
            )
        env = dict(self.env)
        env.update(zip(names, values, strict=True))
        if isinstance(self.node, ast.Lambda):
            return self.conv.expr(self.node.body, env)
        result = self.conv.block(self.node.body, env, set())
        if not isinstance(result, _Return):
            raise self.conv.error(
                self.node, "a nested function must return a value", "end it with `return value`"
            )
        return result.value

    def closure(self) -> Var:
        """The effir closure (bound where the def was), built on first use."""
        if self.var is not None:
            return self.var
        node, conv = self.node, self.conv
        name = node.name if isinstance(node, ast.FunctionDef) else "lambda"
        with span_scope(conv.span(node)):
            self.var = var = B.new_var(name)
            params = []
            for a in node.args.args:
                t = conv.annotation(a.annotation) if a.annotation is not None else None
                params.append(Var(a.arg, t, span=conv.span(a)))
        if self.slot is None:
            raise conv.error(
                node,
                "this lambda cannot be used as a value here",
                "define it with def before this statement",
            )
        self.slot.var = var
        env = dict(self.env)
        if isinstance(node, ast.FunctionDef):
            env[node.name] = self
        env.update(zip(self.params(), params, strict=True))

        def body(*_: Any) -> Any:
            if isinstance(node, ast.Lambda):
                return conv.expr(node.body, env)
            result = conv.block(node.body, env, set())
            if not isinstance(result, _Return):
                raise conv.error(
                    node, "a nested function must return a value", "end it with `return value`"
                )
            return result.value

        with B._block() as block:
            result = body()
            fn_body = B._close(block, to_expr(result))
        self.slot.value = Function(tuple(params), fn_body, span=conv.span(node))
        return var


class _Slot:
    """A place in a let-chain kept for a closure built later (or never)."""

    __slots__ = ("var", "value", "span")

    def __init__(self) -> None:
        self.var: Var | None = None
        self.value: Function | None = None
        self.span = None


class _GlobalCallable:
    """A scripted function used from converted code: calls become calls of
    ``@name``; its return annotation types the result (for unpacking)."""

    def __init__(self, gv: GlobalVar, sf: ScriptFunction) -> None:
        self.gv, self.sf = gv, sf

    def __call__(self, *args: Any) -> Any:
        result = B.call(self.gv, *args)
        ret = _return_type(self.sf.fn)
        if ret is not None and isinstance(result, Var):
            block = B.current_block()
            if block is not None:
                block.root.hints[id(result)] = (result, ret)
        return result


def _return_type(fn: Callable[..., Any]) -> Type | None:
    ann = fn.__annotations__.get("return")
    if ann is None:
        return None
    if isinstance(ann, str):
        try:
            ann = eval(ann, fn.__globals__)  # noqa: S307 (the user's own annotation)
        except Exception:
            return None
    try:
        return as_type(ann)
    except FrontendError:
        return None


class _Converter:
    """Converts one scripted function."""

    def __init__(self, sf: ScriptFunction, context: _ModuleContext) -> None:
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
            raise FrontendError(
                f"{sf.name} is not a def", hint="script a function defined with def"
            )
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
            value = eval(  # noqa: S307 (the user's own annotation, as Python evaluates it)
                compile(ast.Expression(node), self.filename, "eval"), self.globals
            )
        except Exception as err:
            raise self.error(node, f"cannot evaluate this annotation ({err})") from None
        with span_scope(self.span(node)):
            return as_type(value)

    # -------------------------------------------------------- functions
    def convert(self) -> tuple[Function, dict[str, Cell]]:
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
            if not isinstance(result, _Return):
                raise self.error(
                    node.body[-1],
                    f"{self.sf.name} does not return a value on every path: "
                    "it can end after this statement",
                    "end every path with `return value`",
                )
            body = B._close(block, self.value_expr(result.value, result.node or node))
            cells = dict(block.root.cells)
            slots = block.root.slots
        if slots:
            body = _rebuild(body)
        return Function(tuple(params), body, ret, span=self.span(node)), cells

    def value_expr(self, value: Any, node: ast.AST) -> Expr:
        with span_scope(self.span(node)):
            if isinstance(value, _Staged):
                return value.closure()
            if isinstance(value, _GlobalCallable):
                return value.gv
            if isinstance(value, tuple | list):
                return Tuple(tuple(self.value_expr(v, node) for v in value), span=self.span(node))
            if value is None:
                raise self.error(node, "None is not an effir value", "return a value")
            try:
                return to_expr(value)
            except FrontendError as err:
                raise self.error(node, err.message, err.hint) from None

    # -------------------------------------------------------- statements
    def block(
        self, stmts: list[ast.stmt], env: dict[str, Any], live_out: set[str]
    ) -> _Return | None:
        """Convert ``stmts`` in ``env`` (updated); a ``_Return`` if they return."""
        # What is live after each compound statement (the only ones that need
        # it); one backward pass, a copy kept only there, so straight-line
        # code costs linear time.
        after: dict[int, set[str]] = {}
        live = set(live_out)
        for i in range(len(stmts) - 1, -1, -1):
            stmt = stmts[i]
            if isinstance(stmt, ast.If | ast.For | ast.While):
                after[i] = set(live)
            live = live_in([stmt], live)
        for i, stmt in enumerate(stmts):
            with span_scope(self.span(stmt)):
                if isinstance(stmt, ast.If) and _returns(stmt):
                    return self.returning_if(stmt, stmts[i + 1 :], env, live_out)
                result = self.statement(stmt, env, after.get(i, _NOTHING_LIVE))
            if result is not None:
                if i + 1 < len(stmts):
                    raise self.error(stmts[i + 1], "code after return never runs", "remove it")
                return result
        return None

    def statement(
        self, stmt: ast.stmt, env: dict[str, Any], live_after: set[str]
    ) -> _Return | None:
        refused = _REFUSED_STMTS.get(type(stmt))
        if refused is not None:
            raise self.error(stmt, f"{refused[0]} is not supported in @effir.script", refused[1])
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self.error(stmt, "return without a value", "return a value")
            return _Return(self.expr(stmt.value, env), stmt)
        if isinstance(stmt, ast.Assign):
            if isinstance(stmt.value, ast.List) and not stmt.value.elts:
                for t in stmt.targets:
                    if not isinstance(t, ast.Name):
                        raise self.error(t, "only a name can start as an empty list")
                    env[t.id] = _EmptyList()
                return None
            value = self.expr(stmt.value, env, lambda_slot=True)
            for target in stmt.targets:
                self.assign(target, value, env)
            return None
        if isinstance(stmt, ast.AugAssign):
            op = _BINOPS.get(type(stmt.op))
            if op is None:
                raise self.error(
                    stmt,
                    f"the operator {type(stmt.op).__name__}= is not supported",
                    "use + - * / @ **",
                )
            if not isinstance(stmt.target, ast.Name):
                raise self.error(
                    stmt.target,
                    "augmented assignment to an item or attribute",
                    "assign a new name: y = x + 1",
                )
            current = self.name(stmt.target, env)
            value = self.expr(stmt.value, env)
            with span_scope(self.span(stmt)):
                self.assign(stmt.target, self.binop(op, current, value, stmt), env)
            return None
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                raise self.error(stmt, "a declaration without a value", "assign a value")
            self.assign(stmt.target, self.expr(stmt.value, env), env)
            return None
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                return None  # a docstring
            name = append_target(stmt)
            if name is not None:
                self.append(stmt, name, env)
                return None
            self.expr(stmt.value, env)
            return None
        if isinstance(stmt, ast.Pass):
            return None
        if isinstance(stmt, ast.If):
            self.plain_if(stmt, env, live_after)
            return None
        if isinstance(stmt, ast.For):
            self.for_loop(stmt, env, live_after)
            return None
        if isinstance(stmt, ast.While):
            self.while_loop(stmt, env, live_after)
            return None
        if isinstance(stmt, ast.FunctionDef):
            if stmt.decorator_list:
                raise self.error(
                    stmt.decorator_list[0],
                    "a decorator on a nested function",
                    "define it without a decorator",
                )
            env[stmt.name] = self.staged(stmt, env)
            return None
        raise self.error(
            stmt, f"a {type(stmt).__name__} statement is not supported in @effir.script"
        )

    def staged(self, node: ast.FunctionDef | ast.Lambda, env: dict[str, Any]) -> _Staged:
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
            raise self.error(
                node,
                "*args, **kwargs or default parameters in a nested function",
                "list each parameter",
            )
        block = B.current_block()
        slot = _Slot()
        if block is not None:
            block.bindings.append((slot, slot))  # filled by _rebuild if used
            block.root.slots += 1
        env = dict(env)  # the names in scope where it is defined
        staged = _Staged(self, node, env, slot)
        if isinstance(node, ast.FunctionDef):
            env[node.name] = staged
        return staged

    def assign(self, target: ast.expr, value: Any, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = self.named(value, target.id)
            return
        if isinstance(target, ast.Tuple | ast.List):
            with span_scope(self.span(target)):
                try:
                    items = list(value) if not isinstance(value, _Staged) else None
                except FrontendError as err:
                    raise self.error(target, err.message, err.hint) from None
                if items is None or len(items) != len(target.elts):
                    raise self.error(
                        target,
                        f"cannot unpack into {len(target.elts)} names"
                        + (f" a value of {len(items)}" if items is not None else ""),
                    )
            for t, v in zip(target.elts, items, strict=True):
                self.assign(t, v, env)
            return
        if isinstance(target, ast.Attribute):
            raise self.error(
                target,
                "attribute mutation is not supported",
                "return the new value, or keep state in an effir.cell",
            )
        if isinstance(target, ast.Subscript):
            raise self.error(
                target,
                "item assignment is not supported (values are immutable)",
                "build a new value, e.g. with effir.op.where",
            )
        raise self.error(target, "this assignment target is not supported", "assign to a name")

    def named(self, value: Any, name: str) -> Any:
        """Give the binding just made for ``value`` the Python name."""
        block = B.current_block()
        if (
            isinstance(value, Var)
            and block is not None
            and block.bindings
            and block.bindings[-1][0] is value
            and value.type_annotation is None
        ):
            new = Var(B.fresh_name(name), span=value.span)
            block.bindings[-1] = (new, block.bindings[-1][1])
            hint = block.root.hints.pop(id(value), None)
            if hint is not None:
                block.root.hints[id(new)] = (new, hint[1])
            return new
        return value

    def append(self, stmt: ast.Expr, name: str, env: dict[str, Any]) -> None:
        call = stmt.value
        assert isinstance(call, ast.Call)
        target = env.get(name)
        if not isinstance(target, _Collector):
            raise self.error(
                stmt,
                f"{name}.append outside the loop that owns {name}, or in a branch",
                f"start {name} = [] just before the loop and append once per step, "
                "at the loop body's top level",
            )
        if len(call.args) != 1 or call.keywords:
            raise self.error(call, "append takes one value")
        if target.value is not None:
            raise self.error(
                stmt,
                f"{name} is appended to twice in one step",
                "append once per step (append a tuple for several values)",
            )
        target.value = self.expr(call.args[0], env)

    # -------------------------------------------------------- if
    def plain_if(self, stmt: ast.If, env: dict[str, Any], live_after: set[str]) -> None:
        outs = branch_outputs(stmt, live_after)
        pred = self.expr(stmt.test, env)
        if not isinstance(pred, Expr):  # a Python value: decided now
            chosen = stmt.body if bool(pred) else stmt.orelse
            self.block(chosen, env, live_after)
            return
        for name in outs:
            if name not in env and not (_assigns(stmt.body, name) and _assigns(stmt.orelse, name)):
                raise self.error(
                    stmt,
                    f"{name} is assigned in only one branch of this if and used after it",
                    f"give {name} a value before the if, or in both branches",
                )
        results: dict[str, Any] = {}

        def branch(stmts: list[ast.stmt]) -> Callable[[], Any]:
            def run() -> Any:
                inner = dict(env)
                self.block(stmts, inner, set(outs) | live_after)
                values = []
                for n in outs:
                    v = inner[n]
                    if not isinstance(v, Expr) and n in results:
                        dtype = B.dtype_hint(results[n])
                        v = to_expr(v, dtype) if dtype else v
                    results.setdefault(n, v)
                    values.append(self.value_expr(v, stmt))
                return tuple(values)

            return run

        with span_scope(self.span(stmt)):
            got = B.cond(pred, branch(stmt.body), branch(stmt.orelse))
        for name, value in zip(outs, got, strict=True):
            env[name] = value

    def returning_if(
        self, stmt: ast.If, rest: list[ast.stmt], env: dict[str, Any], live_out: set[str]
    ) -> _Return:
        pred = self.expr(stmt.test, env)
        then_stmts = stmt.body if _always_returns(stmt.body) else stmt.body + rest
        else_stmts = stmt.orelse if _always_returns(stmt.orelse) else stmt.orelse + rest
        if not isinstance(pred, Expr):
            result = self.block(then_stmts if bool(pred) else else_stmts, env, live_out)
            if result is None:
                raise self.error(stmt, "this path does not return a value", "return in every path")
            return result

        def branch(stmts: list[ast.stmt]) -> Callable[[], Any]:
            def run() -> Any:
                result = self.block(stmts, dict(env), live_out)
                if result is None:
                    raise self.error(
                        stmt,
                        "a branch of this if does not return a value",
                        "return in both branches (or after the if)",
                    )
                return self.value_expr(result.value, stmt)

            return run

        with span_scope(self.span(stmt)):
            return _Return(B.cond(pred, branch(then_stmts), branch(else_stmts)))

    # -------------------------------------------------------- loops
    def loop_state(
        self, stmt: ast.For | ast.While, env: dict[str, Any], live_after: set[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if stmt.orelse:
            raise self.error(
                stmt.orelse[0],
                "a loop's else block is not supported",
                "write the code after the loop",
            )
        info = analyze_loop(stmt, live_after)
        for name in info.carried:
            if name not in env:
                raise self.error(
                    stmt,
                    f"{name} is first assigned inside this loop but needed after it "
                    "or in the next step",
                    f"give {name} a value before the loop",
                )
        for name in info.outputs:
            if not isinstance(env.get(name), _EmptyList):
                raise self.error(
                    stmt,
                    f"{name} is appended to in the loop but is not an empty list before it",
                    f"write {name} = [] just before the loop",
                )
        _check_no_return(self, stmt.body)
        return info.carried, info.outputs

    def step(
        self,
        stmt: ast.For | ast.While,
        env: dict[str, Any],
        carried: tuple[str, ...],
        outputs: tuple[str, ...],
        state: Any,
        bind: Callable[[dict], None] | None,
        live_after: set[str],
    ) -> tuple[Any, Any]:
        inner = dict(env)
        inner.update(zip(carried, state, strict=True))
        if bind is not None:
            bind(inner)
        collectors = {n: _Collector(n) for n in outputs}
        inner.update(collectors)
        self.block(stmt.body, inner, set(carried) | live_after)
        outs = []
        for name in outputs:
            if collectors[name].value is None:
                raise self.error(
                    stmt,
                    f"{name} is not appended to in every step",
                    "append once per step, at the loop body's top level",
                )
            outs.append(self.value_expr(collectors[name].value, stmt))
        new_state = tuple(self.value_expr(inner[n], stmt) for n in carried)
        return tuple(outs), new_state

    def finish_loop(self, env, carried, outputs, outs, final) -> None:
        for name, value in zip(carried, final, strict=True):
            env[name] = value
        for name, value in zip(outputs, outs, strict=True):
            env[name] = value

    def type_numbers(self, stmt, env, carried, outputs, bind, live_after) -> None:
        """A carried variable that starts as a Python number (``s = 0``)
        takes the dtype its first step gives it (``s = s + x`` with a float32
        ``x``: float32), as the eager Python would compute: the body is
        converted once, aside, with the numbers as they are."""
        numbers = [
            n for n in carried if isinstance(env[n], int | float) and not isinstance(env[n], bool)
        ]
        if not numbers:
            return
        try:
            with B._block():  # a throwaway block: this conversion is only looked at
                _, new_state = self.step(
                    stmt, env, carried, outputs, tuple(env[n] for n in carried), bind, live_after
                )
        except Error:
            return  # the real conversion reports it
        for name, value in zip(carried, new_state, strict=True):
            dtype = B.dtype_hint(value) if name in numbers else None
            if dtype is not None and dtype != "bool":
                env[name] = to_expr(env[name], dtype)

    def initial(self, env: dict[str, Any], carried: tuple[str, ...], stmt: ast.stmt) -> tuple:
        return tuple(self.value_expr(env[n], stmt) for n in carried)

    def for_loop(self, stmt: ast.For, env: dict[str, Any], live_after: set[str]) -> None:
        carried, outputs = self.loop_state(stmt, env, live_after)
        targets = target_names(stmt.target)
        if not isinstance(stmt.target, ast.Name | ast.Tuple) or not targets:
            raise self.error(stmt.target, "this loop target is not supported", "for x in xs:")
        it = stmt.iter
        range_args = self.range_args(it, env)
        if range_args is not None and not all(isinstance(a, int) for a in range_args):
            self.range_while(stmt, env, live_after, carried, outputs, range_args)
            return
        if range_args is not None:
            xs: Any = np.arange(*range_args, dtype=np.int32)
        else:
            zipped = (
                isinstance(it, ast.Call)
                and isinstance(it.func, ast.Name)
                and self.lookup(it.func, env) is zip
            )
            if zipped:  # for a, b in zip(xs, ys): one foreach over the tuple (xs, ys)
                if any(k.arg != "strict" for k in it.keywords) or not it.args:
                    raise self.error(it, "zip takes the sequences only", "zip(xs, ys)")
                xs = tuple(self.expr(a, env) for a in it.args)
                if not all(isinstance(x, Expr | np.ndarray) for x in xs):
                    raise self.error(
                        it, "zip of values that are not tensors", "zip tensors of one length"
                    )
            else:
                xs = self.expr(it, env)
            if not isinstance(xs, Expr | np.ndarray) and not zipped:
                raise self.error(
                    it,
                    "a Python for loop over a value that is not a tensor",
                    "iterate over a tensor's leading axis (for x in xs), zip(xs, ys) or range(n)",
                )

        def bind(inner: dict[str, Any], x: Any) -> None:
            self.assign(stmt.target, x, inner)

        step_x = (
            B._step_like(xs)
            if not isinstance(xs, np.ndarray)
            else Var("x", TensorType(xs.shape[1:], str(xs.dtype)))
        )
        self.type_numbers(
            stmt, env, carried, outputs, lambda inner: bind(inner, step_x), live_after
        )
        init = _one(self.initial(env, carried, stmt))
        n = len(carried)

        def body(x: Any, state: Any) -> Any:
            outs, new_state = self.step(
                stmt,
                env,
                carried,
                outputs,
                _many(state, n),
                lambda inner: bind(inner, x),
                live_after,
            )
            return _one(outs), _one(new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.foreach(body, xs, init)
        self.finish_loop(env, carried, outputs, _many(outs, len(outputs)), _many(final, n))

    def range_args(self, it: ast.expr, env: dict[str, Any]) -> tuple | None:
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)):
            return None
        if self.lookup(it.func, env) is not builtins.range:
            return None
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, "range takes 1 to 3 positional arguments")
        args = [self.expr(a, env) for a in it.args]
        if len(args) == 1:
            args = [0, args[0]]
        if len(args) == 3 and not isinstance(args[2], int):
            raise self.error(it.args[2], "the step of range must be a Python int")
        return tuple(args)

    def range_while(self, stmt: ast.For, env, live_after, carried, outputs, args) -> None:
        """``for i in range(a, b)`` with a run-time bound: a while loop with
        the counter as the first carried value."""
        start, stop = args[0], args[1]
        step = args[2] if len(args) == 3 else 1
        if not isinstance(step, int) or step == 0:
            raise self.error(stmt.iter, "the step of range must be a nonzero Python int")
        counter = Var("i", TensorType((), "int32"))
        self.type_numbers(
            stmt,
            env,
            carried,
            outputs,
            lambda inner: self.assign(stmt.target, counter, inner),
            live_after,
        )
        init = (to_expr(start, "int32"), *self.initial(env, carried, stmt))

        def cond(state: Any) -> Any:
            i = state[0]
            return i < stop if step > 0 else i > stop

        def body(state: Any) -> Any:
            i, *rest = state
            outs, new_state = self.step(
                stmt,
                env,
                carried,
                outputs,
                tuple(rest),
                lambda inner: self.assign(stmt.target, i, inner),
                live_after,
            )
            return outs, (i + step, *new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.while_loop(cond, body, init, outputs=True)
        self.finish_loop(env, carried, outputs, outs, final[1:])

    def while_loop(self, stmt: ast.While, env: dict[str, Any], live_after: set[str]) -> None:
        carried, outputs = self.loop_state(stmt, env, live_after)
        self.type_numbers(stmt, env, carried, outputs, None, live_after)
        init = self.initial(env, carried, stmt)
        if not carried:
            raise self.error(
                stmt,
                "this while loop changes nothing its condition reads",
                "assign a variable of the condition in the loop body",
            )

        n = len(carried)
        init = _one(init)

        def cond(state: Any) -> Any:
            inner = dict(env)
            inner.update(zip(carried, _many(state, n), strict=True))
            value = self.expr(stmt.test, inner)
            if not isinstance(value, Expr):
                raise self.error(
                    stmt.test,
                    "the condition of this while loop does not depend on the loop's values",
                    "make it read a variable the body assigns",
                )
            return value

        def body(state: Any) -> Any:
            outs, new_state = self.step(
                stmt, env, carried, outputs, _many(state, n), None, live_after
            )
            return _one(outs), _one(new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.while_loop(cond, body, init, outputs=True)
        self.finish_loop(env, carried, outputs, _many(outs, len(outputs)), _many(final, n))

    # -------------------------------------------------------- expressions
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
        refused = _REFUSED_EXPRS.get(type(node))
        if refused is not None:
            raise self.error(node, f"{refused[0]} is not supported in @effir.script", refused[1])
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, bool | int | float | str):
                return node.value
            raise self.error(node, f"the constant {node.value!r} is not supported")
        if isinstance(node, ast.Name):
            return self.name(node, env)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
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
            if isinstance(base, Expr | _Staged | _Collector | tuple):
                raise self.error(
                    node,
                    f"attribute .{node.attr} of an effir value",
                    "use effir.op functions (effir.op.transpose, effir.op.reshape...)",
                )
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
            if isinstance(v, _Staged | _GlobalCallable | str) or v is None:
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
        if isinstance(base, Expr):
            if isinstance(index, tuple):
                raise self.error(
                    node.slice,
                    "multi-dimensional indexing",
                    "index one axis at a time, or use effir.op.strided_slice",
                )
            return base[index]
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
        if isinstance(value, _EmptyList):
            raise self.error(
                node,
                f"{node.id} is an empty list here",
                f"append to {node.id} in a loop, then use it after the loop",
            )
        if isinstance(value, _Collector):
            raise self.error(
                node, f"{node.id} is being built by this loop", f"read {node.id} after the loop"
            )
        if isinstance(value, ScriptFunction):
            return _GlobalCallable(self.context.need(value), value)
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
        if callee is print:
            return self.print_call(node, args, kwargs)
        if isinstance(callee, _Staged):
            if kwargs:
                raise self.error(
                    node, "keyword arguments to a nested function", "pass them by position"
                )
            var = callee.closure()
            return B.call(var, *args)
        if isinstance(callee, _GlobalCallable):
            if kwargs:
                raise self.error(
                    node, "keyword arguments to a scripted function", "pass them by position"
                )
            return callee(*args)
        if isinstance(callee, Expr):
            return B.call(callee, *args)
        if _is_numpy(callee):
            return self.numpy_call(node, callee, args, kwargs)
        if callee in (range, len, float, int, bool, abs, min, max, sum, zip, enumerate):
            return self.builtin_call(node, callee, args, kwargs)
        if callable(callee):
            args = [self.callable_arg(a, node) for a in args]
            return callee(*args, **kwargs)
        raise self.error(node.func, f"{_describe(callee)} is not callable")

    def callable_arg(self, value: Any, node: ast.AST) -> Any:
        return value

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
        if fn in _NUMPY_UNARY and len(args) == 1 and not kwargs:
            return B.apply_op(_NUMPY_UNARY[fn], tuple(args), {})
        if fn in _NUMPY_BINARY and len(args) == 2 and not kwargs:
            return B.apply_op(_NUMPY_BINARY[fn], tuple(args), {})
        if fn in _NUMPY_REDUCE and len(args) == 1:
            attrs = {k: v for k, v in kwargs.items() if k in ("axis", "keepdims")}
            if len(attrs) != len(kwargs):
                raise self.error(node, f"np.{fn.__name__} takes axis= and keepdims= here")
            return B.apply_op(_NUMPY_REDUCE[fn], tuple(args), attrs)
        if fn is np.where and len(args) == 3:
            return B.apply_op("where", tuple(args), {})
        if fn in (np.stack, np.array, np.asarray) and len(args) == 1 and isinstance(args[0], Expr):
            return args[0]  # the list a loop appended to is already stacked
        if fn in (np.stack, np.concatenate) and len(args) == 1:
            name = "stack" if fn is np.stack else "concatenate"
            return B.apply_op(name, (tuple(args[0]),), {"axis": kwargs.get("axis", 0)})
        if fn is np.reshape and len(args) == 2:
            return B.apply_op("reshape", (args[0],), {"newshape": list(args[1])})
        if fn is np.transpose and len(args) in (1, 2):
            axes = args[1] if len(args) == 2 else kwargs.get("axes")
            return B.apply_op("transpose", (args[0],), {"axes": axes})
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
        if all(not isinstance(a, Expr) for a in [*args, *kwargs.values()]):
            return fn(*args, **kwargs)  # numpy on constants: computed now
        raise self.error(
            node,
            f"np.{getattr(fn, '__name__', fn)} is not supported on effir values",
            "use the effir.op function of the same name",
        )

    def builtin_call(self, node: ast.Call, fn: Any, args: list, kwargs: dict) -> Any:
        if all(not isinstance(a, Expr) for a in [*args, *kwargs.values()]) and fn is not range:
            if fn is len and args and isinstance(args[0], tuple | list):
                return len(args[0])
            if fn in (float, int, bool, abs, min, max):
                return fn(*args, **kwargs)
        if fn is len and len(args) == 1 and isinstance(args[0], Expr):
            t = B.type_hint(args[0])
            if isinstance(t, TupleType):
                return len(t.fields)
            if isinstance(t, TensorType) and t.ndim and isinstance(t.shape[0], int):
                return t.shape[0]
        names = {
            range: "range outside a for loop",
            zip: "zip",
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
            zip: "iterate over a tuple of tensors: for x, y in (xs, ys)",
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


_NOTHING_LIVE: set[str] = set()


def _one(values: tuple) -> Any:
    """A loop's state or outputs: one value as itself, several as a tuple."""
    return values[0] if len(values) == 1 else values


def _many(value: Any, n: int) -> tuple:
    return (value,) if n == 1 else tuple(value)


def _is_numpy(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return (
        isinstance(fn, np.ufunc)
        or module.startswith("numpy")
        or (isinstance(fn, type) and issubclass(fn, np.generic))
    )


def _describe(value: Any) -> str:
    if isinstance(value, _Staged):
        return "a function"
    if isinstance(value, _GlobalCallable):
        return f"the function {value.sf.name}"
    if value is None:
        return "None"
    return f"a Python {type(value).__name__}"


def _returns(stmt: ast.If) -> bool:
    """Whether a return appears in the if's branches (nested functions aside)."""
    stack: list[ast.AST] = [*stmt.body, *stmt.orelse]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, ast.FunctionDef | ast.Lambda | ast.expr):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _always_returns(stmts: list[ast.stmt]) -> bool:
    """Whether every path through ``stmts`` ends in a return."""
    for stmt in stmts:
        if isinstance(stmt, ast.Return):
            return True
        if isinstance(stmt, ast.If) and _always_returns(stmt.body) and _always_returns(stmt.orelse):
            return True
    return False


def _assigns(stmts: list[ast.stmt], name: str) -> bool:
    from .liveness import assigned

    return name in assigned(stmts)


def _check_no_return(conv: _Converter, body: list[ast.stmt]) -> None:
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            raise conv.error(
                node,
                "return inside a loop",
                "carry the result in a variable and return after the loop",
            )
        if isinstance(node, ast.FunctionDef | ast.Lambda | ast.expr):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _rebuild(expr: Expr) -> Expr:
    """``expr`` with slots filled or dropped, rebuilt bottom-up without
    recursion proportional to the chain's length."""
    from ..ir.expr import Let

    memo: dict[int, Expr] = {}
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in memo:
            continue
        kids = _kids(node)
        if not done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        if isinstance(node, Let):
            if isinstance(node.value, _Slot):
                slot = node.value
                body = memo[id(node.body)]
                if slot.var is None or slot.value is None:
                    memo[id(node)] = body
                else:
                    memo[id(node)] = Let(slot.var, memo[id(slot.value)], body, span=slot.value.span)
                continue
            memo[id(node)] = _replace(node, memo)
        else:
            memo[id(node)] = _replace(node, memo)
    return memo[id(expr)]


def _kids(node: Expr) -> list[Expr]:
    from ..ir.expr import Let

    if isinstance(node, Let) and isinstance(node.value, _Slot):
        kids = [node.body]
        if node.value.value is not None:
            kids.append(node.value.value)
        return kids
    return [c for c in node.children() if isinstance(c, Expr) and not isinstance(c, _Slot)]


def _replace(node: Expr, memo: dict[int, Expr]) -> Expr:
    """``node`` with its child expressions replaced from ``memo`` (the same
    node when none changed)."""
    import dataclasses

    changes: dict[str, Any] = {}
    for name, kind in node.FIELDS:
        value = getattr(node, name)
        if kind == "node" and isinstance(value, Expr) and id(value) in memo:
            if memo[id(value)] is not value:
                changes[name] = memo[id(value)]
        elif kind == "nodes":
            new = tuple(memo.get(id(v), v) if isinstance(v, Expr) else v for v in value)
            if any(a is not b for a, b in zip(new, value, strict=True)):
                changes[name] = new
    if not changes:
        return node
    return dataclasses.replace(node, **changes)
