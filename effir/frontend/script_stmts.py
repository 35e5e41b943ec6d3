"""Statements of ``@effir.script``: assignments, ``if`` (an ``if``
expression of the live names its branches assign; with ``return``s, the
rest of the block moved into the branches), loops (``cf.foreach`` /
``cf.while_loop`` over the carried variables liveness.py finds) and the
refused statements with their hints."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.diagnostics import Error, FrontendError
from ..ir.expr import Expr, Var
from ..ir.types import TensorType
from . import builder as B
from .liveness import (
    analyze_loop,
    append_target,
    assigned,
    branch_outputs,
    live_in,
    target_names,
)
from .script_exprs import BINOPS
from .script_values import (
    Collector,
    Converting,
    EmptyList,
    Return,
    Slot,
    StackedList,
    Staged,
    stacked_outputs,
)
from .spans import span_scope
from .values import to_expr

REFUSED_STMTS = {
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
    ast.Assert: ("assert", "check values before calling the program"),
}


NOTHING_LIVE: set[str] = set()


class StatementConverter:
    """The statement half of ``Converter`` (script_convert.py)."""

    def block(
        self, stmts: list[ast.stmt], env: dict[str, Any], live_out: set[str]
    ) -> Return | None:
        """Convert ``stmts`` in ``env`` (updated); a ``Return`` if they return."""
        # What is live after each compound statement (the only ones that need
        # it); one backward pass, a copy kept only there, so straight-line
        # code costs linear time.
        after: dict[int, set[str]] = {}
        live = set(live_out)
        for i in range(len(stmts) - 1, -1, -1):
            stmt = stmts[i]
            if isinstance(stmt, ast.If | ast.For | ast.While | ast.Match):
                after[i] = set(live)
            live = live_in([stmt], live)
        for i, stmt in enumerate(stmts):
            with span_scope(self.span(stmt)):
                if isinstance(stmt, ast.If) and _returns(stmt):
                    return self.returning_if(stmt, stmts[i + 1 :], env, live_out)
                if isinstance(stmt, ast.Match) and _returns(stmt):
                    return self.returning_match(stmt, stmts[i + 1 :], env, live_out)
                result = self.statement(stmt, env, after.get(i, NOTHING_LIVE))
            if result is not None:
                if i + 1 < len(stmts):
                    raise self.error(stmts[i + 1], "code after return never runs", "remove it")
                return result
        return None

    def statement(self, stmt: ast.stmt, env: dict[str, Any], live_after: set[str]) -> Return | None:
        refused = REFUSED_STMTS.get(type(stmt))
        if refused is not None:
            raise self.error(stmt, f"{refused[0]} is not supported in @effir.script", refused[1])
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self.error(stmt, "return without a value", "return a value")
            return Return(self.expr(stmt.value, env), stmt)
        if isinstance(stmt, ast.Assign):
            if isinstance(stmt.value, ast.List) and not stmt.value.elts:
                for t in stmt.targets:
                    if not isinstance(t, ast.Name):
                        raise self.error(t, "only a name can start as an empty list")
                    env[t.id] = EmptyList()
                return None
            mark = bindings_made()
            value = self.expr(stmt.value, env, lambda_slot=True)
            for target in stmt.targets:
                self.assign(target, value, env, mark)
            return None
        if isinstance(stmt, ast.AugAssign):
            op = BINOPS.get(type(stmt.op))
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
            mark = bindings_made()
            value = self.expr(stmt.value, env)
            with span_scope(self.span(stmt)):
                self.assign(stmt.target, self.binop(op, current, value, stmt), env, mark)
            return None
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                raise self.error(stmt, "a declaration without a value", "assign a value")
            mark = bindings_made()
            self.assign(stmt.target, self.expr(stmt.value, env), env, mark)
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
        if isinstance(stmt, ast.Match):
            self.plain_match(stmt, env, live_after)
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

    def staged(self, node: ast.FunctionDef | ast.Lambda, env: dict[str, Any]) -> Staged:
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
            raise self.error(
                node,
                "*args, **kwargs or default parameters in a nested function",
                "list each parameter",
            )
        block = B.current_block()
        slot = Slot()
        if block is not None:
            block.bindings.append((slot, slot))  # filled by fill_slots if used
            block.root.slots += 1
        env = dict(env)  # the names in scope where it is defined
        staged = Staged(self, node, env, slot)
        if isinstance(node, ast.FunctionDef):
            env[node.name] = staged
        return staged

    def assign(self, target: ast.expr, value: Any, env: dict[str, Any], mark: int = 0) -> None:
        """Bind ``target``'s names to ``value`` (its parts, unpacked); a
        binding made since ``mark`` (``bindings_made()`` before the value
        was computed; 0 for a loop's own values) takes the Python name."""
        if isinstance(target, ast.Name):
            env[target.id] = self.named(value, target.id, mark)
            return
        if isinstance(target, ast.Tuple | ast.List):
            with span_scope(self.span(target)):
                try:
                    items = list(value) if not isinstance(value, Staged) else None
                except FrontendError as err:
                    raise self.error(target, err.message, err.hint) from None
                if items is None or len(items) != len(target.elts):
                    raise self.error(
                        target,
                        f"cannot unpack into {len(target.elts)} names"
                        + (f" a value of {len(items)}" if items is not None else ""),
                    )
            for t, v in zip(target.elts, items, strict=True):
                self.assign(t, v, env, mark)
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

    def named(self, value: Any, name: str, mark: int = 0) -> Any:
        """Give the binding just made for ``value`` the Python name. Only a
        binding made by this statement (at ``mark`` or after): an earlier
        one (``c = a``) has its own name and uses, which renaming it would
        leave without a binder."""
        block = B.current_block()
        if (
            isinstance(value, Var)
            and block is not None
            and len(block.bindings) > mark
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
        if not isinstance(target, Collector):
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
    ) -> Return:
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
            return Return(B.cond(pred, branch(then_stmts), branch(else_stmts)))

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
            if not isinstance(env.get(name), EmptyList):
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
        appended: dict[str, Any] | None = None,
    ) -> tuple[Any, Any]:
        """One step of the loop: its outputs and new state; ``appended``
        gets what the step appended to each list (its structure: a tuple
        per step makes a ``StackedList``)."""
        inner = dict(env)
        inner.update(zip(carried, state, strict=True))
        if bind is not None:
            bind(inner)
        collectors = {n: Collector(n) for n in outputs}
        inner.update(collectors)
        self.block(stmt.body, inner, set(carried) | live_after)
        outs = []
        for name in outputs:
            value = collectors[name].value
            # The body's top-level appends (liveness.appended_lists) always run.
            assert value is not None, f"{name} was not appended to"
            if appended is not None:
                appended[name] = value
            outs.append(self.value_expr(value, stmt))
        new_state = tuple(self.value_expr(inner[n], stmt) for n in carried)
        return tuple(outs), new_state

    def finish_loop(self, env, carried, outputs, outs, final, weak, appended) -> None:
        for name, value in zip(carried, _marked(final, carried, weak), strict=True):
            env[name] = value
        for name, value in zip(outputs, outs, strict=True):
            env[name] = stacked_outputs(name, value, appended.get(name))

    def type_numbers(self, stmt, env, carried, outputs, bind, live_after) -> frozenset[str]:
        """A carried variable that starts as a Python number (``s = 0``)
        takes the dtype its first step gives it (``s = s + x`` with a float32
        ``x``: float32), as the eager Python would compute: the body is
        converted once, aside, with the numbers as they are. Returns the
        names whose first step gives a number again (``i = i + 1``): Python
        numbers when run eagerly, so weak (promotion.py)."""
        numbers = [
            n for n in carried if isinstance(env[n], int | float) and not isinstance(env[n], bool)
        ]
        if not numbers:
            return frozenset()
        root = B.current_block().root
        names, counters = set(root.names), dict(root.counters)
        try:
            with B._block():  # a throwaway block: this conversion is only looked at
                _, new_state = self.step(
                    stmt, env, carried, outputs, tuple(env[n] for n in carried), bind, live_after
                )
        except Error:
            return frozenset()  # the real conversion reports it
        finally:
            root.names, root.counters = names, counters  # its names are free again
        weak = set()
        for name, value in zip(carried, new_state, strict=True):
            if name in numbers and B.is_weak(value):
                weak.add(name)
            dtype = B.dtype_hint(value) if name in numbers else None
            if dtype is not None and dtype != "bool":
                env[name] = to_expr(env[name], dtype)
        return frozenset(weak)

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
            stacked = False
            if zipped:  # for a, b in zip(xs, ys): one foreach over the tuple (xs, ys)
                if any(k.arg != "strict" for k in it.keywords) or not it.args:
                    raise self.error(it, "zip takes the sequences only", "zip(xs, ys)")
                sequences = [self.expr(a, env) for a in it.args]
                if not all(isinstance(x, Expr | np.ndarray | StackedList) for x in sequences):
                    raise self.error(
                        it, "zip of values that are not tensors", "zip tensors of one length"
                    )
                xs = tuple(_sequence(x) for x in sequences)
            else:
                xs = self.expr(it, env)
                stacked = isinstance(xs, StackedList)
                xs = _sequence(xs)
            if not isinstance(xs, Expr | np.ndarray) and not (zipped or stacked):
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
        weak = self.type_numbers(
            stmt, env, carried, outputs, lambda inner: bind(inner, step_x), live_after
        )
        init = _one(self.initial(env, carried, stmt))
        n = len(carried)
        appended: dict[str, Any] = {}

        def body(x: Any, state: Any) -> Any:
            if range_args is not None:
                B.mark_weak(x)  # a Python int eagerly
            outs, new_state = self.step(
                stmt,
                env,
                carried,
                outputs,
                _marked(_many(state, n), carried, weak),
                lambda inner: bind(inner, x),
                live_after,
                appended,
            )
            return _one(outs), _one(new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.foreach(body, xs, init)
        self.finish_loop(
            env, carried, outputs, _many(outs, len(outputs)), _many(final, n), weak, appended
        )

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
        weak = self.type_numbers(
            stmt,
            env,
            carried,
            outputs,
            lambda inner: self.assign(stmt.target, counter, inner),
            live_after,
        )
        init = (to_expr(start, "int32"), *self.initial(env, carried, stmt))
        appended: dict[str, Any] = {}

        def cond(state: Any) -> Any:
            i = state[0]
            B.mark_weak(i)  # a Python int eagerly
            return i < stop if step > 0 else i > stop

        def body(state: Any) -> Any:
            i, *rest = state
            B.mark_weak(i)
            outs, new_state = self.step(
                stmt,
                env,
                carried,
                outputs,
                _marked(tuple(rest), carried, weak),
                lambda inner: self.assign(stmt.target, i, inner),
                live_after,
                appended,
            )
            return outs, (i + step, *new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.while_loop(cond, body, init, outputs=True)
        self.finish_loop(env, carried, outputs, outs, final[1:], weak, appended)

    def while_loop(self, stmt: ast.While, env: dict[str, Any], live_after: set[str]) -> None:
        carried, outputs = self.loop_state(stmt, env, live_after)
        weak = self.type_numbers(stmt, env, carried, outputs, None, live_after)
        init = self.initial(env, carried, stmt)
        if not carried:
            raise self.error(
                stmt,
                "this while loop changes nothing its condition reads",
                "assign a variable of the condition in the loop body",
            )

        n = len(carried)
        init = _one(init)
        appended: dict[str, Any] = {}

        def cond(state: Any) -> Any:
            inner = dict(env)
            inner.update(zip(carried, _marked(_many(state, n), carried, weak), strict=True))
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
                stmt,
                env,
                carried,
                outputs,
                _marked(_many(state, n), carried, weak),
                None,
                live_after,
                appended,
            )
            return _one(outs), _one(new_state)

        with span_scope(self.span(stmt)):
            outs, final = B.while_loop(cond, body, init, outputs=True)
        self.finish_loop(
            env, carried, outputs, _many(outs, len(outputs)), _many(final, n), weak, appended
        )


def _marked(values: tuple, carried: tuple[str, ...], weak: frozenset[str]) -> tuple:
    """``values`` of the ``carried`` names, those in ``weak`` marked weak
    (Python numbers when the function runs eagerly: promotion.py)."""
    for name, value in zip(carried, values, strict=True):
        if name in weak:
            B.mark_weak(value)
    return values


def _sequence(value: Any) -> Any:
    """What a ``for`` walks for ``value``: a ``StackedList``'s stacked
    fields (each step their tuple), else the value itself."""
    return value.fields if isinstance(value, StackedList) else value


def _one(values: tuple) -> Any:
    """A loop's state or outputs: one value as itself, several as a tuple."""
    return values[0] if len(values) == 1 else values


def _many(value: Any, n: int) -> tuple:
    return (value,) if n == 1 else tuple(value)


def _returns(stmt: ast.If | ast.Match) -> bool:
    """Whether a return appears in the if's branches or the match's cases
    (nested functions aside)."""
    if isinstance(stmt, ast.Match):
        stack: list[ast.AST] = [s for case in stmt.cases for s in case.body]
    else:
        stack = [*stmt.body, *stmt.orelse]
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
        if isinstance(stmt, ast.Match) and all(_always_returns(c.body) for c in stmt.cases):
            return True  # a scripted match is exhaustive (script_match.py)
    return False


def _assigns(stmts: list[ast.stmt], name: str) -> bool:
    return name in assigned(stmts)


def _check_no_return(conv: Converting, body: list[ast.stmt]) -> None:
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


def bindings_made() -> int:
    """How many bindings the current block holds: the mark a statement
    takes before computing its value (``Converter.named``)."""
    block = B.current_block()
    return 0 if block is None else len(block.bindings)
