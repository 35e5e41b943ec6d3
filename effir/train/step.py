"""``effir.train_step``: forward, backward, the optimiser's update, the next
PRNG key and the running statistics as one program, run as one call.

A JAX user writes ``jit`` of a function calling ``value_and_grad`` and
optax's ``update``; a PyTorch user ``loss.backward()`` then
``optimizer.step()``. In effir the whole step is one effir function, so it
is optimised and compiled as one program and one call does everything:

    step = effir.train_step(loss, effir.optim.Adam(lr=1e-3), wrt=["w", "b"])
    run = step.init({"w": w, "b": b}, seed=0)     # parameters, Adam's state, cells
    value = step(run, x, y)                       # one compiled call; run moves on
    run.save("ckpt.npz")                          # ... run = step.restore("ckpt.npz")

The convention (``TrainStep`` runs any module's function that follows it,
however it was built): ``@train_step(data..., params..., opt_state...)``
returns ``(value, (params'...), (opt_state'...))``, the cells it uses
passed in and out as state passing passes them (A2: docs/passes.md), so
the key and the statistics move on in the run's ``effir.State``. ``data``
are the loss's parameters that are not trained, in order; ``params`` the
trained ones, in ``wrt``'s order; ``value`` the loss's result.

How ``train_step_module`` builds it: ``value_and_grad`` of the loss (which
takes the module to A2), then a function that calls the gradient function
with the cells' values and applies ``optimizer.update`` to the parameters
and gradients, written with ``effir.op`` (effir/optim/), so the update is
effir code the pipeline fuses with the rest.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from effir.passes.analyses.infer_type import check

from .. import frontend
from ..autodiff.api import grad_module
from ..backends.interpreter import interpret_a2
from ..backends.state import State, StateError
from ..backends.tvm.runtime.importing import import_runtime
from ..ir.builder import fresh_name
from ..ir.diagnostics import Error
from ..ir.expr import Function, GlobalVar
from ..ir.module import IRModule
from ..ir.node import Attrs
from ..ir.types import TensorType, Type
from ..optim.base import Optimizer
from ..runtime.arguments import bind_arguments
from .checkpoint import Checkpoint, CheckpointError, read_checkpoint, save_checkpoint


class TrainingError(Error):
    """A training step asked for wrongly: parameters that are not the
    loss's, arrays of the wrong shape, a loss that is no function."""

    kind = "training error"


@dataclass(frozen=True)
class StepSignature:
    """What a training-step function takes: the names of its data
    parameters and trained parameters (in order), the types of both, and
    the optimiser's state's types."""

    data: tuple[str, ...]
    wrt: tuple[str, ...]
    param_types: tuple[TensorType, ...]
    opt_types: tuple[TensorType, ...]


# ------------------------------------------------------------------ the program
def train_step_module(
    loss: Any,
    optimizer: Optimizer,
    *,
    wrt: Sequence[str],
    entry: str | None = None,
    checkpoint: str = "none",
    output: int | None = None,
    name: str = "train_step",
) -> tuple[IRModule, StepSignature]:
    """The module of ``loss`` (an ``IRModule``, ``@effir.script`` or
    ``effir.trace`` function) with ``@name``, one training step of its
    ``@entry``, added (the module is A2: every function passes its cells),
    and the step's signature. ``checkpoint`` and ``output`` are
    ``value_and_grad``'s."""
    module, entry = _loss_module(loss, entry)
    if isinstance(wrt, str) or not wrt:
        raise TrainingError(
            "wrt must name the trained parameters, as a list (wrt=['w', 'b'])"
            + (f", not the string {wrt!r}" if isinstance(wrt, str) else "")
        )
    if name in module.functions or name in module.cells:
        raise TrainingError(f"the module already has a @{name}: pass another name=")
    taken = set(module.functions) | set(module.cells) | {name}
    grad_name = fresh_name(f"{entry}_grad", taken)
    module = grad_module(
        module, entry, list(wrt), checkpoint, output, with_value=True, name=grad_name
    )
    grad_fn = module.functions[grad_name]
    state_in = tuple(grad_fn.attrs.get("state_in", ()))
    state_out = tuple(grad_fn.attrs.get("state_out", ()))
    user = grad_fn.params[: len(grad_fn.params) - len(state_in)]
    by_name = {p.name_hint: p for p in user}
    param_types = tuple(_static_tensor(by_name[w].checked_type, w) for w in wrt)
    opt_types = tuple(
        TensorType(tuple(a.shape), str(a.dtype)) for a in optimizer.init(_zeros(param_types))
    )
    signature = StepSignature(
        tuple(p.name_hint for p in user if p.name_hint not in wrt),
        tuple(wrt),
        param_types,
        opt_types,
    )
    fn = _step_function(grad_name, grad_fn, user, signature, optimizer, len(state_out))
    attrs = Attrs((("state_in", state_in), ("state_out", state_out)))
    return check(module.with_function(name, dataclasses.replace(fn, attrs=attrs))), signature


