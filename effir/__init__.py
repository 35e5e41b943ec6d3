"""effir: a Relay-style functional IR for effectful, dynamic ML programs."""

from . import ops  # noqa: F401  (registers every operator)
from .backends.interpreter import Closure, Interpreter, State, interpret
from .ir import (
    AttrError,
    EffectError,
    Error,
    EvalError,
    IRModule,
    LinearityError,
    ParseError,
    StructuralMismatch,
    TypeCheckError,
    WellFormedError,
    assert_structural_equal,
    astext,
    check_well_formed,
    parse,
    parse_expr,
    structural_equal,
    structural_hash,
)
from .passes.infer_type import check

# ``effir.TypeError``: the name users expect; the class is TypeCheckError so
# that it never shadows Python's own TypeError inside effir.
TypeError = TypeCheckError  # noqa: A001

__version__ = "0.1.0"

__all__ = [
    "AttrError",
    "Closure",
    "EffectError",
    "Error",
    "EvalError",
    "Interpreter",
    "State",
    "TypeCheckError",
    "TypeError",
    "check",
    "interpret",
    "IRModule",
    "LinearityError",
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
