"""Type and shape inference (``effir.check``): every expression gets its type.

The algorithm is Hindley-Milner unification specialised to effir, as Relay's
type inferencer is:

1. Every global function gets its signature from its annotations; a missing
   annotation becomes an ``IncompleteType`` shared by all uses
   (monomorphic, as in Relay). Declared type parameters (``def @map[A, B]``)
   are instantiated afresh at each use, so global functions are polymorphic.
2. Bodies are walked once, in order, on the trampoline (no Python recursion
   proportional to program size). Constructs unify their parts: a let's
   variable with its value, a callee's parameters with its arguments. A
   value that is one of several (both branches of an ``if``, the clauses of
   a ``match``) has their join instead, which is ``?`` where their sizes
   differ [RULE TYPE-JOIN] (``type_solver.py``); no unification narrows a
   variable's type.
3. An operator call asks the operator's type relation (``rules["type"]``,
   registered beside the operator). If an argument type is still unknown the
   relation says ``NotReady`` and the call waits in a queue; the queue is
   retried until nothing changes [RULE TYPE-WAIT]. Control-flow operators unify the
   types of the functions they take, which is how an unannotated loop body
   learns its parameter types.
4. Symbolic dimensions (``n``) are rigid inside the global function that
   mentions them: ``n`` equals only ``n`` (and ``?``). They belong to that
   function, like implicit type parameters: at a call of a global function,
   its symbolic dimensions are matched against the arguments' dimensions and
   the result type is written in the caller's dimensions [RULE TYPE-CALLDIMS]. A ``?``
   matches anything and is checked at run time.
5. After all bodies, every type is resolved and cached on its expression
   (``expr.checked_type``). A variable whose type is still unknown is an
   error asking for an annotation.

Errors do not stop the walk: the failing expression gets a fresh unknown
type (so one mistake is reported once) and all errors are raised together
as one ``TypeCheckError`` whose ``errors`` lists them, each located.

Known imprecisions: a global function used as a value (not called) loses
its symbolic dimensions (they become ``?``); local functions are
monomorphic; function types' effect annotations are not compared here
(effect inference checks effects).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from effir.ir.collector import collector_paced
from effir.ir.diagnostics import TypeCheckError
from effir.ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalCell,
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
from effir.ir.expr_functor import Computation, ExprFunctor
from effir.ir.functor import on
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.types import (
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
)
from effir.ir.well_formed import check_well_formed
from effir.ops.relations import NotReady
from effir.passes.analyses.call_graph import definition_order
from effir.passes.analyses.exhaustiveness import missing_case
from effir.passes.analyses.infer_calls import CallRules, call_site
from effir.passes.analyses.infer_state import InferenceState
from effir.passes.analyses.type_solver import UnifyError, rename_dims, show, substitute

BOOL_SCALAR = TensorType((), "bool")
UNIT = TupleType(())


def check(module: IRModule) -> IRModule:
    """Type-check ``module``: returns it with ``checked_type`` set on every
    expression (operators and constructors excepted: they are polymorphic and
    shared, so a use's type is its ``Call``'s), or raises ``TypeCheckError``
    listing every error found.

    Checking again the module checked last, with no other check since, does
    nothing: a module is immutable, so it is still well typed, and no other
    check has set the types of nodes it shares with another module. (A pass
    that checks its input right after the pass context verified it, or the
    context verifying what a pass already checked, costs nothing.)"""
    if _LAST_CHECKED.holds(module):
        return module
    with _LAST_CHECKED.checking(module), collector_paced():
        check_well_formed(module)
        TypeInferencer(module).run()
    return module


def typed_if_possible(module: IRModule) -> IRModule:
    """``module`` type-checked when it is not yet and can be; a module that
    does not type-check is returned as it is (its nodes keep no types).
    For analyses and passes that use types where they are known and stay
    conservative where not: effect inference, ``cse``'s keys."""
    roots = [fn.body for fn in module.functions.values()]
    roots.extend(cell.init for cell in module.cells.values())
    if all(r.has_type for r in roots):
        return module
    try:
        return check(module)
    except TypeCheckError:
        return module


