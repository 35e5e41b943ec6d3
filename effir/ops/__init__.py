"""effir's operator set, one module per family (docs/semantics.md §5, "Operators").

Importing this package registers every operator. Each family module defines
its operators once: name, arity, attributes, effect kind and traits; later
layers add their rules (type relation, numpy implementation, TVM lowering)
beside these definitions.
"""

from . import control, creation, dynamic, effects, elementwise, indexing, nn, random, reduce, shape

__all__ = [
    "control",
    "creation",
    "dynamic",
    "effects",
    "elementwise",
    "nn",
    "random",
    "reduce",
    "shape",
]
