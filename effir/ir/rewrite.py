"""Peephole rewriting: ``RewritePattern``s applied by a greedy driver.

Modelled on xDSL's ``RewritePattern`` and ``PatternRewriteWalker`` (and
MLIR's greedy driver): a peephole is one small class whose
``match_and_rewrite(new, old, rewriter)`` returns the replacement of an
expression, or None when it does not apply. Patterns say which node classes
they look at (``roots``) and, for operator calls, which operators
(``ops``): the driver dispatches on both through a table built once per
pattern set, never by trying every pattern on every node.

``PatternRewriter`` is the walk (a ``Mutator``, so iterative and memoised)
and holds what patterns ask about the program:

- a ``let``'s value is rewritten before its body is entered, so
  ``resolve(x)`` gives what a variable is bound to (rewritten), and
  ``constant_value(x)`` its constant value if it has one;
- a ``let`` bound to an atom (a variable or a constant) of its own type is
  substituted into its body and disappears [RULE FOLD-SUBST] [RULE FOLD-TYPE];
- a rewrite that makes a ``let``'s value a block (``if`` on a constant
  whose branch is one) has the block's bindings moved before it, so
  A-normal form is kept;
- every replacement gets the checked type of what it replaces [RULE FOLD-TYPE],
  so patterns further up can ask the type of a rewritten argument.

At each node the patterns run to a fixpoint (a replacement is offered to
the patterns again), bottom-up over the program; ``apply_patterns`` then
repeats over the module until nothing changes (removing the bindings the
rewrites left dead can expose more). The soundness rules [RULE FOLD-TYPE],
[RULE FOLD-ATOM], [RULE FOLD-SUBST], [RULE FOLD-DEAD] are stated in ``effir/passes/transforms/fold_constant.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from .analysis import shared_nodes, use_counts
from .context_types import pin_changed_functions
from .expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var, is_atom
from .functor import Mutator
from .module import IRModule
from .node import Node
from .structural import structural_equal
from .types import TensorType, Type

UNKNOWN = object()
"""``constant_value`` of an expression that is not a constant."""

# A tuple literal nested deeper than this is not looked into (bounds the
# recursion of ``constant_value`` by a constant, not by the program's size).
_MAX_TUPLE_DEPTH = 32

# Replacements offered again to the patterns at one node, at most.
_MAX_LOCAL = 16

# Rounds of rewriting and dead-binding removal at most (one or two suffice:
# every round but the last shrinks the program).
_MAX_ROUNDS = 8


class RewritePattern:
    """One peephole rewrite. Subclasses set ``roots`` (and ``ops`` for
    operator calls) and define ``match_and_rewrite``."""

    roots: ClassVar[tuple[type, ...]] = (Expr,)
    """The node classes this pattern looks at."""
    ops: ClassVar[tuple[str, ...]] = ()
    """For ``roots = (Call,)``: the operators whose calls it looks at (empty: every call)."""

    def match_and_rewrite(self, new: Expr, old: Expr, rewriter: PatternRewriter) -> Expr | None:
        """The replacement of ``new`` (``old`` with its children rewritten;
        ``old`` has the checked type), or None to leave it."""
        raise NotImplementedError


class _Table:
    """Patterns by node class and operator name, resolved once per class."""

    def __init__(self, patterns: Iterable[RewritePattern]) -> None:
        self.patterns = tuple(patterns)
        self._by_class: dict[type, tuple[RewritePattern, ...]] = {}
        self._by_op: dict[str, tuple[RewritePattern, ...]] = {}

    def lookup(self, node: Expr) -> tuple[RewritePattern, ...]:
        cls = type(node)
        if cls is Call and type(node.callee) is Op:  # type: ignore[attr-defined]
            name = node.callee.name  # type: ignore[attr-defined]
            found = self._by_op.get(name)
            if found is None:
                found = self._by_op[name] = tuple(
                    p
                    for p in self.patterns
                    if issubclass(cls, p.roots) and (not p.ops or name in p.ops)
                )
            return found
        found = self._by_class.get(cls)
        if found is None:
            found = self._by_class[cls] = tuple(
                p for p in self.patterns if issubclass(cls, p.roots) and not p.ops
            )
        return found


class PatternRewriter(Mutator):
    """The walk that applies patterns (see the module doc)."""

    binders = False
    types = False
    patterns = False
    substitute_atoms: ClassVar[bool] = True

    def __init__(self, patterns: Iterable[RewritePattern] = ()) -> None:
        super().__init__()
        self.table = _Table(patterns)
        self.values: dict[Var, Expr] = {}
        self.subst: dict[Var, Expr] = {}
        self._used: set[Var] = set()
        self._flattened: set[Var] = set()
        # Identities of the shared nodes, originals and their rewritten forms.
        self._shared: set[int] = set()

    def rewrite(self, fn: Function) -> Function:
        self._shared = shared_nodes(fn)
        return self.mutate_as(fn, Function)

    def visit(self, new: Expr, old: Expr) -> Expr:
        """``new``'s replacement: the patterns applied until none applies."""
        table = self.table
        for _ in range(_MAX_LOCAL):
            for pattern in table.lookup(new):
                result = pattern.match_and_rewrite(new, old, self)
                if result is not None and result is not new:
                    break
            else:
                return new
            if not result.has_type and old.has_type:
                result.set_checked_type(old.checked_type)  # [RULE FOLD-TYPE]
            new = old = result
        return new

    # -------------------------------------------------- what patterns ask
    def resolve(self, expr: Expr) -> Expr:
        """What a rewritten expression is: a let-bound variable's rewritten
        value (followed through variables bound to variables), else itself."""
        while isinstance(expr, Var) and expr in self.values:
            expr = self.values[expr]
        return expr

    def constant_value(self, expr: Expr, depth: int = 0) -> Any:
        """The value of a rewritten expression when it is a constant (an
        array, or a tuple of such values), else ``UNKNOWN``."""
        expr = self.resolve(expr)
        if isinstance(expr, Constant):
            return expr.data
        if isinstance(expr, Tuple) and depth < _MAX_TUPLE_DEPTH:
            fields = tuple(self.constant_value(f, depth + 1) for f in expr.fields)
            return UNKNOWN if any(f is UNKNOWN for f in fields) else fields
        return UNKNOWN

    # ----------------------------------------------------- Mutator hooks
    def child(self, node: Node) -> Node:
        if isinstance(node, Var):
            self._used.add(node)
            return self.subst.get(node, node)
        return self.memo.get(id(node), node)

    def bind(self, let: Let) -> None:
        value = self.child(let.value)
        recursive = let.var in self._used  # [RULE FOLD-SUBST]
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
        self.values[let.var] = value  # type: ignore[assignment]
        # [RULE FOLD-ATOM] an atom; [RULE FOLD-TYPE] of the same type.
        if (
            self.substitute_atoms
            and isinstance(value, Var | Constant)
            and not recursive
            and same_type(let.var, let.value)
            and not annotation_needed(let.var, value)
        ):
            self.subst[let.var] = value

    def finish(self, node: Node) -> Node:
        result = self._finish(node)
        if id(node) in self._shared:
            self._shared.add(id(result))
        return result

    # ------------------------------------------------------------ internals
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
            return self.child(node.body)
        rebuilt = self.rebuild(node)
        if not isinstance(node, Expr):
            return rebuilt
        assert isinstance(rebuilt, Expr)
        result = self.visit(rebuilt, node)
        if result is not node and not result.has_type and node.has_type:
            result.set_checked_type(node.checked_type)  # [RULE FOLD-TYPE]
        return result

    def _flatten(self, old: Let) -> Expr:
        """``let %r = (let %a = v; b); rest`` as ``let %a = v; let %r = b;
        rest`` (or ``let %a = v; rest[%r := b]`` when ``b`` is an atom), when
        a rewrite made the value a block: A-normal form stays A-normal form.
        Binders are unique, so nothing is captured, and the block's lets
        still run first."""
        inner: list[Let] = []
        value = self.child_expr(old.value)
        while isinstance(value, Let):
            inner.append(value)
            value = value.body
        body = self.child_expr(old.body)
        result = body if old.var in self.subst else Let(old.var, value, body, span=old.span)
        for binding in reversed(inner):
            result = Let(binding.var, binding.value, result, span=binding.span)
            if old.has_type:  # each let of the chain has the type of its end
                result.set_checked_type(old.checked_type)
        if old.has_type and not result.has_type:
            result.set_checked_type(old.checked_type)
        return result


