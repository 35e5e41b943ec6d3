"""The reference interpreter: the definition of effir's semantics.

Every pass and backend is tested against it, so it is written to be obviously
right rather than fast: values are numpy arrays and plain Python objects
(``effir.runtime.values``), each operator runs its registered numpy rule, and
the program's control is a loop over an explicit stack.

How it runs without Python recursion: the interpreter is an
``effir.ir.evaluator.Evaluator``, one rule per expression class, in an
environment; a rule yields the evaluation of a compound sub-expression to
the walker's stack. A let chain is a loop in one rule; the expression in
tail position of a ``let``, an ``if``, a ``match`` or a call's body is
*returned* as the rule's continuation, which replaces the rule on the stack
(proper tail calls); a non-tail evaluation pushes one entry. A 10,000-deep
recursion is a 10,000-element list, not 10,000 Python frames. Control-flow
operators are generators too: they yield ``(function, args)`` requests
that run here.

State: global cells live in an explicit ``State`` (each cell's ``RefValue``,
initialised from its declaration); the caller owns it and sees it updated,
never a hidden global. Each call is a transaction on it (state.py): the
State's lock is held for the call, and a call that raises leaves every cell
as it was. ``debug.print`` writes to the caller's ``sink``.

Environments: one dict per function activation, chained to the closure's
captured environment. Binders are unique (well-formedness), so a variable is
bound once per activation and a closure may share its creator's dict.

Sharing: a sub-expression used in several places (the text's graph form,
``%0 = ...;``) is evaluated once per activation, as its ``let`` in A-normal
form would be (Relay's interpreter converts to ANF first for the same
reason); its effects happen once.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..ir import analysis
from ..ir.diagnostics import ArgumentError, EvalError, Span, TypeCheckError
from ..ir.evaluator import Evaluator
from ..ir.expr import (
    ATOM_TYPES,
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.functor import on
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import OpDef, op_def
from ..ir.program import Program, resolve
from ..ir.types import TensorType, TupleType, Type, TypeCall
from ..ops.effects import WORLD
from ..ops.relations import OpFailure
from ..passes.analyses.infer_type import check
from ..runtime.arguments import (
    bind_arguments,
    check_argument,
    check_call_options,
    convert_argument,
    unknown_entry,
)
from ..runtime.limits import fully_sized, static_bytes, too_large
from ..runtime.values import ADTValue, RefValue, adt_value, describe_value
from .state import State, register_initialiser_evaluator, type_of_value

Sink = Callable[[str, Any], None]

_CHECKING = threading.Lock()  # one lazy type check at a time (Interpreter._check_module)

# Failures inside numpy rules that are the program's fault (a size no
# memory holds included: the limit refuses most before numpy is asked).
_RUNTIME_FAILURES = (
    OpFailure,
    ValueError,
    IndexError,
    ZeroDivisionError,
    FloatingPointError,
    MemoryError,
    OverflowError,
)


class Env:
    """One activation's variables, chained to the enclosing closure's, and
    the values of the shared sub-expressions it has evaluated."""

    __slots__ = ("values", "parent", "shared", "dims")

    def __init__(self, parent: Env | None = None) -> None:
        self.values: dict[Var, Any] = {}
        self.parent = parent
        self.shared: dict[int, Any] | None = None
        # The sizes the call's arguments gave the function's symbolic
        # dimensions (the type of a loop that ran zero times needs them).
        self.dims: dict[str, int] | None = None

    def dim_sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        env: Env | None = self
        while env is not None:
            for name, size in (env.dims or {}).items():
                sizes.setdefault(name, size)
            env = env.parent
        return sizes

    def shared_value(self, expr: Expr) -> Any:
        env: Env | None = self
        while env is not None:
            if env.shared is not None and id(expr) in env.shared:
                return env.shared[id(expr)]
            env = env.parent
        return _MISSING

    def remember(self, expr: Expr, value: Any) -> None:
        if self.shared is None:
            self.shared = {}
        self.shared[id(expr)] = value

    def lookup(self, var: Var) -> Any:
        env: Env | None = self
        while env is not None:
            values = env.values
            if var in values:
                return values[var]
            env = env.parent
        raise EvalError(f"variable %{var.name_hint} is used before it has a value", var.span)


class Closure:
    """A function value: a Function and the environment it captured."""

    __slots__ = ("function", "env", "name")

    def __init__(self, function: Function, env: Env | None, name: str | None = None) -> None:
        self.function = function
        self.env = env
        self.name = name

    def __repr__(self) -> str:
        return f"<closure {self.name or 'fn'}/{len(self.function.params)}>"


class ConstructorFunction:
    """A constructor used as a function value."""

    __slots__ = ("constructor",)

    def __init__(self, constructor: Constructor) -> None:
        self.constructor = constructor

    def __repr__(self) -> str:
        return f"<constructor {self.constructor.name}>"


def print_sink(label: str, value: Any) -> None:
    """The default ``debug.print`` sink: standard output."""
    text = describe_value(value)
    print(f"{label}: {text}" if label else text, file=sys.stdout, flush=True)


def interpret(
    module: IRModule | Any,
    /,
    *args: Any,
    entry: str | None = None,
    state: State | None = None,
    sink: Sink | None = None,
    kernels: Mapping[Function | Call, Callable[..., Any]] | None = None,
    **named: Any,
) -> Any:
    """Run ``@entry`` on ``args`` (and ``named`` arguments, by parameter
    name) and return its result. ``module`` is a module (``@main`` by
    default), a function made by ``@effir.script``/``effir.trace`` (its
    own function by default: ir/program.py), or the ``Program`` that
    ``effir.value_and_grad(f)`` gives (run as ``interpret_a2`` runs it:
    the state its cells hold is passed and updated, as a compiled call
    does).

    ``state`` holds the global cells and is updated in place, all or
    nothing, one call at a time (a fresh one from the declarations when
    None); ``sink(label, value)`` receives what ``debug.print`` prints
    (standard output by default); ``kernels`` maps
    functions to compiled code that runs in their place (the TVM backend's
    executor). Arguments follow the input contract of
    effir/runtime/arguments.py; run-time errors are ``effir.EvalError``
    naming the operator and the source location."""
    check_call_options(entry, state, sink, State)
    if isinstance(module, Program):
        # a gradient program (effir.value_and_grad of a function) is
        # state-passing: its cells are threaded as a compiled call threads them
        return interpret_a2(
            module, *args, entry=entry, state=state, sink=sink, kernels=kernels, **named
        )
    module, name = resolve(module, entry, ArgumentError, "effir.interpret")
    if state is None:
        state = State(module)
    else:
        state.check_for(module)
    with state.transaction():  # all or nothing, one call at a time (state.py)
        return Interpreter(module, state, sink, kernels).call_global(name, args, named)


def interpret_a2(
    module: IRModule | Any,
    /,
    *args: Any,
    entry: str | None = None,
    state: State | None = None,
    sink: Sink | None = None,
    kernels: Mapping[Function | Call, Callable[..., Any]] | None = None,
    **named: Any,
) -> Any:
    """Run a state-passing (A2) ``@entry`` as if it were the effectful
    program it came from: the current values of the cells the entry's
    ``state_in`` attribute names are passed after ``args``, the new values
    it returns (``state_out``) are written back into ``state``, and the
    user's result is returned. The world token ``io`` starts at 0 and is
    dropped at the end. ``interpret(a1, *args, state=s1)`` and
    ``interpret_a2(a2, *args, state=s2)`` then compare result for result and
    state for state."""
    check_call_options(entry, state, sink, State)
    module, name = resolve(module, entry, ArgumentError, "effir.interpret")
    if state is None:
        state = State(module)
    else:
        state.check_for(module)
    fn = module.functions[name]
    state_in, state_out = (state_cells(fn, a, name) for a in ("state_in", "state_out"))
    unknown = [c for c in (*state_in, *state_out) if c != WORLD and c not in state.cells]
    if unknown:
        raise EvalError(f"@{name} passes the state of @{unknown[0]}, which the state does not hold")
    # The lock is held from the read of the cells to the write of their new
    # values, so that concurrent calls never start from the same state.
    with state.transaction():
        values = tuple(np.int64(0) if c == WORLD else state[c] for c in state_in)
        params = fn.params
        user = bind_arguments(
            f"@{name}", [p.name_hint for p in params[: len(params) - len(state_in)]], args, named
        )
        result = Interpreter(module, state, sink, kernels).call_global(name, (*user, *values))
        if not state_out:
            return result
        if not isinstance(result, tuple) or len(result) != 1 + len(state_out):
            raise EvalError(
                f"@{name} returns {describe_value(result)}, not its result followed by the "
                f"{len(state_out)} state value(s) its state_out names",
                fn.span,
            )
        for cell, value in zip(state_out, result[1:], strict=True):
            if cell != WORLD:
                state.cells[cell].value = value
        return result[0]


def state_cells(fn: Function, attr: str, name: str) -> tuple[str, ...]:
    """The cells ``fn``'s ``state_in`` or ``state_out`` attribute names."""
    cells = fn.attrs.get(attr, ())
    if not isinstance(cells, tuple) or not all(isinstance(c, str) for c in cells):
        raise EvalError(f"{attr} of @{name} must be a list of cell names, got {cells!r}", fn.span)
    return cells


