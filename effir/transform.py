"""effir.transform: the pass API (as TVM's ``tvm.transform``).

Write a pass as a frozen dataclass (its fields are its options), or with a
decorator that makes one of a function and registers it where it is
defined, so pipeline text, ``effir opt`` and ``effir.compile`` find it by
name::

    @effir.transform.function_pass(name="add-zero", requires={"anf"})
    def add_zero(fn, module, context):
        ...  # a Function in, a Function out

    with effir.PassContext(instruments=[effir.transform.PrintIR("after-change")]):
        out = effir.pipeline("O2,add-zero,fuse{max-fused-ops=32}")(module)

The pieces (docs/passes.md): ``Pass`` (a named ``IRModule -> IRModule``
with the invariants it requires, establishes and preserves, and its
options; subclass ``ModulePass`` or ``FunctionPass``, options by
``option(...)``),
``Sequential`` (passes in order, itself a pass), ``PassContext`` (per
thread: instruments, verification, per-pass options, ``opt_level``),
``pipeline(text)``, the registry (``register_pass``, ``lookup_pass``,
``registered_passes``), the instruments ``Timing`` and ``PrintIR``, and
``load_pass_file`` (a Python file of your passes: ``effir opt --load``).
"""

from __future__ import annotations

from effir.passes.infra.instruments import PrintIR, Timing
from effir.passes.infra.pass_files import PassFileError, load_pass_file
from effir.passes.infra.pipeline import (
    STANDARD_PIPELINES,
    pipeline,
    run_pipeline,
    standard_pipeline,
)
from effir.passes.infra.transform import (
    BUILTIN_PASSES,
    INVARIANTS,
    OPT_LEVELS,
    FunctionPass,
    Instrument,
    ModulePass,
    Option,
    Pass,
    PassContext,
    PassError,
    RegistrationError,
    Sequential,
    as_pass,
    function_pass,
    lookup_pass,
    module_pass,
    option,
    register_pass,
    registered_passes,
    unregister_pass,
)

__all__ = [
    "BUILTIN_PASSES",
    "INVARIANTS",
    "OPT_LEVELS",
    "STANDARD_PIPELINES",
    "Instrument",
    "FunctionPass",
    "ModulePass",
    "Option",
    "Pass",
    "PassContext",
    "PassError",
    "PassFileError",
    "PrintIR",
    "RegistrationError",
    "Sequential",
    "Timing",
    "as_pass",
    "function_pass",
    "lookup_pass",
    "load_pass_file",
    "module_pass",
    "option",
    "pipeline",
    "register_pass",
    "registered_passes",
    "run_pipeline",
    "standard_pipeline",
    "unregister_pass",
]
