"""The converters, one module per family; importing registers them."""

from . import (
    control,
    effects,
    elementwise,
    nn,
    optionals,
    recurrent,
    sequences,
    shape,
)
