"""The well-formedness check: what every IR program must satisfy before any
type checking (``effir check`` runs it).

Rules: every variable is used inside the scope of its binder and bound at
most once; every type variable is bound by an enclosing type parameter list;
every global, constructor and ADT referenced exists in the module; every
operator call has the operator's arity and valid attributes; only operators
take attributes. A shared sub-expression is checked in the scope of its first
use (as Relay's checker did); the parser only builds programs in which every
use is in scope.
"""

from __future__ import annotations

from .diagnostics import AttrError, WellFormedError
from .expr import (
    Call,
    Clause,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Op,
    PatternConstructor,
    PatternVar,
    Var,
)
from .module import IRModule
from .node import Node
from .op import lookup_op
from .types import TypeCall, TypeVar


def _span_of(*nodes: Node | None):
    for node in nodes:
        if node is not None and node.span is not None:
            return node.span
    return None


class _Checker:
    def __init__(self, module: IRModule | None) -> None:
        self.module = module
        self.in_scope: dict[Node, int] = {}
        self.ever_bound: set[Node] = set()
        self.visited: set[int] = set()
        self.context: Node | None = None

    def fail(self, message: str, *nodes: Node | None) -> WellFormedError:
        return WellFormedError(message, _span_of(*nodes, self.context))

    def bind(self, binder: Var | TypeVar) -> None:
        if binder in self.ever_bound:
            name = f"%{binder.name_hint}" if isinstance(binder, Var) else binder.name
            raise self.fail(f"{name} is bound more than once", binder)
        self.ever_bound.add(binder)
        self.in_scope[binder] = 1

    def unbind(self, binders) -> None:
        for binder in binders:
            self.in_scope.pop(binder, None)

    def check(self, root: Node) -> None:
        # Events: (node, None) visits a node; (None, binders) closes a scope.
        stack: list[tuple[Node | None, tuple]] = [(root, ())]
        while stack:
            node, closing = stack.pop()
            if node is None:
                self.unbind(closing)
                continue
            self.context = node if node.span is not None else self.context
            if isinstance(node, Var | TypeVar):
                if node not in self.in_scope:
                    name = (
                        f"variable %{node.name_hint}"
                        if isinstance(node, Var)
                        else f"type variable {node.name}"
                    )
                    raise self.fail(f"{name} is used outside the scope of its binder", node)
                continue
            if id(node) in self.visited:
                continue
            self.visited.add(id(node))
            self.check_node(node)
            binders: list[Var | TypeVar] = []
            items: list[tuple[Node, tuple]] = []
            for name, kind in type(node).FIELDS:
                value = getattr(node, name)
                if kind == "node" and value is not None:
                    items.append((value, ()))
                    self.check_nullary_constructor(node, name, value)
                elif kind == "nodes":
                    items.extend((v, ()) for v in value)
                    for v in value:
                        self.check_nullary_constructor(node, name, v)
                elif kind in ("def", "defs"):
                    for binder in (value,) if kind == "def" else value:
                        self.bind(binder)
                        binders.append(binder)
                        annotation = getattr(binder, "type_annotation", None)
                        if annotation is not None:
                            items.append((annotation, ()))
                elif kind == "ctordefs":
                    for ctor in value:
                        items.extend((t, ()) for t in ctor.inputs)
            if isinstance(node, Clause):
                # Pattern variables are bound by the pattern, for the body.
                pattern_vars = [n for n in _pattern_binders(node)]
                for var in pattern_vars:
                    self.bind(var)
                binders.extend(pattern_vars)
                items = [(node.body, ())]
            stack.append((None, tuple(binders)))
            stack.extend(reversed(items))

    def check_nullary_constructor(self, parent: Node, field: str, child: Node) -> None:
        """[Relay] A nullary constructor's value is the call ``Nil()``; the bare
        constructor may only be called or matched, since the text format
        spells the call and the constructor alike (``Nil``)."""
        if isinstance(child, Constructor) and not child.inputs:
            if (isinstance(parent, Call) and field == "callee") or isinstance(
                parent, PatternConstructor
            ):
                return
            raise self.fail(
                f"the nullary constructor {child.name} is used as a function; "
                f"its value is the call {child.name}()",
                parent,
            )

    def check_node(self, node: Node) -> None:
        module = self.module
        if isinstance(node, GlobalVar) and module is not None:
            if node.name not in module.functions and node.name not in module.cells:
                raise self.fail(f"undefined global @{node.name}", node)
        elif isinstance(node, Constructor) and module is not None:
            if module.constructors.get(node.name) is not node:
                raise self.fail(f"constructor {node.name} is not defined in this module", node)
        elif isinstance(node, TypeCall) and module is not None:
            data = module.type_defs.get(node.func.name)
            if data is None:
                raise self.fail(f"unknown type {node.func.name}", node)
            if len(data.type_params) != len(node.args):
                raise self.fail(
                    f"type {node.func.name} takes {len(data.type_params)} type argument(s), "
                    f"got {len(node.args)}",
                    node,
                )
        elif isinstance(node, Call):
            callee = node.callee
            if isinstance(callee, Op):
                definition = lookup_op(callee.name)
                if definition is None:
                    raise self.fail(f"unknown operator {callee.name}", node)
                if not definition.takes(len(node.args)):
                    raise self.fail(definition.arity_error(len(node.args)), node)
                try:
                    normalized = definition.normalize_attrs(dict(node.attrs.items()))
                except AttrError as err:
                    raise self.fail(err.message, node) from None
                if normalized != node.attrs:
                    raise self.fail(
                        f"{callee.name}: attributes are not normalized (build calls with "
                        "OpDef.normalize_attrs)",
                        node,
                    )
            elif node.attrs:
                raise self.fail("only operator calls take attributes", node)
            if isinstance(callee, Constructor) and len(node.args) != len(callee.inputs):
                raise self.fail(
                    f"constructor {callee.name} takes {len(callee.inputs)} argument(s), "
                    f"got {len(node.args)}",
                    node,
                )


def _pattern_binders(clause: Clause) -> list[Var]:
    found: list[Var] = []
    stack = [clause.pattern]
    while stack:
        pattern = stack.pop()
        if isinstance(pattern, PatternVar):
            found.append(pattern.var)
        else:
            stack.extend(reversed(list(getattr(pattern, "patterns", ()))))
    return found


def _check_state_attrs(name: str, fn: Function) -> None:
    """A state-passing function's ``state_in``/``state_out`` list the cells
    (by name) whose values it takes and returns: anything else is no such list."""
    for attr in ("state_in", "state_out"):
        cells = fn.attrs.get(attr, ())
        if not isinstance(cells, tuple) or not all(isinstance(c, str) for c in cells):
            raise WellFormedError(
                f'{attr} of @{name} must be a list of cell names, such as ["rng"], got {cells!r}',
                fn.span,
            )


def check_well_formed(target: IRModule | Expr, module: IRModule | None = None) -> None:
    """Raise ``WellFormedError`` (with the location, when known) on the first
    broken rule; return None when ``target`` is well formed."""
    if isinstance(target, IRModule):
        for data in target.type_defs.values():
            _Checker(target).check(data)
        for cell in target.cells.values():
            _Checker(target).check(cell)
        for name, fn in target.functions.items():
            _check_state_attrs(name, fn)
            _Checker(target).check(fn)
        return
    _Checker(module).check(target)
