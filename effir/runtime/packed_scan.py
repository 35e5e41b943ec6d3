"""What a scan compiled for packed batches is (``compile_packed``), and the
error of arguments that are not a packed batch: shared by the frontend's
``packed_scan`` and the backend's packed loop (backends/tvm/loop/cpu/packed.py),
so that neither imports the other."""

from __future__ import annotations

from typing import Any

from ..ir.diagnostics import Error


class PackedScanError(Error):
    """Arguments of ``packed_scan`` that do not describe a packed batch."""

    kind = "packed scan error"


class PackedScan:
    """A scan compiled for packed batches (``compile_packed``):
    ``scan(xs, lengths, h0, *captured)`` gives the final states itself."""

    def __call__(self, xs: Any, lengths: Any, h0: Any, *captured: Any, **options: Any) -> Any:
        raise NotImplementedError
