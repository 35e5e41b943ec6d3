"""Unification of types for inference: ``IncompleteType`` variables bound in a
union-find, tensor dimensions merged (a ``?`` takes the other side's size;
symbolic dimensions are rigid and equal only to themselves); and the join
of two types, the type of a value that is one or the other.

Unification and join answer different questions [RULE TYPE-JOIN]. Unification
says that two types describe *one* value (a let and its value, an argument
and its parameter): a ``?`` there may take the other side's size, which the
interpreter checks at run time. A join describes a value that is *either*
of two (the branches of an ``if``, the clauses of a ``match``, a loop's
state on entry and after the body): its size is known only where both
sides have the same size, and ``?`` everywhere else. Taking the more
precise side at a join is unsound: ``if`` of a ``(?, 4)`` and a ``(0, 4)``
is not a ``(0, 4)``. For the same reason unification never narrows a
variable's binding: a variable stands for the type of every value it was
unified with, so learning ``3`` from one of them says nothing of another.

Types can be as deep as the program that builds them, so every walk here
is an ``ExprFunctor`` (``effir.ir.expr_functor``: a hook per type class,
run on the trampoline) instead of Python recursion: resolving a type,
unifying two (dispatched on the first one's class, the second checked in
the hook) and rebuilding one (``map_type``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from effir.ir.expr_functor import ExprFunctor
from effir.ir.functor import on
from effir.ir.printer import astext
from effir.ir.structural import structural_equal
from effir.ir.types import (
    ANY,
    Dim,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    KeyType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from effir.ops.relations import NotReady


class UnifyError(Exception):
    """Two types that cannot be made equal; ``detail`` names the innermost clash."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def show(t: Type) -> str:
    return astext(t)