def infer_expr(expr: Expr, module: IRModule | None = None) -> Type:
    """The type of a closed expression (its free global references resolved in
    ``module``)."""
    module = module or IRModule()
    with _LAST_CHECKED.checking(None):  # it sets types, perhaps of shared nodes
        check_well_formed(expr, module)
        inferencer = TypeInferencer(module)
        return inferencer.run_expr(expr)


class _LastChecked:
    """The module whose check succeeded last, while no check (of it or of
    anything else) has started since. Every check takes a new stamp when it
    starts and when it ends, so a check that overlaps another one (in
    another thread) leaves nothing remembered."""

    def __init__(self) -> None:
        self._stamps = itertools.count()
        self._stamp = next(self._stamps)
        self._module: IRModule | None = None
        self._valid_at = -1

    def holds(self, module: IRModule) -> bool:
        return module is self._module and self._valid_at == self._stamp

    @contextlib.contextmanager
    def checking(self, module: IRModule | None) -> Iterator[None]:
        start = self._stamp = next(self._stamps)
        self._module = None
        ok = False
        try:
            yield
            ok = True
        finally:
            overlapped = self._stamp != start
            self._stamp = end = next(self._stamps)
            if ok and module is not None and not overlapped:
                self._module, self._valid_at = module, end


_LAST_CHECKED = _LastChecked()


