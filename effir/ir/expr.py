"""Expressions: the A-normal-form functional core of effir (Relay's, plus
state cells), patterns for ``match``, and ADT definitions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .diagnostics import WellFormedError
from .names import KEYWORDS, require_name
from .node import EMPTY_ATTRS, PATTERN, Attrs, Node
from .types import Type, TypeVar


class Expr(Node):
    """Base of all expressions.

    ``checked_type`` is filled in by type inference (``effir.check``), as
    Relay's ``checked_type_``; it is a cache, not part of the node's content.
    """

    __slots__ = ("_checked_type",)
    _checked_type: Type

    @property
    def checked_type(self) -> Type:
        try:
            return self._checked_type
        except AttributeError:
            raise WellFormedError(
                f"{type(self).__name__} has no type yet: run effir.check(module) first"
            ) from None

    @property
    def has_type(self) -> bool:
        return hasattr(self, "_checked_type")

    def set_checked_type(self, ty: Type) -> None:
        object.__setattr__(self, "_checked_type", ty)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A local variable. Identity is the variable; ``name_hint`` is only a hint."""

    name_hint: str
    type_annotation: Type | None = None
    FIELDS = (("type_annotation", "node"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalVar(Expr):
    """A reference to a global function or a global state cell, by name."""

    name: str
    FIELDS = (("name", "attr"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constant(Expr):
    """A tensor literal; the array is copied and made read-only."""

    data: np.ndarray
    FIELDS = (("data", "data"),)

    def __post_init__(self) -> None:
        array = np.array(self.data, copy=True)
        array.setflags(write=False)
        object.__setattr__(self, "data", array)

    @property
    def dtype(self) -> str:
        return str(self.data.dtype)


def const(value, dtype: str | None = None) -> Constant:
    """A constant from a Python or numpy value (ints default to int32, floats to float32)."""
    if dtype is None:
        array = np.asarray(value)
        if array.dtype == np.int64 and not isinstance(value, np.ndarray | np.generic):
            array = array.astype(np.int32)
        elif array.dtype == np.float64 and not isinstance(value, np.ndarray | np.generic):
            array = array.astype(np.float32)
        return Constant(array)
    return Constant(np.asarray(value, dtype=dtype))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Op(Expr):
    """A primitive operator; obtain it with ``effir.ir.op.get_op(name)``."""

    name: str
    FIELDS = (("name", "attr"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    """``callee(args..., attrs...)``; only operator calls carry attributes."""

    callee: Expr
    args: tuple[Expr, ...]
    attrs: Attrs = EMPTY_ATTRS
    FIELDS = (("callee", "node"), ("args", "nodes"), ("attrs", "attr"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    FIELDS = (("fields", "nodes"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    FIELDS = (("tuple_value", "node"), ("index", "attr"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Function(Expr):
    """A function or closure; free variables of ``body`` are captured."""

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    type_params: tuple[TypeVar, ...] = ()
    attrs: Attrs = EMPTY_ATTRS
    FIELDS = (
        ("type_params", "defs"),
        ("params", "defs"),
        ("ret_type", "node"),
        ("body", "node"),
        ("attrs", "attr"),
    )

    def __post_init__(self) -> None:
        for key in self.attrs:
            require_name(key, "function attribute name", KEYWORDS)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Let(Expr):
    """``let var = value; body``. As in Relay, ``var`` is in scope in ``value``
    too, so a let-bound function may call itself."""

    var: Var
    value: Expr
    body: Expr
    FIELDS = (("var", "def"), ("value", "node"), ("body", "node"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class If(Expr):
    cond: Expr
    then_branch: Expr
    else_branch: Expr
    FIELDS = (("cond", "node"), ("then_branch", "node"), ("else_branch", "node"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constructor(Expr):
    """An ADT constructor; as an expression it is a function building the value."""

    name: str
    inputs: tuple[Type, ...]
    adt: str
    # ``inputs`` mention the ADT's type parameters, so they are compared where
    # the ADT is defined (TypeData), not at each use.
    FIELDS = (("name", "attr"), ("adt", "attr"))


class Pattern(Node):
    __slots__ = ()
    ROLE = PATTERN


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternWildcard(Pattern):
    FIELDS = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternVar(Pattern):
    var: Var
    FIELDS = (("var", "def"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternConstructor(Pattern):
    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()
    FIELDS = (("constructor", "node"), ("patterns", "nodes"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PatternTuple(Pattern):
    patterns: tuple[Pattern, ...]
    FIELDS = (("patterns", "nodes"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Clause(Node):
    pattern: Pattern
    body: Expr
    FIELDS = (("pattern", "node"), ("body", "node"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Match(Expr):
    """``match`` (complete: exhaustive) or ``match?`` (may fail at run time)."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True
    FIELDS = (("data", "node"), ("clauses", "nodes"), ("complete", "attr"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefCreate(Expr):
    value: Expr
    FIELDS = (("value", "node"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefRead(Expr):
    ref: Expr
    FIELDS = (("ref", "node"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefWrite(Expr):
    """Writes ``value`` into ``ref``; evaluates to the unit tuple ``()``."""

    ref: Expr
    value: Expr
    FIELDS = (("ref", "node"), ("value", "node"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeData(Node):
    """An ADT definition: ``type List[A] { Cons(A, List[A]), Nil }``."""

    name: str
    type_params: tuple[TypeVar, ...]
    constructors: tuple[Constructor, ...]
    FIELDS = (("name", "attr"), ("type_params", "defs"), ("constructors", "ctordefs"))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalCell(Node):
    """A global state cell: ``global @rng: Ref[Key] = ref(random.key(0));``.

    ``type`` is the cell's ``Ref[T]`` type (or None) and ``init`` the initial
    value's expression, evaluated once when a program's state is created."""

    name: str
    type: Type | None
    init: Expr
    FIELDS = (("name", "attr"), ("type", "node"), ("init", "node"))


ATOM_TYPES = (Var, GlobalVar, Constant, Op, Constructor)


def is_atom(expr: Expr) -> bool:
    """Atoms may appear as arguments in A-normal form."""
    return isinstance(expr, ATOM_TYPES)