class Interpreter(Evaluator):
    """Evaluates expressions of one module against one ``State``: rules
    ``(expr, env) -> value``."""

    def __init__(
        self,
        module: IRModule,
        state: State | None = None,
        sink: Sink | None = None,
        kernels: Mapping[Function | Call, Callable[..., Any]] | None = None,
    ):
        self.module = module
        self.state = state
        self.sink = sink or print_sink
        # Compiled code (a backend's kernels): a call of a closure of a
        # function found here runs the kernel on the argument values instead
        # of evaluating the body; a control-flow call found here runs the
        # kernel on the operator's arguments (closures included) instead of
        # stepping through its bodies.
        self.kernels = kernels or {}
        self._globals: dict[str, Closure] = {}
        self._shared = shared_nodes(module)
        self._sized: set[int] = set()  # calls whose result size the limit allowed
        self._checked = False  # whether _check_module ran
        self._sized_at_run_time: set[int] = set()  # ... whose types leave it to the run

    # ------------------------------------------------------------ entry
    def call_global(
        self, name: str, args: tuple[Any, ...], named: Mapping[str, Any] | None = None
    ) -> Any:
        name = name.removeprefix("@")
        if name not in self.module.functions:
            raise unknown_entry(name, self.module.functions)
        closure = self._global(name)
        fn = closure.function
        bound = bind_arguments(f"@{name}", [p.name_hint for p in fn.params], args, named or {})
        adts = self.module.type_defs
        converted = tuple(
            convert_argument(a, p.type_annotation, f"argument %{p.name_hint} of @{name}", adts)
            for p, a in zip(fn.params, bound, strict=True)
        )
        # ADT arguments are checked through and through once, here (as a
        # compiled entry checks them); calls inside check their own level
        dims: dict[str, int] = {}
        for p, value in zip(fn.params, converted, strict=True):
            if isinstance(p.type_annotation, TypeCall):
                where = f"parameter %{p.name_hint} of @{name}"
                check_argument(value, p.type_annotation, dims, where, p.span, adts)
        return self.drive(self._apply(closure, converted, None))

    def evaluate(self, expr: Expr) -> Any:
        """The value of a closed expression."""
        self._shared |= shared_nodes(expr)
        return self.drive(self.eval(expr, Env()))

    def _global(self, name: str) -> Closure:
        closure = self._globals.get(name)
        if closure is None:
            closure = Closure(self.module.functions[name], None, "@" + name)
            self._globals[name] = closure
        return closure

    # -------------------------------------------------------- evaluation
    def _atom(self, expr: Expr, env: Env) -> Any:
        if isinstance(expr, Var):
            return env.lookup(expr)
        if isinstance(expr, Constant):
            return expr.data
        if isinstance(expr, GlobalVar):
            if expr.name in self.module.functions:
                return self._global(expr.name)
            if self.state is not None and expr.name in self.state.cells:
                return self.state.cells[expr.name]
            raise EvalError(f"@{expr.name} is not defined", expr.span)
        if isinstance(expr, Constructor):
            return ConstructorFunction(expr)
        assert isinstance(expr, Op)
        raise EvalError(f"operator {expr.name} used as a value", expr.span)

    def eval(self, expr: Node, env: Env) -> Any:  # type: ignore[override]
        """The value of ``expr`` in ``env``, or its computation. A shared
        sub-expression is evaluated once per activation."""
        if id(expr) in self._shared and not isinstance(expr, ATOM_TYPES):
            value = env.shared_value(expr)
            if value is _MISSING:
                return self._evaluate_shared(expr, env)
            return value
        plan = self._plans.get(type(expr)) or self.plan(type(expr))
        return plan[0](self, expr, env)  # Evaluator.eval, inlined: the hottest call

    def _evaluate_shared(self, expr: Expr, env: Env):
        value = yield Evaluator.eval(self, expr, env)
        env.remember(expr, value)
        return value

    @on(*ATOM_TYPES)
    def _atom_rule(self, expr: Expr, env: Env) -> Any:
        return self._atom(expr, env)

    @on(Let)
    def _let(self, expr: Let, env: Env):
        """A let chain in one loop; its body is the continuation."""
        while isinstance(expr, Let):
            value = expr.value
            if isinstance(value, Function):
                result = Closure(value, env, expr.var.name_hint)
            elif isinstance(value, ATOM_TYPES):
                result = self._atom(value, env)
            elif id(value) not in self._shared and (simple := _simple_op(value)):
                args = tuple(self._atom(a, env) for a in value.args)
                result = self._call_simple_op(value, simple, args)
            else:
                result = yield self.eval(value, env)
            if expr.var.type_annotation is not None:
                check_argument(
                    result,
                    expr.var.type_annotation,
                    {},
                    f"%{expr.var.name_hint}",
                    expr.var.span,
                )
            env.values[expr.var] = result
            expr = expr.body
        return self.eval(expr, env)

    @on(Call)
    def _call(self, expr: Call, env: Env):
        callee = expr.callee
        args = []
        for a in expr.args:
            args.append(
                self._atom(a, env) if isinstance(a, ATOM_TYPES) else (yield self.eval(a, env))
            )
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" not in definition.traits:
                return self._call_simple_op(expr, definition, tuple(args))
            return (yield self._run_control_flow(expr, definition, tuple(args), env))
        if isinstance(callee, Constructor):
            return adt_value(callee.adt, callee.name, tuple(args))
        fn = (
            self._atom(callee, env)
            if isinstance(callee, ATOM_TYPES)
            else (yield self.eval(callee, env))
        )
        if isinstance(fn, ConstructorFunction):
            return adt_value(fn.constructor.adt, fn.constructor.name, tuple(args))
        if not isinstance(fn, Closure):
            raise EvalError(f"calling a value that is not a function: {fn!r}", expr.span)
        kernel = self.kernels.get(fn.function) if self.kernels else None
        if kernel is not None:
            return self._run_kernel(kernel, fn, tuple(args), expr.span)
        # A call in tail position: the callee's body continues in its place.
        body, env = self._enter(fn, tuple(args), expr.span)
        return self.eval(body, env)

    @on(If)
    def _if(self, expr: If, env: Env):
        cond = yield self.eval(expr.cond, env)
        return self.eval(expr.then_branch if _truth(cond, expr) else expr.else_branch, env)

    @on(Match)
    def _match(self, expr: Match, env: Env):
        data = yield self.eval(expr.data, env)
        return self.eval(self._select_clause(expr, data, env), env)

    @on(Function)
    def _function(self, expr: Function, env: Env) -> Closure:
        return Closure(expr, env)

    @on(Tuple)
    def _tuple(self, expr: Tuple, env: Env):
        fields = []
        for f in expr.fields:
            fields.append(
                self._atom(f, env) if isinstance(f, ATOM_TYPES) else (yield self.eval(f, env))
            )
        return tuple(fields)

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, env: Env):
        value = yield self.eval(expr.tuple_value, env)
        if not isinstance(value, tuple) or not 0 <= expr.index < len(value):
            raise EvalError(f"cannot take field {expr.index} of {describe_value(value)}", expr.span)
        return value[expr.index]

    @on(RefCreate)
    def _ref_create(self, expr: RefCreate, env: Env):
        return RefValue((yield self.eval(expr.value, env)))

    @on(RefRead)
    def _ref_read(self, expr: RefRead, env: Env):
        ref = yield self.eval(expr.ref, env)
        return _expect_ref(ref, expr).value

    @on(RefWrite)
    def _ref_write(self, expr: RefWrite, env: Env):
        ref = _expect_ref((yield self.eval(expr.ref, env)), expr)
        ref.value = yield self.eval(expr.value, env)
        return ()

    @on(Node)
    def _other(self, expr: Node, env: Env) -> Any:
        raise EvalError(f"cannot evaluate {type(expr).__name__}", getattr(expr, "span", None))

    def _enter(self, closure: Closure, args: tuple[Any, ...], span: Span | None):
        """Bind a call's arguments: the body to evaluate and its environment."""
        fn = closure.function
        if len(args) != len(fn.params):
            name = closure.name or "the function"
            raise EvalError(f"{name} takes {len(fn.params)} argument(s), got {len(args)}", span)
        env = Env(closure.env)
        dims: dict[str, int] = {}
        for param, arg in zip(fn.params, args, strict=True):
            if param.type_annotation is not None:
                check_argument(arg, param.type_annotation, dims, _where(param, closure), param.span)
            env.values[param] = arg
        env.dims = dims or None
        return fn.body, env

    def _apply(self, closure: Closure, args: tuple[Any, ...], span: Span | None):
        kernel = self.kernels.get(closure.function) if self.kernels else None
        if kernel is not None:
            return self._run_kernel(kernel, closure, args, span)
        body, env = self._enter(closure, args, span)
        return (yield self.eval(body, env))

    def _run_kernel(self, kernel, closure: Closure, args: tuple[Any, ...], span: Span | None):
        """A compiled function's result; its parameter checks are the body's."""
        fn = closure.function
        if len(args) != len(fn.params):
            name = closure.name or "the function"
            raise EvalError(f"{name} takes {len(fn.params)} argument(s), got {len(args)}", span)
        dims: dict[str, int] = {}
        for param, arg in zip(fn.params, args, strict=True):
            if param.type_annotation is not None:
                check_argument(arg, param.type_annotation, dims, _where(param, closure), param.span)
        try:
            return kernel(*args)
        except _RUNTIME_FAILURES as err:
            name = closure.name or "a compiled function"
            raise EvalError(f"{name}: {_failure_text(err)}", span) from None

    def _run_control_flow(self, call: Call, definition: OpDef, args: tuple[Any, ...], env: Env):
        """Generator: a control-flow operator, whose rule asks for its bodies
        to be run through the trampoline."""
        name = definition.name
        if id(call) not in self._sized:
            self._check_size(call, name)
        kernel = self.kernels.get(call) if self.kernels else None
        if kernel is not None:  # the whole loop compiled: no step runs here
            try:
                return kernel(*args)
            except _RUNTIME_FAILURES as err:
                raise EvalError(f"{name}: {_failure_text(err)}", call.span) from None
        impl = _numpy_rule(definition, call)

        def out_type() -> Type | None:
            """The stacked outputs' type, asked for only by a loop that
            ran zero times (the empty outputs' shape comes from it)."""
            if not call.has_type:
                self._check_module()
            if not call.has_type:
                return None
            return _with_sizes(call.checked_type.fields[0], env)  # type: ignore[attr-defined]

        try:
            steps = impl(args, call.attrs, out_type=out_type)
            request = next(steps)
            while True:
                fn, fn_args = request
                if not isinstance(fn, Closure):
                    raise EvalError(f"{name}: the body is not a function", call.span)
                result = yield self._apply(fn, fn_args, call.span)
                request = steps.send(result)
        except StopIteration as done:
            return done.value
        except _RUNTIME_FAILURES as err:
            raise EvalError(f"{name}: {_failure_text(err)}", call.span) from None

    def _check_module(self) -> None:
        """Type the module being run, which its caller did not check (a
        scripted, traced or parsed module): the types are the semantics of
        an empty loop's outputs (docs/semantics.md §7.1). Once per
        interpreter, under a lock (checking sets the types on the nodes,
        which other threads may be running); an ill-typed module stays
        untyped, and the loop says it has no type to go by."""
        if self._checked:
            return
        self._checked = True
        with _CHECKING:
            try:
                check(self.module)
            except TypeCheckError:
                pass

    def _call_simple_op(self, call: Call, definition: OpDef, args: tuple[Any, ...]) -> Any:
        if id(call) not in self._sized:
            self._check_size(call, definition.name)
        if id(call) in self._sized_at_run_time:
            self._check_run_time_size(call, definition, args)
        impl = _numpy_rule(definition, call)
        try:
            if definition.effect == "io":
                return impl(args, call.attrs, sink=self.sink)
            return impl(args, call.attrs)
        except _RUNTIME_FAILURES as err:
            raise EvalError(f"{definition.name}: {_failure_text(err)}", call.span) from None

    def _check_size(self, call: Call, name: str) -> None:
        """Refuse, before it runs, an operator whose checked type says its
        result is larger than the size limit (runtime/limits.py). Checked
        once per call node: its type does not change. Rules whose sizes come
        from attributes or data check again (``ops.relations.allocation``),
        for untyped programs and ``?`` dimensions."""
        if call.has_type:
            message = too_large(static_bytes(call.checked_type), f"{name}: its result")
            if message is not None:
                raise EvalError(message, call.span)
        if not call.has_type or not fully_sized(call.checked_type):
            self._sized_at_run_time.add(id(call))
        self._sized.add(id(call))

    def _check_run_time_size(self, call: Call, definition: OpDef, args: tuple[Any, ...]) -> None:
        """Refuse, before it runs, an operator whose result size its type
        leaves to the run (a symbolic dimension, an untyped program): the
        operator's type relation on its arguments' actual types gives the
        result's sizes. A relation that cannot say (a size that depends on
        data, arguments it refuses) leaves it to the rule, which checks
        what it allocates (``ops.relations.allocation``) or reports the
        arguments' error itself."""
        types = [type_of_value(a) for a in args]
        relation = definition.rules.get("type")
        if relation is None or any(t is None for t in types):
            return
        try:
            result = relation(tuple(types), call.attrs)
        except Exception:  # (the rule reports what is wrong with the arguments)
            return
        message = too_large(static_bytes(result), f"{definition.name}: its result")
        if message is not None:
            raise EvalError(message, call.span)

    def _select_clause(self, match: Match, data: Any, env: Env) -> Expr:
        for clause in match.clauses:
            bindings = _match_pattern(clause.pattern, data)
            if bindings is not None:
                env.values.update(bindings)
                return clause.body
        kind = "match" if match.complete else "match?"
        raise EvalError(
            f"no clause of this {kind} matches the value {describe_value(data)}", match.span
        )