class TypeInferencer(ExprFunctor):
    """An ``ExprFunctor``: one generator hook per expression class, run
    through ``eval`` (a type already known, or the hook between its span's
    push and pop, its result recorded). Calls go to ``CallRules``
    (infer_calls.py); both share one ``InferenceState`` (infer_state.py)."""

    def __init__(self, module: IRModule) -> None:
        ExprFunctor.__init__(self)
        self.state = InferenceState(module)
        self.calls = CallRules(self.state, self)

    # ---------------------------------------------------------------- driver
    def run(self) -> None:
        module = self.state.module
        for name, fn in module.functions.items():
            self.state.signatures[name] = self._signature(fn)
        for name, cell in module.cells.items():
            self._check_cell(name, cell)
        # One function needs no call graph (the walk that builds it visits
        # every node).
        order = list(module.functions) if len(module.functions) < 2 else definition_order(module)
        for name in order:
            fn = module.functions[name]
            self.state.span_stack = [fn.span]
            fn_type = self.evaluate(fn)
            self.state.unify(self.state.signatures[name], fn_type, fn, f"the definition of @{name}")
            self.state.solve_pending()
        self._finish()

    def run_expr(self, expr: Expr) -> Type:
        # The signatures of the globals the expression calls, made when
        # first asked for: typing one function against a large module
        # (each copy passes/transforms/specialise_dims.py makes) costs that function.
        self.state.signatures = _Signatures(self.state.module, self._signature)
        for name, cell in self.state.module.cells.items():
            self._check_cell(name, cell)
        self.state.span_stack = [expr.span]
        result = self.evaluate(expr)
        self.state.solve_pending()
        self._finish()
        return self.state.solver.resolve(result)

    def _finish(self) -> None:
        self.state.solve_pending()
        if not self.state.errors:
            for item in self.state.pending:
                self.state.error(
                    "cannot infer the argument types of this call; add a type annotation",
                    item.node,
                    item.span,
                )
        # Each variable's type is resolved once, and is complete when no
        # unknown is left in it.
        resolve = self.state.solver.resolve
        memo: dict[int, Type] = {}
        var_types: dict[Var, Type] = {}
        if not self.state.errors:
            var_types = {v: resolve(t, memo) for v, t in self.state.var_types.items()}
            complete = _Completeness()
            unknown = [v for v, t in var_types.items() if not complete(t)]
            # Name the variables with nothing known first: they need the annotation.
            bare = [
                v
                for v in unknown
                if isinstance(self.state.solver.head(self.state.var_types[v]), IncompleteType)
            ]
            for var in bare or unknown:
                known = show(self.state.solver.resolve(self.state.var_types[var]))
                self.state.error(
                    f"cannot infer the type of %{var.name_hint} "
                    f"(known so far: {known}); add a type annotation",
                    var,
                )
        if self.state.errors:
            raise TypeCheckError.combine(self.state.errors)
        for expr, t in self.state.types.items():
            expr.set_checked_type(resolve(t, memo))
        for var, t in var_types.items():
            var.set_checked_type(t)

    def _signature(self, fn: Function) -> FuncType:
        params = tuple(p.type_annotation or IncompleteType() for p in fn.params)
        ret = fn.ret_type or IncompleteType()
        return FuncType(params, ret, fn.type_params)

    def _check_cell(self, name: str, cell: GlobalCell) -> None:
        # `global @c: Ref[T] = ref(init);` stores `init`, of type T.
        self.state.span_stack = [cell.span]
        init_type = self.evaluate(cell.init)
        self.state.solve_pending()
        cell_type: Type = RefType(init_type)
        if cell.type is not None:
            if isinstance(cell.type, RefType):
                # The declared type holds every value written later, not
                # only the initial one [RULE TYPE-JOIN].
                self.state.unify(cell.type, cell_type, cell.init, f"the initial value of @{name}")
                cell_type = cell.type
            else:
                self.state.error(
                    f"state cell @{name} must have a Ref[...] type, got {show(cell.type)}", cell
                )
        self.state.cell_types[name] = cell_type

    def _record(self, expr: Expr, t: Type) -> Type:
        self.state.types[expr] = t
        return t

    # ------------------------------------------------------------- walking
    # Most expressions of a program in A-normal form are leaves (variables,
    # constants, cells) or have leaves for operands: operator calls, tuples,
    # projections, reference operations. ``_leaf`` and ``flat`` type those
    # directly; only the others start a generator on the trampoline. Each
    # ``yield self.eval(e)`` is preceded by ``flat(e)``, and the result is
    # the same either way: the generators below call the same ``_*_core``
    # functions once their operands are typed.
    def _leaf(self, expr: Expr) -> Type | None:
        """The type of a variable, a constant or an initialised cell; None
        for anything else."""
        cls = type(expr)
        if cls is Var:
            t = self.state.var_types.get(expr)  # type: ignore[call-overload]
            return t if t is not None else self._bind_var(expr)  # type: ignore[arg-type]
        if cls is Constant:
            t = self.state.types.get(expr)
            if t is None:
                t = self.state.types[expr] = self._constant_type(expr)  # type: ignore[arg-type]
            return t
        if cls is GlobalVar:
            t = self.state.cell_types.get(expr.name)  # type: ignore[attr-defined]
            if t is not None:
                self.state.types[expr] = t
            return t
        return None

    def flat(self, expr: Expr) -> Type | None:
        """The type of a leaf, or of an expression with leaves for operands
        (what ``eval`` gives, without a generator); None for the rest."""
        t = self._leaf(expr)
        if t is not None:
            return t
        cls = type(expr)
        operands: tuple[Expr, ...]
        if cls is Call:
            if type(expr.callee) is not Op:  # type: ignore[attr-defined]
                return None
            operands = expr.args  # type: ignore[attr-defined]
        elif cls is TupleGetItem:
            operands = (expr.tuple_value,)  # type: ignore[attr-defined]
        elif cls is Tuple:
            operands = expr.fields  # type: ignore[attr-defined]
        elif cls is RefRead:
            operands = (expr.ref,)  # type: ignore[attr-defined]
        elif cls is RefWrite:
            operands = (expr.ref, expr.value)  # type: ignore[attr-defined]
        elif cls is RefCreate:
            operands = (expr.value,)  # type: ignore[attr-defined]
        else:
            return None
        if expr in self.state.types:  # a shared sub-expression (graph form)
            return self.state.types[expr]
        types = []
        for operand in operands:
            t = self._leaf(operand)
            if t is None:
                return None
            types.append(t)
        span = expr.span
        if span is not None:
            self.state.span_stack.append(span)
        try:
            result = _CORES[cls](self, expr, types)
        finally:
            if span is not None:
                self.state.span_stack.pop()
        return self._record(expr, result)

    def eval(self, expr: Expr) -> Any:  # type: ignore[override]
        """The type of ``expr``: known already (a shared sub-expression, in
        graph form), or a computation to ``yield``. A constructor is one
        node shared by all its uses, each instantiated afresh; so is a
        global function used as a value (one node may stand for uses in
        several functions, whose type parameters differ: a polymorphic
        function's body inlined into another, ``@id`` in both)."""
        if expr in self.state.types and type(expr) not in _INSTANTIATED:
            return self.state.types[expr]
        return self._infer(expr)

    def _infer(self, expr: Expr):
        """Generator: ``expr``'s hook, under its span; its type recorded
        (a let chain records its lets' types itself)."""
        pushed = expr.span is not None
        if pushed:
            self.state.span_stack.append(expr.span)
        try:
            result = yield from ExprFunctor.eval(self, expr)
            if isinstance(expr, Let):
                return result
        finally:
            if pushed:
                self.state.span_stack.pop()
        return self._record(expr, result)

    @on(Let)
    def _infer_let(self, let: Let):
        # A let chain is walked in a loop, not by nesting generators.
        chain = []
        unify = self.state.solver.unify
        expr: Expr = let
        while isinstance(expr, Let) and expr not in self.state.types:
            var_type = self._bind_var(expr.var)
            value_type = self.flat(expr.value)
            if value_type is None:
                value_type = yield self.eval(expr.value)
            if expr.var.type_annotation is not None and isinstance(
                self.state.solver.head(value_type), IncompleteType
            ):
                self._annotated(expr, var_type, value_type)
            else:
                try:
                    unify(var_type, value_type)
                except UnifyError as err:
                    self._binding_mismatch(expr, var_type, value_type, err)
            chain.append(expr)
            expr = expr.body
        body_type = self.flat(expr)
        if body_type is None:
            body_type = yield self.eval(expr)
        for link in chain:
            self.state.types[link] = body_type
        return body_type

    def _binding_mismatch(
        self, let: Let, var_type: Type, value_type: Type, err: UnifyError
    ) -> None:
        where = call_site(let.value, let)
        self.state.mismatch(
            var_type, value_type, where, f"the binding of %{let.var.name_hint}", err
        )

    def _annotated(self, let: Let, var_type: Type, value_type: Type) -> None:
        """An annotated let of a value whose type is not known yet: the
        annotation is checked against it once it is known (it says what the
        variable holds; a ``?`` in it says nothing of the value), and only
        gives the value its type if nothing else does [RULE TYPE-JOIN]."""

        def attempt(force: bool = False) -> None:
            if not force and isinstance(self.state.solver.head(value_type), IncompleteType):
                raise NotReady
            try:
                self.state.solver.unify(var_type, value_type)
            except UnifyError as err:
                self._binding_mismatch(let, var_type, value_type, err)

        self.state.attempt(attempt, let, forcible=True)

    def _bind_var(self, var: Var) -> Type:
        t = self.state.var_types.get(var)
        if t is None:
            t = var.type_annotation or IncompleteType()
            self.state.var_types[var] = t
        return t

    @on(Var)
    def _var(self, expr: Var):
        return self.state.var_types.get(expr) or self._bind_var(expr)
        yield  # a generator

    @on(GlobalVar)
    def _global(self, expr: GlobalVar):
        if expr.name in self.state.cell_types:
            return self.state.cell_types[expr.name]
        if expr.name in self.state.module.cells:
            # Cells are initialised in declaration order [see State].
            self.state.error(
                f"state cell @{expr.name} is used before it is initialised: a cell's "
                "initial value may only use the cells declared before it",
                expr,
            )
            return IncompleteType()
        # Used as a value: instantiate type parameters; its dims become `?` [RULE TYPE-CALLDIMS].
        return rename_dims(self.instantiate(self.calls.global_signature(expr.name)), {})
        yield

    def instantiate(self, t: FuncType) -> FuncType:
        if not t.type_params:
            return t
        resolved = self.state.solver.resolve(t)
        assert isinstance(resolved, FuncType)
        t = resolved
        fresh = {tv: IncompleteType() for tv in t.type_params}
        inst = substitute(FuncType(t.arg_types, t.ret_type, (), t.effects), fresh)
        assert isinstance(inst, FuncType)
        return inst

    @on(Call)
    def _call(self, expr: Call) -> Computation[Type]:
        return self.calls.call(expr)

    def _call_op_core(self, expr: Call, operands: list[Type]) -> Type:
        return self.calls.call_op_core(expr, operands)

    @on(Constant)
    def _constant(self, expr: Constant):
        return self._constant_type(expr)
        yield

    def _constant_type(self, expr: Constant) -> TensorType:
        # Constants of one shape and dtype share their type (types are
        # immutable): a program holds many scalar constants.
        key = (expr.data.shape, expr.data.dtype)
        t = self.state.constant_types.get(key)
        if t is None:
            t = self.state.constant_types[key] = TensorType(key[0], _dtype_name(key[1]))
        return t

    @on(Op)
    def _op(self, expr: Op):
        self.state.error(
            f"operator {expr.name} must be called, not used as a value; wrap it in a function", expr
        )
        return IncompleteType()
        yield

    def constructor_type(self, ctor: Constructor) -> FuncType:
        data = self.state.module.type_defs[ctor.adt]
        fresh = {tv: IncompleteType() for tv in data.type_params}
        ret = TypeCall(GlobalTypeVar(data.name), tuple(fresh.values()))
        inputs = tuple(substitute(t, fresh) for t in ctor.inputs)
        return FuncType(inputs, ret)

    @on(Constructor)
    def _constructor(self, expr: Constructor):
        return self.constructor_type(expr)
        yield

    @on(Tuple)
    def _tuple(self, expr: Tuple):
        fields = []
        for f in expr.fields:
            t = self.flat(f)
            fields.append(t if t is not None else (yield self.eval(f)))
        return self._tuple_core(expr, fields)

    def _tuple_core(self, expr: Tuple, fields: list[Type]) -> Type:
        return TupleType(tuple(fields))

    @on(TupleGetItem)
    def _tuple_get_item(self, expr: TupleGetItem):
        tuple_type = self.flat(expr.tuple_value)
        if tuple_type is None:
            tuple_type = yield self.eval(expr.tuple_value)
        return self._tuple_get_item_core(expr, [tuple_type])

    def _tuple_get_item_core(self, expr: TupleGetItem, operands: list[Type]) -> Type:
        (tuple_type,) = operands
        result = IncompleteType()

        def attempt() -> None:
            t = self.state.solver.head(tuple_type)
            if isinstance(t, IncompleteType):
                raise NotReady
            if not isinstance(t, TupleType):
                self.state.error(
                    f"cannot take field {expr.index} of a value of type {show(t)}", expr
                )
                return
            if not 0 <= expr.index < len(t.fields):
                self.state.error(
                    f"field index {expr.index} is out of range for a tuple of "
                    f"{len(t.fields)} fields ({show(self.state.solver.resolve(t))})",
                    expr,
                )
                return
            self.state.unify(result, t.fields[expr.index], expr, "a tuple field")

        self.state.attempt(attempt, expr)
        return result

    @on(Function)
    def _function(self, expr: Function):
        params = tuple(self._bind_var(p) for p in expr.params)
        body_type = self.flat(expr.body)
        if body_type is None:
            body_type = yield self.eval(expr.body)
        if expr.ret_type is not None:
            body_type = self.state.unify(
                expr.ret_type, body_type, call_site(expr.body, expr), "the function's result"
            )
        return FuncType(params, body_type, expr.type_params)

    @on(If)
    def _if(self, expr: If):
        cond = self.flat(expr.cond)
        if cond is None:
            cond = yield self.eval(expr.cond)
        self.state.unify(
            BOOL_SCALAR, cond, call_site(expr.cond, expr), "the condition of if (a bool scalar)"
        )
        then_type = self.flat(expr.then_branch)
        if then_type is None:
            then_type = yield self.eval(expr.then_branch)
        else_type = self.flat(expr.else_branch)
        if else_type is None:
            else_type = yield self.eval(expr.else_branch)
        return self._join(
            expr,
            [(then_type, expr.then_branch), (else_type, expr.else_branch)],
            "the branches of if (the else branch must match the then branch)",
        )

    @on(Match)
    def _match(self, expr: Match):
        errors_before = len(self.state.errors)
        data_type = yield self.eval(expr.data)
        bodies: list[tuple[Type, Node]] = []
        for clause in expr.clauses:
            self._bind_pattern(clause, data_type)
            bodies.append(((yield self.eval(clause.body)), clause.body))
        result = self._join(expr, bodies, "the clauses of match") if bodies else IncompleteType()
        # Exhaustiveness assumes well-typed patterns (consistent arities).
        if expr.complete and len(self.state.errors) == errors_before:
            missing = missing_case(expr, self.state.module)
            if missing is not None:
                self.state.error(
                    f"match is not exhaustive: no clause matches {missing} "
                    "(add a clause, or write match? to fail at run time instead)",
                    expr,
                )
        return result

    def _join(self, expr: Expr, parts: list[tuple[Type, Node]], what: str) -> Type:
        """The type of ``expr``, whose value is one of ``parts`` (branches,
        clauses): their join [RULE TYPE-JOIN], once they are known; until then
        the join waits [RULE TYPE-WAIT], and if nothing else can make progress it is
        forced (an unknown part is unified with the others)."""
        result = IncompleteType()

        def attempt(force: bool = False) -> None:
            joined, _ = parts[0]
            for t, node in parts[1:]:
                try:
                    joined = self.state.solver.join(joined, t, force)
                except UnifyError as err:
                    joined = self.state.mismatch(joined, t, call_site(node, expr), what, err)
            self.state.unify(result, joined, expr, what)

        self.state.attempt(attempt, expr, forcible=True)
        return result

    def _bind_pattern(self, clause: Clause, data_type: Type) -> None:
        work: list[tuple[Pattern, Type]] = [(clause.pattern, data_type)]
        while work:
            pattern, t = work.pop()
            if isinstance(pattern, PatternWildcard):
                continue
            if isinstance(pattern, PatternVar):
                self.state.unify(self._bind_var(pattern.var), t, pattern, "a pattern variable")
            elif isinstance(pattern, PatternTuple):
                fields = tuple(IncompleteType() for _ in pattern.patterns)
                self.state.unify(t, TupleType(fields), pattern, "a tuple pattern")
                work.extend(zip(pattern.patterns, fields, strict=True))
            elif isinstance(pattern, PatternConstructor):
                ctor_type = self.constructor_type(pattern.constructor)
                self.state.unify(
                    t, ctor_type.ret_type, pattern, f"the pattern {pattern.constructor.name}"
                )
                if len(pattern.patterns) != len(ctor_type.arg_types):
                    self.state.error(
                        f"constructor {pattern.constructor.name} has "
                        f"{len(ctor_type.arg_types)} field(s), the pattern gives "
                        f"{len(pattern.patterns)}",
                        pattern,
                    )
                    continue
                work.extend(zip(pattern.patterns, ctor_type.arg_types, strict=True))

    @on(RefCreate)
    def _ref_create(self, expr: RefCreate):
        value_type = self.flat(expr.value)
        if value_type is None:
            value_type = yield self.eval(expr.value)
        return self._ref_create_core(expr, [value_type])

    def _ref_create_core(self, expr: RefCreate, operands: list[Type]) -> Type:
        return RefType(operands[0])

    @on(RefRead)
    def _ref_read(self, expr: RefRead):
        ref_type = self.flat(expr.ref)
        if ref_type is None:
            ref_type = yield self.eval(expr.ref)
        return self._ref_read_core(expr, [ref_type])

    def _ref_read_core(self, expr: RefRead, operands: list[Type]) -> Type:
        (ref_type,) = operands
        content = IncompleteType()
        self.state.unify(
            RefType(content), ref_type, call_site(expr.ref, expr), "ref_read (a Ref[...] value)"
        )
        return content

    @on(RefWrite)
    def _ref_write(self, expr: RefWrite):
        ref_type = self.flat(expr.ref)
        if ref_type is None:
            ref_type = yield self.eval(expr.ref)
        value_type = self.flat(expr.value)
        if value_type is None:
            value_type = yield self.eval(expr.value)
        return self._ref_write_core(expr, [ref_type, value_type])

    def _ref_write_core(self, expr: RefWrite, operands: list[Type]) -> Type:
        ref_type, value_type = operands
        self.state.unify(ref_type, RefType(value_type), expr, "ref_write")
        return UNIT