def step_signature(
    module: IRModule, name: str, wrt: Sequence[str], optimizer: Optimizer
) -> StepSignature:
    """The signature of ``module``'s ``@name``, a training step written by
    hand to the convention (a backward written in effir, say), checked:
    its parameters end with ``wrt`` then the optimiser's state (then the
    cells it passes); the ones before are its data."""
    if name not in module.functions:
        known = ", ".join(f"@{n}" for n in module.functions) or "none"
        raise TrainingError(f"the module has no function @{name} (its functions: {known})")
    fn = module.functions[name]
    user = fn.params[: len(fn.params) - len(fn.attrs.get("state_in", ()))]
    names = [p.name_hint for p in user]
    n_data = names.index(wrt[0]) if wrt and wrt[0] in names else -1
    if n_data < 0 or names[n_data : n_data + len(wrt)] != list(wrt):
        raise TrainingError(
            f"@{name}'s parameters ({', '.join(names)}) do not take {', '.join(wrt)} in a row, "
            "after its data and before the optimiser's state"
        )
    param_types = tuple(
        _static_tensor(p.checked_type, p.name_hint) for p in user[n_data : n_data + len(wrt)]
    )
    opt_types = tuple(
        TensorType(tuple(a.shape), str(a.dtype)) for a in optimizer.init(_zeros(param_types))
    )
    given = [p.checked_type for p in user[n_data + len(wrt) :]]
    if [_shape_dtype(t) for t in given] != [_shape_dtype(t) for t in opt_types]:
        raise TrainingError(
            f"@{name} takes {len(given)} value(s) after its parameters, where "
            f"{optimizer.name}'s state is {len(opt_types)} tensor(s) of these parameters' shapes"
        )
    return StepSignature(tuple(names[:n_data]), tuple(wrt), param_types, opt_types)


def _loss_module(loss: Any, entry: str | None) -> tuple[IRModule, str]:
    """The module and entry of what the user calls a loss."""
    if isinstance(loss, IRModule):
        module, default = loss, "main"
    elif isinstance(getattr(loss, "module", None), IRModule):  # a scripted or traced function
        module, default = loss.module, loss.name
    else:
        raise TrainingError(
            f"the loss must be an IRModule or an @effir.script / effir.trace function, "
            f"not {type(loss).__name__}"
        )
    entry = (entry or default).removeprefix("@")
    if entry not in module.functions:
        known = ", ".join(f"@{n}" for n in module.functions) or "none"
        raise TrainingError(f"the module has no function @{entry} (its functions: {known})")
    return module, entry


def _static_tensor(t: Type | None, name: str) -> TensorType:
    if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape):
        shown = t if t is None else type(t).__name__
        if isinstance(t, TensorType):
            shown = "a tensor of shape (" + ", ".join(str(d) for d in t.shape) + ")"
        raise TrainingError(
            f"the trained parameter %{name} is {shown}: a trained parameter is a tensor of "
            "static shape (the optimiser's state is made for it)"
        )
    return t


def _shape_dtype(t: Type | None) -> tuple[tuple, str] | None:
    return (tuple(t.shape), t.dtype) if isinstance(t, TensorType) else None


def _zeros(types: Sequence[TensorType]) -> tuple[np.ndarray, ...]:
    return tuple(np.zeros(t.shape, t.dtype) for t in types)


