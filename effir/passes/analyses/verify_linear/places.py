"""Places (the values the rules track), obligations (new state that must
be used), paths into tuples, and the path state: what was used and which
obligations were met on the path taken so far, forked at each branch and
joined at its end."""

from __future__ import annotations

import enum
import itertools
from typing import Final

from effir.ir.diagnostics import Span
from effir.ir.expr import Expr
from effir.ir.node import Node
from effir.ir.types import TupleType, Type

Path = tuple[int, ...]
# Where a value is used: (the expression, its parent, its index among the
# parent's children, the nearest enclosing span). Resolved lazily, on error.
Site = tuple[Expr, Node | None, int, Span | None]
MISSING = object()
SERIALS = itertools.count()


class _Met(enum.Enum):
    SAT = "met"


SAT: Final = _Met.SAT  # an obligation met on every path so far
Status = Site | _Met | None
"""An obligation's state on a path: ``SAT``, None (unmet), or the ``Site``
of the path end that left it unmet."""
Delta = tuple[dict[tuple["Place", Path], Site], dict["Obligation", Status]]
"""A branch's changes that matter after the join: the sites of its uses
of places older than the branch, and the status of its obligations."""


class Obligation:
    """An obligation: one part (``field``) of a piece of new state that must
    be used on every path; ``group`` holds the obligations of all its parts."""

    __slots__ = ("what", "how", "span", "field", "group")

    def __init__(self, what: str, how: str, span: Span | None, field: str, group: list) -> None:
        self.what, self.how, self.span, self.field, self.group = what, how, span, field, group


class Place:
    __slots__ = (
        "name",
        "binder",
        "produced",
        "type",
        "origin",
        "marks",
        "obs",
        "captures",
        "used",
        "serial",
        "view",
    )

    def __init__(self, name: str | None, span: Span | None, ty: Type | None, origin: object):
        self.serial = next(SERIALS)  # places made after a branch began die with it
        self.name = name  # None: an anonymous value (a call's result...)
        self.binder = span  # where it is bound (or produced, if anonymous)
        self.produced = span
        self.type = ty
        self.origin = origin  # the node whose evaluation created it
        self.marks: set[Path] = set()  # world tokens
        self.obs: dict[Path, list[Obligation]] = {}
        self.captures: list[tuple[Place, Path]] = []  # a closure's linear captures
        self.used: dict[Path, None] = {}  # every path ever used, on any path
        # a let alias: (its source, the source's path, the alias's key parts
        # whose uses are the source's too)
        self.view: tuple[Place, Path, list[Path]] | None = None


Val = tuple[Place, Path] | None


def type_of(node: Expr) -> Type | None:
    return node.checked_type if node.has_type else None


def type_at(ty: Type | None, path: Path) -> Type | None:
    for index in path:
        if not isinstance(ty, TupleType) or index >= len(ty.fields):
            return None
        ty = ty.fields[index]
    return ty


def leaf_paths(ty: Type | None, path: Path) -> list[Path]:
    """The paths of the non-tuple parts of ``ty`` (under ``path``)."""
    found, stack = [], [(ty, path)]
    while stack:
        t, p = stack.pop()
        if isinstance(t, TupleType):
            stack.extend((f, p + (i,)) for i, f in reversed(list(enumerate(t.fields))))
        else:
            found.append(p)
    return found


def overlap(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def path_text(path: Path) -> str:
    return "".join(f".{i}" for i in path)


# ------------------------------------------------------------ path states
class PathState:
    """Uses and obligations on the current path; ``begin``/``end`` log and
    undo a branch's changes so that ``merge`` can join the branches."""

    def __init__(self) -> None:
        self.uses: dict[tuple[Place, Path], Site] = {}
        self.obs: dict[Obligation, Status] = {}
        self.memo: dict[int, Val] = {}  # shared (graph-form) expressions evaluated
        self.log: list[tuple[dict, object, object]] = []
        self.depth = 0

    def set(self, table: dict, key: object, value: object) -> None:
        if self.depth:
            self.log.append((table, key, table.get(key, MISSING)))
        table[key] = value

    def begin(self) -> tuple[int, int]:
        self.depth += 1
        return len(self.log), next(SERIALS)

    def end(self, mark: tuple[int, int]) -> Delta:
        """Undo the branch since ``mark``; its changes that matter after the
        join (not those to its own places, nor obligations it created and met)."""
        entries = self.log[mark[0] :]
        before: dict[tuple[int, object], object] = {}
        for table, key, old in entries:
            before.setdefault((id(table), key), old)
        uses: dict[tuple[Place, Path], Site] = {}
        obs: dict[Obligation, Status] = {}
        for (table_id, key), old in before.items():
            if table_id == id(self.uses) and isinstance(key, tuple):
                if key[0].serial < mark[1]:
                    uses[key] = self.uses[key]
            elif table_id == id(self.obs) and isinstance(key, Obligation):
                if old is not MISSING or self.obs[key] is not SAT:
                    obs[key] = self.obs[key]
        for table, key, old in reversed(entries):
            if old is MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        del self.log[mark[0] :]
        self.depth -= 1
        return uses, obs

    def merge(self, branches: list[tuple[Delta, Site]]) -> None:
        # [RULE LINEAR-KEY] used on some path: used
        for use in {k for (uses, _), _ in branches for k in uses}:
            base = self.uses.get(use, MISSING)
            found = (uses.get(use, base) for (uses, _), _ in branches)
            site = next((v for v in found if v is not MISSING), MISSING)
            if site is not MISSING:
                self.set(self.uses, use, site)
        # [RULE LINEAR-STATE] met only if met on every path where it exists
        for ob in {k for (_, obs), _ in branches for k in obs}:
            value: Status = SAT
            for (_, obs), end in branches:
                here = obs if ob in obs else self.obs  # else unchanged on that path
                if ob in here and (v := here[ob]) is not SAT:
                    value = end if v is None else v
                    break
            self.set(self.obs, ob, value)
