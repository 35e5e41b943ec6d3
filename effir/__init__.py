"""effir: a Relay-style functional IR for effectful, dynamic ML programs."""

from . import ops  # noqa: F401  (registers every operator)
from .backends.interpreter import Closure, Interpreter, State, interpret
from .backends.tvm.errors import BackendError, CompileError  # no TVM import
from .ir import (
    ArgumentError,
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
from .std import prelude

# ``effir.TypeError``: the name users expect; the class is TypeCheckError so
# that it never shadows Python's own TypeError inside effir.
TypeError = TypeCheckError  # noqa: A001

__version__ = "0.1.0"

# --- the Python frontend (issue 15, docs/frontend.md) ---
from .frontend import (  # noqa: E402
    Cell,
    Key,
    ModuleBuilder,
    Ref,
    ScriptFunction,
    Tensor,
    TracedFunction,
    TupleOf,
    call,
    cell,
    cond,
    emit,
    foreach,
    function,
    op,
    read,
    script,
    trace,
    var,
    while_loop,
    write,
)
from .ir import FrontendError  # noqa: E402

random = op.random  # ``effir.random.key(0)``
nn = op.nn

_FRONTEND_NAMES = [
    "Cell",
    "FrontendError",
    "Key",
    "ModuleBuilder",
    "Ref",
    "ScriptFunction",
    "Tensor",
    "TracedFunction",
    "TupleOf",
    "call",
    "cell",
    "cond",
    "emit",
    "foreach",
    "function",
    "nn",
    "op",
    "random",
    "read",
    "script",
    "trace",
    "var",
    "while_loop",
    "write",
]
# --- end of the Python frontend ---


def compile(module: IRModule, target: str = "llvm", **options):  # noqa: A001
    """``module`` through the optimisation pipeline and compiled by TVM for
    ``target`` ("llvm": this CPU; "cuda"): a callable ``CompiledModule``
    (effir/backends/tvm/compile.py). Imports TVM on first use."""
    from .backends.tvm.compile import compile as compile_module

    return compile_module(module, target, **options)


def load(path, key=None):
    """A program exported by ``compiled.export(path)``, ready to call
    without effir's frontend or a compiler (effir/backends/tvm/artifact.py).
    With ``key``, the artifact must carry a signature made with that key at
    export (``compiled.export(path, key=key)``)."""
    from .backends.tvm.artifact import load as load_artifact

    return load_artifact(path, key=key)


__all__ = [
    "ArgumentError",
    "AttrError",
    "BackendError",
    "Closure",
    "CompileError",
    "EffectError",
    "Error",
    "EvalError",
    "Interpreter",
    "State",
    "TypeCheckError",
    "TypeError",
    "check",
    "prelude",
    "compile",
    "interpret",
    "load",
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
    *_FRONTEND_NAMES,
]
