"""How nodes and modules show themselves: as text (``str``) and as HTML
(Jupyter's ``_repr_html_``).

The printer and the highlighter sit above the node classes (they import
them), so the nodes cannot import them back; each registers its rendering
here when it is imported (the printer by ``effir.ir``, the highlighter by
``effir``), as TVM's node reflection finds the printer through a registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Render = Callable[[Any], str]

_RENDERERS: dict[str, Render] = {}


def register_renderer(kind: str, render: Render) -> None:
    """Make ``render`` the way a node or module is shown as ``kind`` ("text"
    or "html")."""
    _RENDERERS[kind] = render


def render(kind: str, obj: Any) -> str | None:
    """``obj`` rendered as ``kind``, or None when no renderer is registered
    (Jupyter then falls back to the text)."""
    renderer = _RENDERERS.get(kind)
    return None if renderer is None else renderer(obj)
