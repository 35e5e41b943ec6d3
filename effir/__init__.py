"""effir: a Relay-style functional IR for effectful, dynamic ML programs."""

from effir.passes.analyses.infer_type import check

from . import (
    highlight,  # registers how notebooks show nodes and modules (HTML)
    ops,  # registers every operator
    transform,
)
from .autodiff import DifferentiationError, grad, value_and_grad
from .backends.interpreter import Closure, Interpreter, State, interpret
from .backends.tvm.runtime.errors import (  # no TVM import
    BackendError,
    CompileError,
    StateNotExportedWarning,
)
from .backends.tvm.runtime.importing import import_runtime as _import_runtime  # TVM's runtime
from .backends.tvm.runtime.importing import import_tvm as _import_tvm  # imports TVM when called
from .graph import visualize
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
from .ir.program import Program
from .runtime.device_array import DeviceArray
from .std import prelude
from .transform import (
    Pass,
    PassContext,
    PassError,
    Sequential,
    function_pass,
    module_pass,
    pipeline,
)

# ``effir.TypeError``: the name users expect; the class is TypeCheckError so
# that it never shadows Python's own TypeError inside effir.
TypeError = TypeCheckError

__version__ = "0.1.0"

# --- the Python frontend (docs/frontend.md) ---
from .frontend import (  # noqa: E402
    Cell,
    Cons,
    Key,
    List,
    ModuleBuilder,
    Nil,
    Option,
    Ref,
    ScriptFunction,
    Some,
    Tensor,
    TracedFunction,
    TupleOf,
    adt,
    call,
    cell,
    cond,
    emit,
    foreach,
    function,
    match,
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
    "Cons",
    "FrontendError",
    "Key",
    "List",
    "ModuleBuilder",
    "Nil",
    "Option",
    "Ref",
    "ScriptFunction",
    "Some",
    "Tensor",
    "TracedFunction",
    "TupleOf",
    "adt",
    "call",
    "cell",
    "cond",
    "emit",
    "foreach",
    "function",
    "match",
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

from . import optim, train  # noqa: E402  (effir.optim.SGD, effir.optim.Adam; effir.train)
from .frontend.packed import compile_packed, packed_scan  # noqa: E402  (variable-length batches)
from .train import TrainState, TrainStep, train_step  # noqa: E402  (docs/training.md)


def compile(
    module,
    target="llvm",
    pipeline=None,
    *,
    opt_level: int | None = None,
    dims=None,
    entry: str | None = None,
    verbose=None,
    precision: str = "float32",
):
    """``module`` (an ``IRModule``, or a function made by ``@effir.script``
    or ``effir.trace``) through the optimisation pipeline and compiled by
    TVM for ``target``: a callable ``CompiledModule``; ``compiled.report``
    says what was built and what it cost. Imports TVM on first use (its
    runtime alone when the program is in the build cache).

    - ``target``: ``"llvm"`` (this CPU), ``"cuda"``, or a TVM target string
      (``"llvm -mcpu=skylake-avx512"``, ``"cuda -arch=sm_90"``), dict or Target.
    - ``pipeline``: pipeline text (``"O2,fuse{max-fused-ops=16},lower-tvm"``)
      or a ``Pass``; by default the pipeline of ``opt_level``.
    - ``opt_level``: 0, 1 or 2 (default: the current ``PassContext``'s, 2).
    - ``dims``: bindings of the entry's symbolic dimensions to build now
      (``{"n": 8}`` or a list); other shapes build at their first call.
    - ``entry``: the function a call runs and ``dims`` are for (default:
      a module's ``main``, a function's own).
    - ``verbose``: progress lines (specialisations, kernels, times) on
      standard error (or the stream given); by default quiet in library
      calls and scripts, on in a Jupyter notebook.
    - ``precision``: how float32 matrix products multiply: ``"float32"``
      (default), ``"tf32"`` or ``"bfloat16"`` (operands rounded to that
      format, float32 accumulation; tensor cores on CUDA).

    See effir/backends/tvm/driver/compile.py and docs/backend.md."""
    _import_runtime()  # without the PyTorch import TVM's FFI makes (runtime/importing.py)
    from .backends.tvm.driver.compile import compile as compile_module  # lazy: TVM's runtime

    return compile_module(
        module,
        target,
        pipeline,
        opt_level=opt_level,
        dims=dims,
        entry=entry,
        verbose=verbose,
        precision=precision,
    )


def load(path, key=None):
    """A program exported by ``compiled.export(path)``, ready to call
    without effir's frontend or a compiler (effir/backends/tvm/runtime/artifact.py).
    With ``key``, the artifact must carry a signature made with that key at
    export (``compiled.export(path, key=key)``)."""
    _import_tvm()  # without the PyTorch import TVM's FFI makes (runtime/importing.py)
    from .backends.tvm.runtime.artifact import load as load_artifact  # lazy: imports TVM

    return load_artifact(path, key=key)


# --- importers (docs/importers.md): onnx is imported when a model is read ---
from . import importers  # noqa: E402  (its converters load at the first model read)
from .importers import ModelImportError  # noqa: E402


def from_onnx(model_or_path, *, opset=None, initializers="constants", input_types=None):
    """An ONNX model (a ``ModelProto``, its bytes or a path) as an
    ``IRModule`` whose ``@main`` takes the graph's inputs and returns its
    outputs: control flow kept (``Loop``/``Scan``/recurrent layers as
    ``cf.foreach``/``cf.while_loop``, ``If`` as ``if``), sequences as lists,
    random operators, dropout and training-mode batch norm on state cells.

    - ``opset``: read the model at this opset of the default domain
      (default: the model's own).
    - ``initializers``: ``"constants"`` (default) or ``"parameters"`` (the
      weights (float initializers of rank 1 or more, but batch
      norm's running statistics, which stay state) become parameters of
      ``@main`` after its inputs: what
      training with ``effir.grad`` needs; their values:
      ``effir.importers.onnx.initializer_values``).
    - ``input_types``: effir types for inputs the model does not type
      precisely enough, by name (for a sequence, its elements' type).

    What cannot be imported is a ``ModelImportError`` naming the node, its
    operator type and opset. See effir/importers/onnx/convert.py."""
    return importers.from_onnx(
        model_or_path, opset=opset, initializers=initializers, input_types=input_types
    )


def from_torch(exported_program, *, parameters="parameters"):
    """A ``torch.export.ExportedProgram`` as an ``IRModule`` whose ``@main``
    takes the program's user inputs (a ``torch.export.Dim`` a symbolic
    dimension of its name), then, with ``parameters="parameters"`` (the
    default), the module's parameters (``effir.importers.torch.
    parameter_values`` gives their arrays): what training with
    ``effir.grad`` needs; ``"constants"`` makes them constants. Buffers
    are constants, but those the program writes (batch norm's running
    statistics in training mode), which are state cells; ``cond``,
    ``while_loop``, ``scan``, ``map`` and the recurrent layers stay control
    flow; randomness draws from key cells. What cannot be imported is a
    ``ModelImportError`` naming the FX node, its target and the Python
    line torch recorded. See effir/importers/torch/program.py."""
    return importers.from_torch(exported_program, parameters=parameters)


__all__ = [
    "ArgumentError",
    "AttrError",
    "BackendError",
    "Closure",
    "CompileError",
    "DeviceArray",
    "DifferentiationError",
    "EffectError",
    "Error",
    "EvalError",
    "Interpreter",
    "Pass",
    "PassContext",
    "Program",
    "PassError",
    "Sequential",
    "State",
    "StateNotExportedWarning",
    "TypeCheckError",
    "TypeError",
    "check",
    "grad",
    "value_and_grad",
    "function_pass",
    "module_pass",
    "pipeline",
    "transform",
    "prelude",
    "compile",
    "compile_packed",
    "interpret",
    "load",
    "optim",
    "train",
    "train_step",
    "TrainStep",
    "TrainState",
    "visualize",
    "IRModule",
    "LinearityError",
    "ParseError",
    "StructuralMismatch",
    "WellFormedError",
    "ModelImportError",
    "from_onnx",
    "from_torch",
    "assert_structural_equal",
    "astext",
    "check_well_formed",
    "parse",
    "parse_expr",
    "structural_equal",
    "structural_hash",
    *_FRONTEND_NAMES,
]
