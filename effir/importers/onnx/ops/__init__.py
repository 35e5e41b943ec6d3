"""The converters, one module per family; importing registers them."""

from . import (  # noqa: F401
    control,
    effects,
    elementwise,
    nn,
    optionals,
    recurrent,
    sequences,
    shape,
)
