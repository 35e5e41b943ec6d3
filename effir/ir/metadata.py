"""The ``#[metadata]`` section: tensor constants too large (or too exotic)
to print inline, encoded and decoded side by side so the two stay exact
inverses.

The section is JSON: ``{"relay.Constant": [{"dtype": ..., "shape": [...],
"data": base64 of the little-endian bytes}, ...]}``; the text refers to entry
``i`` as ``meta[relay.Constant][i]``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math

import numpy as np

from .diagnostics import ParseError, Source, Span
from .expr import Constant
from .types import DTYPES

KIND = "relay.Constant"


def encode(constants: list[Constant]) -> str:
    """The section (starting with ``#[metadata]``) for ``constants``, or ''."""
    if not constants:
        return ""
    entries = []
    for constant in constants:
        data = np.asarray(constant.data, order="C")  # ascontiguousarray makes 0-d 1-d
        raw = data.astype(data.dtype.newbyteorder("<")).tobytes()
        entry = {
            "dtype": str(data.dtype),
            "shape": list(data.shape),
            "data": base64.b64encode(raw).decode("ascii"),
        }
        entries.append("    " + json.dumps(entry))
    return f'\n#[metadata]\n{{\n  "{KIND}": [\n' + ",\n".join(entries) + "\n  ]\n}\n"


def decode(text: str, offset: int, source: Source, header: Span) -> list[Constant]:
    """The constants of a section whose JSON ``text`` starts at character
    ``offset`` of ``source``; a located ParseError if it is malformed."""

    def fail(message: str, at: int | None = None) -> ParseError:
        return ParseError(message, header if at is None else Span(source, at, at + 1))

    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise fail(f"malformed metadata section: {err.msg}", offset + err.pos) from None
    except (RecursionError, ValueError) as err:
        raise fail(f"malformed metadata section: {err}") from None
    if not isinstance(data, dict):
        raise fail("the metadata section must be a JSON object")
    for key in data:
        if key != KIND:
            raise fail(f"unknown metadata kind {key!r}: effir stores only {KIND!r}")
    entries = data.get(KIND, [])
    if not isinstance(entries, list):
        raise fail(f"metadata {KIND!r} must be a list")
    constants = []
    for i, entry in enumerate(entries):
        where = f"metadata constant {i}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data"}:
            raise fail(f"{where} must have exactly the keys 'dtype', 'shape' and 'data'")
        dtype, shape, payload = entry["dtype"], entry["shape"], entry["data"]
        if dtype not in DTYPES:
            raise fail(f"{where} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape
        ):
            raise fail(f"{where} has a malformed shape {shape!r}")
        if not isinstance(payload, str):
            raise fail(f"{where}: 'data' must be a base64 string")
        try:
            raw = base64.b64decode(payload.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise fail(f"{where}: 'data' is not valid base64") from None
        little = np.dtype(dtype).newbyteorder("<")
        count = math.prod(shape)  # Python ints: np.prod would wrap around in int64
        if len(raw) != count * little.itemsize:
            raise fail(
                f"{where}: {len(raw)} bytes of data for shape {tuple(shape)} of {dtype} "
                f"(expected {count * little.itemsize})"
            )
        array = np.frombuffer(raw, dtype=little).astype(np.dtype(dtype)).reshape(shape)
        constants.append(Constant(array))
    return constants
