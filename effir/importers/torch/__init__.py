"""``effir.from_torch``: a ``torch.export`` program as an effir module
(docs/importers.md). torch is imported only when a program is read."""

from __future__ import annotations

from .program import from_torch, parameter_values

__all__ = ["from_torch", "parameter_values"]
