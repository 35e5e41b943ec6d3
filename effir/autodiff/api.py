"""``effir.grad``, ``effir.value_and_grad`` and the ``grad`` pass.

Each takes a module and returns it with one function added,
``@<entry>_grad`` (``effir.autodiff.entry`` says what it returns), plus a
``@<g>_vjp`` per global function the entry calls with a gradient flowing
through it. An A1 program (global cells) goes through ``explicate`` and
``state-passing`` first (the ``grad`` pass requires an A2 program in
A-normal form and names those passes as its prelude, which the pass
context runs; ``effir.grad`` runs them itself), so the result is A2: randomness and running
statistics are explicit inputs and outputs, threaded and never
differentiated. The gradient program is an ordinary effir program: it is
optimised, interpreted and compiled like any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from effir.passes.analyses.anf_sharing import fresh_binders
from effir.passes.analyses.infer_type import check
from effir.passes.analyses.verify_linear.verifier import REPLAYS_KEYS
from effir.passes.infra.pipeline import pipeline
from effir.passes.infra.transform import INVARIANTS, Option, module_pass
from effir.passes.transforms.partial_eval import partial_eval

from ..ir.builder import fresh_name
from ..ir.expr import Function
from ..ir.module import IRModule
from ..ir.node import Attrs
from ..ir.program import Program, resolve
from ..ir.vjp import DifferentiationError
from . import loop_rule  # noqa: F401  (registers the loops' binding rule on import)
from .checkpoint import CheckpointPolicy, policy_of
from .differentiator import Differentiator
from .entry import build_grad
from .reverse import finish
from .specialise import SPECIALISE
from .unpad import unpad_while_loops


def grad_module(
    module: IRModule,
    entry: str | None = None,
    wrt: Sequence[str] | str | None = None,
    checkpoint: str | CheckpointPolicy = "none",
    output: int | None = None,
    with_value: bool = False,
    name: str | None = None,
    specialise: bool = True,
) -> IRModule:
    """``module`` with the gradient function of ``@entry`` added."""
    return grad_program(module, entry, wrt, checkpoint, output, with_value, name, specialise).module


def grad_program(
    module: IRModule | Any,
    entry: str | None = None,
    wrt: Sequence[str] | str | None = None,
    checkpoint: str | CheckpointPolicy = "none",
    output: int | None = None,
    with_value: bool = False,
    name: str | None = None,
    specialise: bool = True,
) -> Program:
    """``module`` with the gradient function of ``@entry`` added, and that
    function's name."""
    module, entry = resolve(module, entry, DifferentiationError, "effir.grad")
    if any(INVARIANTS[i](module) is not None for i in GRAD_REQUIRES):
        module = pipeline(GRAD_PRELUDE)(module)
    return _differentiate(module, entry, wrt, checkpoint, output, with_value, name, specialise)


GRAD_REQUIRES = frozenset({"anf", "a2"})
"""What differentiation needs of its input: A-normal form, state passed."""

GRAD_PRELUDE = "to-anf,explicate,state-passing"
"""The passes that make any program what differentiation needs (the grad
pass's prelude; ``grad_program`` runs them for the API)."""


def _differentiate(
    module: IRModule,
    entry: str,
    wrt: Sequence[str] | str | None,
    checkpoint: str | CheckpointPolicy,
    output: int | None,
    with_value: bool,
    name: str | None,
    specialise: bool,
) -> Program:
    """``grad_program`` on an A2 module in A-normal form."""
    policy = policy_of(checkpoint)
    if specialise:
        module = check(partial_eval(module))
        # what partial evaluation left higher-order: a closure passed to a
        # recursive function (specialise.py)
        module = SPECIALISE.with_options(entry=entry)(module)
    # a padded while_loop as its exact loop and the padding (unpad.py)
    module = unpad_while_loops(check(module))
    check(module)
    # A typed copy whose nodes the gradient functions take over, so that
    # the module's own functions stay as they are.
    work = IRModule(
        {n: fresh_binders(f) for n, f in module.functions.items()},
        module.type_defs,
        module.cells,
    )
    check(work)
    taken = set(module.functions) | set(module.cells)
    target = name or fresh_name(f"{entry}_grad", taken)
    taken.add(target)
    ad = Differentiator(work, policy, taken)
    grad_fn = build_grad(ad, work.functions[entry], wrt, output, with_value)
    vjps = finish(ad)
    ct_datas, ct_adds = ad.adts.finish()
    out = module.with_function(target, replays_keys(grad_fn))
    for vjp_name, fn in vjps.items():
        out = out.with_function(vjp_name, replays_keys(fn))
    if ad.tape is not None:
        out = out.with_type_def(ad.tape)
    for data in ct_datas:  # the cotangent ADTs and their add functions (adt.py)
        out = out.with_type_def(data)
    for add_name, fn in ct_adds.items():
        out = out.with_function(add_name, fn)
    check(out)
    return Program(out, target)


