"""fold-constant: compute at compile time what only depends on constants.

Requires a well-typed program (the pass runs ``effir.check`` on its input);
establishes nothing new (A-normal form and A2 are kept when the input has
them). Every value the program computes stays bit-identical.

Rewrites, bottom-up, in one walk over each global function (a second walk
only where removing dead bindings exposed more, see ``rewrite_functions``):

1. **Calls.** ``op(c1, ..., cn)`` becomes a ``Constant`` (or a tuple of
   constants) when ``op`` has the effect kind ``pure`` and not the trait
   ``control_flow``, every argument is a constant (a ``Constant``, a variable
   bound to one, or a tuple of constants), and the call's type is a tensor
   or a tuple of tensors with static shapes and at most ``max_elements``
   elements in all. The value is the operator's own numpy rule applied to
   the same arrays the interpreter would pass, so it is the interpreter's
   value bit for bit, dtype and rank included [RULE V].
2. **Projections.** ``(a, b).1`` and ``%t.1`` with ``let %t = (a, b)``
   become ``b`` when ``b`` is an atom (and, for a literal, every other field
   is an atom too: nothing with an effect is dropped).
3. **Constant conditions.** ``if (True) {A} else {B}`` becomes ``A``. Where
   that makes a ``let`` bound to a block (``let %r = if ...``), the block's
   bindings move before it, so A-normal form is kept (not for a block the
   text's graph form shares, whose bindings would then be bound twice; a
   program with shared nodes is not in A-normal form anyway).
4. **Atoms.** ``let %x = a; body`` with ``a`` a variable or a constant
   becomes ``body`` with ``a`` for ``%x``.

What is never folded, and why:

- operators with an effect (``random``, ``state``, ``io``): ``debug.print(1)``
  must still print;
- anything whose type is not made of tensors: a ``Key`` is not a tensor
  constant (``random.key(0)`` stays; the keyed ``random.*`` operators take a
  key, which is never a constant, so they are never candidates);
- results with a symbolic or ``?`` dimension (a dynamic-shape operator on
  constants): the constant's static type would be more precise than the
  call's, and [RULE T] below forbids that;
- results larger than ``max_elements`` (default 1024): folding
  ``zeros(shape=[1000, 1000])`` would put four megabytes into the program
  text instead of one call;
- a call whose rule raises (an integer division by zero, a reshape that
  does not fit): the error stays a run-time error, raised only if and when
  the program reaches the call.

Soundness rules, cited in the code:

- [RULE T] Every replacement has exactly the checked type of the expression
  it replaces. A more precise type (a static shape for a ``?``) could make a
  later ``if`` or call fail to type-check; a less precise one could lose a
  static shape that ``squeeze`` needs. Where the types differ (an ``if``
  whose taken branch has a ``?`` the other branch fixed, a ``let`` annotated
  with a looser type than its value's) the expression is left alone.
  Substituting the atom of ``let %v: T = %w`` drops the annotation ``T``,
  which may be all that fixes ``%w``'s type (``let %w = None`` of an
  ``Option[A]``): the variable is substituted only when it has no
  annotation or ``%w`` has one of its own.
- [RULE A] Only atoms are moved or duplicated. A field taken out of a tuple,
  a value substituted for a variable: each is a variable or a constant, so
  no evaluation (and no effect) is repeated, dropped or reordered.
- [RULE S] A variable is substituted only if none of its uses was rewritten
  before its ``let`` was reached (a use inside its own value, which a
  recursive ``let`` allows): otherwise that use would be left dangling.
- [RULE L] In a function the pass changed, a ``let`` whose variable is
  unused is removed when its value can neither fail nor have an effect (an
  atom, a tuple of atoms, a projection of an atom). ``%t.1`` with
  ``let %t = (%a, %b)`` folds to ``%b``, but the tuple's ``let`` would still
  hold ``%b``: a second holder of a key or of the world token breaks the
  linearity of an A2 program. Other dead code is dead-code elimination's.

How it runs without Python recursion: ``Rewriter`` walks the tree with an
explicit stack, finishing a ``let``'s value before it visits the body, so
that what a variable holds (``values``) is known at every use. ``simplify``
uses the same walker.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.expr import (
    ATOM_TYPES,
    Call,
    Clause,
    Constant,
    Expr,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import op_def
from ..ir.structural import structural_equal
from ..ir.types import TensorType, TupleType, Type
from .dce import child_fields
from .infer_type import check
from .infra import Option, module_pass

DEFAULT_MAX_ELEMENTS = 1024
"""The largest result (in elements, over all its tensors) that is folded."""

# A tuple literal nested deeper than this is not looked into (bounds the
# recursion of ``constant_value`` by a constant, not by the program's size).
_MAX_TUPLE_DEPTH = 32

_UNKNOWN = object()

# Rounds of rewriting and dead-binding removal at most (one or two suffice:
# every round but the last shrinks the program).
_MAX_ROUNDS = 8


@module_pass(
    name="fold-constant",
    doc="calls of pure operators on constants, projections of tuple literals, "
    "ifs on constants and lets of atoms are computed at compile time",
    options={
        "max_elements": Option("largest result (in elements) computed at compile time", minimum=0)
    },
)
def fold_constant(module: IRModule, max_elements: int = DEFAULT_MAX_ELEMENTS) -> IRModule:
    """``module`` with constant sub-expressions computed (see the module doc).
    Returns ``module`` itself when nothing changed."""
    return rewrite_functions(module, lambda: _Folder(max_elements))


def rewrite_functions(module: IRModule, rewriter: Callable[[], Rewriter]) -> IRModule:
    """Each global function of ``module`` through a fresh ``rewriter()``,
    then, where it changed, without the trivial bindings it left dead
    [RULE L]; ``module`` itself when nothing changed.

    Removing a binding can expose a new opportunity to the expression
    around a block (``(let %t = (c,); (c,)).0`` becomes ``(c,).0``): then
    the whole module is checked and rewritten again, so that the result is
    a fixpoint (running the pass twice gives what running it once gave)."""
    for _ in range(_MAX_ROUNDS):
        check(module)
        functions, again = {}, False
        for name, fn in module.functions.items():
            new = rewriter().rewrite(fn)
            if new is not fn:
                cleaned = _DeadBindings(new).rewrite(new)
                again = again or cleaned is not new
                new = cleaned
            functions[name] = new
        if all(functions[name] is fn for name, fn in module.functions.items()):
            return module
        module = IRModule(functions, module.type_defs, module.cells)
        if not again:
            break
    return module


# ------------------------------------------------------------------ walker
class Rewriter:
    """Bottom-up rewriting of a typed expression, without recursion.

    Like ``ExprMutator``, with three differences that rewrites needing a
    variable's value want:

    - a ``let``'s value is rewritten before its body is visited, and
      ``values[var]`` then holds the rewritten value for every use;
    - variables in use positions are replaced by ``subst``; binders never
      are. A ``let`` bound to an atom of the same type is substituted and
      disappears [RULE S] [RULE T];
    - types are not traversed, and a node that replaces another gets its
      ``checked_type`` (every rewrite keeps the type exactly [RULE T]), so
      rules further up can ask the type of a rewritten argument.

    Subclasses override ``visit(new, old)``: ``new`` is ``old`` with its
    children rewritten; the result replaces ``old``."""

    substitute_atoms = True

    def __init__(self) -> None:
        self.memo: dict[int, Node] = {}
        self.values: dict[Var, Expr] = {}
        self.subst: dict[Var, Expr] = {}
        self._used: set[Var] = set()
        self._flattened: set[Var] = set()
        # Identities of the shared nodes, originals and their rewritten forms.
        self._shared: set[int] = set()

    def visit(self, new: Expr, old: Expr) -> Expr:
        return new

    def rewrite(self, root: Expr) -> Expr:
        memo = self.memo
        self._shared = _shared_nodes(root)
        # (node, phase): 0 enter, 1 a let's value is done, 2 children are done.
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, phase = stack.pop()
            if phase == 0:
                if id(node) in memo or _is_leaf(node):
                    continue
                if isinstance(node, Let):
                    stack.append((node, 2))
                    stack.append((node, 1))
                    stack.append((node.value, 0))
                    continue
                pending = [c for c in _children(node) if not (_is_leaf(c) or id(c) in memo)]
                if pending:
                    stack.append((node, 2))
                    stack.extend((c, 0) for c in reversed(pending))
                else:  # nothing to visit below (most values in A-normal form)
                    self._done(node)
            elif phase == 1:
                assert isinstance(node, Let)
                self._bind(node)
                stack.append((node.body, 0))
            else:
                self._done(node)
        return memo.get(id(root), root)  # type: ignore[return-value]

    def _done(self, node: Node) -> None:
        result = self.memo[id(node)] = self._finish(node)
        if id(node) in self._shared:
            self._shared.add(id(result))

    def new(self, expr: Expr) -> Expr:
        """The rewritten form of an original child expression."""
        if isinstance(expr, Var):
            self._used.add(expr)
            return self.subst.get(expr, expr)
        return self.memo.get(id(expr), expr)  # type: ignore[return-value]

    def resolve(self, expr: Expr) -> Expr:
        """What a rewritten expression is: a let-bound variable's rewritten
        value (followed through variables bound to variables), else itself."""
        while isinstance(expr, Var) and expr in self.values:
            expr = self.values[expr]
        return expr

    def constant_value(self, expr: Expr, depth: int = 0) -> Any:
        """The value of a rewritten expression when it is a constant (an
        array, or a tuple of such values), else ``_UNKNOWN``."""
        expr = self.resolve(expr)
        if isinstance(expr, Constant):
            return expr.data
        if isinstance(expr, Tuple) and depth < _MAX_TUPLE_DEPTH:
            fields = tuple(self.constant_value(f, depth + 1) for f in expr.fields)
            return _UNKNOWN if any(f is _UNKNOWN for f in fields) else fields
        return _UNKNOWN

    # ------------------------------------------------------------ internals
    def _bind(self, let: Let) -> None:
        value = self.new(let.value)
        recursive = let.var in self._used  # [RULE S]
        if (
            isinstance(value, Let)
            and not isinstance(let.value, Let)
            and not recursive
            and not self._shares_a_let(value)
        ):
            # A rewrite made the value a block: its lets will move before
            # this one (``_flatten``), which then binds the block's end.
            self._flattened.add(let.var)
            while isinstance(value, Let):
                value = value.body
        self.values[let.var] = value
        # [RULE A] an atom; [RULE T] of the same type.
        if (
            self.substitute_atoms
            and isinstance(value, Var | Constant)
            and not recursive
            and same_type(let.var, let.value)
            and not _annotation_needed(let.var, value)
        ):
            self.subst[let.var] = value

    def _shares_a_let(self, block: Expr) -> bool:
        """Whether a let of the chain ``block`` is shared (the text's graph
        form): moving its binding out would bind it twice."""
        while isinstance(block, Let):
            if id(block) in self._shared:
                return True
            block = block.body
        return False

    def _finish(self, node: Node) -> Node:
        if isinstance(node, Let) and node.var in self._flattened:
            return self._flatten(node)
        if isinstance(node, Let) and node.var in self.subst:
            return self.new(node.body)
        changes: dict[str, Any] = {}
        for name, many in child_fields(node):
            value = getattr(node, name)
            if not many:
                if isinstance(value, Expr):
                    new = self.new(value)
                    if new is not value:
                        changes[name] = new
            else:
                items = tuple(
                    self.new(v) if isinstance(v, Expr) else self.memo.get(id(v), v) for v in value
                )
                if any(a is not b for a, b in zip(items, value, strict=True)):
                    changes[name] = items
        rebuilt = dataclasses.replace(node, **changes) if changes else node
        if not isinstance(node, Expr):
            return rebuilt
        assert isinstance(rebuilt, Expr)
        result = self.visit(rebuilt, node)
        if result is not node and not result.has_type and node.has_type:
            result.set_checked_type(node.checked_type)  # [RULE T]
        return result

    def _flatten(self, old: Let) -> Expr:
        """``let %r = (let %a = v; b); rest`` as ``let %a = v; let %r = b;
        rest`` (or ``let %a = v; rest[%r := b]`` when ``b`` is an atom), when
        a rewrite made the value a block (an ``if`` on a constant whose
        branch is one): A-normal form stays A-normal form. Binders are
        unique, so nothing is captured, and the block's lets still run
        first."""
        inner: list[Let] = []
        value = self.new(old.value)
        while isinstance(value, Let):
            inner.append(value)
            value = value.body
        body = self.new(old.body)
        result = body if old.var in self.subst else Let(old.var, value, body, span=old.span)
        for binding in reversed(inner):
            result = Let(binding.var, binding.value, result, span=binding.span)
            if old.has_type:  # each let of the chain has the type of its end
                result.set_checked_type(old.checked_type)
        if old.has_type and not result.has_type:
            result.set_checked_type(old.checked_type)
        return result


class _DeadBindings(Rewriter):
    """Removes the lets whose variable is unused and whose value can neither
    fail nor have an effect: an atom, a tuple of atoms, a projection of an
    atom [RULE L]. Lets are finished body first, so removing one (and the
    uses its value made) can make an earlier one dead in the same walk."""

    substitute_atoms = False

    def __init__(self, root: Expr) -> None:
        super().__init__()
        self.uses = _use_counts(root)

    def visit(self, new: Expr, old: Expr) -> Expr:
        if (
            isinstance(new, Let)
            and self.uses[new.var] == 0
            and _trivial(new.value)
            and not _annotation_needed(new.var, new.value)
        ):
            for var in _atoms_of(new.value):
                self.uses[var] -= 1
            return new.body
        return new


def _trivial(expr: Expr) -> bool:
    if isinstance(expr, Tuple):
        return all(is_atom(f) for f in expr.fields)
    if isinstance(expr, TupleGetItem):
        return is_atom(expr.tuple_value)
    return isinstance(expr, Var | Constant)


def _atoms_of(expr: Expr) -> list[Var]:
    if isinstance(expr, Tuple):
        return [f for f in expr.fields if isinstance(f, Var)]
    if isinstance(expr, TupleGetItem):
        expr = expr.tuple_value
    return [expr] if isinstance(expr, Var) else []


def _use_counts(root: Node) -> Counter[Var]:
    """How many times each variable is used (a shared node counts once)."""
    uses: Counter[Var] = Counter()
    seen: set[int] = set()
    stack = [root]
    while stack:
        for child in _children(stack.pop()):
            if isinstance(child, Var):
                uses[child] += 1
            elif not _is_leaf(child) and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return uses


def _shared_nodes(root: Node) -> set[int]:
    """Identities of the expressions with more than one parent (the text's
    graph form): moving a binding out of one would bind it twice."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = [root]
    while stack:
        for child in _children(stack.pop()):
            if _is_leaf(child):
                continue
            if id(child) in seen:
                shared.add(id(child))
            else:
                seen.add(id(child))
                stack.append(child)
    return shared