class Solver:
    """The substitution built up by one run of type inference."""

    def __init__(self) -> None:
        self._bound: dict[IncompleteType, Type] = {}
        # What each compound type reached when the occurs check last walked
        # it (see `_occurs`): its unbound variables then, or None for more
        # than `_MAX_UNKNOWNS` of them. Types hash by identity.
        self._unknowns: dict[Type, frozenset[IncompleteType] | None] = {}

    # ----------------------------------------------------------- lookup
    def head(self, t: Type) -> Type:
        """``t`` with bound variables at its root followed (path-compressed)."""
        path = []
        while isinstance(t, IncompleteType) and t in self._bound:
            path.append(t)
            t = self._bound[t]
        for var in path[:-1]:
            self._bound[var] = t
        return t

    def resolve(self, t: Type, memo: dict[int, Type] | None = None) -> Type:
        """``t`` with every bound variable replaced by its binding. ``memo``
        (keyed by node identity) shares the work between calls: resolving the
        types of a whole program stays linear when types share structure."""
        t = self.head(t)
        if isinstance(t, TensorType | KeyType | TypeVar | GlobalTypeVar | IncompleteType):
            return t  # the common case, without starting a trampoline
        return _Resolve(self, {} if memo is None else memo).evaluate(t)

    # ------------------------------------------------------------ unify
    def unify(self, expected: Type, actual: Type) -> Type:
        """Make the two types equal (binding variables); the merged type.
        Raises UnifyError naming the innermost mismatch."""
        # The common cases (a variable, two tensors) without a trampoline:
        # inference unifies at least once per binding.
        a, b, merged = self._unify_heads(expected, actual)
        if merged is not None:
            return merged
        # Heads are concrete here: the walk below finds no variable at their
        # roots, exactly as if it had started from `expected` and `actual`.
        return _Unify(self).evaluate(a, b)

    def _unify_heads(self, x: Type, y: Type) -> tuple[Type, Type, Type | None]:
        """The heads of ``x`` and ``y`` and, when they unify without a walk
        (the same type, a variable, two tensors), the merged type."""
        a, b = self.head(x), self.head(y)
        if a is b:
            return a, b, a
        if isinstance(a, IncompleteType):
            self._bind(a, b)
            return a, b, b
        if isinstance(b, IncompleteType):
            self._bind(b, a)
            return a, b, a
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            # The merged type is the caller's to use; a variable bound to `a`
            # or `b` keeps its binding, which is also the type of the other
            # values it was unified with (no narrowing) [RULE TYPE-JOIN].
            return a, b, unify_tensors(a, b)
        return a, b, None

    # ------------------------------------------------------------- join
    def join(self, a: Type, b: Type, force: bool = False) -> Type:
        """The type of a value that is an ``a`` or a ``b`` [RULE TYPE-JOIN]:
        tensors' sizes where they agree, ``?`` where they differ; tuples and
        ADTs (immutable, so covariant) field by field; references and
        functions (invariant) unified. Neither side is changed where it is
        known. An unknown part on either side could still turn out to be
        either side's size: ``NotReady`` (the caller waits [RULE TYPE-WAIT]), or,
        ``force``d, it is unified with the other side. Raises ``UnifyError``
        for types of different kinds, dtypes or ranks."""
        return _Join(self, force).evaluate(a, b)

    def within(self, sub: Type, sup: Type) -> bool:
        """Whether every value of ``sub`` is a value of ``sup`` (both
        complete): their join is ``sup``."""
        try:
            return structural_equal(self.join(sub, sup), self.resolve(sup))
        except UnifyError:
            return False

    def _bind(self, var: IncompleteType, t: Type) -> None:
        # A type without children cannot contain `var` (nor be it: the
        # caller unifies distinct heads).
        if not isinstance(t, _LEAF_TYPES) and self._occurs(var, t):
            raise UnifyError(f"a type that contains itself: {show(self.resolve(t))}")
        self._bound[var] = t

    def _occurs(self, var: IncompleteType, t: Type) -> bool:
        """Whether ``var`` is in ``t`` (through the bindings).

        Inference binds a variable to a type that holds earlier variables'
        types: in a chain of lets, each one's type contains the previous
        one's. A walk of the whole type at each binding is quadratic in the
        program, so each compound type remembers the unbound variables it
        reached when it was last walked (`_unknowns`). Bindings only ever
        replace unbound variables, so whatever ``t`` reaches now it reaches
        through those: a later walk goes on from them instead of through the
        type's structure again, and ends at types without any unknown at
        once. Shared parts are walked once per check."""
        cache = self._unknowns
        reached: dict[Type, frozenset[IncompleteType] | None] = {}
        stack: list[tuple[Type, list[Type] | None]] = [(self.head(t), None)]
        while stack:
            node, below = stack.pop()
            if below is not None:  # its parts are done
                found: set[IncompleteType] | None = set()
                for part in below:
                    unknowns = reached[part]
                    if unknowns is None or found is None:
                        found = None
                    elif unknowns:
                        found |= unknowns
                        if len(found) > _MAX_UNKNOWNS:
                            found = None
                reached[node] = cache[node] = None if found is None else frozenset(found)
                continue
            if node in reached:
                continue
            if isinstance(node, IncompleteType):
                if node is var:
                    return True
                reached[node] = frozenset((node,))
                continue
            known = cache.get(node)
            if isinstance(node, _LEAF_TYPES) or known == _NONE:
                reached[node] = _NONE
                continue
            # The unbound variables it reached last time (their heads now),
            # or its parts. (No type is its own part: nothing finds it again
            # before its parts are done.)
            parts = known or (c for c in node.children() if isinstance(c, Type))
            below = [self.head(part) for part in parts]
            reached[node] = _NONE
            stack.append((node, below))
            stack.extend((part, None) for part in below)
        return False


_MAX_UNKNOWNS = 32
"""The most unbound variables a type remembers having reached (a type with
more is walked in full at each check: large types with many unknowns are
rare, and a set per type must stay small)."""

_NONE: frozenset[IncompleteType] = frozenset()


_LEAF_TYPES = (TensorType, KeyType, TypeVar, GlobalTypeVar)
"""Types with no type below them."""


def unify_dims(a: Dim, b: Dim) -> Dim:
    if a == b or b == ANY:
        return a
    if a == ANY:
        return b
    raise UnifyError(f"dimension {a} vs {b}")


def join_dims(a: Dim, b: Dim) -> Dim:
    """A size that is ``a`` or ``b``: itself when they are equal, else ``?``."""
    return a if a == b else ANY


def join_tensors(a: TensorType, b: TensorType) -> TensorType:
    if a.shape == b.shape and a.dtype == b.dtype:
        return a
    _same_kind_of_tensor(a, b)
    shape = tuple(join_dims(x, y) for x, y in zip(a.shape, b.shape, strict=True))
    return a if shape == a.shape else b if shape == b.shape else TensorType(shape, a.dtype)


def _same_kind_of_tensor(a: TensorType, b: TensorType) -> None:
    if a.dtype != b.dtype:
        raise UnifyError(f"dtype {a.dtype} vs {b.dtype}")
    if len(a.shape) != len(b.shape):
        raise UnifyError(f"rank {len(a.shape)} vs {len(b.shape)}: {show(a)} vs {show(b)}")


