"""effir: a Relay-style functional IR for effectful, dynamic ML programs."""

from . import ops  # noqa: F401  (registers every operator)
from .ir import (
    AttrError,
    Error,
    IRModule,
    ParseError,
    StructuralMismatch,
    WellFormedError,
    assert_structural_equal,
    astext,
    check_well_formed,
    parse,
    parse_expr,
    structural_equal,
    structural_hash,
)

__version__ = "0.1.0"

__all__ = [
    "AttrError",
    "Error",
    "IRModule",
    "ParseError",
    "StructuralMismatch",
    "WellFormedError",
    "assert_structural_equal",
    "astext",
    "check_well_formed",
    "parse",
    "parse_expr",
    "structural_equal",
    "structural_hash",
]
