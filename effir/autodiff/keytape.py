"""Keys and ADT values carried by a loop, stored for its backward on a tape.

A loop whose steps draw random numbers carries a key. Recomputing a step
in the backward needs the key the step started from, but a key is not a
tensor and cannot be stacked per step as the other carried values are;
nor can an ADT value (a list the loop grows, an ``Option``). The forward
pushes each step's non-tensor carried values onto a linked list carried
along (``GradTape``, an ADT added to the module); the backward, which
visits the steps last first, pops them in exactly that order. The keys are
the forward's, so each recomputed dropout draws the forward's mask; the
ADT values are the forward's, so each recomputed step reads what it read.

``sqrt`` checkpointing (``static_segments.py``) stores a carry per segment instead:
the forward pushes each segment's start (``store``), and the backward
pops it (``restore``), recomputes the segment pushing its steps onto the
rest of the tape, and pops them again in the segment's reverse loop.
"""

from __future__ import annotations

from ..ir.builder import LetBuilder
from ..ir.expr import Clause, Expr, Match, PatternConstructor, PatternVar, TypeData, Var
from ..ir.parser import parse
from ..ir.types import KeyType, TensorType, TupleType, Type, TypeCall

TAPE = "GradTape"
_TAPE_SOURCE = f"""#[version = "0.0.5"]
type {TAPE}[A] {{ GradPush(A, {TAPE}[A]), GradEnd }}
"""


def tape_type_def() -> TypeData:
    """``type GradTape[A] { GradPush(A, GradTape[A]), GradEnd }``."""
    return parse(_TAPE_SOURCE).type_defs[TAPE]


def tape_leaves_only(t: Type) -> bool:
    """Whether every leaf of ``t`` is a tensor, a key or an ADT value (and
    some is not a tensor): what a tape stores (functions are not stored)."""
    leaves = _leaves(t)
    return all(isinstance(x, TensorType | KeyType | TypeCall) for _, x in leaves) and any(
        _on_tape(x) for _, x in leaves
    )


def _on_tape(t: Type) -> bool:
    """Whether a carried leaf of type ``t`` goes on the tape (not a tensor)."""
    return not isinstance(t, TensorType)


def _leaves(t: Type) -> list[tuple[tuple[int, ...], Type]]:
    out: list[tuple[tuple[int, ...], Type]] = []
    stack: list[tuple[tuple[int, ...], Type]] = [((), t)]
    while stack:
        path, ty = stack.pop()
        if isinstance(ty, TupleType):
            stack.extend(((*path, i), f) for i, f in reversed(list(enumerate(ty.fields))))
        else:
            out.append((path, ty))
    return out


def _project(b: LetBuilder, value: Expr, path: tuple[int, ...]) -> Expr:
    for i in path:
        value = b.emit_get(value, i, "part")
    return value


def split(b: LetBuilder, value: Expr, t: Type) -> tuple[Expr, Expr]:
    """(tuple of the tensor leaves, tuple of the leaves on the tape: keys
    and ADT values) of ``value``."""
    tensors, keys = [], []
    for path, leaf in _leaves(t):
        (keys if _on_tape(leaf) else tensors).append(_project(b, value, path))
    return b.emit(b.tuple(tensors), "tensors"), b.emit(b.tuple(keys), "keys")


def tensors_type(t: Type) -> TupleType:
    """The type of ``split``'s tensors: what a loop stacks of its carry."""
    return TupleType(tuple(x for _, x in _leaves(t) if not _on_tape(x)))


def join(b: LetBuilder, tensors: Expr, keys: Expr, t: Type) -> Expr:
    """The value of type ``t`` from ``split``'s two tuples."""
    counts = {"tensor": 0, "key": 0}

    def build(ty: Type) -> Expr:
        if isinstance(ty, TupleType):
            return b.emit(b.tuple([build(f) for f in ty.fields]), "carry")
        kind = "key" if _on_tape(ty) else "tensor"
        source = keys if kind == "key" else tensors
        index = counts[kind]
        counts[kind] += 1
        return b.emit_get(source, index, kind)

    return build(t)  # recursion over the carry's type: its depth, not the program's


def constructors(data: TypeData) -> tuple[Expr, Expr]:
    push, end = data.constructors
    return push, end


def push(b: LetBuilder, data: TypeData, keys: Expr, tape: Expr) -> Expr:
    return b.emit(b.call(constructors(data)[0], [keys, tape]), "tape")


def empty(b: LetBuilder, data: TypeData) -> Expr:
    return b.emit(b.call(constructors(data)[1], []), "tape")


def pop(
    b: LetBuilder,
    data: TypeData,
    tape: Expr,
    count: int,
    like: Expr | None = None,
    t: Type | None = None,
) -> tuple[Expr, Expr]:
    """(the ``count`` values on top, the rest of the tape); the backward pops
    exactly as many times as the forward pushed. The match is complete (a
    backend compiles no ``match?``): the empty tape, never reached, gives
    placeholders: new keys, and an ADT value's leaf of ``like`` (of type
    ``t``: the loop's initial carry, the one value of those types at hand)."""
    push_ctor, end_ctor = constructors(data)
    keys, rest = Var("keys"), Var("rest")
    taken = Clause(
        PatternConstructor(push_ctor, (PatternVar(keys), PatternVar(rest))), b.tuple([keys, rest])
    )
    eb = b.child()
    seed = eb.const(0, "int64")
    if t is not None and any(isinstance(x, TypeCall) for _, x in _leaves(t)):
        assert like is not None
        placeholders = [
            eb.emit(eb.call_op("random.key", seed), "key")
            if isinstance(leaf, KeyType)
            else _project(eb, like, path)
            for path, leaf in _leaves(t)
            if _on_tape(leaf)
        ]
    else:
        placeholders = [eb.emit(eb.call_op("random.key", seed), "key") for _ in range(count)]
    unreached = eb.emit(eb.tuple([eb.emit(eb.tuple(placeholders), "keys"), tape]), "popped")
    never = Clause(PatternConstructor(end_ctor, ()), eb.finish(unreached))
    popped = b.emit(Match(tape, (taken, never), complete=True), "popped")
    return b.emit_get(popped, 0, "keys"), b.emit_get(popped, 1, "rest")


def key_count(t: Type) -> int:
    """How many leaves of ``t`` go on the tape."""
    return sum(_on_tape(x) for _, x in _leaves(t))


def store(b: LetBuilder, data: TypeData, value: Expr, t: Type, tape: Expr) -> tuple[Expr, Expr]:
    """Store the carry ``value`` (of type ``t``): (its tensors, to be
    stacked; ``tape`` with its keys and ADT values pushed)."""
    tensors, keys = split(b, value, t)
    return tensors, push(b, data, keys, tape)


def restore(
    b: LetBuilder, data: TypeData, tensors: Expr, tape: Expr, like: Expr, t: Type
) -> tuple[Expr, Expr]:
    """``store`` undone: (the carry from its stored ``tensors`` and the
    values on top of ``tape``, the rest of the tape)."""
    keys, rest = pop(b, data, tape, key_count(t), like, t)
    return join(b, tensors, keys, t), rest


__all__ = [
    "TAPE",
    "empty",
    "join",
    "key_count",
    "pop",
    "push",
    "restore",
    "split",
    "store",
    "tape_leaves_only",
    "tape_type_def",
    "tensors_type",
]
