"""``effir.State``: the global state cells of one program instance.

The contract (docs/semantics.md §3.4):

- **A mapping of cell names to values.** ``s["rng"]`` (or ``s["@rng"]``),
  ``list(s)`` (the names, in declaration order), ``len(s)``, ``"rng" in s``;
  ``s["rng"] = value`` checks ``value`` against the cell's type first (a
  ``StateError`` otherwise). ``s.cells[name]`` is the ``RefValue`` the
  program reads and writes.
- **A call changes it completely or not at all.** Every call (``interpret``,
  ``interpret_a2``) runs inside ``s.transaction()``: it takes the State's
  lock, remembers each cell's value, and puts them all back if the call
  raises. Values are never mutated in place (each operator makes new
  arrays), so remembering them is remembering references.
- **Threads may share it.** The lock is held from the first read of a cell
  to the last write, so calls on one State from several threads run one
  after another, each seeing the state the previous one left (a random
  stream advances once per call, never twice from the same key). Calls on
  separate States run in parallel. The lock is re-entrant: a ``sink`` that
  calls the program again on the same State from the same thread does not
  deadlock.
- **Kept on a GPU between calls.** A program compiled for a GPU leaves the
  new values of the cells it passes (keys, batch-norm statistics) in the
  GPU's memory (``keep_on_device``), and its next call takes them from
  there (``device_value``): no copy per call. Anything that reads the State
  on the host (``s[name]``, ``s.cells``, ``values``, ``save``, a call of
  the interpreter or of a program for the CPU) copies them back first
  (``_to_host``), once.
- **Saved and loaded as ``.npz``.** ``s.save(path)`` writes one array per
  tensor (tuples are numbered ``bn.0``, ``bn.1``; a key is its two
  ``uint32`` words), without pickles; ``s.load(path)`` (a method: the
  module gives the cells and their types) checks every array against its
  cell before it replaces any value. ``s.arrays()`` and
  ``s.set_arrays(arrays)`` are the same without a file (a training
  checkpoint holds them beside the parameters: effir/train/checkpoint.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..ir.diagnostics import Error, EvalError, Span
from ..ir.expr import Expr
from ..ir.module import IRModule
from ..ir.printer import astext
from ..ir.program import resolve
from ..ir.types import KeyType, RefType, TensorType, TupleType, Type
from ..runtime import prng
from ..runtime.values import PRNGKey, RefValue, describe_value, type_text

_INT64 = (-(1 << 63), (1 << 63) - 1)

InitialiserEvaluator = Callable[[IRModule, "State"], Callable[[Expr], Any]]
"""``make(module, state)``: a function from a cell's initialiser to its value."""

_INITIALISERS: list[InitialiserEvaluator] = []
"""How a State runs its cells' initialisers (programs of the module): the
interpreter, the reference semantics, registers itself when it is imported
(backends/interpreter.py). It reads and writes a State's cells, so it builds
on this module, not the reverse, as the printer lets what builds on it show
itself through ir/display.py's hooks."""


def register_initialiser_evaluator(make: InitialiserEvaluator) -> None:
    """Let every ``State`` evaluate its cells' initialisers with ``make``."""
    _INITIALISERS[:] = [make]


def _initialiser_evaluator(module: IRModule, state: State) -> Callable[[Expr], Any]:
    if not _INITIALISERS:  # only before effir's own import is complete
        raise StateError("no evaluator of cell initialisers is registered: import effir first")
    return _INITIALISERS[0](module, state)


class StateError(EvalError):
    """A ``State`` used wrongly: a value of the wrong type for its cell, a
    seed out of range, a file that does not hold this program's state."""

    kind = "state error"