def _is_leaf(node: Node) -> bool:
    return isinstance(node, ATOM_TYPES)  # atoms are expressions


def _children(node: Node) -> list[Node]:
    """The expressions (and match clauses) below ``node``; not its binders,
    patterns or types."""
    found: list[Node] = []
    for name, many in child_fields(node):
        value = getattr(node, name)
        if many:
            found.extend(v for v in value if isinstance(v, Expr | Clause))
        elif isinstance(value, Expr | Clause):
            found.append(value)
    return found


def type_of(expr: Expr) -> Type | None:
    """The checked type; a constant made by a pass has its array's type."""
    if expr.has_type:
        return expr.checked_type
    if isinstance(expr, Constant):
        return TensorType(expr.data.shape, expr.dtype)
    return None


def _annotation_needed(var: Var, value: Expr) -> bool:
    """Whether substituting ``value`` for ``var`` may drop the only
    annotation that fixes ``value``'s type [RULE T]."""
    return (
        var.type_annotation is not None and isinstance(value, Var) and value.type_annotation is None
    )


def same_type(a: Expr | Type | None, b: Expr | Type | None) -> bool:
    """Both known and structurally equal [RULE T]."""
    ta = type_of(a) if isinstance(a, Expr) else a
    tb = type_of(b) if isinstance(b, Expr) else b
    return ta is not None and tb is not None and structural_equal(ta, tb)