class _Signatures(dict[str, FuncType]):
    """Global signatures made on first use (``TypeInferencer.run_expr``)."""

    def __init__(self, module: IRModule, make: Callable[[Function], FuncType]) -> None:
        super().__init__()
        self.module, self.make = module, make

    def __contains__(self, name: object) -> bool:
        return name in self.module.functions

    def __missing__(self, name: str) -> FuncType:
        fn = self.module.functions[name]
        # A function a check typed already has its whole signature (the
        # return type its body gives, where no annotation says it): the
        # caller's expression then needs no more than a checked program did.
        known = fn.checked_type if fn.has_type else None
        made = self[name] = known if isinstance(known, FuncType) else self.make(fn)
        return made


class _Completeness:
    """Whether resolved types hold no unknown. The resolved types of a
    program share their parts (a let's type is part of the next one's), so
    each part is walked once for all of them: a walk per type would be
    quadratic in a chain."""

    def __init__(self) -> None:
        self._memo: dict[Type, bool] = {}  # types hash by identity

    def __call__(self, t: Type) -> bool:
        memo = self._memo
        stack: list[tuple[Type, list[Type] | None]] = [(t, None)]
        while stack:
            node, parts = stack.pop()
            if parts is not None:  # its parts are done
                memo[node] = all(memo[p] for p in parts)
            elif node in memo:
                continue
            elif isinstance(node, TensorType):
                memo[node] = True
            elif isinstance(node, IncompleteType):
                memo[node] = False
            else:
                parts = [c for c in node.children() if isinstance(c, Type)]
                stack.append((node, parts))
                stack.extend((p, None) for p in parts)
        return memo[t]


def _dtype_name(dtype: np.dtype) -> str:
    return str(dtype)


_INSTANTIATED = (Constructor, GlobalVar)
"""Atoms whose type is instantiated at each use, never taken from another
use of the same node (a cell's ``GlobalVar`` is typed by ``_leaf``)."""

_CORES: dict[type, Callable[[TypeInferencer, Any, list[Type]], Type]] = {
    Call: TypeInferencer._call_op_core,
    TupleGetItem: TypeInferencer._tuple_get_item_core,
    Tuple: TypeInferencer._tuple_core,
    RefRead: TypeInferencer._ref_read_core,
    RefWrite: TypeInferencer._ref_write_core,
    RefCreate: TypeInferencer._ref_create_core,
}
"""What an expression with typed operands has for type (see ``flat``)."""