class UnknownCellError(StateError, KeyError):
    """A cell name the program does not declare (a ``KeyError`` too, so that
    ``s.get(name)`` and ``name in s`` behave as for any mapping)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self._render()


class State(Mapping[str, Any]):
    """The global state cells of one program instance.

    Created from the module's declarations (each cell's initialiser runs
    once); ``interpret`` reads and updates it in place, all or nothing.
    ``seed`` replaces the initial key of every cell that holds a ``Key``:
    the first such cell (in declaration order) starts from ``key(seed)``
    (``jax.random.PRNGKey(seed)`` of a Python int), the k-th one after it
    from ``fold_in(key(seed), k)``.
    """

    def __init__(self, module: IRModule | Any, seed: int | None = None) -> None:
        if not isinstance(module, IRModule):  # a scripted function (ir/program.py)
            module = resolve(module, None, StateError, "effir.State")[0]
        if seed is not None and not (
            isinstance(seed, int | np.integer) and _INT64[0] <= int(seed) <= _INT64[1]
        ):
            raise StateError(f"the seed must be an integer that fits in int64, got {seed!r}")
        self._cells: dict[str, RefValue] = {}
        self._types: dict[str, Type | None] = {}
        self._lock = threading.RLock()
        self._on_device: dict[str, tuple[Any, Callable[[Any], Any]]] = {}
        if not module.cells:
            # No initialiser to run, so no interpreter (which analyses the
            # whole module): a compiled program without cells makes a State
            # at every call (docs/performance.md, the per-call cost).
            return
        evaluate = _initialiser_evaluator(module, self)
        key_index = 0
        for name, cell in module.cells.items():
            ref = RefValue(evaluate(cell.init), name)
            if seed is not None and isinstance(ref.value, PRNGKey):
                ref.value = _seeded_key(int(seed), key_index)
                key_index += 1
            self._cells[name] = ref
            declared = cell.type.value if isinstance(cell.type, RefType) else None
            self._types[name] = declared if declared is not None else type_of_value(ref.value)

    def check_for(self, module: IRModule) -> None:
        """``check_cells`` against ``module``'s declared cell types."""
        types, spans = {}, {}
        for name, cell in module.cells.items():
            types[name] = cell.type.value if isinstance(cell.type, RefType) else None
            spans[name] = cell.span
        check_cells(self, types, spans)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> State:
        """A State of cells holding ``values`` (name -> value), each cell's
        type that of its value: the state of a program known only by its
        values, such as one reloaded from an artifact (``effir.load``)."""
        state = cls.__new__(cls)
        state._cells = {name: RefValue(value, name) for name, value in values.items()}
        state._types = {name: type_of_value(value) for name, value in values.items()}
        state._lock = threading.RLock()
        state._on_device = {}
        return state

    @property
    def cells(self) -> dict[str, RefValue]:
        """The cells the program reads and writes, each holding its value
        on the host (values a GPU program left on its device are copied
        back first)."""
        if self._on_device:
            self._to_host()
        return self._cells

    # ----------------------------------------------------- on a device
    def device_value(self, name: str) -> Any:
        """Cell ``name``'s value where it is: as a GPU program left it
        (``keep_on_device``), else on the host. For compiled code, inside
        ``transaction(on_device=True)``."""
        kept = self._on_device.get(name)
        return kept[0] if kept is not None else self._cells[name].value

    def keep_on_device(self, name: str, value: Any, to_host: Callable[[Any], Any]) -> None:
        """Cell ``name``'s new value, left in a device's memory;
        ``to_host(value)`` copies it back when the host reads the State."""
        self._on_device[name] = (value, to_host)

    def set_value(self, name: str, value: Any) -> None:
        """Cell ``name``'s new value, on the host (a program's result: no
        type check)."""
        self._on_device.pop(name, None)
        self._cells[name].value = value

    def _to_host(self) -> None:
        """Every value left on a device copied back to its cell."""
        with self._lock:
            for name, (value, to_host) in list(self._on_device.items()):
                self._cells[name].value = to_host(value)
                del self._on_device[name]

    # ------------------------------------------------------------ mapping
    def _name(self, name: str) -> str:
        key = name.removeprefix("@") if isinstance(name, str) else name
        if key not in self._cells:
            known = ", ".join("@" + n for n in self._cells) or "none"
            raise UnknownCellError(f"no state cell {name!r} (cells: {known})")
        return key

    def __getitem__(self, name: str) -> Any:
        """The current value held in cell ``name``."""
        return self.cells[self._name(name)].value

    def __setitem__(self, name: str, value: Any) -> None:
        """Replace cell ``name``'s value, after checking it against the
        cell's type (its declaration's, else its initial value's)."""
        key = self._name(name)
        converted = _checked(value, self._types[key], f"state cell @{key}")
        with self._lock:
            self.set_value(key, converted)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._cells))

    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.removeprefix("@") in self._cells

    def values(self) -> dict[str, Any]:  # type: ignore[override]
        """A snapshot: each cell's name and current value (a dict, so that
        two snapshots compare with ``==``)."""
        with self._lock:
            return {name: ref.value for name, ref in self.cells.items()}

    # A State is one program instance: equal only to itself, and hashable
    # (Mapping's __eq__ would compare arrays, whose truth is ambiguous).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "State(" + ", ".join(f"@{n}={r.value!r}" for n, r in self.cells.items()) + ")"

    # -------------------------------------------------------- transactions
    @contextlib.contextmanager
    def transaction(self, on_device: bool = False) -> Iterator[State]:
        """Hold the State for one call: no other thread's call runs until
        this one ends, and if it raises every cell gets its value back.
        The values are on the host for the call unless ``on_device`` (a
        compiled program, which reads them with ``device_value``)."""
        with self._lock:
            if not on_device and self._on_device:
                self._to_host()
            saved = [(ref, ref.value) for ref in self._cells.values()]
            saved_on_device = dict(self._on_device)
            try:
                yield self
            except BaseException:
                for ref, value in saved:
                    ref.value = value
                self._on_device.clear()
                self._on_device.update(saved_on_device)
                raise

    # ------------------------------------------------------------- files
    def arrays(self) -> dict[str, np.ndarray]:
        """Every cell's value as the arrays ``save`` writes: ``name``, or
        ``name.0``, ``name.1``... for the fields of a tuple, a key as its
        two ``uint32`` words (a snapshot, in declaration order)."""
        arrays: dict[str, np.ndarray] = {}
        for name, value in self.values().items():
            for leaf, array in _leaves(value, name):
                arrays[leaf] = array
        return arrays

    def set_arrays(self, arrays: Mapping[str, np.ndarray], where: str = "the arrays") -> State:
        """Replace every cell's value with the one in ``arrays`` (named as
        ``arrays()`` names them), all or none: each is checked against its
        cell first, and an array that is no cell's is refused (``where``
        names the source in messages)."""
        left = dict(arrays)
        new: dict[str, Any] = {}
        for name in self.cells:
            value = _assemble(left, name, self._types[name], where)
            new[name] = _checked(value, self._types[name], f"{where}: state cell @{name}")
        if left:
            extra = sorted(left)[0]
            raise StateError(f"{where}: holds {extra!r}, which is no cell of this program")
        with self._lock:
            for name, value in new.items():
                self.set_value(name, value)
        return self

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every cell's value to the ``.npz`` file ``path``."""
        arrays = self.arrays()
        try:
            with open(path, "wb") as handle:
                np.savez(handle, **arrays)
        except OSError as err:
            raise StateError(f"{os.fspath(path)}: cannot write: {err.strerror or err}") from None

    def load(self, path: str | os.PathLike[str]) -> State:
        """Replace every cell's value with the one saved in ``path`` (by
        ``save``), all or none: each array is checked against its cell first."""
        arrays = read_npz(path, StateError, "a .npz file of saved state")
        return self.set_arrays(arrays, os.fspath(path))