# ------------------------------------------------------------------ folding
class _Folder(Rewriter):
    def __init__(self, max_elements: int) -> None:
        super().__init__()
        self.max_elements = max_elements

    def visit(self, new: Expr, old: Expr) -> Expr:
        if isinstance(new, Call) and isinstance(new.callee, Op):
            return self._fold_call(new, old)
        if isinstance(new, TupleGetItem):
            return self._fold_projection(new, old)
        if isinstance(new, If):
            return self._fold_if(new, old)
        return new

    def _fold_call(self, call: Call, old: Expr) -> Expr:
        definition = op_def(call.callee)  # type: ignore[arg-type]
        if definition.effect != "pure" or "control_flow" in definition.traits:
            return call
        impl = definition.rules.get("numpy")
        result_type = type_of(old)
        if impl is None or result_type is None:
            return call
        if _static_size(result_type) is None or _static_size(result_type) > self.max_elements:
            return call
        args = tuple(self.constant_value(a) for a in call.args)
        if any(a is _UNKNOWN for a in args):
            return call
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = impl(args, call.attrs)
        except Exception:  # the run-time error stays at run time
            return call
        folded = _as_constant(value, result_type, old)
        return call if folded is None else folded  # [RULE V] [RULE T]

    def _fold_projection(self, get: TupleGetItem, old: Expr) -> Expr:
        tup = get.tuple_value
        if isinstance(tup, Tuple):
            # A literal: the other fields are evaluated too, so they must be atoms.
            field = tup.fields[get.index]
            others = (f for i, f in enumerate(tup.fields) if i != get.index)
            if all(is_atom(f) for f in others) and same_type(field, old):  # [RULE T]
                return field
            return get
        value = self.resolve(tup)
        if isinstance(value, Tuple):
            field = value.fields[get.index]
            if isinstance(field, Var | Constant) and same_type(field, old):  # [RULE A] [RULE T]
                return field
        return get

    def _fold_if(self, node: If, old: Expr) -> Expr:
        cond = self.constant_value(node.cond)
        if not isinstance(cond, np.ndarray) or cond.dtype != np.bool_ or cond.ndim != 0:
            return node
        assert isinstance(old, If)
        taken, old_taken = (
            (node.then_branch, old.then_branch) if cond else (node.else_branch, old.else_branch)
        )
        return taken if same_type(old_taken, old) else node  # [RULE T]


def _static_size(t: Type) -> int | None:
    """Elements in all the tensors of ``t`` when it is made of statically
    shaped tensors only, else None."""
    if isinstance(t, TensorType):
        if all(isinstance(d, int) and not isinstance(d, bool) for d in t.shape):
            return math.prod(t.shape)
        return None
    if isinstance(t, TupleType):
        sizes = [_static_size(f) for f in t.fields]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]
    return None


def _as_constant(value: Any, t: Type, old: Expr) -> Expr | None:
    """The folded value as an expression of type ``t``, or None when the
    value does not have exactly that type."""
    if isinstance(t, TensorType):
        if (
            isinstance(value, np.ndarray)
            and str(value.dtype) == t.dtype
            and value.shape == tuple(t.shape)
        ):
            return Constant(value, span=old.span)
        return None
    if isinstance(t, TupleType) and isinstance(value, tuple) and len(value) == len(t.fields):
        fields = [_as_constant(v, f, old) for v, f in zip(value, t.fields, strict=True)]
        if any(f is None for f in fields):
            return None
        return Tuple(tuple(fields), span=old.span)  # type: ignore[arg-type]
    return None
