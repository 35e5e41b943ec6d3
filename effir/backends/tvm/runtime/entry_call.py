"""One call of a compiled entry: the arguments bound and checked by its
``Signature``, the cells' values taken from a ``State`` after them, the
VM function run on the device of its ``Placement``, and the new values
of the cells written back, all under the State's lock.

Apart from signature.py, which says what an entry takes and gives (and
which placement.py converts values with): this module builds on both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ....ir.diagnostics import Span
from ....ir.types import Type
from ....ops.effects import WORLD
from ...state import check_cells
from .placement import Placement
from .signature import Dims, Signature, TupleSpec, type_of


def call_entry(
    function: Callable[[Dims], Any],
    signature: Signature,
    args: tuple[Any, ...],
    cells: Any,
    placement: Placement,
    named: dict[str, Any] | None = None,
    entry: str = "main",
    any_alignment: bool = True,
    keep: bool = False,
    cell_spans: Mapping[str, Span | None] | None = None,
) -> Any:
    """Run an entry as the interpreter runs it: the cells' values (from
    ``cells``, a ``State``) follow the arguments, the new values it returns
    are written back, the user's result is returned. ``function(dims)`` is
    the VM function for the arguments' binding of the dimensions;
    ``any_alignment``: whether it takes arrays at any address (``to_tvm``);
    ``placement``: the device it runs on (runtime/placement.py); ``keep``:
    the results left there (``DeviceArray``). The cells are checked
    against the types the entry declares for them first (``check_cells``,
    located at ``cell_spans``)."""
    user, dims = signature.bind(args, named, entry, placement.take)
    # One call at a time on one state: the lock is held from the read of
    # the cells to the write-back of their new values (effir/backends/state.py).
    with cells.transaction(on_device=not placement.on_host):
        return _run_entry(
            function, signature, user, dims, cells, any_alignment, placement, keep, cell_spans
        )


@functools.lru_cache(maxsize=64)
def _cell_types(signature: Signature) -> dict[str, Type]:
    """The type the entry declares for each cell it reads (made once per
    signature: every call checks its State against them)."""
    declared = signature.params[len(signature.params) - len(signature.state_in) :]
    pairs = zip(signature.state_in, declared, strict=True)
    return {cell: type_of(spec) for cell, (_, spec) in pairs if cell != WORLD}


def _run_entry(
    function: Callable[[Dims], Any],
    signature: Signature,
    user: tuple[Any, ...],
    dims: Dims,
    cells: Any,
    any_alignment: bool,
    placement: Placement,
    keep: bool,
    cell_spans: Mapping[str, Span | None] | None,
) -> Any:
    run = function(dims)  # first: it says when this machine has no such device
    check_cells(cells, _cell_types(signature), cell_spans)
    values = tuple(
        placement.world() if c == WORLD else cells.device_value(c) for c in signature.state_in
    )
    inputs = (*user, *values)
    adts = signature.types
    tensors = [
        placement.argument(v, spec, any_alignment, adts)
        for v, (_, spec) in zip(inputs, signature.params, strict=True)
    ]
    result = run(*tensors)
    if not signature.state_out:
        return placement.result(result, signature.result, keep, adts)
    specs = signature.result
    assert isinstance(specs, TupleSpec)
    for cell, value, spec in zip(signature.state_out, result[1:], specs.fields[1:], strict=True):
        if cell != WORLD:
            placement.store(cells, cell, value, spec)
    return placement.result(result[0], specs.fields[0], keep, adts)