def unify_tensors(a: TensorType, b: TensorType) -> TensorType:
    if a.shape == b.shape and a.dtype == b.dtype:
        return a
    _same_kind_of_tensor(a, b)
    try:
        shape = tuple(unify_dims(x, y) for x, y in zip(a.shape, b.shape, strict=True))
    except UnifyError:
        raise UnifyError(f"shape {show(a)} vs {show(b)}") from None
    return a if shape == a.shape else TensorType(shape, a.dtype)


def map_type(t: Type, leaf: Callable[[Type], Type | None]) -> Type:
    """Rebuild ``t`` bottom-up; ``leaf(node)`` may replace any node (None keeps it)."""
    return _MapType(leaf).evaluate(t)


def substitute(t: Type, mapping: Mapping[TypeVar, Type]) -> Type:
    """Replace type parameters (matched by name: printing and parsing may
    re-create them) in ``t``."""
    by_name = {tv.name: v for tv, v in mapping.items()}
    if not by_name:
        return t

    def leaf(node: Type) -> Type | None:
        if isinstance(node, TypeVar):
            return by_name.get(node.name)
        return None

    return map_type(t, leaf)


def rename_dims(t: Type, dims: Mapping[str, Dim]) -> Type:
    """Replace symbolic dimensions by name; a name not in ``dims`` becomes ``?``."""

    def leaf(node: Type) -> Type | None:
        if isinstance(node, TensorType) and any(
            isinstance(d, str) and d != ANY for d in node.shape
        ):
            shape = tuple(
                dims.get(d, ANY) if isinstance(d, str) and d != ANY else d for d in node.shape
            )
            return TensorType(shape, node.dtype)
        return None

    return map_type(t, leaf)


# ------------------------------------------------------------ the walks
class _Rebuild(ExprFunctor):
    """A compound type rebuilt from its parts' results: what ``resolve``
    and ``map_type`` share (each says what ``eval`` does at a type first,
    and what a type with no parts gives)."""

    @on(TupleType)
    def _tuple(self, t: TupleType):
        fields = []
        for f in t.fields:
            fields.append((yield self.eval(f)))
        return TupleType(tuple(fields))

    @on(RefType)
    def _ref(self, t: RefType):
        return RefType((yield self.eval(t.value)))

    @on(FuncType)
    def _func(self, t: FuncType):
        args = []
        for a in t.arg_types:
            args.append((yield self.eval(a)))
        ret = yield self.eval(t.ret_type)
        return FuncType(tuple(args), ret, t.type_params, t.effects)

    @on(TypeCall)
    def _call(self, t: TypeCall):
        args = []
        for a in t.args:
            args.append((yield self.eval(a)))
        return TypeCall(t.func, tuple(args))


class _Resolve(_Rebuild):
    """``Solver.resolve``: each compound type rebuilt from its parts'
    resolutions, once per type (``memo``, shared between calls)."""

    def __init__(self, solver: Solver, memo: dict[int, Type]) -> None:
        super().__init__()
        self.solver = solver
        self.memo = memo

    def eval(self, t: Type) -> Any:  # type: ignore[override]
        t = self.solver.head(t)
        if isinstance(t, TensorType | KeyType | TypeVar | GlobalTypeVar | IncompleteType):
            return t
        done = self.memo.get(id(t))
        if done is not None:
            return done
        return self._remember(id(t), ExprFunctor.eval(self, t))

    @on(Type)
    def _unknown(self, t: Type) -> Type:
        raise UnifyError(f"unknown type {type(t).__name__}")


