"""Index expressions evaluated on grids of integers with numpy: which
elements of a tensor a stage reads, for every element of the stage at
once (owners.py). An expression this cannot evaluate (a ``Select``, a read
of data, a variable not in the grid) gives None, which the analysis takes
as "any element": the conservative answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tvm
from tvm import tirx

MAX_POINTS = 1 << 22
"""Largest grid an index is evaluated on; a larger one is "any element"."""

_BINARY = {
    tirx.Add: np.add,
    tirx.Sub: np.subtract,
    tirx.Mul: np.multiply,
    tirx.FloorDiv: np.floor_divide,
    tirx.FloorMod: np.mod,
    tirx.Min: np.minimum,
    tirx.Max: np.maximum,
}


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - _trunc_div(a, b) * b


def evaluate(expr: Any, env: Mapping[Any, np.ndarray]) -> np.ndarray | None:
    """``expr``'s integer values with each variable given by ``env`` (arrays
    that broadcast together), or None. An explicit stack: no recursion."""
    results: list[np.ndarray | None] = []
    work: list[tuple[Any, bool]] = [(expr, False)]
    while work:
        node, expanded = work.pop()
        kind = type(node)
        if not expanded:
            if isinstance(node, tirx.IntImm | int):
                results.append(np.asarray(int(node), dtype=np.int64))
            elif isinstance(node, tirx.Var):
                value = env.get(node)
                results.append(None if value is None else np.asarray(value, dtype=np.int64))
            elif kind in _BINARY or isinstance(node, tirx.Div | tirx.Mod):
                work += [(node, True), (node.b, False), (node.a, False)]
            elif isinstance(node, tirx.Cast) and tvm.DataType(str(node.ty)).type_code in (0, 1):
                work += [(node, True), (node.value, False)]
            else:
                results.append(None)
            continue
        if isinstance(node, tirx.Cast):
            continue  # an integer cast of an integer: its value
        a, b = results.pop(-2), results.pop()
        if a is None or b is None:
            results.append(None)
        elif isinstance(node, tirx.Div | tirx.Mod) or kind in (tirx.FloorDiv, tirx.FloorMod):
            if np.any(b == 0):
                results.append(None)
            elif isinstance(node, tirx.Div):
                results.append(_trunc_div(a, b))
            elif isinstance(node, tirx.Mod):
                results.append(_trunc_mod(a, b))
            else:
                results.append(_BINARY[kind](a, b))
        else:
            results.append(_BINARY[kind](a, b))
    return results.pop()


def free_vars(exprs: list[Any]) -> list[Any]:
    """The variables ``exprs`` read, in the order met."""
    found: list[Any] = []
    for e in exprs:
        for v in tirx.analysis.undefined_vars(e):
            if not any(v.same_as(f) for f in found):
                found.append(v)
    return found


def grid(extents: Mapping[Any, int], variables: list[Any]) -> dict[Any, np.ndarray] | None:
    """Every combination of ``variables``' values (each over its extent) as
    broadcastable arrays, or None when a variable has no extent or there
    are more than ``MAX_POINTS`` combinations."""
    sizes = []
    for v in variables:
        if v not in extents:
            return None
        sizes.append(int(extents[v]))
    if int(np.prod(sizes, dtype=np.int64)) > MAX_POINTS:
        return None
    axes = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in sizes], indexing="ij", sparse=True)
    return dict(zip(variables, axes, strict=True))