_MISSING = object()


def shared_nodes(root: IRModule | Expr) -> set[int]:
    """Identities of the expressions reachable along more than one path
    (``effir.ir.analysis.shared_nodes`` of the functions and cell initial
    values of a module, or of one expression)."""
    if isinstance(root, IRModule):
        return analysis.shared_nodes(
            *root.functions.values(), *(c.init for c in root.cells.values())
        )
    return analysis.shared_nodes(root)


def _failure_text(err: BaseException) -> str:
    """An operator's failure for its message (a MemoryError has no text)."""
    if isinstance(err, MemoryError):
        return f"out of memory{f' ({err})' if str(err) else ''}"
    if isinstance(err, OverflowError):
        return f"a size or value too large to represent ({err})"
    return str(err)


def _numpy_rule(definition: OpDef, call: Call) -> Any:
    impl = definition.rules.get("numpy")
    if impl is None:
        raise EvalError(f"operator {definition.name} has no numpy rule registered", call.span)
    return impl


def _simple_op(expr: Expr) -> OpDef | None:
    """The operator of a call with atom arguments that runs no function (it
    is evaluated in place, without a generator of its own), else None."""
    if not isinstance(expr, Call) or not isinstance(expr.callee, Op):
        return None
    definition = op_def(expr.callee)
    if "control_flow" in definition.traits:
        return None
    return definition if all(isinstance(a, ATOM_TYPES) for a in expr.args) else None


