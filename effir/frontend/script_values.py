"""What the script converter keeps in its environment besides effir
values: a block's return, the lists loops append to, nested functions
(staged: inlined where called with values, a closure where used as one)
the let-chain places kept for those closures, and the scripted functions
it calls; with what these parts use of the converter and of the module
being converted (Protocols: script_convert.py and script.py build on this
module)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Protocol

from ..ir.diagnostics import FrontendError, Span
from ..ir.expr import Expr, Function, GlobalVar, Let, Tuple, Var
from ..ir.functor import Mutator, Plan, on
from ..ir.node import Node
from ..ir.types import TensorType, TupleType, Type
from . import builder as B
from .spans import span_scope
from .values import as_type, to_expr


class Converting(Protocol):
    """What the parts of the script converter (``Converter``,
    script_convert.py) use of one another."""

    def span(self, node: ast.AST) -> Span | None: ...

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> FrontendError: ...

    def annotation(self, node: ast.expr) -> Type: ...

    def value_expr(self, value: Any, node: ast.AST) -> Expr: ...

    def expr(self, node: ast.expr, env: dict[str, Any], lambda_slot: bool = False) -> Any: ...

    def block(
        self, stmts: list[ast.stmt], env: dict[str, Any], live_out: set[str]
    ) -> Return | None: ...


class Scripted(Protocol):
    """A scripted function as its conversion reads it (``ScriptFunction``)."""

    name: str
    fn: Callable[..., Any]


class Scripts(Protocol):
    """The module being converted (``ModuleContext``, script.py): what a
    name the converter reads calls, if it is a scripted function."""

    def called(self, value: Any) -> GlobalCallable | None: ...


class GlobalCallable:
    """A scripted function used from converted code: calls become calls of
    ``@name``; its return annotation types the result (for unpacking)."""

    def __init__(self, gv: GlobalVar, sf: Scripted) -> None:
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
            ann = eval(ann, fn.__globals__)  # the user's own annotation
        except Exception:
            return None
    try:
        return as_type(ann)
    except FrontendError:
        return None


class Return:
    """A block that ended in ``return value`` (at ``node``)."""

    def __init__(self, value: Any, node: ast.AST | None = None) -> None:
        self.value = value
        self.node = node


class Collector:
    """A list being appended to inside a loop body (one value per step)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Any = None


class EmptyList:
    """``outs = []`` before a loop appends to it."""


class StackedList:
    """A list a loop appended a tuple to at each step, as the program holds
    it: each field stacked along the steps (the tuple of stacked tensors
    ``cf.foreach`` gives). Python's list is the reference: indexing, ``len``
    and iteration go by step, as on the list the function builds eagerly;
    as a value (returned, put in a tuple) it is the tuple of its stacked
    fields. A list of tensors needs no such wrapper: its stacked tensor
    indexes, measures and iterates by step already.

    ``fields`` holds the stacked tensors shaped as one step's tuple (nested
    tuples of effir values)."""

    def __init__(self, name: str, fields: tuple) -> None:
        self.name = name
        self.fields = fields

    def __getitem__(self, index: Any) -> Any:
        """Step ``index``'s tuple; a slice, the list of those steps."""
        taken = _map_leaves(self.fields, lambda leaf: leaf[index])
        return StackedList(self.name, taken) if isinstance(index, slice) else taken

    def length(self) -> Any:
        """The number of steps: an int when the type says it, else None."""
        leaf = self.fields
        while isinstance(leaf, tuple):
            leaf = leaf[0]
        t = B.type_hint(leaf) if isinstance(leaf, Expr) else None
        if isinstance(t, TensorType) and t.ndim and isinstance(t.shape[0], int):
            return t.shape[0]
        return None


def stacked_outputs(name: str, value: Any, step: Any) -> Any:
    """The value a loop's list ``name`` has after the loop: ``value``, its
    outputs stacked, wrapped as a ``StackedList`` when a step appended a
    tuple (``step``, the value appended in a step, or its type says so)."""
    like = _structure(step)
    if not isinstance(like, tuple):
        return value
    return StackedList(name, B.unflatten(value, like) if isinstance(value, Expr) else value)


def _structure(value: Any) -> Any:
    """``value``'s tuple structure (nested tuples of None), None for a leaf."""
    if isinstance(value, tuple | list):
        return tuple(_structure(v) for v in value)
    if isinstance(value, Tuple):
        return tuple(_structure(v) for v in value.fields)
    t = B.type_hint(value) if isinstance(value, Expr) else None
    return _type_structure(t) if isinstance(t, TupleType) else None


def _type_structure(t: Type) -> Any:
    if isinstance(t, TupleType):
        return tuple(_type_structure(f) for f in t.fields)
    return None


def _map_leaves(fields: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(fields, tuple):
        return tuple(_map_leaves(f, fn) for f in fields)
    return fn(fields)


class Staged:
    """A nested ``def`` or ``lambda``: a Python callable that converts its
    body where it is called with values (inlined: for effir.cond/foreach
    bodies), and an effir closure, built at its definition, where it is used
    as a value or called from converted code."""

    def __init__(
        self, conv: Converting, node: ast.FunctionDef | ast.Lambda, env: dict, slot: Slot | None
    ) -> None:
        self.conv, self.node, self.env, self.slot = conv, node, env, slot
        self.var: Var | None = None
        self.hinting = False  # being converted aside for a type hint

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
        if not isinstance(result, Return):
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
            if not isinstance(result, Return):
                raise conv.error(
                    node, "a nested function must return a value", "end it with `return value`"
                )
            return result.value

        with B._block() as block:
            result = body()
            fn_body = B._close(block, to_expr(result))
        self.slot.value = Function(tuple(params), fn_body, span=conv.span(node))
        return var


class Slot:
    """A place in a let-chain kept for a closure built later (or never)."""

    __slots__ = ("var", "value", "span")

    def __init__(self) -> None:
        self.var: Var | None = None
        self.value: Function | None = None
        self.span = None


def fill_slots(expr: Expr) -> Expr:
    """``expr`` with slots filled or dropped (a ``Mutator``: no recursion
    proportional to the chain's length or the closures' nesting)."""
    filled = _FillSlots().mutate(expr)
    assert isinstance(filled, Expr)
    return filled


class _FillSlots(Mutator):
    """Each ``let`` of a slot (``block.bindings``' ``(slot, slot)``) becomes
    the let of its closure, rewritten too, or is dropped if the closure was
    never built. A slot is no IR node: its closure is its one child."""

    patterns = False

    @classmethod
    def plan(cls, node_type: type) -> Plan:
        if node_type is Slot:
            return _SLOT_PLAN
        return super().plan(node_type)

    def rebuild(self, node: Node) -> Node:
        return node if type(node) is Slot else super().rebuild(node)

    @on(Let)
    def _let(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Let) and isinstance(old, Let)
        slot = old.value
        if not isinstance(slot, Slot):
            return new
        if slot.var is None or slot.value is None:
            return new.body
        return Let(slot.var, self.child(slot.value), new.body, span=slot.value.span)


_SLOT_PLAN: Plan = (None, None, (("value", False),), True, None)
"""A slot's plan for ``_FillSlots``: no hook, its closure as its child."""
