"""A specialised state-passing program as a Relax module: the program the
executor (TVM's Relax virtual machine) runs.

Purpose
-------
After the pipeline (``effir.compile``: the effect passes, partial
evaluation, the basic-block optimisations, ``fuse`` and ``lower-tvm``) a
program is pure A2 code in A-normal form whose operator calls sit in
primitive functions. This module turns one specialisation of it
(driver/specialise.py: the entry's dimensions bound) into a Relax IRModule: each
primitive function becomes scheduled TIR called with ``call_tir``, a static
``cf.foreach`` becomes one TIR loop, and the control around them (``if``,
calls, recursion, tuples, output, data-dependent shapes) becomes Relax,
which the VM runs without Python. docs/backend.md says why this executor.

Algorithm
---------
1. [TYPES] Each effir type becomes a Relax type: a tensor of static shape a
   tensor of that shape, one with a ``?`` (data-dependent) dimension a
   tensor of known rank; a ``Key`` the ``uint32[2]`` tensor of its threefry
   words; the world token an ``int64`` scalar tensor; tuples stay tuples.
2. [GLOBALS] Every global function the entry reaches becomes a Relax
   function. Each is declared first (a stub of the right signature), so
   that recursive and mutually recursive calls refer to it, then defined.
3. [BINDINGS] A function body is lowered binding by binding, in order, in
   non-dataflow blocks (the VM keeps their order, so output stays ordered):
   - a primitive function is lowered once per distinct text and types
     (kernel.lower_kernel) and called with ``call_tir``; its tuple and key
     arguments are flattened into tensors, its tuple results rebuilt
     [RULE LOWER-FLAT];
   - ``cf.foreach`` whose body is static and pure is one ``call_tir`` of the
     loop (loop.lower_loop): no VM instruction runs per step [RULE LOOP-TIR].
     A long sequence runs in chunks of ``LOOP_CHUNK`` steps, one call each,
     the state passed from one to the next: the loop's prologue holds the
     hoisted input projections of its steps, so memory stays bounded
     whatever the length [RULE LOOP-CHUNK];
   - a function literal that is not primitive is lifted to a private Relax
     function taking its free variables first; a call of a let-bound one
     calls that function [RULE LOWER-CLOSURE]; one used as a value is a VM
     closure (relax/closures.py [RULE LOWER-VMCLOSURE]);
   - ``if`` is a Relax ``If`` whose branches are blocks of their own (the
     tensors a branch allocates get storage of their own, whatever flows
     out of it: relax/pipeline.py [RULE PIPELINE-BRANCH]); a ``match`` on tuples
     binds the patterns' variables by projection, one on constructors
     tests tags (relax/adts.py [RULE LOWER-ADT], where ADT values are tagged VM
     tuples);
   - ``io.print`` calls the packed function ``effir.print`` (registered by
     the Python runtime and by the C++ runner) and advances the world token;
   - a loop that cannot be one TIR function (``cf.while_loop``, a
     ``cf.foreach`` with control flow or effects in its body) is a VM loop
     the VM runs step by step, in levels of recursive functions so that
     its native depth stays bounded [RULE LOOP-VM] [RULE LOOP-LEVELS]; its
     per-step outputs go to buffers written in place, cut to the steps run;
   - [RULE LOWER-DEPTH] a global on a cycle of the call graph (and a closure that
     calls itself or may call one) takes its depth of recursion first;
     each call passes it on through a kernel that adds one and fails with
     an ``EvalError`` naming the callee past ``MAX_DEPTH`` nested calls,
     and a VM loop in such code counts its levels' calls too. Such a
     program runs on a thread with a large stack (runtime/stack.py [RULE RUNTIME-STACK]);
     a recursive entry is a wrapper calling its body at depth 0;
   - an operator of data-dependent shape (``boolean_mask``, ``argwhere``,
     the ``dyn.*`` operators, ``shape_of``) runs as the executor's kernels
     (relax/dynamic_kernels.py): count, allocate once the size is known
     (``tensor_to_shape``), fill [RULE LOWER-DYN]; a size the run chooses
     is checked against the size limit before it is allocated [RULE LOWER-SIZE].
4. [RULE LOWER-SHAPEPOLY] A primitive function whose types keep a ``?``
   dimension (a kernel after ``boolean_mask``) is compiled once with its
   sizes as variables bound from its arguments' run-time shapes
   (relax/symbolic.py, kernel/symbolic_shapes.py): its sizes are expressions of
   those variables, checked at run time where the interpreter checks
   them; every compiled program exports.

The parts: relax/types.py (the types, [RULE LOWER-SYMBOLIC]), relax/kernel_calls.py
([RULE LOWER-FLAT], [RULE LOWER-APART], [RULE LOWER-VIEW]), relax/loops.py and whole_loops.py
([RULE LOOP-TIR], [RULE LOOP-CHUNK], [RULE LOOP-VM], [RULE LOOP-LEVELS]),
relax/dynamic.py ([RULE LOWER-DYN]), relax/symbolic.py and kernel/symbolic_shapes.py
([RULE LOWER-SHAPEPOLY]), relax/adts.py ([RULE LOWER-ADT]),
relax/closures.py ([RULE LOWER-VMCLOSURE]) and runtime/stack.py (run-time checks, the
large stack); this module is the walk over the program, its calls and the
closures lifted where they are called. Each part is a rule set (``LoopRules``,
``AdtRules``, ...) the walk holds and calls, composed, not inherited: one
``LoweringState`` (relax/state.py) holds what they share, each field
declared with its type, and each rule set's constructor names the state and
the other rule sets it uses.

Known limitations: references left after state passing and a kernel used
as a value are not compiled: CompileError, naming the construct
(driver/compilable.py refuses them when the program is compiled); run such
programs with the interpreter. A failure of TVM's own while lowering or
building is a CompileError too, at the binding whose Relax variable it
names (``RelaxProgram.sites``; runtime/errors.py ``build_failure``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from effir.passes.analyses.call_graph import reachable, recursive
from effir.passes.analyses.infer_type import infer_expr
from effir.passes.transforms.fuse import is_primitive
from effir.passes.transforms.specialise_dims import source_name

from ....ir.block import Block
from ....ir.diagnostics import Error, Span
from ....ir.expr import (
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
from ....ir.expr_functor import Computation, ExprFunctor
from ....ir.functor import on
from ....ir.module import IRModule
from ....ir.node import Node
from ....ir.op import op_def
from ....ir.printer import astext
from ....ir.visitor import free_vars, pre_order
from ..kernel import rounding
from ..kernel.checks import error_shape
from ..kernel.lower_tvm import one_call_kernel
from ..runtime.errors import BackendError, CompileError, build_failure
from ..runtime.printing import PRINT_FUNCTION, print_label, print_layout
from ..runtime.stack import MAX_DEPTH
from .adts import AdtRules, has_constructor_pattern
from .apart import LIBRARY
from .closures import ClosureRules
from .constants import constant
from .depth import deeper_kernel
from .dynamic import DYNAMIC, DynamicRules
from .kernel_calls import KernelRules
from .loops import LoopRules
from .program import RelaxProgram
from .state import LiftedFunction, LoweringState
from .types import NeedsStatic, declare, relax_type
from .whole_loops import WholeLoopRules


# ================================================================== the walk
def lower_to_relax(
    module: IRModule, entry: str, target: Any, symbolic: tuple[str, ...] = ()
) -> RelaxProgram:
    """``module`` (checked, specialised, A2 or pure) as a Relax module whose
    public function ``entry`` is the program's entry. ``symbolic`` names
    the entry's dimensions left symbolic; NeedsStatic when code needs one
    of them static, CompileError for what is not compiled."""
    lowering = _Lowering(module, target, symbolic)
    try:
        return lowering.run(entry)
    except CompileError:
        raise
    except BackendError as err:
        raise CompileError(err.message, err.span, err.notes) from None
    except (NeedsStatic, Error):  # build again; effir's own, located
        raise
    except Exception as err:  # TVM's (its normaliser's) or a defect of the lowering's
        span = module.functions[entry].span if entry in module.functions else None
        raise build_failure(err, entry, lowering.sites, span) from None


class _Lowering(ExprFunctor):
    """The walk over the program: globals, blocks, values, calls, closures
    lifted where they are called, the depth of recursion; what it does not
    do itself goes to the rule sets it holds, which share ``state``."""

    def __init__(self, module: IRModule, target: Any, symbolic: tuple[str, ...] = ()) -> None:
        super().__init__()
        symbols = {name: tirx.Var(name, "int64") for name in symbolic}
        self.state = LoweringState(module, target, symbols)
        self.bb = self.state.bb
        self.dynamic = DynamicRules(self.state, self)
        self.kernel = KernelRules(self.state, self, self.dynamic)
        self.adt = AdtRules(self.state, self, self.dynamic)
        self.closure = ClosureRules(self.state, self)
        whole = WholeLoopRules(self.state, self.kernel, self.dynamic)
        self.loop = LoopRules(self.state, self, self.kernel, self.dynamic, whole)

    @property
    def sites(self) -> dict[str, Span | None]:
        """``RelaxProgram.sites`` so far (where a failure is reported)."""
        return self.state.sites

    # ------------------------------------------------------------ globals
    def run(self, entry: str) -> RelaxProgram:
        # [RULE KERNEL-ROUND] (kernel/rounding.py): gradient programs round per operator
        with rounding.per_operator(rounding.gradient_program(self.state.module)):
            return self._run(entry)

    def _run(self, entry: str) -> RelaxProgram:
        self.state.entry = entry
        reached = self._reachable(entry)
        self.state.recursive = recursive(self.state.module) & set(reached)
        self.state.recursion = bool(self.state.recursive)
        for name in reached:  # [GLOBALS] declare, then define
            fn = self.state.module.functions[name]
            symbols = self.state.symbols if name == entry else None
            with _located(fn, source_name(fn, name)):
                params = [
                    relax.Var(p.name_hint, relax_type(p.checked_type, symbols)) for p in fn.params
                ]
                ret = relax_type(fn.body.checked_type, symbols)
            if name in self.state.recursive:  # [RULE LOWER-DEPTH]
                params.insert(0, relax.Var("depth", relax.TensorType([], "int64")))
            label = f"{name}_recursive" if name == entry and name in self.state.recursive else name
            self.state.globals[name] = declare(self.bb, params, ret, label)
        for name in reached:
            fn = self.state.module.functions[name]
            with _located(fn, source_name(fn, name)):
                function = self._function(fn, name)
            if name == entry and name not in self.state.recursive:
                function = function.with_attr("global_symbol", entry)
            self.bb.update_func(self.state.globals[name], function)
        if entry in self.state.recursive:  # the entry as it is called: depth 0
            self._entry_of_recursive(entry)
        module = self.bb.finalize()
        # built in parallel while the caller builds the module, or by an
        # earlier build (relax/apart.py)
        libraries = LIBRARY.start(self.state.apart) if self.state.apart else None
        span = self.state.module.functions[entry].span
        return RelaxProgram(
            module,
            entry,
            len(self.state.kernels),
            self.state.loops,
            self.state.recursion,
            self.state.sites,
            span,
            libraries,
        )

    def _entry_of_recursive(self, entry: str) -> None:
        """[RULE LOWER-DEPTH] The public entry of a recursive entry function: its
        parameters, then a call at depth 0."""
        fn = self.state.module.functions[entry]
        params = [
            relax.Var(p.name_hint, relax_type(p.checked_type, self.state.symbols))
            for p in fn.params
        ]
        ret = relax_type(fn.body.checked_type, self.state.symbols)

        def call() -> Any:
            zero = constant(np.int64(0), "int64")
            return self.bb.emit(relax.Call(self.state.globals[entry], [zero, *params]))

        body = self.bb.block(call)
        function = relax.Function(params, body, ret, False).with_attr("global_symbol", entry)
        self.bb.add_func(function, entry)

    def _reachable(self, entry: str) -> list[str]:
        if entry not in self.state.module.functions:
            raise BackendError(f"the module has no function @{entry}")
        return reachable(self.state.module, entry)

    def _function(self, fn: Function, name: str) -> Any:
        """A Relax function of the global ``fn`` (taking the depth of
        recursion first when it is recursive [RULE LOWER-DEPTH])."""
        env: dict[Var, Any] = {}
        params = []
        symbols = self.state.symbols if name == self.state.entry else None
        for v in fn.params:
            param = relax.Var(v.name_hint, relax_type(v.checked_type, symbols))
            env[v] = param
            params.append(param)
        depth = None
        if name in self.state.recursive:
            depth = relax.Var("depth", relax.TensorType([], "int64"))
            params.insert(0, depth)
        body = self._at_depth_of(fn, env, depth)
        ret = relax_type(fn.body.checked_type, symbols)
        return relax.Function(params, body, ret, False).with_attr("effir_name", name)

    def _at_depth_of(self, fn: Function, env: dict[Var, Any], depth: Any) -> Any:
        """``fn``'s body lowered where the depth of recursion is ``depth``
        (a parameter, or None)."""
        saved, self.state.depth = self.state.depth, depth
        try:
            return self._block(fn.body, env)
        finally:
            self.state.depth = saved

    def _deeper(self, callee: str, span: Any) -> Any:
        """[RULE LOWER-DEPTH] The depth a call of the recursive ``callee`` runs
        at: one more than here, checked against ``MAX_DEPTH`` by one small
        kernel (an ``EvalError`` naming ``callee`` past it); 1 from code
        that is not recursive."""
        one = constant(np.int64(1), "int64")
        if self.state.depth is None:
            return one
        on_host = self.state.target.kind.name == "llvm"
        key = f"deeper:{callee}:{span}"
        known = self.state.executor_gvs.get(key)
        if known is None:
            func, text = deeper_kernel(MAX_DEPTH, callee, span, on_host)
            known = self.state.executor_gvs[key] = (
                self.bb.add_func(self.dynamic.on_target(func), "deeper"),
                text,
            )
        gv, text = known
        depth = relax.TensorType([], "int64")
        if on_host:  # the kernel raises by itself
            return self.bb.emit(relax.call_tir(gv, [self.state.depth], depth))
        outs = [depth, relax.TensorType(list(error_shape((text,))), "int64")]
        result = self.bb.emit(relax.call_tir(gv, [self.state.depth], outs))
        self.dynamic.test_error_code(self.bb.emit(relax.TupleGetItem(result, 1)), (text,))
        return self.bb.emit(relax.TupleGetItem(result, 0))

    # ------------------------------------------------------------- blocks
    def _block(self, expr: Expr, env: dict[Var, Any]) -> Any:
        """``expr`` as a Relax sequence of bindings ending in its value."""
        return self.drive(self.bb.nested(self.chain(expr, env)))

    def chain(self, expr: Expr, env: dict[Var, Any]) -> Computation[Any]:
        """The bindings of the let chain ``expr`` emitted in the open block,
        on the trampoline: a value's hook (``@on`` below) that opens blocks
        of its own (an ``If``'s branches, a ``match``'s clauses) yields
        them, so nested blocks are no Python recursion. Synchronously:
        ``self.drive(self.chain(expr, env))``."""
        block = Block.of(expr)
        for let in block.lets:
            value = let.value
            if isinstance(value, Function):
                # A kernel, or a closure lifted where it is called
                # [RULE LOWER-CLOSURE]: no run-time value of its own.
                env[let.var] = value
            else:
                lowered = yield self.eval(value, env, let.var.name_hint)
                env[let.var] = self._bound(value, lowered)
        tail = block.tail
        return self._bound(tail, (yield self.eval(tail, env, "result")))

    # ------------------------------------------------------------- values
    def atom(self, expr: Expr, env: dict[Var, Any]) -> Any:
        if isinstance(expr, Var):
            value = env.get(expr)
            if value is None:
                raise BackendError(f"%{expr.name_hint} is not bound here", expr.span)
            if isinstance(value, Function):  # a closure that escapes [RULE LOWER-VMCLOSURE]
                return self.closure.closure_value(value, env, expr.name_hint, expr.span)
            return value
        if isinstance(expr, Constant):
            return self.bb.constant(expr.data)
        if isinstance(expr, Constructor):
            return self.adt.construct(expr, [], expr.name)
        if isinstance(expr, GlobalVar) and expr.name in self.state.globals:
            return self.closure.global_value(expr)
        raise BackendError(f"{type(expr).__name__} is not compiled", expr.span)

    def _bound(self, expr: Expr, value: Any) -> Any:
        """A let-bound value as lowered (by its ``@on`` hook below), cast to
        its effir type where it came out as an ``Object`` (a closure call's
        result, a polymorphic callee's, a ``match``'s: relax/adts.py
        ``typed``), its Relax variables remembered as ``expr``'s sites."""
        typed = self.adt.typed(value, expr.checked_type)
        for var in (value, typed):
            if isinstance(var, relax.Var):
                self.state.sites.setdefault(str(var.name), expr.span)
        return typed

    # A let-bound value lowered and emitted as ``name``: one ``@on`` hook
    # per expression class, returning the value or a computation (``If``,
    # ``match``: the blocks they open are yielded, see ``chain``).
    @on(Var, Constant, GlobalVar, Constructor)
    def _atom_value(self, expr: Expr, env: dict[Var, Any], name: str) -> Any:
        return self.atom(expr, env)

    @on(Tuple)
    def _tuple_value(self, expr: Tuple, env: dict[Var, Any], name: str) -> Any:
        return self.bb.emit(relax.Tuple([self.atom(f, env) for f in expr.fields]), name)

    @on(TupleGetItem)
    def _get_value(self, expr: TupleGetItem, env: dict[Var, Any], name: str) -> Any:
        tuple_value = self.atom(expr.tuple_value, env)
        return self.bb.emit(relax.TupleGetItem(tuple_value, expr.index), name)

    @on(If)
    def _if_value(self, expr: If, env: dict[Var, Any], name: str) -> Computation[Any]:
        cond = self.atom(expr.cond, env)
        then = yield self.bb.nested(self.chain(expr.then_branch, dict(env)))
        other = yield self.bb.nested(self.chain(expr.else_branch, dict(env)))
        return self.bb.emit(relax.If(cond, then, other), name)

    @on(Match)
    def _match_value(self, expr: Match, env: dict[Var, Any], name: str) -> Any:
        if has_constructor_pattern(expr):
            return self.adt.adt_match(expr, env, name)
        return self._match(expr, env)

    @on(Call)
    def _call_value(self, expr: Call, env: dict[Var, Any], name: str) -> Any:
        return self._call(expr, env, name)

    @on(Function)
    def _function_value(self, expr: Function, env: dict[Var, Any], name: str) -> Any:
        # A literal in a value's place (a function's or a branch's result):
        # the closure it makes [RULE LOWER-VMCLOSURE], as an escaping let-bound one.
        return self.closure.closure_value(expr, env, name, expr.span)

    @on(RefCreate, RefRead, RefWrite)
    def _ref_value(self, expr: Expr, env: dict[Var, Any], name: str) -> Any:
        raise BackendError(
            "references are not compiled: run state-passing first (effir.compile does)",
            expr.span,
        )

    @on(Node)
    def _other_value(self, expr: Expr, env: dict[Var, Any], name: str) -> Any:
        raise BackendError(f"{type(expr).__name__} is not compiled", expr.span)

    def _match(self, expr: Match, env: dict[Var, Any]) -> Computation[Any]:
        """A match whose first clause binds a tuple's parts (the only kind
        without constructors), in the open block."""
        data = self.atom(expr.data, env)
        clause = expr.clauses[0]
        work = [(clause.pattern, data)]
        while work:
            pattern, value = work.pop()
            if isinstance(pattern, PatternVar):
                env[pattern.var] = value
            elif isinstance(pattern, PatternTuple):
                for i, sub in enumerate(pattern.patterns):
                    work.append((sub, self.bb.emit(relax.TupleGetItem(value, i))))
            elif not isinstance(pattern, PatternWildcard):
                raise BackendError(
                    "a match on constructors (an ADT) is not compiled; run it with the interpreter",
                    clause.span or expr.span,
                )
        return self.chain(clause.body, env)

    # -------------------------------------------------------------- calls
    def _call(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        callee = call.callee
        if isinstance(callee, Op):
            return self._operator(call, env, name)
        if isinstance(callee, Constructor):
            return self.adt.construct(callee, [self.atom(a, env) for a in call.args], name)
        if isinstance(callee, GlobalVar):
            args = [self.atom(a, env) for a in call.args]
            if callee.name in self.state.recursive:
                called = self.state.module.functions[callee.name]
                shown = source_name(called, callee.name)
                args.insert(0, self._deeper(f"@{shown}", called.span))
            return self.bb.emit(relax.Call(self.state.globals[callee.name], args), name)
        if isinstance(callee, Var) and isinstance(env.get(callee), Function):
            fn = env[callee]
            if is_primitive(fn):
                return self.kernel.kernel_call(fn, call.args, env, name)
            closure = self.lift(fn, env, callee.name_hint)
            args = [env[v] for v in closure.captured] + [self.atom(a, env) for a in call.args]
            if closure.deep:
                args.insert(0, self._deeper(f"%{callee.name_hint}", fn.span))
            return self.bb.emit(relax.Call(closure.gv, args), name)
        if isinstance(callee, Var) and callee in env:  # a function value [RULE LOWER-VMCLOSURE]
            return self.closure.invoke(env[callee], call, env, name)
        raise BackendError(
            f"a call of {astext(callee)}, a function computed at run time, is not compiled",
            call.span,
        )

    def lift(
        self, fn: Function, env: dict[Var, Any], name: str, captured_last: bool = False
    ) -> LiftedFunction:
        """[RULE LOWER-CLOSURE] ``fn`` as a private Relax function of its free
        variables and parameters (lifted once); ``captured_last`` puts the
        free variables last, as a VM closure binds them (relax/closures.py).
        One called where it is bound that calls itself, a recursive global
        or another closure takes the depth of recursion first [RULE LOWER-DEPTH];
        a VM closure does not (the VM's ``invoke_closure`` passes only the
        call's arguments): a program with function values runs on the large
        stack (runtime/stack.py) instead."""
        known = self.state.lifted.get((id(fn), captured_last))
        if known is not None:
            return known
        captured = [v for v in free_vars(fn) if not isinstance(env.get(v), Function)]
        inner_functions = {v: env[v] for v in free_vars(fn) if isinstance(env.get(v), Function)}
        itself = any(f is fn for f in inner_functions.values())
        deep = not captured_last and (itself or self.calls_deeper(fn, inner_functions))
        self.state.recursion = self.state.recursion or itself or captured_last
        order = [*fn.params, *captured] if captured_last else [*captured, *fn.params]
        params = [relax.Var(v.name_hint, relax_type(v.checked_type)) for v in order]
        if deep:
            params.insert(0, relax.Var("depth", relax.TensorType([], "int64")))
        ret = relax_type(fn.body.checked_type)
        gv = declare(self.bb, params, ret, f"lifted_{name}")
        closure = self.state.lifted[(id(fn), captured_last)] = LiftedFunction(gv, captured, deep)
        inner = dict(inner_functions)
        body_params = []
        for v in order:
            param = relax.Var(v.name_hint, relax_type(v.checked_type))
            inner[v] = param
            body_params.append(param)
        depth = None
        if deep:
            depth = relax.Var("depth", relax.TensorType([], "int64"))
            body_params.insert(0, depth)
        body = self._at_depth_of(fn, inner, depth)
        function = relax.Function(body_params, body, ret, False)
        self.bb.update_func(gv, function.with_attr("effir_name", gv.name_hint))  # unique
        return closure

    def calls_deeper(self, fn: Function, functions: dict[Var, Any]) -> bool:
        """[RULE LOWER-DEPTH] Whether ``fn`` calls a recursive global or a closure
        (which may recurse): it must pass the depth of recursion on."""
        bound = dict(functions)
        for node in pre_order(fn.body):
            if isinstance(node, Let) and isinstance(node.value, Function):
                bound[node.var] = node.value
        for node in pre_order(fn.body):
            if isinstance(node, Call):
                callee = node.callee
                if isinstance(callee, GlobalVar) and callee.name in self.state.recursive:
                    return True
                if isinstance(callee, Var):
                    target = bound.get(callee)
                    if not isinstance(target, Function) or not is_primitive(target):
                        return True
        return False

    # ------------------------------------------------------------ kernels

    # ---------------------------------------------------------- operators
    def _operator(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        definition = op_def(call.callee)  # type: ignore[arg-type]
        if definition.name == "cf.foreach":
            return self.loop.foreach(call, env, name)
        if definition.name == "cf.while_loop":
            return self.loop.while_loop(call, env, name)
        if definition.name == "io.print":
            return self._print(call, env, name)
        dynamic = DYNAMIC.get(definition.name)
        if dynamic is not None:
            return dynamic(self.dynamic, call, env, name)
        if definition.effect == "pure" and "te" in definition.rules:
            operands = tuple(a for a in call.args if isinstance(a, Var))
            return self.kernel.kernel_call(_one_call_kernel(call), operands, env, name)
        raise BackendError(
            f"the operator {definition.name} is not compiled outside a kernel",
            call.span,
        )

    def _print(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``io.print(%world, %x)``: the packed function ``effir.print``
        prints, in order; the world token advances by one."""
        world, value = (self.atom(a, env) for a in call.args)
        label = str(call.attrs.get("label", ""))
        try:
            layout = print_layout(call.args[1].checked_type, dict(self.state.module.type_defs))
        except BackendError as err:
            raise BackendError(err.message, call.span) from None
        args = [tvm.ir.StringImm(print_label(label)), value]
        if layout is not None:  # [RULE RUNTIME-PRINT] what the VM holds is not the value
            args.append(tvm.ir.StringImm(layout))
        self.bb.emit(
            relax.Call(relax.ExternFunc(PRINT_FUNCTION), args, ty_args=[relax.ObjectType()])
        )
        one = constant(np.int64(1), "int64")
        advanced = self.bb.emit(relax.op.add(world, one))
        return self.bb.emit(relax.Tuple([advanced, value]), name)


def _one_call_kernel(call: Call) -> Function:
    """A primitive function computing ``call`` alone (what ``lower-tvm``
    makes of a call whose types became static only once specialised)."""
    fn, _ = one_call_kernel(call)
    infer_expr(fn)
    return fn


@contextlib.contextmanager
def _located(fn: Function, name: str) -> Iterator[None]:
    """A BackendError without a location gets the function's."""
    try:
        yield
    except BackendError as err:
        if err.span is not None:
            raise
        raise BackendError(f"@{name}: {err.message}", fn.span) from None
