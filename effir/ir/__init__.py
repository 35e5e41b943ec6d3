"""effir's IR: nodes, types, modules, the operator registry, text format,
structural equality and hashing, traversal, and the well-formedness check."""

from .diagnostics import (
    ArgumentError,
    AttrError,
    EffectError,
    Error,
    EvalError,
    FrontendError,
    LinearityError,
    MissingRuleError,
    ParseError,
    Source,
    Span,
    TypeCheckError,
    WellFormedError,
)
from .evaluator import Evaluator
from .expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalCell,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
    const,
    is_atom,
)
from .expr_functor import ExprFunctor
from .functor import Mutator, Visitor, after, on
from .module import IRModule
from .node import EMPTY_ATTRS, Attrs, Node
from .op import AttrSpec, OpDef, all_ops, call_op, get_op, lookup_op, op_def, register_op
from .parser import parse, parse_expr
from .printer import astext
from .structural import (
    StructuralMismatch,
    assert_structural_equal,
    structural_diff,
    structural_equal,
    structural_hash,
)
from .types import (
    ANY,
    DTYPES,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    KeyType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    scalar_type,
)
from .visitor import post_order, pre_order
from .well_formed import check_well_formed

__all__ = [name for name in dir() if not name.startswith("_")]
