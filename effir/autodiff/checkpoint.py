"""Checkpoint policies: what a loop's backward stores and what it recomputes.

The loop rule (``effir.autodiff.loop_rule``) asks the policy of the
``grad`` run for the backward of each ``cf.foreach`` and ``cf.while_loop``
(JAX's ``jax.checkpoint`` policies). A policy is an object with one
method, ``bind(loop, b)``: it binds the loop's variable in ``b`` and puts
the loop's backward on the block's tape. Policies by name, in ``POLICIES``:

==============  ==========================================================
``none``        every residual (the forward values the step's backward
                reads) stacked per step; falls back to ``loop`` where one
                is not a tensor (a branch's pullback, a key)
``loop``        each step's starting carry stacked; the backward
                recomputes the step
``sqrt``        each segment's starting carry (about sqrt(T) segments);
                the backward recomputes a segment at a time
``dots``        the residuals computed by a matrix product (``nn.dense``,
                ``nn.matmul``) stacked, the cheap elementwise work
                recomputed from them (JAX's ``dots_saveable``)
==============  ==========================================================

and, for values the user marks by name, ``SaveNames`` (store only the
marked values, recompute the others) and ``RecomputeNames`` (recompute
the marked values, store the others). A value's mark is the name of the
variable it is bound to (``let %h = ...`` in the text format, ``h = ...``
in ``@effir.script``: JAX's ``checkpoint_name``, without an operator that
every backend would have to lower).

Every policy runs the same operations on the same values, so the
gradients are bit-identical to ``none``'s (a recomputed operator gets the
same operands). A new policy is one class (``register`` adds it to the
table, ``grad(checkpoint=...)`` also takes an instance): see
docs/autodiff.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from ..ir.builder import LetBuilder
from ..ir.expr import Call, Var
from ..ir.expr_functor import Computation
from ..ir.vjp import DifferentiationError
from .cotangent import stackable
from .loop_vjp import LoopVjp
from .loops import recompute, residuals, segments_of


class CheckpointPolicy(ABC):
    """What the backward of a loop stores (see the module docstring)."""

    name: str = ""

    @abstractmethod
    def bind(self, loop: LoopVjp, b: LetBuilder) -> Computation[None]:
        """Bind ``loop.var`` in ``b`` and record the loop's backward on
        ``loop.rev.tape`` (a computation on the trampoline: a policy that
        differentiates the body yields ``residuals``)."""


class NoCheckpoint(CheckpointPolicy):
    """``none``: every residual stored; a loop whose residuals cannot be
    stacked recomputes its steps (``loop``)."""

    name = "none"

    def saves(self, var: Var, call: Call) -> bool:
        """Whether the residual ``var = call`` is stored (else recomputed
        from what is: ``loops.recomputed``). Subclasses choose."""
        return True

    def bind(self, loop: LoopVjp, b: LetBuilder) -> Computation[None]:
        ad = loop.ad
        if loop.call not in ad.unstacked:
            if (yield residuals(loop, b, self.saves)):
                return
            # the same loop comes again wherever an enclosing body is
            # differentiated again (its own fallback): it falls back at once
            ad.unstacked.add(loop.call)
        recompute(loop, b)


class LoopCheckpoint(CheckpointPolicy):
    """``loop``: each step's carry stored, the step recomputed."""

    name = "loop"

    def bind(self, loop: LoopVjp, b: LetBuilder) -> Computation[None]:
        recompute(loop, b)
        yield from ()


class SqrtCheckpoint(CheckpointPolicy):
    """``sqrt``: each segment's starting carry stored, a segment at a time
    recomputed (``segments``); a loop too short to segment, or carrying a
    function, is ``loop``'s."""

    name = "sqrt"

    def bind(self, loop: LoopVjp, b: LetBuilder) -> Computation[None]:
        storable = stackable(loop.init.checked_type) or loop.taped
        if not (storable and segments_of(loop).sqrt(loop, b)):
            recompute(loop, b)
        yield from ()


DOTS = frozenset({"nn.dense", "nn.matmul"})
"""The operators whose results ``dots`` stores: the matrix products."""


class SaveDots(NoCheckpoint):
    """``dots``: the matrix products stored, the elementwise work between
    them recomputed in the backward step (JAX's ``dots_saveable``)."""

    name = "dots"

    def saves(self, var: Var, call: Call) -> bool:
        return call.callee.name in DOTS


class SaveNames(NoCheckpoint):
    """Store only the residuals bound to a variable named in ``names``;
    recompute the other operator results."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.name = "save_names:" + ",".join(sorted(self.names))

    def saves(self, var: Var, call: Call) -> bool:
        return var.name_hint in self.names


class RecomputeNames(NoCheckpoint):
    """Recompute the residuals bound to a variable named in ``names``;
    store the others."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        self.name = "recompute_names:" + ",".join(sorted(self.names))

    def saves(self, var: Var, call: Call) -> bool:
        return var.name_hint not in self.names


POLICIES: dict[str, CheckpointPolicy] = {}
"""The policies ``grad(checkpoint="name")`` and the ``grad`` pass find by name."""


def register(policy: CheckpointPolicy) -> CheckpointPolicy:
    """Add ``policy`` to ``POLICIES`` under its ``name`` (a name given twice
    is an error: a policy is never replaced behind its users' backs)."""
    if not policy.name:
        raise ValueError("a checkpoint policy needs a name to be registered")
    if policy.name in POLICIES:
        raise ValueError(f"a checkpoint policy named {policy.name!r} is already registered")
    POLICIES[policy.name] = policy
    return policy


for _policy in (NoCheckpoint(), LoopCheckpoint(), SqrtCheckpoint(), SaveDots()):
    register(_policy)


def policy_of(checkpoint: str | CheckpointPolicy) -> CheckpointPolicy:
    """The policy ``checkpoint`` names (or is); a DifferentiationError
    listing the registered names for another value."""
    if isinstance(checkpoint, CheckpointPolicy):
        return checkpoint
    if isinstance(checkpoint, str) and checkpoint in POLICIES:
        return POLICIES[checkpoint]
    raise DifferentiationError(
        f"checkpoint must be one of {', '.join(POLICIES)} or a CheckpointPolicy, not {checkpoint!r}"
    )


__all__ = [
    "POLICIES",
    "CheckpointPolicy",
    "LoopCheckpoint",
    "NoCheckpoint",
    "RecomputeNames",
    "SaveDots",
    "SaveNames",
    "SqrtCheckpoint",
    "policy_of",
    "register",
]