# ------------------------------------------------------- dead bindings
class DeadTrivialBinding(RewritePattern):
    """[RULE FOLD-DEAD] a ``let`` whose variable is unused and whose value can
    neither fail nor have an effect (an atom, a tuple of atoms, a
    projection of an atom) goes. Lets are finished body first, so removing
    one (and the uses its value made) can make an earlier one dead in the
    same walk."""

    roots = (Let,)

    def __init__(self, root: Expr) -> None:
        self.uses = use_counts(root)

    def match_and_rewrite(self, new: Expr, old: Expr, rewriter: PatternRewriter) -> Expr | None:
        assert isinstance(new, Let)
        if (
            self.uses[new.var] == 0
            and _trivial(new.value)
            and not annotation_needed(new.var, new.value)
        ):
            for var in _atoms_of(new.value):
                self.uses[var] -= 1
            return new.body
        return None


class _DeadBindings(PatternRewriter):
    substitute_atoms = False


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


# ---------------------------------------------------------------- driver
def apply_patterns(
    module: IRModule,
    patterns: Callable[[], Iterable[RewritePattern]],
    typecheck: Callable[[IRModule], Any],
) -> IRModule:
    """Each global function of ``module`` through a ``PatternRewriter`` of
    ``patterns()``, then, where it changed, without the trivial bindings it
    left dead [RULE FOLD-DEAD]; ``module`` itself when nothing changed.
    ``typecheck(module)`` fills in the checked types the patterns read.

    Removing a binding can expose a new opportunity to the expression
    around a block (``(let %t = (c,); (c,)).0`` becomes ``(c,).0``): then
    the whole module is checked and rewritten again, so that the result is
    a fixpoint (running the pass twice gives what running it once gave)."""
    for _ in range(_MAX_ROUNDS):
        typecheck(module)
        functions, again = {}, False
        for name, fn in module.functions.items():
            new = PatternRewriter(patterns()).rewrite(fn)
            if new is not fn:
                cleaned = _DeadBindings([DeadTrivialBinding(new)]).rewrite(new)
                again = again or cleaned is not new
                new = cleaned
            functions[name] = new
        # A replaced `if` may have been what typed the `None` of its taken
        # branch [RULE PIN-CONTEXT].
        functions = pin_changed_functions(module, functions)
        if all(functions[name] is fn for name, fn in module.functions.items()):
            return module
        module = IRModule(functions, module.type_defs, module.cells)
        if not again:
            break
    return module


# ------------------------------------------------------------------ types
def type_of(expr: Expr) -> Type | None:
    """The checked type; a constant made by a pass has its array's type."""
    if expr.has_type:
        return expr.checked_type
    if isinstance(expr, Constant):
        return TensorType(expr.data.shape, expr.dtype)
    return None


def annotation_needed(var: Var, value: Expr) -> bool:
    """Whether substituting ``value`` for ``var`` may drop the only
    annotation that fixes ``value``'s type [RULE FOLD-TYPE]."""
    return (
        var.type_annotation is not None and isinstance(value, Var) and value.type_annotation is None
    )


def same_type(a: Expr | Type | None, b: Expr | Type | None) -> bool:
    """Both known and structurally equal [RULE FOLD-TYPE]."""
    ta = type_of(a) if isinstance(a, Expr) else a
    tb = type_of(b) if isinstance(b, Expr) else b
    return ta is not None and tb is not None and structural_equal(ta, tb)


__all__ = [
    "UNKNOWN",
    "DeadTrivialBinding",
    "PatternRewriter",
    "RewritePattern",
    "annotation_needed",
    "apply_patterns",
    "same_type",
    "type_of",
]
