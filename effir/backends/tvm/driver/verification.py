"""[RULE COMPILE-VERIFY] ``effir.compile`` checks its pipeline's input and
output, not the program after every pass, unless it is asked to.

Why: verification after every pass (``PassContext(verify=True)``, the
default context's) type-checks each pass's output and runs the linearity
verifier on state-passing programs: it names the pass that broke a
program, which is what a pass's author needs, and costs a user about a
quarter of the pipeline (the MLP gradient of benchmarks/mlp_scan.py: 0.60
s of CPU verified, 0.46 s checked at the ends; the GRU language model's
training step: 0.48-0.66 s against 0.31-0.38 s).

What ``effir.compile`` does:

- a context the caller entered is used as it is (``with
  PassContext(verify=True): effir.compile(...)`` verifies every pass);
- with none entered, the pipeline runs in ``PassContext(verify=False)``,
  unless ``EFFIR_VERIFY_PASSES=1`` (the test suite sets it) asks for the
  verification of every pass;
- whenever passes are not verified, the input is type-checked before the
  first (its own errors, located, as verification reports them) and the
  output after the last: a pass that breaks the types is a ``PassError``
  naming the pipeline, located where the checker found the fault, instead
  of a program the backend would lower wrongly. Only per-pass
  verification runs the linearity verifier."""

from __future__ import annotations

import os

from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import Pass, PassContext, PassError

from ....ir.diagnostics import TypeCheckError, WellFormedError
from ....ir.module import IRModule

VERIFY_EACH_PASS = "EFFIR_VERIFY_PASSES"
"""The environment variable that, set to ``1``, makes ``effir.compile``
verify the program after every pass when no context is entered."""


def pipeline_context() -> PassContext:
    """The context ``effir.compile`` runs its pipeline in [RULE COMPILE-VERIFY]."""
    if PassContext.entered():
        return PassContext.current()
    return PassContext(verify=os.environ.get(VERIFY_EACH_PASS) == "1")


def run_pipeline(passes: Pass, module: IRModule, context: PassContext) -> IRModule:
    """``passes`` on ``module`` in ``context``; when it does not verify each
    pass, the input checked before and the output after [RULE COMPILE-VERIFY]."""
    if context.verify:
        return passes(module, context)
    check(module)  # the input's own errors, located
    result = passes(module, context)
    try:
        check(result)
    except (WellFormedError, TypeCheckError) as err:
        spelled = passes.spelled() or "(no pass)"
        raise PassError(
            f"the pipeline {spelled} produced an invalid program ({err.kind}): {err.message}",
            err.span,
            (*err.notes, f"{VERIFY_EACH_PASS}=1 verifies each pass and names the one at fault"),
        ) from None
    return result
