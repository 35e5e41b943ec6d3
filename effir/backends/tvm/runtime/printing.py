"""``debug.print`` in compiled code: the packed function ``io.print``
calls, the labels it carries, and where a thread's prints go."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from ...interpreter import Sink
from .errors import site_message

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


def _print(label: str, value: Any) -> None:
    """``effir.print``: the packed function ``io.print`` calls. A failure
    (a label standard output cannot encode) is reported as the
    interpreter's: ``debug.print: ...``."""
    sink = current_sink()
    # a value printed by GPU code is in the GPU's memory: copied to the host
    on_host = value.device.dlpack_device_type() == tvm.cpu(0).dlpack_device_type()
    array = np.from_dlpack(value).copy() if on_host else value.numpy()
    text = label_text(str(label))
    if sink is None:
        try:
            print(f"{text}: {array}" if text else array)
        except (ValueError, OSError) as err:
            raise RuntimeError(site_message("debug.print", str(err), None)) from None
    else:
        sink(text, array)


tvm_ffi.register_global_func(PRINT_FUNCTION, _print, override=True)