class _Unify(ExprFunctor):
    """``Solver.unify`` below concrete heads: dispatched on the first
    type's class; a hook whose second type is of another kind, and any
    other pair, is a mismatch."""

    def __init__(self, solver: Solver) -> None:
        super().__init__()
        self.solver = solver

    def eval(self, a: Type, b: Type) -> Any:  # type: ignore[override]
        a, b, merged = self.solver._unify_heads(a, b)
        if merged is not None:
            return merged
        return ExprFunctor.eval(self, a, b)

    @on(TupleType)
    def _tuple(self, a: TupleType, b: Type):
        if not isinstance(b, TupleType):
            return self._mismatch(a, b)
        if len(a.fields) != len(b.fields):
            raise UnifyError(
                f"tuples of {len(a.fields)} and {len(b.fields)} fields: {show(a)} vs {show(b)}"
            )
        fields = []
        for x, y in zip(a.fields, b.fields, strict=True):
            fields.append((yield self.eval(x, y)))
        return TupleType(tuple(fields))

    @on(RefType)
    def _ref(self, a: RefType, b: Type):
        if not isinstance(b, RefType):
            return self._mismatch(a, b)
        return RefType((yield self.eval(a.value, b.value)))

    @on(KeyType)
    def _key(self, a: KeyType, b: Type) -> Type:
        return a if isinstance(b, KeyType) else self._mismatch(a, b)

    @on(TypeVar)
    def _type_var(self, a: TypeVar, b: Type) -> Type:
        if isinstance(b, TypeVar) and a.name == b.name:
            return a  # rigid: the same parameter, possibly re-created
        return self._mismatch(a, b)

    @on(FuncType)
    def _func(self, a: FuncType, b: Type):
        if not isinstance(b, FuncType):
            return self._mismatch(a, b)
        if len(a.arg_types) != len(b.arg_types):
            raise UnifyError(
                f"functions of {len(a.arg_types)} and {len(b.arg_types)} parameters: "
                f"{show(a)} vs {show(b)}"
            )
        if len(a.type_params) != len(b.type_params):
            raise UnifyError(f"polymorphic and monomorphic functions: {show(a)} vs {show(b)}")
        b_args, b_ret = b.arg_types, b.ret_type
        if b.type_params:  # compare up to renaming of the type parameters
            renaming = dict(zip(b.type_params, a.type_params, strict=True))
            b_args = tuple(substitute(t, renaming) for t in b_args)
            b_ret = substitute(b_ret, renaming)
        args = []
        for x, y in zip(a.arg_types, b_args, strict=True):
            args.append((yield self.eval(x, y)))
        ret = yield self.eval(a.ret_type, b_ret)
        return FuncType(tuple(args), ret, a.type_params, a.effects)

    @on(GlobalTypeVar, TypeCall)
    def _adt(self, a: GlobalTypeVar | TypeCall, b: Type):
        if isinstance(b, GlobalTypeVar | TypeCall):
            fa, aa = (a, ()) if isinstance(a, GlobalTypeVar) else (a.func, a.args)
            fb, ab = (b, ()) if isinstance(b, GlobalTypeVar) else (b.func, b.args)
            if fa.name == fb.name and len(aa) == len(ab):
                args = []
                for x, y in zip(aa, ab, strict=True):
                    args.append((yield self.eval(x, y)))
                return TypeCall(fa, tuple(args)) if args else a
        return self._mismatch(a, b)

    @on(Type)
    def _mismatch(self, a: Type, b: Type) -> Type:
        raise UnifyError(f"{show(a)} vs {show(b)}")


class _Join(ExprFunctor):
    """``Solver.join`` of two resolved types, dispatched on the first one's
    class; what is not a tensor, a tuple or an ADT is unified."""

    def __init__(self, solver: Solver, force: bool) -> None:
        super().__init__()
        self.solver = solver
        self.force = force

    def eval(self, a: Type, b: Type) -> Any:  # type: ignore[override]
        a, b = self.solver.head(a), self.solver.head(b)
        if a is b:
            return self.solver.resolve(a)
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            return join_tensors(a, b)
        if isinstance(a, IncompleteType) or isinstance(b, IncompleteType):
            if not self.force:
                raise NotReady
            return self.solver.resolve(self.solver.unify(a, b))
        return ExprFunctor.eval(self, a, b)

    @on(TupleType)
    def _tuple(self, a: TupleType, b: Type):
        if not isinstance(b, TupleType) or len(a.fields) != len(b.fields):
            return self.solver.unify(a, b)  # the mismatch, as unification words it
        fields = []
        for x, y in zip(a.fields, b.fields, strict=True):
            fields.append((yield self.eval(x, y)))
        return TupleType(tuple(fields))

    @on(TypeCall)
    def _adt(self, a: TypeCall, b: Type):
        if not (isinstance(b, TypeCall) and a.func.name == b.func.name):
            return self.solver.unify(a, b)
        if len(a.args) != len(b.args):
            return self.solver.unify(a, b)
        args = []
        for x, y in zip(a.args, b.args, strict=True):
            args.append((yield self.eval(x, y)))
        return TypeCall(a.func, tuple(args))

    @on(Type)
    def _invariant(self, a: Type, b: Type) -> Type:
        return self.solver.resolve(self.solver.unify(a, b))


class _MapType(_Rebuild):
    """``map_type``: ``leaf`` asked first at each type, then its parts."""

    def __init__(self, leaf: Callable[[Type], Type | None]) -> None:
        super().__init__()
        self.leaf = leaf

    def eval(self, t: Type) -> Any:  # type: ignore[override]
        replaced = self.leaf(t)
        if replaced is not None:
            return replaced
        return ExprFunctor.eval(self, t)

    @on(Type)
    def _other(self, t: Type) -> Type:
        return t