def _truth(cond: Any, expr: If) -> bool:
    array = np.asarray(cond)
    if array.shape != () or array.dtype != np.bool_:
        raise EvalError(
            f"the condition of if must be a bool scalar, got {describe_value(cond)}", expr.span
        )
    return bool(array)


def _expect_ref(value: Any, expr: Expr) -> RefValue:
    if not isinstance(value, RefValue):
        raise EvalError(f"expected a reference, got {describe_value(value)}", expr.span)
    return value


def _match_pattern(pattern: Pattern, value: Any) -> dict[Var, Any] | None:
    bindings: dict[Var, Any] = {}
    work = [(pattern, value)]
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            bindings[p.var] = v
        elif isinstance(p, PatternTuple):
            if not isinstance(v, tuple) or len(v) != len(p.patterns):
                return None
            work.extend(zip(p.patterns, v, strict=True))
        elif isinstance(p, PatternConstructor):
            if not isinstance(v, ADTValue) or v.constructor != p.constructor.name:
                return None
            if len(v.fields) != len(p.patterns):
                return None
            work.extend(zip(p.patterns, v.fields, strict=True))
    return bindings


def _where(param: Var, closure: Closure) -> str:
    name = f"%{param.name_hint}"
    return f"parameter {name} of {closure.name}" if closure.name else name


def _with_sizes(t: Type, env: Env) -> Type:
    """``t`` with the symbolic dimensions the enclosing calls bound replaced
    by their sizes: the shape of a loop's stacked output when it ran zero
    times (``xs[:0]``) is then known, as it is in compiled code."""
    sizes = env.dim_sizes()
    if not sizes:
        return t
    if isinstance(t, TupleType):
        return TupleType(tuple(_with_sizes(f, env) for f in t.fields))
    if isinstance(t, TensorType):
        return TensorType(
            tuple(sizes.get(d, d) if isinstance(d, str) else d for d in t.shape), t.dtype
        )
    return t


register_initialiser_evaluator(lambda module, state: Interpreter(module, state).evaluate)
