"""Types: tensors with static, symbolic or unknown dims, tuples, functions,
references, PRNG keys, type variables and algebraic data types."""

from __future__ import annotations

from dataclasses import dataclass, field

from .diagnostics import WellFormedError
from .names import BUILTIN_TYPE_WORDS, KEYWORDS, is_identifier
from .node import TYPE, Node

# A dimension is an int (static), a str naming a symbolic dimension ("n"),
# or ANY ("?"), a dimension known only at run time.
ANY = "?"
Dim = int | str

DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)

# Effect-set items that a function type may carry (docs/text-format.md).
EFFECT_KEYWORDS = ("io", "random")


class Type(Node):
    """Base of all types."""

    __slots__ = ()
    ROLE = TYPE


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TensorType(Type):
    shape: tuple[Dim, ...]
    dtype: str = "float32"
    FIELDS = (("shape", "attr"), ("dtype", "attr"))

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        for dim in shape:
            if not is_dim(dim):
                raise WellFormedError(
                    f"bad dimension {dim!r} in a tensor type: a dimension is an integer >= 0, "
                    "a symbolic name such as 'n', or '?'"
                )
        if self.dtype not in DTYPES:
            raise WellFormedError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        object.__setattr__(self, "shape", shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TupleType(Type):
    fields: tuple[Type, ...]
    FIELDS = (("fields", "nodes"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeVar(Type):
    """A type parameter; bound by the ``type_params`` of a function or ADT."""

    name: str
    FIELDS = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FuncType(Type):
    """``fn [T](A, B) -> {effects} R``; ``effects`` is None when not annotated."""

    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()
    effects: tuple[str, ...] | None = None
    FIELDS = (
        ("type_params", "defs"),
        ("arg_types", "nodes"),
        ("ret_type", "node"),
        ("effects", "attr"),
    )

    def __post_init__(self) -> None:
        if self.effects is not None:
            object.__setattr__(self, "effects", normalize_effects(self.effects))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefType(Type):
    value: Type
    FIELDS = (("value", "node"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IncompleteType(Type):
    """A type not known yet: a unification variable of type inference
    (Relay's IncompleteType). Never part of a checked program; prints as ``_``."""

    FIELDS = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class KeyType(Type):
    """A PRNG key (threefry2x32: two uint32 words)."""

    FIELDS = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalTypeVar(Type):
    """The name of an algebraic data type defined in the module."""

    name: str
    FIELDS = (("name", "attr"),)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TypeCall(Type):
    """An ADT applied to type arguments: ``List[A]``."""

    func: GlobalTypeVar
    args: tuple[Type, ...] = field(default=())
    FIELDS = (("func", "node"), ("args", "nodes"))


def is_dim(dim: object) -> bool:
    """An int >= 0, ANY, or a symbolic name the parser reads back as one."""
    if isinstance(dim, bool):
        return False
    if isinstance(dim, int):
        return dim >= 0
    return dim == ANY or (
        is_identifier(dim) and dim not in KEYWORDS and dim not in DTYPES and dim != "_"
    )


RESERVED_TYPE_NAMES = frozenset(DTYPES) | BUILTIN_TYPE_WORDS | KEYWORDS


def normalize_effects(items) -> tuple[str, ...]:
    """Canonical (sorted, deduplicated) effect set; WellFormedError on an
    item that is not ``io``, ``random``, ``read @cell`` or ``write @cell``."""
    result = set()
    for item in items:
        if item in EFFECT_KEYWORDS:
            result.add(item)
            continue
        kind, _, cell = str(item).partition(" @")
        if kind not in ("read", "write") or not is_identifier(cell):
            raise WellFormedError(
                f"bad effect {item!r}: expected io, random, 'read @cell' or 'write @cell'"
            )
        result.add(item)
    return tuple(sorted(result))
