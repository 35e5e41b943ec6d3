"""``debug.print`` in compiled code: the packed function ``io.print``
calls, the labels it carries, and where a thread's prints go.

[RULE RUNTIME-PRINT] The sink gets exactly what the interpreter gives it: a
tensor as a numpy array, a ``Key`` as a ``PRNGKey``, a tuple as a tuple,
an ADT value as an ``ADTValue``. The VM holds a key as a ``uint32[2]``
tensor, a tuple as an ``Array`` and an ADT value as the ``Array`` of its
tag and fields (relax/adts.py [RULE LOWER-ADT]), so a print of anything but a
tensor carries its layout (``print_layout``, made from the value's type
when the program is lowered: JSON, with each ADT instance described once,
so a recursive type is finite), and ``effir.print`` rebuilds the value
from it (``rebuilt``, a loop over an explicit stack: a list printed is
as long as the program made it). A tensor's print carries no layout (the
C++ runner's ``effir.print`` takes a label and a tensor)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tvm_ffi

from effir.passes.analyses.type_solver import substitute

from ....ir.expr import TypeData
from ....ir.printer import astext
from ....ir.types import GlobalTypeVar, KeyType, TensorType, TupleType, Type, TypeCall
from ....runtime.values import ADTValue, PRNGKey
from ...interpreter import Sink, print_sink
from .errors import BackendError, site_message
from .tvm_runtime import to_numpy

PRINT_FUNCTION = "effir.print"
"""The packed function ``io.print`` calls: ``(label: str, value) -> None``."""

_ESCAPED_LABEL = "\x00effir-utf8-hex:"


def print_label(label: str) -> str:
    """A print label as TVM can hold it (UTF-8): a label that is not (a
    lone surrogate) is carried as the hex of its surrogate-passing bytes."""
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        return _ESCAPED_LABEL + label.encode("utf-8", "surrogatepass").hex()
    return label


def label_text(label: str) -> str:
    """The label ``print_label`` carried."""
    if label.startswith(_ESCAPED_LABEL):
        return bytes.fromhex(label.removeprefix(_ESCAPED_LABEL)).decode("utf-8", "surrogatepass")
    return label


_sinks = threading.local()


@contextlib.contextmanager
def printing_to(sink: Sink | None) -> Iterator[None]:
    """Send what ``io.print`` prints in this thread to ``sink``."""
    previous = getattr(_sinks, "current", None)
    _sinks.current = sink
    try:
        yield
    finally:
        _sinks.current = previous


def current_sink() -> Sink | None:
    """Where this thread's prints go (None: standard output)."""
    return getattr(_sinks, "current", None)


Layout = Any  # "tensor", "key", {"tuple": [Layout, ...]} or {"adt": name}


def print_layout(t: Type, type_defs: dict[str, TypeData]) -> str | None:
    """How the VM holds a printed value of type ``t`` (JSON; None for a
    tensor), or BackendError for a value compiled code cannot print (a
    function, a value of a type parameter)."""
    adts: dict[str, list[list[Any]]] = {}
    root: list[Layout] = [None]
    work: list[tuple[Type, list[Layout], int]] = [(t, root, 0)]
    while work:
        ty, into, slot = work.pop()
        if isinstance(ty, TensorType):
            into[slot] = "tensor"
        elif isinstance(ty, KeyType):
            into[slot] = "key"
        elif isinstance(ty, TupleType):
            fields: list[Layout] = [None] * len(ty.fields)
            into[slot] = {"tuple": fields}
            work.extend((f, fields, k) for k, f in enumerate(ty.fields))
        elif isinstance(ty, TypeCall | GlobalTypeVar) and _adt_name(ty) in type_defs:
            name = astext(ty)
            into[slot] = {"adt": name}
            if name in adts:
                continue
            definition = type_defs[_adt_name(ty)]
            args = ty.args if isinstance(ty, TypeCall) else ()
            mapping = dict(zip(definition.type_params, args, strict=False))
            adts[name] = []
            for ctor in definition.constructors:
                layouts: list[Layout] = [None] * len(ctor.inputs)
                adts[name].append([ctor.name, layouts])
                work.extend((substitute(f, mapping), layouts, k) for k, f in enumerate(ctor.inputs))
        else:
            raise BackendError(f"debug.print of a value of type {astext(ty)} is not compiled")
    if root[0] == "tensor":
        return None
    return json.dumps({"value": root[0], "adts": adts})


def _adt_name(t: TypeCall | GlobalTypeVar) -> str:
    return t.func.name if isinstance(t, TypeCall) else t.name


def _array(value: Any) -> np.ndarray:
    """A VM tensor as a numpy array on the host (a GPU's is copied)."""
    return to_numpy(value)


def rebuilt(value: Any, layout: str | None) -> Any:
    """The interpreter's value of the VM's ``value`` laid out as ``layout``
    [RULE RUNTIME-PRINT]: the nodes in pre-order, then built children first."""
    if layout is None:
        return _array(value)
    described = json.loads(layout)
    adts = described["adts"]
    nodes: list[tuple[Layout, Any]] = []
    children: list[list[int]] = []
    work: list[tuple[Layout, Any, int]] = [(described["value"], value, -1)]
    while work:
        lay, obj, parent = work.pop()
        index = len(nodes)
        nodes.append((lay, obj))
        children.append([])
        if parent >= 0:
            children[parent].append(index)
        if isinstance(lay, dict):
            parts = list(obj)
            if "adt" in lay:
                _, field_layouts = adts[lay["adt"]][int(_array(parts[0]))]
                parts = parts[1:]
            else:
                field_layouts = lay["tuple"]
            # pushed last first: each parent's children are listed in order
            work.extend(
                (f, p, index) for f, p in reversed(list(zip(field_layouts, parts, strict=True)))
            )
    values: list[Any] = [None] * len(nodes)
    for index in range(len(nodes) - 1, -1, -1):
        lay, obj = nodes[index]
        fields = tuple(values[k] for k in children[index])
        if lay == "tensor":
            values[index] = _array(obj)
        elif lay == "key":
            values[index] = PRNGKey(_array(obj))
        elif "tuple" in lay:
            values[index] = fields
        else:
            name, _ = adts[lay["adt"]][int(_array(list(obj)[0]))]
            values[index] = ADTValue(name, fields)
    return values[0]


def _print(label: str, value: Any, layout: str | None = None) -> None:
    """``effir.print``: the packed function ``io.print`` calls, with the
    value's layout where it is not a tensor [RULE RUNTIME-PRINT]. The sink (the
    interpreter's default one when none was given) gets what the
    interpreter gives it; a failure (a label standard output cannot
    encode) is reported as the interpreter's: ``debug.print: ...``."""
    sink = current_sink()
    text = label_text(str(label))
    printed = rebuilt(value, None if layout is None else str(layout))
    if sink is None:
        try:
            print_sink(text, printed)
        except (ValueError, OSError) as err:
            raise RuntimeError(site_message("debug.print", str(err), None)) from None
    else:
        sink(text, printed)


tvm_ffi.register_global_func(PRINT_FUNCTION, _print, override=True)
