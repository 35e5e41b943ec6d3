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

The parts: relax_types.py (the types, [RULE SYMBOLIC]), relax_loops.py
([RULE LOOP], [RULE CHUNK], [RULE VMLOOP]), relax_dynamic.py ([RULE DYN])
and relax_fallback.py ([FALLBACK]); this module is the walk over the
program and its calls, kernels and closures.

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
from tvm import relax, tirx

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
from ...ir.types import TupleType, Type
from ...ir.visitor import free_vars, pre_order
from ...passes.fuse import PRIMITIVE, is_primitive
from ...passes.infer_type import infer_expr
from .errors import BackendError
from .kernel import KernelIR, leaves, lower_kernel
from .relax_dynamic import DYNAMIC, DynamicLowering
from .relax_fallback import PythonKernel
from .relax_loops import LoopLowering
from .relax_types import NeedsStatic, named_dims, relax_type, scheduled, static

PRINT_FUNCTION = "effir.print"
_ESCAPED_LABEL = "\x00effir-utf8-hex:"


def print_label(label: str) -> str:
    """A print label as TVM can hold it (UTF-8): a label that is not (a
    lone surrogate) is carried as the hex of its surrogate-passing bytes."""
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        return _ESCAPED_LABEL + label.encode("utf-8", "surrogatepass").hex()
    return label


def label_text(label: str) -> str:
    """The label ``print_label`` carried."""
    if label.startswith(_ESCAPED_LABEL):
        return bytes.fromhex(label.removeprefix(_ESCAPED_LABEL)).decode("utf-8", "surrogatepass")
    return label


"""The packed function ``io.print`` calls: ``(label: str, value) -> None``."""

_fallback_ids = itertools.count()


# ================================================================== types
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


class _Lowering(LoopLowering, DynamicLowering):
    def __init__(self, module: IRModule, target: Any, symbolic: tuple[str, ...] = ()) -> None:
        self.module = module
        self.target = target
        self.symbols = {name: tirx.Var(name, "int64") for name in symbolic}
        self.entry = ""
        self.apart: dict[str, Any] = {}  # symbol -> PrimFunc [RULE APART]
        self.bb = relax.BlockBuilder()
        self.globals: dict[str, Any] = {}
        self.kernels: dict[str, tuple[Any, KernelIR]] = {}  # effir's, by text and types
        self.executor_gvs: dict[str, Any] = {}  # the executor's (relax_dynamic.py)
        self.lifted: dict[int, _Closure] = {}
        self.fallbacks: dict[str, Callable[..., Any]] = {}
        self.loops = 0

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
                # A kernel, or a closure lifted where it is called [RULE
                # CLOSURE]: no run-time value of its own.
                env[expr.var] = value
            else:
                env[expr.var] = self._value(value, env, expr.var.name_hint)
            expr = expr.body
        return self._value(expr, env, "result")

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
        if not leaves(result_type):  # nothing to compute (random.split(k, num=0))
            return self._rebuild(result_type, iter(()))
        gv, lowered = self._kernel(fn)
        inputs = [leaf for arg, t in zip(args, types, strict=True) for leaf in self._leaves(arg, t)]
        inputs += [relax.const(c, str(c.dtype)) for c in lowered.constants]
        outs = [relax_type(t) for t in lowered.signature.outputs]
        result = self.bb.emit(
            relax.call_dps_packed(gv, inputs, outs if len(outs) > 1 else outs[0]), name
        )
        if len(outs) == 1:  # a tensor, or a tuple of one (random.split(k, num=1))
            return self._rebuild(result_type, iter([result]))
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
        self.apart[symbol] = scheduled(func).with_attr("global_symbol", symbol)
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
        self.fallbacks[packed] = PythonKernel(fn, self.target, types, result)
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
        dynamic = DYNAMIC.get(definition.name)
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
                [tvm.ir.StringImm(print_label(label)), value],
                ty_args=[relax.ObjectType()],
            )
        )
        one = relax.const(np.int64(1), "int64")
        advanced = self.bb.emit(relax.op.add(world, one))
        return self.bb.emit(relax.Tuple([advanced, value]), name)


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


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"k_{cleaned}"
