"""The converters, by family (each module registers its operators)."""

from . import control, effects, elementwise, nn, recurrent, shape