def replays_keys(fn: Function) -> Function:
    """``fn`` marked as reading keys again on purpose: its backward applies a
    random operator's rule with the forward's key (dropout's mask drawn
    again), so the linearity verifier does not count that as key reuse
    (``verify_linear.REPLAYS_KEYS``; the entry's own function stays checked)."""
    attrs = Attrs(tuple(fn.attrs.items()) + ((REPLAYS_KEYS, True),))
    return dataclasses.replace(fn, attrs=attrs)


def grad(
    module: IRModule | Any,
    entry: str | None = None,
    wrt: Sequence[str] | str | None = None,
    checkpoint: str | CheckpointPolicy = "none",
    output: int | None = None,
    specialise: bool = True,
) -> IRModule | Program:
    """``module`` with ``@<entry>_grad``, which returns the gradients of the
    entry's scalar result (or of field ``output`` of its tuple result;
    a non-scalar one takes its cotangent as the parameter ``%cotangent``)
    with respect to the parameters named in ``wrt`` (default: every float
    parameter that is not state), as a tuple in ``wrt``'s order; a
    state-passing entry returns ``(grads, new state...)``.

    ``checkpoint``: ``"none"`` (store every intermediate a loop's backward
    needs), ``"loop"`` (store each step's carried state, recompute the
    step), ``"sqrt"`` (store every ceil(sqrt(T))-th carry, recompute
    segments), ``"dots"`` (store the matrix products, recompute the
    elementwise work), or a ``CheckpointPolicy`` (``effir.autodiff.checkpoint``:
    ``SaveNames``, ``RecomputeNames``, one of the user's); the gradients
    are bit-identical.

    ``specialise``: partially evaluate the program first (``partial-eval``:
    known closures and small global functions inlined, static values
    folded, loops of at most 8 static steps unrolled), so that the gradient
    program has no ``@g_vjp`` closure-returning globals, which the TVM
    backend cannot compile when they have symbolic dimensions; then give a
    function a known closure or global function is passed to (a recursive
    ``@foldl``) a copy specialised on it (``specialise.py``); False
    differentiates the program as it is. See docs/autodiff.md.

    ``module`` may be a function made by ``@effir.script`` or
    ``effir.trace`` (its own function is then the default entry): the
    result is then a ``Program`` whose entry is the gradient function,
    which ``effir.compile`` and ``effir.interpret`` run as they are."""
    return _as_given(
        module,
        lambda m, e: grad_program(m, e, wrt, checkpoint, output, False, specialise=specialise),
        entry,
    )


def value_and_grad(
    module: IRModule | Any,
    entry: str | None = None,
    wrt: Sequence[str] | str | None = None,
    checkpoint: str | CheckpointPolicy = "none",
    output: int | None = None,
    specialise: bool = True,
) -> IRModule | Program:
    """As ``grad``, but ``@<entry>_grad`` returns ``(value, grads)`` as the
    user's result: ``((value, grads), new state...)`` for a state-passing
    entry, ``(value, grads)`` otherwise; ``value`` is the entry's result."""
    return _as_given(
        module,
        lambda m, e: grad_program(m, e, wrt, checkpoint, output, True, specialise=specialise),
        entry,
    )


def _as_given(
    program: IRModule | Any,
    differentiate: Callable[[IRModule, str], Program],
    entry: str | None,
) -> IRModule | Program:
    """``differentiate(module, entry)`` for what the user gave: the module
    for a module; for a function, the ``Program`` running its gradient."""
    module, name = resolve(program, entry, DifferentiationError, "effir.grad")
    out = differentiate(module, name)
    return out.module if isinstance(program, IRModule) else out


@module_pass(
    name="grad",
    requires=GRAD_REQUIRES,
    preserves=GRAD_REQUIRES,  # the gradient functions are A2 and in A-normal form
    prelude=GRAD_PRELUDE,
    options={
        "entry": "the function to differentiate",
        "wrt": "comma-separated parameter names (empty: every float parameter)",
        "checkpoint": "a checkpoint policy by name: none, loop, sqrt or dots",
        "value": "also return the entry's result",
        "output": Option(
            "the field of a tuple result to differentiate (-1: the result)", minimum=-1
        ),
        "specialise": "partially evaluate first (inline closures and small functions) and "
        "specialise functions on their function arguments",
    },
)
def grad_pass(
    module: IRModule,
    entry: str = "main",
    wrt: str = "",
    checkpoint: str = "none",
    value: bool = True,
    specialise: bool = True,
    output: int = -1,
) -> IRModule:
    """Adds @<entry>_grad, the reverse-mode gradient of @entry (docs/autodiff.md)."""
    names = [w.strip() for w in wrt.split(",") if w.strip()] or None
    field = None if output == -1 else output
    module, entry = resolve(module, entry, DifferentiationError, "effir.grad")
    return _differentiate(module, entry, names, checkpoint, field, value, None, specialise).module