def read_npz(path: str | os.PathLike[str], error: type[Error], what: str) -> dict[str, Any]:
    """The arrays of the ``.npz`` file ``path``, read without pickles; any
    other file (one ``.npy`` array too: ``np.load`` returns it bare) is an
    ``error`` saying it is not ``what``."""
    where = os.fspath(path)
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise error(f"{where}: not {what} ({err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise error(f"{where}: not {what} (one array, not a .npz of named arrays)")
    try:
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise error(f"{where}: not {what} ({err})") from None


def check_cells(
    state: State,
    types: Mapping[str, Type | None],
    spans: Mapping[str, Span | None] | None = None,
) -> None:
    """Refuse, before a call reads it, a ``state`` whose cells do not hold
    what the program declares (``types``: each cell's type, None where the
    program does not say): a State made for another program whose cell has
    the same name and another type would otherwise fail deep inside the
    call, or inside compiled code. One check for the interpreter, compiled
    modules and loaded artifacts; located at the cell's declaration
    (``spans``) where the program has one."""
    for name, t in types.items():
        if t is None or name not in state._cells or name in state._on_device:
            # (a cell the State lacks is an UnknownCellError at its read; a
            # value a GPU program left on its device is that program's own,
            # and reading it here would copy it back at every call)
            continue
        value = state._cells[name].value
        if not _conforms(value, t):
            where = spans.get(name) if spans else None
            raise StateError(
                f"state cell @{name} is declared {astext(t)}, but the State holds "
                f"{describe_value(value)} (a State made for another program?)",
                where,
            )


def _conforms(value: Any, t: Type) -> bool:
    """Whether ``value`` is a value of type ``t`` as a cell holds it (a
    symbolic or unknown dimension matches any size)."""
    stack: list[tuple[Any, Type]] = [(value, t)]
    while stack:
        v, ty = stack.pop()
        if isinstance(ty, KeyType):
            ok = isinstance(v, PRNGKey)
        elif isinstance(ty, TupleType):
            ok = isinstance(v, tuple) and len(v) == len(ty.fields)
            if ok:
                stack.extend(zip(v, ty.fields, strict=True))
        elif isinstance(ty, TensorType):
            ok = (
                isinstance(v, np.ndarray | np.generic)
                and str(v.dtype) == ty.dtype
                and v.ndim == len(ty.shape)
                and all(
                    not isinstance(d, int) or d == n for d, n in zip(ty.shape, v.shape, strict=True)
                )
            )
        else:
            ok = True  # (an ADT, a function: not checked here)
        if not ok:
            return False
    return True


def _seeded_key(seed: int, index: int) -> PRNGKey:
    """As ``jax.random.PRNGKey(seed)`` for a Python int, folded with ``index``."""
    key = prng.key(int(seed))
    if index:
        key = prng.fold_in(key, index)
    return PRNGKey(key)


def type_of_value(value: Any) -> Type | None:
    """The type a value has (a cell's initial value, for a cell declared
    without one; an operator's argument, for the interpreter's size check),
    or None for a value it does not describe, such as an ADT."""
    if isinstance(value, PRNGKey):
        return KeyType()
    if isinstance(value, np.ndarray):
        return TensorType(tuple(value.shape), str(value.dtype))
    if isinstance(value, tuple):
        fields = [type_of_value(v) for v in value]
        if all(f is not None for f in fields):
            return TupleType(tuple(fields))  # type: ignore[arg-type]
    return None


def _checked(value: Any, t: Type | None, where: str) -> Any:
    """``value`` as the cell of type ``t`` holds it (a fresh array: later
    changes to the caller's buffer do not reach the state), or StateError."""
    if isinstance(t, KeyType):
        if isinstance(value, PRNGKey):
            return value
        array = _array(value)
        if array is not None and array.dtype == np.uint32 and array.shape == (2,):
            return PRNGKey(array)
        raise StateError(f"{where} holds a Key, got {describe_value(value)}")
    if isinstance(t, TupleType):
        if not isinstance(value, tuple | list) or len(value) != len(t.fields):
            raise StateError(f"{where} holds {astext(t)}, got {describe_value(value)}")
        return tuple(
            _checked(v, f, f"{where}, field {i}")
            for i, (v, f) in enumerate(zip(value, t.fields, strict=True))
        )
    if isinstance(t, TensorType):
        array = _array(value)
        if array is None:
            raise StateError(f"{where} holds {astext(t)}, got {describe_value(value)}")
        same_kind = str(array.dtype) == t.dtype and array.ndim == len(t.shape)
        if not same_kind or any(
            isinstance(d, int) and d != size for d, size in zip(t.shape, array.shape, strict=False)
        ):
            raise StateError(f"{where} holds {astext(t)}, got {type_text(array)}")
        return np.array(array, copy=True)
    return value


def _array(value: Any) -> np.ndarray | None:
    """``value`` as an ndarray when it is array-like (numpy, JAX, lists)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, PRNGKey | RefValue | str | bytes) or value is None:
        return None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return None
    return None if array.dtype == object else array


def _leaves(value: Any, name: str) -> list[tuple[str, np.ndarray]]:
    """The arrays ``save`` writes for one cell: ``name``, or ``name.0``... for
    the fields of a tuple, a key as its two words."""
    found: list[tuple[str, np.ndarray]] = []
    stack = [(name, value)]
    while stack:
        leaf, v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed([(f"{leaf}.{i}", f) for i, f in enumerate(v)]))
        elif isinstance(v, PRNGKey):
            found.append((leaf, np.array(v.data)))
        elif isinstance(v, np.ndarray):
            found.append((leaf, v))
        else:
            raise StateError(
                f"state cell @{name} holds {describe_value(v)}, which cannot be saved "
                "(only tensors, keys and tuples of them)"
            )
    return found


def _assemble(arrays: dict[str, np.ndarray], name: str, t: Type | None, where: str) -> Any:
    """The value of cell ``name`` from the saved arrays (taken out of
    ``arrays``), shaped as its type ``t``."""
    if isinstance(t, TupleType):
        return tuple(_assemble(arrays, f"{name}.{i}", f, where) for i, f in enumerate(t.fields))
    if name not in arrays:
        raise StateError(f"{where}: no value for {name!r}")
    return arrays.pop(name)
