"""Structural equality and hashing up to alpha-renaming.

Two programs are structurally equal when they differ only in the names of
bound variables (and type variables), in source spans, and in sharing: a DAG
equals the tree it unfolds to. Free variables must be the same object unless
``map_free_vars`` is set. Constants compare bit for bit; attributes compare
with ``==`` except that a NaN equals a NaN. Each definition of a module is
compared (and hashed) on its own, in its own scope. Both algorithms walk
an explicit stack in the same left-to-right pre-order, so binders are met
before their uses and deep programs need no recursion. A bound variable
hashes as its position among the binders of the node that binds it
(parameter 0, 1, ...), which depends neither on names nor on where that node
sits, so alpha-renaming and sharing leave hashes unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .diagnostics import Error
from .expr import Constant, Constructor, Var
from .literals import format_scalar
from .module import IRModule
from .node import Attrs, Node
from .types import TypeVar

_BINDERS = (Var, TypeVar)


class StructuralMismatch(Error, AssertionError):
    """Raised by ``assert_structural_equal``; an AssertionError for test runners."""

    kind = "structural mismatch"


def _path_text(path: tuple | None) -> str:
    labels = []
    while path is not None:
        path, label = path
        labels.append(label)
    text = ""
    for label in reversed(labels):
        text += label if label.startswith("[") or not text else "." + label
    return text or "<root>"


def _brief(x: Any) -> str:
    if x is None:
        return "nothing"
    if isinstance(x, Var):
        return f"variable %{x.name_hint}"
    if isinstance(x, TypeVar):
        return f"type variable {x.name}"
    if isinstance(x, Constant):
        text = format_scalar(x.data)
        if text is None:
            text = np.array2string(x.data, threshold=8) + f" ({x.dtype})"
        return f"constant {text}"
    if isinstance(x, Node):
        name = getattr(x, "name", None)
        return f"{type(x).__name__} {name}" if isinstance(name, str) else type(x).__name__
    return repr(x)


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    )


class _Comparer:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.forward: dict[Node, Node] = {}
        self.backward: dict[Node, Node] = {}
        self.seen: set[tuple[int, int]] = set()

    def _bind(self, x: Node, y: Node) -> None:
        """Enter a binding site. A binder met again is a shared binding node
        (a DAG) entered anew, so the latest pairing wins: a DAG equals the
        tree it unfolds to."""
        self.forward[x] = y
        self.backward[y] = x

    def _use(self, x: Node, y: Node) -> str | None:
        if type(x) is not type(y):
            return f"{_brief(x)} vs {_brief(y)}"
        mapped = self.forward.get(x)
        if mapped is not None:
            return None if mapped is y else f"{_brief(x)} vs {_brief(y)} (bound differently)"
        if y in self.backward:
            return f"{_brief(x)} vs {_brief(y)} (bound differently)"
        if x is y:
            return None
        if self.map_free_vars:
            self._bind(x, y)
            return None
        return f"free {_brief(x)} vs free {_brief(y)}"

    def compare(self, a: Node | None, b: Node | None, root_path: tuple | None) -> str | None:
        """None when equal, else a description of the first difference."""
        stack: list[tuple[Any, Any, tuple | None, bool]] = [(a, b, root_path, False)]
        pop, push = stack.pop, stack.append
        while stack:
            x, y, path, is_def = pop()
            if x is None or y is None:
                if x is not y:
                    return f"{_path_text(path)}: {_brief(x)} vs {_brief(y)}"
                continue
            cls = type(x)
            if cls is not type(y):
                return f"{_path_text(path)}: {_brief(x)} vs {_brief(y)}"
            if cls in _BINDERS:
                if is_def:
                    self._bind(x, y)
                    if cls is Var:
                        push((x.type_annotation, y.type_annotation, (path, "type"), False))
                    continue
                problem = self._use(x, y)
                if problem is not None:
                    return f"{_path_text(path)}: {problem}"
                continue
            key = (id(x), id(y))
            if key in self.seen:
                continue
            self.seen.add(key)
            pending = []
            for name, kind in cls.FIELDS:
                u, v = getattr(x, name), getattr(y, name)
                if kind == "node":
                    pending.append((u, v, (path, name), False))
                elif kind == "nodes" or kind == "defs":
                    if len(u) != len(v):
                        return (
                            f"{_path_text((path, name))}: {len(u)} vs {len(v)} "
                            f"{'binders' if kind == 'defs' else 'elements'}"
                        )
                    d = kind == "defs"
                    if d and (len(set(u)) != len(u) or len(set(v)) != len(v)):
                        return f"{_path_text((path, name))}: a variable is bound twice here"
                    for i in range(len(u)):
                        pending.append((u[i], v[i], (path, f"{name}[{i}]"), d))
                elif kind == "def":
                    pending.append((u, v, (path, name), True))
                elif kind == "attr":
                    if isinstance(u, Attrs) or isinstance(v, Attrs):
                        equal = u == v or (
                            isinstance(u, Attrs)
                            and isinstance(v, Attrs)
                            and _nan_equal_key(u.key()) == _nan_equal_key(v.key())
                        )
                    else:
                        equal = type(u) is type(v) and u == v
                    if not equal:
                        return f"{_path_text((path, name))}: {u!r} vs {v!r}"
                elif kind == "data":
                    if not _arrays_equal(u, v):
                        return f"{_path_text(path)}: {_brief(x)} vs {_brief(y)}"
                elif kind == "ctordefs":
                    if len(u) != len(v):
                        return f"{_path_text((path, name))}: {len(u)} vs {len(v)} constructors"
                    for i, (cu, cv) in enumerate(zip(u, v, strict=True)):
                        cpath = (path, f"{name}[{i}]")
                        if cu.name != cv.name or len(cu.inputs) != len(cv.inputs):
                            return (
                                f"{_path_text(cpath)}: {_describe_ctor(cu)} vs {_describe_ctor(cv)}"
                            )
                        for j in range(len(cu.inputs)):
                            pending.append(
                                (cu.inputs[j], cv.inputs[j], (cpath, f"inputs[{j}]"), False)
                            )
                else:  # pragma: no cover - a new field kind must be taught here
                    raise NotImplementedError(f"structural equality: field kind {kind!r}")
            stack.extend(reversed(pending))
        return None


def _nan_equal_key(key: Any) -> Any:
    """An ``Attrs.key()`` in which a NaN attribute equals any other NaN (as
    ``structural_hash`` has it), so that ``low=nan`` survives a round trip."""
    if isinstance(key, tuple):
        return tuple(_nan_equal_key(k) for k in key)
    if isinstance(key, float) and key != key:
        return "nan"  # still tagged ("float", ...) by Attrs.key(), so not the string "nan"
    return key


def _describe_ctor(c: Constructor) -> str:
    return f"constructor {c.name}/{len(c.inputs)}"


def _module_parts(m: IRModule) -> dict[str, Node]:
    parts: dict[str, Node] = {}
    for name, data in m.type_defs.items():
        parts[f"type {name}"] = data
    for name, cell in m.cells.items():
        parts[f"global @{name}"] = cell
    for name, fn in m.functions.items():
        parts[f"@{name}"] = fn
    return parts


def structural_diff(a: Any, b: Any, map_free_vars: bool = False) -> str | None:
    """A readable description of the first difference, or None when equal."""
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        if not (isinstance(a, IRModule) and isinstance(b, IRModule)):
            return f"<root>: {type(a).__name__} vs {type(b).__name__}"
        left, right = _module_parts(a), _module_parts(b)
        for name in left:
            if name not in right:
                return f"{name}: defined on the left only"
        for name in right:
            if name not in left:
                return f"{name}: defined on the right only"
        for name, node in left.items():
            # Each definition is its own scope: a closed sub-expression shared
            # by two definitions binds its variables once in each.
            problem = _Comparer(map_free_vars).compare(node, right[name], (None, name))
            if problem is not None:
                return problem
        return None
    return _Comparer(map_free_vars).compare(a, b, None)


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """True when ``a`` and ``b`` are equal up to alpha-renaming (modules too)."""
    return structural_diff(a, b, map_free_vars) is None


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    """Raise ``StructuralMismatch`` describing the first difference, if any."""
    problem = structural_diff(a, b, map_free_vars)
    if problem is not None:
        raise StructuralMismatch(f"not structurally equal at {problem}")


_MASK = (1 << 64) - 1
_STRING_HASHES: dict[str, int] = {}


def _stable(value: Any) -> int:
    """A 64-bit hash of a plain value that is the same in every process
    (Python's own ``hash`` of strings is salted per process)."""
    if value is None:
        return 0x9E3779B97F4A7C15
    if isinstance(value, bool):
        return 0x51ED27 + int(value)
    if isinstance(value, int):
        return (value * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK
    if isinstance(value, str):
        cached = _STRING_HASHES.get(value)
        if cached is None:
            digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8)
            cached = int.from_bytes(digest.digest(), "little")
            if len(_STRING_HASHES) < 100_000:
                _STRING_HASHES[value] = cached
        return cached
    if isinstance(value, tuple):
        return _digest(*value)
    if isinstance(value, float):
        return _stable(repr(value + 0.0))  # -0.0 == 0.0, so they must hash alike
    return _stable(repr(value))


def _digest(*parts: Any) -> int:
    h = 0xCBF29CE484222325 ^ len(parts)
    for part in parts:
        h = ((h ^ _stable(part)) * 0x100000001B3) & _MASK
        h ^= h >> 29
    return h


_PRIME = 0x100000001B3
_DEF, _BOUND, _FREE, _NONE = (_stable(tag) for tag in ("def", "bound", "free", "none"))


def _mix(h: int, value: int) -> int:
    h = ((h ^ value) * _PRIME) & _MASK
    return h ^ (h >> 29)


class _Hasher:
    def __init__(self) -> None:
        self.memo: dict[int, int] = {}
        self.ordinal: dict[Node, int] = {}
        self.attr_memo: dict[int, int] = {}

    def _child(self, child: Any, is_def: bool) -> int:
        if child is None:
            return _NONE
        if isinstance(child, _BINDERS):
            if is_def:
                ann = getattr(child, "type_annotation", None)
                ann_hash = self._child(ann, False) if ann is not None else _NONE
                return _mix(_mix(_DEF, self.ordinal[child]), ann_hash)
            ordinal = self.ordinal.get(child)
            if ordinal is None:  # free: hashed by name, equal only if identical
                name = child.name_hint if isinstance(child, Var) else child.name
                return _mix(_FREE, _stable(name))
            return _mix(_BOUND, ordinal)
        return self.memo[id(child)]

    def hash(self, root: Node) -> int:
        stack: list[tuple[Any, int]] = [(root, 0)]  # 0: enter, 1: enter as binder, 2: exit
        memo, ordinal = self.memo, self.ordinal
        while stack:
            x, state = stack.pop()
            if x is None:
                continue
            if state == 2:
                memo[id(x)] = self._combine(x)
                continue
            if isinstance(x, _BINDERS):
                if state == 1:
                    ann = getattr(x, "type_annotation", None)
                    if ann is not None:
                        stack.append((ann, 0))
                continue
            if id(x) in memo:
                continue
            stack.append((x, 2))
            pending = []
            for name, kind in type(x).FIELDS:
                value = getattr(x, name)
                if kind == "node":
                    pending.append((value, 0))
                elif kind == "nodes":
                    pending.extend((v, 0) for v in value)
                elif kind == "def":
                    ordinal.setdefault(value, 0)
                    pending.append((value, 1))
                elif kind == "defs":
                    for i, v in enumerate(value):
                        ordinal.setdefault(v, i)
                    pending.extend((v, 1) for v in value)
                elif kind == "ctordefs":
                    for ctor in value:
                        pending.extend((t, 0) for t in ctor.inputs)
            stack.extend(reversed(pending))
        return self._child(root, False) if isinstance(root, _BINDERS) else memo[id(root)]

    def _combine(self, x: Node) -> int:
        h = _stable(type(x).__name__)
        for name, kind in type(x).FIELDS:
            value = getattr(x, name)
            if kind == "node":
                h = _mix(h, self._child(value, False))
            elif kind == "def":
                h = _mix(h, self._child(value, True))
            elif kind == "nodes" or kind == "defs":
                d = kind == "defs"
                inner = len(value)
                for v in value:
                    inner = _mix(inner, self._child(v, d))
                h = _mix(h, inner)
            elif kind == "attr":
                if isinstance(value, Attrs):
                    cached = self.attr_memo.get(id(value))
                    if cached is None:
                        cached = self.attr_memo[id(value)] = _stable(value.key())
                    h = _mix(h, cached)
                else:
                    h = _mix(h, _stable(value))
            elif kind == "data":
                raw = np.ascontiguousarray(value).tobytes()
                digest = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")
                h = _mix(h, _stable((str(value.dtype), value.shape, digest)))
            elif kind == "ctordefs":
                for c in value:
                    h = _mix(h, _stable(c.name))
                    for t in c.inputs:
                        h = _mix(h, self._child(t, False))
        return h


def structural_hash(x: Any) -> int:
    """A hash consistent with ``structural_equal`` and stable across processes."""
    if isinstance(x, IRModule):
        # One hasher per definition, as structural_diff compares them: the
        # hash of a definition depends neither on the definitions before it
        # (binder ordinals) nor on what it shares with them.
        return _digest(
            *sorted((name, _Hasher().hash(node)) for name, node in _module_parts(x).items())
        )
    return _Hasher().hash(x)