def _step_function(
    grad_name: str,
    grad_fn: Function,
    user: Sequence[Any],
    signature: StepSignature,
    optimizer: Optimizer,
    n_state_out: int,
) -> Function:
    """``(data..., params..., opt_state..., cells...) -> ((value, params',
    opt_state'), cells'...)``: the gradient function called, the optimiser
    applied to its gradients."""
    data = {n: frontend.var(n, p.checked_type) for n, p in _named(user) if n in signature.data}
    params = [frontend.var(n, t) for n, t in zip(signature.wrt, signature.param_types, strict=True)]
    opt = [frontend.var(f"opt{i}", t) for i, t in enumerate(signature.opt_types)]
    cells = [frontend.var(p.name_hint, p.checked_type) for p in grad_fn.params[len(user) :]]
    trained = dict(zip(signature.wrt, params, strict=True))

    def body(*_: Any) -> Any:
        ordered = [data[n] if n in data else trained[n] for n, _ in _named(user)]
        result = frontend.call(GlobalVar(grad_name), *ordered, *cells)
        value_grads = result[0] if n_state_out else result
        grads = [value_grads[1][i] for i in range(len(params))]
        new_params, new_opt = optimizer.update(params, grads, opt)
        out = (value_grads[0], tuple(new_params), tuple(new_opt))
        return (out, *(result[1 + k] for k in range(n_state_out))) if n_state_out else out

    return frontend.function([*data.values(), *params, *opt, *cells], body)


def _named(params: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(p.name_hint, p) for p in params]


# ------------------------------------------------------------------ a run
@dataclass
class TrainState:
    """Everything a run carries from one step to the next: the parameters
    (by name, in ``wrt``'s order), the optimiser's state, the program's
    cells (an ``effir.State``: keys, running statistics) and the number of
    steps taken. A step replaces them all, or none if it fails."""

    params: dict[str, np.ndarray]
    opt_state: tuple[np.ndarray, ...]
    state: State
    step: int = 0
    optimizer: str = field(default="", repr=False)

    def save(self, path: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None) -> None:
        """One ``.npz`` checkpoint (effir/train/checkpoint.py) of the run,
        with the caller's ``metadata`` (arrays, numbers, strings)."""
        try:
            cells = self.state.arrays()
        except StateError as err:
            raise CheckpointError(f"{os.fspath(path)}: {err.message}") from None
        save_checkpoint(
            path,
            Checkpoint(
                dict(self.params),
                tuple(self.opt_state),
                cells,
                self.step,
                self.optimizer,
                dict(metadata or {}),
            ),
        )


