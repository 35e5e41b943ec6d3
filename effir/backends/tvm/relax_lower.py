"""A specialised state-passing program as a Relax module: the program the
executor (TVM's Relax virtual machine) runs.

Purpose
-------
After the pipeline (``effir.compile``: the effect passes, partial
evaluation, the basic-block optimisations, ``fuse`` and ``lower-tvm``) a
program is pure A2 code in A-normal form whose operator calls sit in
primitive functions. This module turns one specialisation of it
(specialize.py: the entry's dimensions bound) into a Relax IRModule: each
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
     [RULE FLAT];
   - ``cf.foreach`` whose body is static and pure is one ``call_tir`` of the
     loop (loop.lower_loop): no VM instruction runs per step [RULE LOOP].
     A long sequence runs in chunks of ``LOOP_CHUNK`` steps, one call each,
     the state passed from one to the next: the loop's prologue holds the
     hoisted input projections of its steps, so memory stays bounded
     whatever the length [RULE CHUNK];
   - a function literal that is not primitive is lifted to a private Relax
     function taking its free variables first; a call of a let-bound one
     calls that function [RULE CLOSURE];
   - ``if`` is a Relax ``If`` whose branches are blocks of their own; a
     ``match`` on tuples binds the patterns' variables by projection;
   - ``io.print`` calls the packed function ``effir.print`` (registered by
     the Python runtime and by the C++ runner) and advances the world token;
   - a loop that cannot be one TIR function (``cf.while_loop``, a
     ``cf.foreach`` with control flow in its body or of data-dependent
     length) is a recursive Relax function the VM runs step by step; its
     per-step outputs go to buffers that double when full, written in
     place, cut to the steps run at the end [RULE VMLOOP];
   - an operator of data-dependent shape (``boolean_mask``, ``argwhere``,
     the ``dyn.*`` operators, ``shape_of``) runs as the executor's kernels
     (executor_kernels.py): count, allocate once the size is known
     (``tensor_to_shape``), fill [RULE DYN].
4. [FALLBACK] A primitive function whose types keep a ``?`` dimension
   cannot be compiled ahead of its shapes: it runs as a Python packed
   function that builds its kernel per concrete shape (cached). Such a
   program runs in Python only; ``export`` refuses it.

Known limitations: ADTs (constructors and matches on them), references
and closures that escape (stored, returned or passed to a global) are not
compiled: BackendError, naming the construct; run such programs with the
interpreter.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.op.vm import kill_object

from ...ir.expr import (
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
from ...ir.module import IRModule
from ...ir.op import op_def
from ...ir.printer import astext
from ...ir.types import ANY, FuncType, KeyType, TensorType, TupleType, Type
from ...ir.visitor import ExprMutator, free_vars, pre_order
from ...passes.fuse import PRIMITIVE, is_primitive
from ...passes.infer_type import infer_expr
from ...runtime.values import PRNGKey
from . import executor_kernels
from .errors import BackendError
from .kernel import KernelIR, build_kernel, leaves, lower_kernel
from .loop import LoweredLoop, lower_loop

PRINT_FUNCTION = "effir.print"
"""The packed function ``io.print`` calls: ``(label: str, value) -> None``."""

_fallback_ids = itertools.count()

LOOP_CHUNK = 1024
"""Steps per call of a whole-loop kernel [RULE CHUNK]."""


# ================================================================== types
def relax_type(t: Type, symbols: dict[str, Any] | None = None) -> Any:
    """[TYPES] The Relax type of values of effir type ``t``; a dimension
    named in ``symbols`` is that symbolic variable [RULE SYMBOLIC]."""
    if isinstance(t, TensorType):
        if t.is_static:
            return relax.TensorType([int(d) for d in t.shape], t.dtype)
        if symbols and all(isinstance(d, int) or d in symbols for d in t.shape):
            shape = [d if isinstance(d, int) else symbols[d] for d in t.shape]
            return relax.TensorType(shape, t.dtype)
        return relax.TensorType(dtype=t.dtype, ndim=t.ndim)
    if isinstance(t, KeyType):
        return relax.TensorType([2], "uint32")
    if isinstance(t, TupleType):
        return relax.TupleType([relax_type(f, symbols) for f in t.fields])
    if isinstance(t, FuncType):
        return relax.FuncType(
            [relax_type(a, symbols) for a in t.arg_types], relax_type(t.ret_type, symbols), False
        )
    raise BackendError(
        f"values of type {astext(t)} are not compiled (ADTs and references run in the interpreter)"
    )


class NeedsStatic(Exception):
    """[RULE SYMBOLIC] Lowering met code that needs these symbolic
    dimensions static (a kernel of their shapes): specialise them and
    lower again."""

    def __init__(self, dims: set[str]) -> None:
        super().__init__(f"needs static {', '.join(sorted(dims))}")
        self.dims = dims


def named_dims(t: Type) -> set[str]:
    """The symbolic dimension names in ``t`` (not ``?``)."""
    return {
        d
        for n in pre_order(t)
        if isinstance(n, TensorType)
        for d in n.shape
        if isinstance(d, str) and d != ANY
    }


def static(t: Type) -> bool:
    """Whether every tensor in ``t`` has a static shape."""
    return all(
        not isinstance(n, TensorType) or n.is_static for n in pre_order(t) if isinstance(n, Type)
    )


# ================================================================ program
@dataclass
class RelaxProgram:
    """A lowered specialisation: the Relax module, and the Python packed
    functions it calls [FALLBACK] (empty for an exportable program)."""

    module: Any  # tvm.IRModule
    entry: str
    fallbacks: dict[str, Callable[..., Any]] = field(default_factory=dict)
    kernels: int = 0
    loops: int = 0


def lower_to_relax(
    module: IRModule, entry: str, target: Any, symbolic: tuple[str, ...] = ()
) -> RelaxProgram:
    """``module`` (checked, specialised, A2 or pure) as a Relax module whose
    public function ``entry`` is the program's entry. ``symbolic`` names
    the entry's dimensions left symbolic; NeedsStatic when code needs one
    of them static."""
    return _Lowering(module, target, symbolic).run(entry)


@dataclass
class _Closure:
    """A lifted function literal: its Relax function and captured variables."""

    gv: Any
    captured: list[Var]


class _Lowering:
    def __init__(self, module: IRModule, target: Any, symbolic: tuple[str, ...] = ()) -> None:
        self.module = module
        self.target = target
        self.symbols = {name: tirx.Var(name, "int64") for name in symbolic}
        self.entry = ""
        self.apart: dict[str, Any] = {}  # symbol -> PrimFunc [RULE APART]
        self.bb = relax.BlockBuilder()
        self.globals: dict[str, Any] = {}
        self.kernels: dict[str, tuple[Any, KernelIR]] = {}
        self.lifted: dict[int, _Closure] = {}
        self.fallbacks: dict[str, Callable[..., Any]] = {}
        self.loops = 0
        self.print_calls = False

    # ------------------------------------------------------------ globals
    def run(self, entry: str) -> RelaxProgram:
        self.entry = entry
        reached = self._reachable(entry)
        for name in reached:  # [GLOBALS] declare, then define
            fn = self.module.functions[name]
            symbols = self.symbols if name == entry else None
            with _located(fn, name):
                params = [
                    relax.Var(p.name_hint, relax_type(p.checked_type, symbols)) for p in fn.params
                ]
                ret = relax_type(fn.body.checked_type, symbols)
            stub = relax.Function(params, relax.SeqExpr([], relax.op.null_value()), ret, False)
            self.globals[name] = self.bb.add_func(stub, name)
        for name in reached:
            fn = self.module.functions[name]
            with _located(fn, name):
                function = self._function(fn, name)
            if name == entry:
                function = function.with_attr("global_symbol", entry)
            self.bb.update_func(self.globals[name], function)
        module = self.bb.finalize()
        if self.apart:
            with self.target:
                library = tvm.compile(tvm.IRModule(self.apart), target=self.target)
            module = module.with_attr("external_mods", [library.mod])
        return RelaxProgram(module, entry, self.fallbacks, len(self.kernels), self.loops)

    def _reachable(self, entry: str) -> list[str]:
        if entry not in self.module.functions:
            raise BackendError(f"the module has no function @{entry}")
        order, seen, work = [], {entry}, [entry]
        while work:
            name = work.pop()
            order.append(name)
            for node in pre_order(self.module.functions[name]):
                if isinstance(node, GlobalVar) and node.name in self.module.functions:
                    if node.name not in seen:
                        seen.add(node.name)
                        work.append(node.name)
        return order

    def _function(self, fn: Function, name: str, captured: list[Var] | None = None) -> Any:
        """A Relax function of ``fn`` (its captured variables first)."""
        env: dict[Var, Any] = {}
        params = []
        symbols = self.symbols if name == self.entry and captured is None else None
        for v in [*(captured or []), *fn.params]:
            param = relax.Var(v.name_hint, relax_type(v.checked_type, symbols))
            env[v] = param
            params.append(param)
        body = self._block(fn.body, env)
        ret = relax_type(fn.body.checked_type, symbols)
        return relax.Function(params, body, ret, False).with_attr("effir_name", name)

    # ------------------------------------------------------------- blocks
    def _block(self, expr: Expr, env: dict[Var, Any]) -> Any:
        """``expr`` as a Relax sequence of bindings ending in its value."""
        self.bb._begin_binding_block()
        try:
            value = self._chain(expr, env)
        finally:
            block = self.bb._end_block()
        return relax.SeqExpr([block], value)

    def _chain(self, expr: Expr, env: dict[Var, Any]) -> Any:
        while isinstance(expr, Let):
            value = expr.value
            if isinstance(value, Function):
                self._bind_function(expr.var, value, env)
            else:
                env[expr.var] = self._value(value, env, expr.var.name_hint)
            expr = expr.body
        return self._value(expr, env, "result")

    def _bind_function(self, var: Var, fn: Function, env: dict[Var, Any]) -> None:
        """A let-bound function literal: a kernel, or a closure lifted to a
        Relax function [RULE CLOSURE]; it has no run-time value of its own."""
        env[var] = fn

    # ------------------------------------------------------------- values
    def _atom(self, expr: Expr, env: dict[Var, Any]) -> Any:
        if isinstance(expr, Var):
            value = env.get(expr)
            if value is None:
                raise BackendError(f"%{expr.name_hint} is not bound here", expr.span)
            if isinstance(value, Function):
                raise BackendError(
                    f"the function %{expr.name_hint} is used as a value (stored, returned or "
                    "passed on): closures that escape are not compiled",
                    expr.span,
                )
            return value
        if isinstance(expr, Constant):
            return relax.const(np.array(expr.data, order="C"), str(expr.data.dtype))
        if isinstance(expr, GlobalVar):
            raise BackendError(
                f"the global @{expr.name} is used as a value: only calls of globals are compiled",
                expr.span,
            )
        raise BackendError(f"{type(expr).__name__} is not compiled", expr.span)

    def _value(self, expr: Expr, env: dict[Var, Any], name: str) -> Any:
        emit = self.bb.emit
        if isinstance(expr, Var | Constant | GlobalVar):
            return self._atom(expr, env)
        if isinstance(expr, Tuple):
            return emit(relax.Tuple([self._atom(f, env) for f in expr.fields]), name)
        if isinstance(expr, TupleGetItem):
            return emit(relax.TupleGetItem(self._atom(expr.tuple_value, env), expr.index), name)
        if isinstance(expr, If):
            cond = self._atom(expr.cond, env)
            then = self._block(expr.then_branch, dict(env))
            other = self._block(expr.else_branch, dict(env))
            return emit(relax.If(cond, then, other), name)
        if isinstance(expr, Match):
            return self._match(expr, env)
        if isinstance(expr, Call):
            return self._call(expr, env, name)
        if isinstance(expr, Function):
            raise BackendError(
                "a function literal that is not bound by a let is not compiled", expr.span
            )
        if isinstance(expr, RefCreate | RefRead | RefWrite):
            raise BackendError(
                "references are not compiled: run state-passing first (effir.compile does)",
                expr.span,
            )
        raise BackendError(f"{type(expr).__name__} is not compiled", expr.span)

    def _match(self, expr: Match, env: dict[Var, Any]) -> Any:
        """A match whose first clause binds a tuple's parts (the only kind
        without constructors)."""
        data = self._atom(expr.data, env)
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
        return self._chain(clause.body, env)

    # -------------------------------------------------------------- calls
    def _call(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        callee = call.callee
        if isinstance(callee, Op):
            return self._operator(call, env, name)
        if isinstance(callee, Constructor):
            raise BackendError(
                f"the constructor {callee.name} (an ADT) is not compiled; run it with the "
                "interpreter",
                call.span,
            )
        if isinstance(callee, GlobalVar):
            args = [self._atom(a, env) for a in call.args]
            return self.bb.emit(relax.Call(self.globals[callee.name], args), name)
        if isinstance(callee, Var) and isinstance(env.get(callee), Function):
            fn = env[callee]
            if is_primitive(fn):
                return self._kernel_call(fn, call.args, env, name)
            closure = self._lift(fn, env, callee.name_hint)
            args = [env[v] for v in closure.captured] + [self._atom(a, env) for a in call.args]
            return self.bb.emit(relax.Call(closure.gv, args), name)
        raise BackendError(
            f"a call of {astext(callee)}, a function computed at run time, is not compiled",
            call.span,
        )

    def _lift(self, fn: Function, env: dict[Var, Any], name: str) -> _Closure:
        """[RULE CLOSURE] ``fn`` as a private Relax function of its free
        variables and parameters (lifted once)."""
        known = self.lifted.get(id(fn))
        if known is not None:
            return known
        captured = [v for v in free_vars(fn) if not isinstance(env.get(v), Function)]
        inner_functions = {v: env[v] for v in free_vars(fn) if isinstance(env.get(v), Function)}
        params = [relax.Var(v.name_hint, relax_type(v.checked_type)) for v in captured]
        params += [relax.Var(p.name_hint, relax_type(p.checked_type)) for p in fn.params]
        ret = relax_type(fn.body.checked_type)
        stub = relax.Function(params, relax.SeqExpr([], relax.op.null_value()), ret, False)
        gv = self.bb.add_func(stub, f"lifted_{name}")
        closure = self.lifted[id(fn)] = _Closure(gv, captured)
        inner = dict(inner_functions)
        body_params = []
        for v in [*captured, *fn.params]:
            param = relax.Var(v.name_hint, relax_type(v.checked_type))
            inner[v] = param
            body_params.append(param)
        body = self._block(fn.body, inner)
        self.bb.update_func(gv, relax.Function(body_params, body, ret, False))
        return closure

    # ------------------------------------------------------------ kernels
    def _kernel_call(
        self, fn: Function, arguments: tuple[Expr, ...], env: dict[Var, Any], name: str
    ) -> Any:
        """[RULE FLAT] A primitive function's call: its arguments' tensors
        in, its result's tensors out."""
        types = [p.checked_type for p in fn.params]
        result_type = fn.body.checked_type
        args = [self._atom(a, env) for a in arguments]
        if not (all(static(t) for t in types) and static(result_type)):
            self._needs_static([*types, result_type])
            return self._fallback(fn, args, types, result_type, name)
        gv, lowered = self._kernel(fn)
        inputs = [leaf for arg, t in zip(args, types, strict=True) for leaf in self._leaves(arg, t)]
        inputs += [relax.const(c, str(c.dtype)) for c in lowered.constants]
        outs = [relax_type(t) for t in lowered.signature.outputs]
        result = self.bb.emit(
            relax.call_dps_packed(gv, inputs, outs if len(outs) > 1 else outs[0]), name
        )
        if len(outs) == 1:
            return result
        parts = iter([self.bb.emit(relax.TupleGetItem(result, i)) for i in range(len(outs))])
        return self._rebuild(result_type, parts)

    def _needs_static(self, types: list[Type]) -> None:
        """[RULE SYMBOLIC] Code whose types name the entry's symbolic
        dimensions, where they must be static."""
        needed = {d for t in types for d in named_dims(t)} & self.symbols.keys()
        if needed:
            raise NeedsStatic(needed)

    def _kernel(self, fn: Function) -> tuple[str, KernelIR]:
        key = astext(fn) + "|" + ",".join(astext(p.checked_type) for p in fn.params)
        known = self.kernels.get(key)
        if known is None:
            lowered = lower_kernel(fn, self.target)
            symbol = self._compiled_apart(lowered.module["main"], _identifier(lowered.name))
            known = self.kernels[key] = (symbol, lowered)
        return known

    def _compiled_apart(self, func: Any, name: str) -> str:
        """[RULE APART] ``func`` (effir's own kernel or loop) joins the
        kernels compiled as a module of their own, linked into the VM's
        executable; its call is ``call_dps_packed`` of the returned symbol.
        TVM's LLVM code generator drops ``noalias`` from every function of a
        module as soon as something in it (the shape functions Relax
        generates, say) leads it to, and effir's loops then run 2.3x
        slower: compiled apart, they keep it whatever the program."""
        symbol = f"effir_{len(self.apart)}_{name}"
        self.apart[symbol] = _scheduled(func).with_attr("global_symbol", symbol)
        return symbol

    def _leaves(self, value: Any, t: Type) -> list[Any]:
        """The tensors of a value of type ``t`` (a tuple's, in order)."""
        if not isinstance(t, TupleType):
            return [value]
        out = []
        for i, f in enumerate(t.fields):
            out += self._leaves(self.bb.emit(relax.TupleGetItem(value, i)), f)
        return out

    def _rebuild(self, t: Type, parts: Any) -> Any:
        if not isinstance(t, TupleType):
            return next(parts)
        return self.bb.emit(relax.Tuple([self._rebuild(f, parts) for f in t.fields]))

    def _fallback(
        self, fn: Function, args: list[Any], types: list[Type], result: Type, name: str
    ) -> Any:
        """[FALLBACK] A kernel of data-dependent shape, built per concrete
        shape when called, as a Python packed function."""
        packed = f"effir.fallback.{next(_fallback_ids)}"
        self.fallbacks[packed] = _PythonKernel(fn, self.target, types, result)
        inputs = [leaf for arg, t in zip(args, types, strict=True) for leaf in self._leaves(arg, t)]
        outs = [relax_type(t) for t in leaves(result)]
        ty = outs[0] if len(outs) == 1 else relax.TupleType(outs)
        value = self.bb.emit(relax.op.call_pure_packed(packed, *inputs, ty_args=ty), name)
        if len(outs) == 1:
            return value
        parts = iter([self.bb.emit(relax.TupleGetItem(value, i)) for i in range(len(outs))])
        return self._rebuild(result, parts)

    # ---------------------------------------------------------- operators
    def _operator(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        definition = op_def(call.callee)  # type: ignore[arg-type]
        if definition.name == "cf.foreach":
            return self._foreach(call, env, name)
        if definition.name == "cf.while_loop":
            return self._recursive_loop(call, env, name)
        if definition.name == "io.print":
            return self._print(call, env, name)
        dynamic = _DYNAMIC.get(definition.name)
        if dynamic is not None:
            return dynamic(self, call, env, name)
        if definition.effect == "pure" and "te" in definition.rules:
            operands = tuple(a for a in call.args if isinstance(a, Var))
            return self._kernel_call(_one_call_kernel(call), operands, env, name)
        raise BackendError(
            f"the operator {definition.name} is not compiled outside a kernel",
            call.span,
        )

    def _print(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``io.print(%world, %x)``: the packed function ``effir.print``
        prints, in order; the world token advances by one."""
        world, value = (self._atom(a, env) for a in call.args)
        label = str(call.attrs.get("label", ""))
        self.bb.emit(
            relax.Call(
                relax.ExternFunc(PRINT_FUNCTION),
                [tvm.ir.StringImm(label), value],
                ty_args=[relax.ObjectType()],
            )
        )
        one = relax.const(np.int64(1), "int64")
        advanced = self.bb.emit(relax.op.add(world, one))
        return self.bb.emit(relax.Tuple([advanced, value]), name)

    def _foreach(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE LOOP] ``cf.foreach(body, xs, init)`` as one TIR loop."""
        body_arg, xs_arg, init_arg = call.args
        body = env.get(body_arg) if isinstance(body_arg, Var) else body_arg
        if not isinstance(body, Function):
            raise BackendError("a cf.foreach body must be a function literal", call.span)
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        captured = [v for v in free_vars(body) if v not in functions]
        xs_type = xs_arg.checked_type
        length: Any = _leading_dim(xs_type)
        step_types = [*_step_types(xs_type), init_arg.checked_type, body.checked_type]
        step_types += [v.checked_type for v in captured]
        self._needs_static(step_types)
        if isinstance(length, str) and length in self.symbols and all(map(static, step_types)):
            length = self.symbols[length]  # a whole loop of symbolic length
        elif not static(xs_type) or not static(init_arg.checked_type):
            return self._recursive_loop(call, env, name)
        if self.target.kind.name != "llvm":  # a whole TIR loop is a CPU schedule
            return self._recursive_loop(call, env, name)
        try:
            lowered = lower_loop(body, {}, captured, functions, self.module, parallel=True)
        except BackendError:  # control flow or effects in the body: a VM loop
            return self._recursive_loop(call, env, name)
        func = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": lowered.func}))["main"]
        gv = self._compiled_apart(func, f"loop_{self.loops}")
        self.loops += 1
        sequences = self._leaves(self._atom(xs_arg, env), xs_type)
        state = self._leaves(self._atom(init_arg, env), init_arg.checked_type)
        rest = []
        for v in captured:
            rest += self._leaves(self._atom(v, env), v.checked_type)
        rest += [relax.const(c, str(c.dtype)) for c in lowered.constants]
        emit = self.bb.emit
        if isinstance(length, int):
            return self._in_chunks(call, gv, lowered, length, sequences, state, rest, name)
        # A symbolic length: up to LOOP_CHUNK steps, one call on the sequences
        # as they are; more, the chunked loop (its copies of the chunks'
        # rows cost less than a prologue of the whole length would hold).
        steps = _step_types(xs_type)
        first = [t for t in steps if isinstance(t, TensorType)][0]
        size = int(np.prod(first.shape, dtype=np.int64))
        rows = emit(self._reshape(sequences[0], [length, size]))
        chunk_limit = relax.const(np.int64(LOOP_CHUNK), "int64")
        long = emit(
            relax.call_tir(
                self._executor("before_end", first.dtype),
                [rows, chunk_limit],
                relax.TensorType([], "bool"),
            )
        )
        self.bb._begin_binding_block()
        chunked = self._chunked(call, gv, lowered, length, sequences, state, rest, steps, name)
        chunked_seq = relax.SeqExpr([self.bb._end_block()], chunked)
        self.bb._begin_binding_block()
        direct = self._bounded_call(call, gv, lowered, sequences, state, rest)
        direct_seq = relax.SeqExpr([self.bb._end_block()], direct)
        return emit(relax.If(long, chunked_seq, direct_seq), name)

    def _bounded_call(
        self,
        call: Call,
        loop: Any,
        lowered: LoweredLoop,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
    ) -> Any:
        """One call of the loop kernel on at most ``LOOP_CHUNK`` steps, in a
        function of its own whose length is declared bounded
        (``tir_var_upper_bound``): Relax then plans the kernel's scratch
        (the hoisted projections) statically and reuses it from call to
        call, where a symbolic size would make the VM allocate fresh pages
        at every call (a page fault per 4 KiB, slower than the loop)."""
        steps = tirx.Var("steps", "int64")
        seq_params = [
            relax.Var(f"xs{i}", relax.TensorType([steps, *list(x.ty.shape.values)[1:]], x.ty.dtype))
            for i, x in enumerate(sequences)
        ]
        carried = [relax.Var(f"state{i}", x.ty) for i, x in enumerate(state)]
        others = [relax.Var(f"c{i}", r.ty) for i, r in enumerate(rest) if not _is_const(r)]
        it = iter(others)
        inner_rest = [r if _is_const(r) else next(it) for r in rest]
        self.bb._begin_binding_block()
        outs = _loop_outputs(lowered, steps)
        result = self.bb.emit(
            relax.call_dps_packed(loop, [*seq_params, *carried, *inner_rest], outs)
        )
        n_keep = len(lowered.outputs) + len(lowered.state)
        kept = relax.Tuple([self.bb.emit(relax.TupleGetItem(result, i)) for i in range(n_keep)])
        body = relax.SeqExpr([self.bb._end_block()], kept)
        params = [*seq_params, *carried, *others]
        ret = relax.TupleType([o for o in outs[:n_keep]])
        function = relax.Function(params, body, ret, False).with_attr(
            "tir_var_upper_bound", {"steps": LOOP_CHUNK}
        )
        gv = self.bb.add_func(function, f"bounded_{self.loops}")
        self.loops += 1
        emit = self.bb.emit
        result = emit(relax.Call(gv, [*sequences, *state, *[r for r in rest if not _is_const(r)]]))
        n_out = len(lowered.outputs)
        ret = call.checked_type
        assert isinstance(ret, TupleType)
        stacked = self._rebuild(
            ret.fields[0], iter([emit(relax.TupleGetItem(result, i)) for i in range(n_out)])
        )
        final = self._rebuild(
            ret.fields[1],
            iter([emit(relax.TupleGetItem(result, n_out + i)) for i in range(len(lowered.state))]),
        )
        return emit(relax.Tuple([stacked, final]))

    def _in_chunks(
        self,
        call: Call,
        gv: Any,
        lowered: LoweredLoop,
        length: Any,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
        name: str,
    ) -> Any:
        """The loop kernel called on ``LOOP_CHUNK`` steps at a time, the
        state passed on (one call when the length is symbolic)."""
        emit = self.bb.emit
        n_out, n_state = len(lowered.outputs), len(lowered.state)
        pieces: list[list[Any]] = [[] for _ in range(n_out)]
        starts = range(0, max(length, 1), LOOP_CHUNK) if isinstance(length, int) else [0]
        for start in starts:  # [RULE CHUNK]
            steps = min(LOOP_CHUNK, length - start) if isinstance(length, int) else length
            chunk = sequences
            if isinstance(length, int) and steps != length:
                chunk = [
                    emit(relax.op.strided_slice(x, [0], [start], [start + steps]))
                    for x in sequences
                ]
            outs = _loop_outputs(lowered, steps)
            result = emit(relax.call_dps_packed(gv, [*chunk, *state, *rest], outs))
            parts = [emit(relax.TupleGetItem(result, i)) for i in range(len(outs))]
            for i in range(n_out):
                pieces[i].append(parts[i])
            state = parts[n_out : n_out + n_state]
        stacked_leaves = [p[0] if len(p) == 1 else emit(relax.op.concat(p, axis=0)) for p in pieces]
        ret = call.checked_type
        assert isinstance(ret, TupleType)
        stacked = self._rebuild(ret.fields[0], iter(stacked_leaves))
        final = self._rebuild(ret.fields[1], iter(state))
        return emit(relax.Tuple([stacked, final]), name)

    def _chunked(
        self,
        call: Call,
        loop: Any,
        lowered: LoweredLoop,
        length: Any,
        sequences: list[Any],
        state: list[Any],
        rest: list[Any],
        steps: list[Type],
        name: str,
    ) -> Any:
        """[RULE CHUNK] A whole loop of symbolic length: a recursive Relax
        function calls the loop kernel on ``LOOP_CHUNK`` steps at a time
        (the chunk's rows copied out of the sequences), passes the state on
        and writes each chunk's outputs into buffers of the whole length."""
        emit = self.bb.emit
        seq_types = [t for t in steps if isinstance(t, TensorType)]
        sizes = [int(np.prod(t.shape, dtype=np.int64)) for t in seq_types]
        out_sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in lowered.outputs]
        rows = tirx.Var("rows", "int64")
        start = relax.Var("start", relax.TensorType([], "int64"))
        seqs = [
            relax.Var(f"xs{i}", relax.TensorType([rows, c], t.dtype))
            for i, (t, c) in enumerate(zip(seq_types, sizes, strict=True))
        ]
        carried = [
            relax.Var(f"state{i}", relax.TensorType(list(leaf.shape), leaf.dtype))
            for i, leaf in enumerate(lowered.state)
        ]
        bufs = [
            relax.Var(f"out{i}", relax.TensorType([rows, c], leaf.dtype))
            for i, (leaf, c) in enumerate(zip(lowered.outputs, out_sizes, strict=True))
        ]
        others = [relax.Var(f"c{i}", r.ty) for i, r in enumerate(rest) if not _is_const(r)]
        params = [start, *carried, *bufs, *seqs, *others]
        ret = relax.TupleType(
            [relax.TensorType(dtype=leaf.dtype, ndim=2) for leaf in lowered.outputs]
            + [p.ty for p in carried]
        )
        stub = relax.Function(params, relax.SeqExpr([], relax.op.null_value()), ret, False)
        gv = self.bb.add_func(stub, f"chunks_{self.loops}")
        inner_rest = []
        it = iter(others)
        for r in rest:
            inner_rest.append(r if _is_const(r) else next(it))

        self.bb._begin_binding_block()
        first = seq_types[0]
        more = emit(
            relax.call_tir(
                self._executor("before_end", first.dtype),
                [seqs[0], start],
                relax.TensorType([], "bool"),
            )
        )
        self.bb._begin_binding_block()
        n = emit(
            relax.call_tir(
                self._executor("chunk_length", first.dtype, LOOP_CHUNK),
                [seqs[0], start],
                relax.TensorType([1], "int64"),
            )
        )
        k = tirx.Var("k", "int64")
        self.bb.match_cast(emit(relax.op.tensor_to_shape(n)), relax.ShapeType([k]))
        chunk = []
        for seq, t, c in zip(seqs, seq_types, sizes, strict=True):
            part = emit(
                relax.call_tir(
                    self._executor("chunk_rows", t.dtype),
                    [seq, start],
                    relax.TensorType([k, c], t.dtype),
                )
            )
            chunk.append(emit(self._reshape(part, [k, *[int(d) for d in t.shape]])))
        outs = _loop_outputs(lowered, k)
        result = emit(relax.call_dps_packed(loop, [*chunk, *carried, *inner_rest], outs))
        n_out = len(lowered.outputs)
        written = []
        for i, (buf, leaf, c) in enumerate(zip(bufs, lowered.outputs, out_sizes, strict=True)):
            part = emit(self._reshape(emit(relax.TupleGetItem(result, i)), [k, c]))
            written.append(
                emit(
                    relax.op.call_tir_inplace(
                        self._executor("write_rows", leaf.dtype), [buf, part, start], 0, buf.ty
                    )
                )
            )
        new_state = [emit(relax.TupleGetItem(result, n_out + i)) for i in range(len(carried))]
        following = emit(relax.op.add(start, relax.const(np.int64(LOOP_CHUNK), "int64")))
        self._release(result)
        again = emit(relax.Call(gv, [following, *new_state, *written, *seqs, *others]))
        step = relax.SeqExpr([self.bb._end_block()], again)
        done = relax.SeqExpr([], relax.Tuple([*bufs, *carried]))
        value = emit(relax.If(more, step, done))
        self.bb.update_func(
            gv, relax.Function(params, relax.SeqExpr([self.bb._end_block()], value), ret, False)
        )
        self.loops += 1

        # The call: buffers of the whole length, the sequences as rows.
        rows_in = [
            emit(self._reshape(x, [length, c])) for x, c in zip(sequences, sizes, strict=True)
        ]
        start_bufs = [
            emit(
                relax.call_tir(
                    self._executor("zeros", leaf.dtype),
                    [],
                    relax.TensorType([length, c], leaf.dtype),
                )
            )
            for leaf, c in zip(lowered.outputs, out_sizes, strict=True)
        ]
        args = [relax.const(np.int64(0), "int64"), *state, *start_bufs, *rows_in]
        args += [r for r in rest if not _is_const(r)]
        finished = emit(relax.Call(gv, args))
        stacked = []
        for i, leaf in enumerate(lowered.outputs):
            part = emit(relax.TupleGetItem(finished, i))
            stacked.append(emit(self._reshape(part, [length, *leaf.shape])))
        final = [emit(relax.TupleGetItem(finished, n_out + i)) for i in range(len(carried))]
        ret_type = call.checked_type
        assert isinstance(ret_type, TupleType)
        result_value = relax.Tuple(
            [
                self._rebuild(ret_type.fields[0], iter(stacked)),
                self._rebuild(ret_type.fields[1], iter(final)),
            ]
        )
        return emit(result_value, name)

    # ------------------------------------------------------ VM loops
    def _recursive_loop(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """[RULE VMLOOP] A loop the VM runs: a private recursive Relax
        function of (steps done, state, output buffers, sequences, captured
        values). ``cf.while_loop`` asks its condition at each step and
        collects its outputs in buffers that double when full
        (executor_kernels.py); ``cf.foreach`` takes row ``count`` of its
        sequences and fills buffers of their length. At the end the
        buffers are cut to the steps run."""
        is_while = op_def(call.callee).name == "cf.while_loop"  # type: ignore[arg-type]
        self._needs_static([a.checked_type for a in call.args] + [call.checked_type])
        functions = {v: f for v, f in env.items() if isinstance(f, Function)}
        if is_while:
            cond_arg, body_arg, init_arg = call.args
            cond: Function | None = self._literal(cond_arg, env, call)
            xs_arg = None
        else:
            body_arg, xs_arg, init_arg = call.args
            cond = None
        body = self._literal(body_arg, env, call)
        captured = []
        for fn in [f for f in (cond, body) if f is not None]:
            captured += [v for v in free_vars(fn) if v not in functions and v not in captured]
        step_type = body.body.checked_type
        assert isinstance(step_type, TupleType)
        out_type, state_type = step_type.fields
        outs = leaves(out_type)
        for leaf in outs:
            if not leaf.is_static:
                raise BackendError(
                    f"a loop whose per-step output ({astext(leaf)}) has a data-dependent shape "
                    "is not compiled",
                    call.span,
                )
        sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in outs]
        xs_leaves = [] if xs_arg is None else leaves(xs_arg.checked_type)

        # The recursive function.
        cap = tirx.Var("cap", "int64")
        count = relax.Var("count", relax.TensorType([], "int64"))
        state = relax.Var("state", relax_type(state_type))
        bufs = [
            relax.Var(f"buf{i}", relax.TensorType([cap, c], leaf.dtype))
            for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True))
        ]
        seqs = [relax.Var(f"xs{i}", relax_type(t)) for i, t in enumerate(xs_leaves)]
        caps = [relax.Var(v.name_hint, relax_type(v.checked_type)) for v in captured]
        params = [count, state, *bufs, *seqs, *caps]
        ret = relax.TupleType(
            [relax.TensorType(dtype=leaf.dtype, ndim=2) for leaf in outs]
            + [relax.TensorType([], "int64"), relax_type(state_type)]
        )
        stub = relax.Function(params, relax.SeqExpr([], relax.op.null_value()), ret, False)
        gv = self.bb.add_func(stub, f"vm_loop_{self.loops}")
        self.loops += 1

        inner: dict[Var, Any] = dict(functions)
        inner.update(zip(captured, caps, strict=True))
        emit = self.bb.emit
        self.bb._begin_binding_block()
        if is_while:
            assert cond is not None
            go = self._chain(cond.body, {**inner, cond.params[0]: state})
        else:
            flat = self._rows(seqs[0], xs_leaves[0])
            go = emit(
                relax.call_tir(
                    self._executor("before_end", xs_leaves[0].dtype),
                    [flat, count],
                    relax.TensorType([], "bool"),
                )
            )
        limit = call.attrs.get("max_iterations")
        if limit is not None:
            below = emit(relax.op.less(count, relax.const(np.int64(limit), "int64")))
            go = emit(relax.op.logical_and(go, below))
        # One more step.
        self.bb._begin_binding_block()
        if is_while:
            step_env = {**inner, body.params[0]: state}
        else:
            rows = []
            for seq, leaf in zip(seqs, xs_leaves, strict=True):
                flat = self._rows(seq, leaf)
                row_size = int(np.prod(leaf.shape[1:], dtype=np.int64))
                row = emit(
                    relax.call_tir(
                        self._executor("take_row", leaf.dtype),
                        [flat, count],
                        relax.TensorType([row_size], leaf.dtype),
                    )
                )
                rows.append(emit(self._reshape(row, [int(d) for d in leaf.shape[1:]])))
            x_t = self._rebuild(body.params[0].checked_type, iter(rows))
            step_env = {**inner, body.params[0]: x_t, body.params[1]: state}
        step = self._chain(body.body, step_env)
        out = emit(relax.TupleGetItem(step, 0))
        new_state = emit(relax.TupleGetItem(step, 1))
        current = list(bufs)
        if is_while:  # double the buffers when they are full
            full = emit(
                relax.call_tir(
                    self._executor("at_capacity", outs[0].dtype),
                    [bufs[0], count],
                    relax.TensorType([], "bool"),
                )
            )
            self.bb._begin_binding_block()
            grown = [
                emit(
                    relax.call_tir(
                        self._executor("grow", leaf.dtype),
                        [b],
                        relax.TensorType([cap * 2, c], leaf.dtype),
                    )
                )
                for b, leaf, c in zip(bufs, outs, sizes, strict=True)
            ]
            grown_seq = relax.SeqExpr(
                [self.bb._end_block()], relax.Tuple(grown) if grown else relax.Tuple([])
            )
            same_seq = relax.SeqExpr([], relax.Tuple(list(bufs)))
            chosen = emit(relax.If(full, grown_seq, same_seq))
            new_cap = tirx.Var("cap", "int64")
            current = []
            for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True)):
                part = emit(relax.TupleGetItem(chosen, i))
                current.append(self.bb.match_cast(part, relax.TensorType([new_cap, c], leaf.dtype)))
        written = []
        for b, value, leaf, c in zip(
            current, self._leaves(out, out_type), outs, sizes, strict=True
        ):
            row = emit(self._reshape(value, [c]))
            written.append(
                emit(
                    relax.op.call_tir_inplace(
                        self._executor("write_row", leaf.dtype), [b, row, count], 0, b.ty
                    )
                )
            )
        following = emit(relax.op.add(count, relax.const(np.int64(1), "int64")))
        self._release(step)
        again = emit(relax.Call(gv, [following, new_state, *written, *seqs, *caps]))
        more = relax.SeqExpr([self.bb._end_block()], again)
        done = relax.SeqExpr([], relax.Tuple([*bufs, count, state]))
        result = emit(relax.If(go, more, done))
        body_seq = relax.SeqExpr([self.bb._end_block()], result)
        self.bb.update_func(gv, relax.Function(params, body_seq, ret, False))

        # The call: empty buffers, then the outputs cut to the steps run.
        if is_while:
            first = int(limit) if limit is not None and 0 < limit <= 64 else 16
        else:
            first = _leading(xs_arg.checked_type)  # type: ignore[union-attr]
        start_bufs = [
            emit(
                relax.call_tir(
                    self._executor("zeros", leaf.dtype),
                    [],
                    relax.TensorType([first, c], leaf.dtype),
                )
            )
            for leaf, c in zip(outs, sizes, strict=True)
        ]
        args = [relax.const(np.int64(0), "int64"), self._atom(init_arg, env), *start_bufs]
        if xs_arg is not None:
            args += self._leaves(self._atom(xs_arg, env), xs_arg.checked_type)
        args += [self._atom(v, env) for v in captured]
        finished = emit(relax.Call(gv, args))
        steps = emit(relax.TupleGetItem(finished, len(outs)))
        n = self._size_of(steps)
        stacked = []
        for i, (leaf, c) in enumerate(zip(outs, sizes, strict=True)):
            buf = emit(relax.TupleGetItem(finished, i))
            cut = emit(
                relax.call_tir(
                    self._executor("prefix", leaf.dtype),
                    [buf],
                    relax.TensorType([n, c], leaf.dtype),
                )
            )
            stacked.append(emit(self._reshape(cut, [n, *[int(d) for d in leaf.shape]])))
        final_state = emit(relax.TupleGetItem(finished, len(outs) + 1))
        stacked_value = self._rebuild(out_type, iter(stacked))
        return emit(relax.Tuple([stacked_value, final_state]), name)

    def _release(self, value: Any) -> None:
        """Drop the VM's reference to the tuple ``value`` before a loop's
        recursive call: Relax frees a tensor after its last use but keeps a
        tuple whose fields were taken, so every step's tuple (a chunk's
        scratch, say) would live until the recursion unwinds, memory
        growing with the number of steps."""
        self.bb.emit(kill_object(value))

    def _literal(self, arg: Expr, env: dict[Var, Any], call: Call) -> Function:
        fn = env.get(arg) if isinstance(arg, Var) else arg
        if not isinstance(fn, Function):
            raise BackendError("a loop's body and condition must be function literals", call.span)
        return fn

    def _executor(self, kernel: str, dtype: str, *extra: Any) -> Any:
        """The executor kernel ``kernel`` for ``dtype``, added once."""
        key = "_".join([kernel, dtype, *map(str, extra)])
        gv = self.kernels.get(key)
        if gv is None:
            func = self._on_target(getattr(executor_kernels, kernel)(dtype, *extra))
            gv = self.bb.add_func(func, key)
            self.kernels[key] = (gv, None)  # type: ignore[assignment]
            return gv
        return gv[0]

    def _reshape(self, value: Any, shape: list[Any]) -> Any:
        """``value`` with ``shape``: a view of the same memory (the VM's
        builtin), not a copy; Relax's own ``reshape`` outside a dataflow
        block is an unscheduled copy kernel, 20 ms for a 3 MB tensor."""
        dtype = value.ty.dtype
        ty = relax.TensorType(list(shape), dtype)
        return relax.op.call_pure_packed(
            "vm.builtin.reshape", value, relax.ShapeExpr(list(shape)), ty_args=ty
        )

    def _on_target(self, func: Any) -> Any:
        """An executor kernel for the target: on a GPU it runs as one
        thread (its steps are sequential: a running count of the rows
        written; the data it moves is small beside the kernels').

        Its buffers never alias, and it says so (``tirx.noalias``): TVM's
        LLVM code generator drops ``noalias`` from *every* function of a
        module in which one function does not declare it, and the loop
        kernels ran 2.3x slower without it."""
        func = func.with_attr("tirx.noalias", True)
        if self.target.kind.name == "llvm":
            return func
        return _scheduled(executor_kernels.single_thread(func))

    def _rows(self, value: Any, t: TensorType) -> Any:
        """``value`` as a (rows, row size) tensor: a view for the executor
        kernels, which work on rows."""
        dims = self._dims(value, t)
        row = 1
        for d in dims[1:]:
            row = row * d
        return self.bb.emit(self._reshape(value, [dims[0] if dims else 1, row]))

    def _dims(self, value: Any, t: TensorType) -> list[Any]:
        """The dimensions of a tensor value: its static ones, variables
        bound by a cast for the others."""
        if t.is_static:
            return [int(d) for d in t.shape]
        sinfo = value.ty
        if isinstance(sinfo, relax.TensorType) and sinfo.shape is not None:
            return list(sinfo.shape.values)
        names = [tirx.Var(f"d{i}", "int64") for i in range(t.ndim)]
        cast = self.bb.match_cast(value, relax.TensorType(names, t.dtype))
        del cast
        return names

    def _size_of(self, count: Any) -> Any:
        """A variable holding the value of the ``int64`` scalar ``count``."""
        flat = self.bb.emit(self._reshape(count, [1]))
        shape = self.bb.emit(relax.op.tensor_to_shape(flat))
        n = tirx.Var("n", "int64")
        self.bb.match_cast(shape, relax.ShapeType([n]))
        return n

    # --------------------------------------------------- dynamic shapes
    def _boolean_mask(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``x[mask]``: count, allocate, fill [RULE DYN]."""
        x_arg, mask_arg = call.args
        x_type, mask_type = x_arg.checked_type, mask_arg.checked_type
        x = self._atom(x_arg, env)
        mask = self._atom(mask_arg, env)
        x_dims = self._dims(x, x_type)
        k = mask_type.ndim
        rows = 1
        for d in x_dims[:k]:
            rows = rows * d
        size = 1
        for d in x_dims[k:]:
            size = size * d
        emit = self.bb.emit
        flat_mask = emit(self._reshape(mask, [rows]))
        counted = emit(
            relax.call_tir(
                self._executor_fixed("count_true"), [flat_mask], relax.TensorType([1], "int64")
            )
        )
        n = self._size_of(emit(self._reshape(counted, [])))
        flat_x = emit(self._reshape(x, [rows, size]))
        picked = emit(
            relax.call_tir(
                self._executor("mask_rows", x_type.dtype),
                [flat_x, flat_mask],
                relax.TensorType([n, size], x_type.dtype),
            )
        )
        return emit(self._reshape(picked, [n, *x_dims[k:]]), name)

    def _argwhere(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        (x_arg,) = call.args
        x_type = x_arg.checked_type
        x = self._atom(x_arg, env)
        dims = self._dims(x, x_type)
        total = 1
        for d in dims:
            total = total * d
        emit = self.bb.emit
        flat = emit(self._reshape(x, [total]))
        if x_type.dtype == "bool":
            counted = emit(
                relax.call_tir(
                    self._executor_fixed("count_true"), [flat], relax.TensorType([1], "int64")
                )
            )
            flat = emit(relax.op.astype(flat, "int8"))
            dtype = "int8"
        else:
            dtype = x_type.dtype
            counted = emit(
                relax.call_tir(
                    self._executor("count_nonzero", dtype), [flat], relax.TensorType([1], "int64")
                )
            )
        n = self._size_of(emit(self._reshape(counted, [])))
        shape = emit(relax.op.shape_to_tensor(relax.ShapeExpr(dims)))
        return emit(
            relax.call_tir(
                self._executor("argwhere_rows", dtype),
                [flat, shape],
                relax.TensorType([n, len(dims)], "int32"),
            ),
            name,
        )

    def _dyn_shape(self, shape_value: Any, shape_type: TensorType) -> list[Any]:
        """The dimensions a 1-d integer shape tensor holds, as variables."""
        length = shape_type.shape[0]
        if not isinstance(length, int):
            raise BackendError("a shape tensor of data-dependent length is not compiled")
        as_int64 = self.bb.emit(relax.op.astype(shape_value, "int64"))
        shape = self.bb.emit(relax.op.tensor_to_shape(as_int64))
        dims = [tirx.Var(f"s{i}", "int64") for i in range(length)]
        self.bb.match_cast(shape, relax.ShapeType(dims))
        return dims

    def _dyn_fill(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        """``dyn.zeros``/``dyn.ones``/``dyn.full``: the shape from a tensor."""
        op = op_def(call.callee).name  # type: ignore[arg-type]
        dtype = str(call.attrs["dtype"])
        shape_arg = call.args[-1]
        dims = self._dyn_shape(self._atom(shape_arg, env), shape_arg.checked_type)
        if op == "dyn.full":
            value = self.bb.emit(relax.op.astype(self._atom(call.args[0], env), dtype))
        else:
            value = relax.const(np.asarray(0 if op == "dyn.zeros" else 1, dtype=dtype), dtype)
        total = 1
        for d in dims:
            total = total * d
        emit = self.bb.emit
        flat = emit(
            relax.call_tir(self._executor("fill", dtype), [value], relax.TensorType([total], dtype))
        )
        return emit(self._reshape(flat, dims), name)

    def _dyn_reshape(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        x_arg, shape_arg = call.args
        x = self._atom(x_arg, env)
        self._dims(x, x_arg.checked_type)
        dims = self._dyn_shape(self._atom(shape_arg, env), shape_arg.checked_type)
        return self.bb.emit(self._reshape(x, dims), name)

    def _shape_of(self, call: Call, env: dict[Var, Any], name: str) -> Any:
        (x_arg,) = call.args
        x = self._atom(x_arg, env)
        dims = self._dims(x, x_arg.checked_type)
        shape = self.bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr(dims)))
        return self.bb.emit(relax.op.astype(shape, str(call.attrs["dtype"])), name)

    def _executor_fixed(self, kernel: str) -> Any:
        key = kernel
        known = self.kernels.get(key)
        if known is None:
            gv = self.bb.add_func(self._on_target(getattr(executor_kernels, kernel)()), key)
            self.kernels[key] = (gv, None)  # type: ignore[assignment]
            return gv
        return known[0]


_DYNAMIC: dict[str, Callable[..., Any]] = {
    "boolean_mask": _Lowering._boolean_mask,
    "argwhere": _Lowering._argwhere,
    "dyn.zeros": _Lowering._dyn_fill,
    "dyn.ones": _Lowering._dyn_fill,
    "dyn.full": _Lowering._dyn_fill,
    "dyn.reshape": _Lowering._dyn_reshape,
    "shape_of": _Lowering._shape_of,
}


def _scheduled(func: Any) -> Any:
    """``func`` marked as scheduled, so that Relax's default GPU schedule
    (for the operators it legalises itself) leaves it alone."""
    return func.with_attr("tirx.is_scheduled", True)


def _one_call_kernel(call: Call) -> Function:
    """A primitive function computing ``call`` alone (what ``lower-tvm``
    makes of a call whose types became static only once specialised)."""
    params, args = [], []
    for arg in call.args:
        if isinstance(arg, Var):
            param = Var(f"p{len(params)}", arg.checked_type)
            params.append(param)
            args.append(param)
        else:
            args.append(arg)
    body = Call(call.callee, tuple(args), call.attrs, span=call.span)
    fn = Function(tuple(params), body, call.checked_type, attrs=PRIMITIVE, span=call.span)
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


def _is_const(value: Any) -> bool:
    return isinstance(value, tvm.ir.expr.Constant)


def _leading_dim(t: Type) -> int | str:
    while isinstance(t, TupleType):
        t = t.fields[0]
    assert isinstance(t, TensorType)
    return t.shape[0]


def _step_types(t: Type) -> list[Type]:
    """The types of one step of a sequence of type ``t`` (the leading axis
    dropped)."""
    if isinstance(t, TupleType):
        return [s for f in t.fields for s in _step_types(f)]
    assert isinstance(t, TensorType)
    return [TensorType(t.shape[1:], t.dtype)]


def _leading(t: Type) -> int:
    while isinstance(t, TupleType):
        t = t.fields[0]
    assert isinstance(t, TensorType)
    return int(t.shape[0])


def _loop_outputs(lowered: LoweredLoop, length: int) -> list[Any]:
    """The loop function's output tensors: the stacked outputs, the final
    state, the prologue's scratch (discarded)."""
    rows = lowered.scratch_rows(length)
    outs = [relax.TensorType([length, *leaf.shape], leaf.dtype) for leaf in lowered.outputs]
    outs += [relax.TensorType(list(leaf.shape), leaf.dtype) for leaf in lowered.state]
    outs += [
        relax.TensorType(([rows] if seq else []) + list(leaf.shape), leaf.dtype)
        for leaf, seq in lowered.scratch
    ]
    return outs


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"k_{cleaned}"


class _PythonKernel:
    """[FALLBACK] A packed function computing a primitive function on the
    VM's tensors: the kernel for their shapes is built at the first call."""

    def __init__(self, fn: Function, target: Any, types: list[Type], result: Type) -> None:
        self.fn = fn
        self.target = target
        self.types = types
        self.result = result
        self.builds: dict[tuple[tuple[int, ...], ...], Any] = {}

    def __call__(self, *tensors: Any) -> Any:
        arrays = [np.from_dlpack(t) for t in tensors]
        key = tuple(a.shape for a in arrays)
        kernel = self.builds.get(key)
        if kernel is None:
            kernel = self.builds[key] = build_kernel(
                _with_static_types(self.fn, arrays), self.target
            )
        args = _regroup(self.types, iter(arrays))
        result = kernel(*args)
        flat = _flatten_result(result)
        outs = [tvm_ffi.from_dlpack(np.array(a, order="C")) for a in flat]
        return outs[0] if len(outs) == 1 else tvm_ffi.convert(outs)


def _with_static_types(fn: Function, arrays: list[np.ndarray]) -> Function:
    """``fn`` with its parameters typed by ``arrays``' shapes and its body
    checked again, so that every type in it is static."""
    it = iter(arrays)
    params = {p: Var(p.name_hint, _static_type(p.checked_type, it), span=p.span) for p in fn.params}
    renamer = _Rename(params)
    body = renamer.mutate(fn.body)
    copy = Function(tuple(params.values()), body, None, fn.type_params, fn.attrs, span=fn.span)
    infer_expr(copy)
    return copy


class _Rename(ExprMutator):
    def __init__(self, mapping: dict[Var, Var]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_Var(self, new: Any, old: Any) -> Any:
        return self.mapping.get(old, new)


def _static_type(t: Type, arrays: Any) -> Type:
    if isinstance(t, TupleType):
        return TupleType(tuple(_static_type(f, arrays) for f in t.fields))
    array = next(arrays)
    if isinstance(t, KeyType):
        return t
    assert isinstance(t, TensorType)
    return TensorType(tuple(int(n) for n in array.shape), t.dtype)


def _regroup(types: list[Type], arrays: Any) -> list[Any]:
    def one(t: Type) -> Any:
        if isinstance(t, TupleType):
            return tuple(one(f) for f in t.fields)
        a = next(arrays)
        return PRNGKey(a) if isinstance(t, KeyType) else a

    return [one(t) for t in types]


def _flatten_result(value: Any) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    stack = [value]
    while stack:
        top = stack.pop()
        if isinstance(top, tuple):
            stack.extend(reversed(top))
        else:
            out.append(top.data if isinstance(top, PRNGKey) else np.asarray(top))
    return out
