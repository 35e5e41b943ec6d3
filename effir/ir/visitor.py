"""The names older code imports: ``pre_order``/``post_order`` and the free
variable analyses, now on ``effir.ir.functor`` and ``effir.ir.analysis``
(write new code against those). Rewrites are ``Mutator`` subclasses with
``@on`` hooks (``effir.ir.functor``).
"""

from __future__ import annotations

from .analysis import block_heads, free_vars, free_vars_by_function
from .functor import post_order, pre_order

__all__ = [
    "block_heads",
    "free_vars",
    "free_vars_by_function",
    "post_order",
    "pre_order",
]