class TrainStep:
    """A module's training-step function (the convention above) and how it
    runs: compiled by ``effir.compile`` for ``target``, or interpreted
    (``target=None``). ``step(run, *data)`` is one call."""

    def __init__(
        self,
        module: IRModule,
        signature: StepSignature,
        optimizer: Optimizer,
        name: str = "train_step",
        target: Any = "llvm",
    ) -> None:
        import_runtime()  # as effir.compile does: without TVM's optional imports
        from ..backends.tvm.driver.compile import compile as compile_module  # TVM: lazy

        self.module = module
        self.signature = signature
        self.optimizer = optimizer
        self.name = name
        self.program = compile_module(module, target, entry=name) if target is not None else None
        """The ``CompiledModule`` of every function of ``module`` (None:
        interpreted); ``step.call(entry, ...)`` runs any of them."""

    @property
    def wrt(self) -> tuple[str, ...]:
        return self.signature.wrt

    def init(
        self,
        params: Mapping[str, Any] | Sequence[Any],
        seed: int | None = None,
        state: State | None = None,
    ) -> TrainState:
        """A run starting from ``params`` (by name, or in ``wrt``'s order),
        the optimiser's initial state and ``state`` (a fresh ``effir.State``
        of the module, its keys from ``seed``, when None)."""
        arrays = self._params(params, "init")
        return TrainState(
            arrays,
            tuple(self.optimizer.init(tuple(arrays.values()))),
            state if state is not None else State(self.module, seed=seed),
            0,
            self.optimizer.name,
        )

    def __call__(self, run: TrainState, *data: Any, **named: Any) -> Any:
        """One step on the batch ``data`` (the loss's other arguments,
        positional or by name): the loss's value before the update; ``run``
        holds the new parameters, optimiser state, cells and step count."""
        if not isinstance(run, TrainState):
            raise TrainingError(
                f"a step takes the run first (step(run, *data)), not {type(run).__name__}"
            )
        bound = bind_arguments(f"@{self.name}", self.signature.data, data, named)
        value, params, opt_state = self.call(
            self.name, *bound, *run.params.values(), *run.opt_state, state=run.state
        )
        run.params = {n: np.asarray(p) for n, p in zip(self.wrt, params, strict=True)}
        run.opt_state = tuple(np.asarray(s) for s in opt_state)
        run.step += 1
        return value

    def call(self, entry: str, *args: Any, state: State | None = None, **named: Any) -> Any:
        """Any function of the module (an evaluation, a sampler), compiled
        or interpreted as the step is."""
        if self.program is not None:
            return self.program(*args, entry=entry, state=state, **named)
        return interpret_a2(self.module, *args, entry=entry, state=state, **named)

    def restore(self, path: str | os.PathLike[str]) -> TrainState:
        """The run saved in ``path`` (``TrainState.save``), checked against
        this step: the same parameters, shapes and dtypes, the optimiser's
        state, the module's cells."""
        where = os.fspath(path)
        saved = read_checkpoint(path)
        if saved.optimizer != self.optimizer.name:
            raise CheckpointError(
                f"{where}: holds the state of the optimiser {saved.optimizer!r}, and this step "
                f"uses {self.optimizer.name!r}"
            )
        try:
            params = self._params(saved.params, where)
        except TrainingError as err:
            raise CheckpointError(err.message) from None
        want = self.signature.opt_types
        if len(saved.opt_state) != len(want) or any(
            (a.shape, str(a.dtype)) != (t.shape, t.dtype)
            for a, t in zip(saved.opt_state, want, strict=False)
        ):
            raise CheckpointError(
                f"{where}: the optimiser's state is not {self.optimizer.name}'s for these "
                "parameters (its number, shapes or dtypes differ)"
            )
        state = State(self.module)
        try:
            state.set_arrays(saved.state, f"{where} (state.*)")
        except StateError as err:
            raise CheckpointError(err.message) from None
        return TrainState(params, saved.opt_state, state, saved.step, saved.optimizer)

    def _params(self, given: Mapping[str, Any] | Sequence[Any], where: str) -> dict[str, Any]:
        """``given`` as the trained parameters, each checked against its type."""
        if isinstance(given, Mapping):
            extra = sorted(set(given) - set(self.wrt))
            missing = [n for n in self.wrt if n not in given]
            if extra or missing:
                raise TrainingError(
                    f"{where}: the parameters are {', '.join(self.wrt)}"
                    + (f"; no parameter {extra[0]!r}" if extra else "")
                    + (f"; missing {', '.join(missing)}" if missing else "")
                )
            values = [given[n] for n in self.wrt]
        else:
            values = list(given)
            if len(values) != len(self.wrt):
                raise TrainingError(
                    f"{where}: {len(self.wrt)} parameters ({', '.join(self.wrt)}), "
                    f"got {len(values)}"
                )
        out = {}
        for n, value, t in zip(self.wrt, values, self.signature.param_types, strict=True):
            array = np.asarray(value)
            if array.shape != tuple(t.shape) or str(array.dtype) != t.dtype:
                raise TrainingError(
                    f"{where}: parameter {n} is a {array.dtype} array of shape {array.shape}, "
                    f"where the loss takes {t.dtype} of shape {tuple(t.shape)}"
                )
            out[n] = np.array(array, copy=True)  # the run's own: later changes to the caller's
        return out


def train_step(
    loss: Any,
    optimizer: Optimizer,
    *,
    wrt: Sequence[str],
    entry: str | None = None,
    checkpoint: str = "none",
    output: int | None = None,
    name: str = "train_step",
    target: Any = "llvm",
) -> TrainStep:
    """One training step of ``loss`` (an ``IRModule`` and its ``entry``, or
    an ``@effir.script``/``effir.trace`` function) with ``optimizer``
    (``effir.optim.SGD``, ``Adam``), for the parameters ``wrt``: forward,
    backward, update, next key and statistics, compiled for ``target``
    into one call (``target=None``: run by effir's interpreter).
    ``checkpoint`` ("none", "loop", "sqrt") and ``output`` are
    ``effir.value_and_grad``'s. See docs/training.md."""
    module, signature = train_step_module(
        loss, optimizer, wrt=wrt, entry=entry, checkpoint=checkpoint, output=output, name=name
    )
    return TrainStep(module, signature, optimizer, name, target)
