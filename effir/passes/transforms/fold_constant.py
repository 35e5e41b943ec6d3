"""fold-constant: compute at compile time what only depends on constants.

Requires a well-typed program (the pass runs ``effir.check`` on its input);
establishes nothing new (A-normal form and A2 are kept when the input has
them). Every value the program computes stays bit-identical.

Rewrites, bottom-up, in one walk over each global function (a second walk
only where removing dead bindings exposed more, see
``effir.ir.rewrite.apply_patterns``):

1. **Calls.** ``op(c1, ..., cn)`` becomes a ``Constant`` (or a tuple of
   constants) when ``op`` has the effect kind ``pure`` and not the trait
   ``control_flow``, every argument is a constant (a ``Constant``, a variable
   bound to one, or a tuple of constants), and the call's type is a tensor
   or a tuple of tensors with static shapes and at most ``max_elements``
   elements in all. The value is the operator's own numpy rule applied to
   the same arrays the interpreter would pass, so it is the interpreter's
   value bit for bit, dtype and rank included [RULE FOLD-VALUE].
2. **Projections.** ``(a, b).1`` and ``%t.1`` with ``let %t = (a, b)``
   become ``b`` when ``b`` is an atom (and, for a literal, every other field
   is an atom too: nothing with an effect is dropped).
3. **Constant conditions.** ``if (True) {A} else {B}`` becomes ``A``. Where
   that makes a ``let`` bound to a block (``let %r = if ...``), the block's
   bindings move before it, so A-normal form is kept (not for a block the
   text's graph form shares, whose bindings would then be bound twice; a
   program with shared nodes is not in A-normal form anyway).
4. **Atoms.** ``let %x = a; body`` with ``a`` a variable or a constant
   becomes ``body`` with ``a`` for ``%x``.

What is never folded, and why:

- operators with an effect (``random``, ``state``, ``io``): ``debug.print(1)``
  must still print;
- anything whose type is not made of tensors: a ``Key`` is not a tensor
  constant (``random.key(0)`` stays; the keyed ``random.*`` operators take a
  key, which is never a constant, so they are never candidates);
- results with a symbolic or ``?`` dimension (a dynamic-shape operator on
  constants): the constant's static type would be more precise than the
  call's, and [RULE FOLD-TYPE] below forbids that;
- results larger than ``max_elements`` (default 1024): folding
  ``zeros(shape=[1000, 1000])`` would put four megabytes into the program
  text instead of one call;
- a call whose rule raises (an integer division by zero, a reshape that
  does not fit): the error stays a run-time error, raised only if and when
  the program reaches the call.

Soundness rules, cited in the code:

- [RULE FOLD-TYPE] Every replacement has exactly the checked type of the expression
  it replaces. A more precise type (a static shape for a ``?``) could make a
  later ``if`` or call fail to type-check; a less precise one could lose a
  static shape that ``squeeze`` needs. Where the types differ (an ``if``
  whose taken branch has a size the other branch does not share, so the
  ``if``'s type, their join, has ``?`` there; a ``let`` annotated with a
  looser type than its value's) the expression is left alone.
  A folded ``if`` whose taken branch is a ``None`` that only the other
  branch typed keeps that type as an annotation [RULE PIN-CONTEXT] (the
  driver, ``effir.ir.rewrite.apply_patterns``, pins every function it changed).
  Substituting the atom of ``let %v: T = %w`` drops the annotation ``T``,
  which may be all that fixes ``%w``'s type (``let %w = None`` of an
  ``Option[A]``): the variable is substituted only when it has no
  annotation or ``%w`` has one of its own.
- [RULE FOLD-ATOM] Only atoms are moved or duplicated. A field taken out of a tuple,
  a value substituted for a variable: each is a variable or a constant, so
  no evaluation (and no effect) is repeated, dropped or reordered.
- [RULE FOLD-SUBST] A variable is substituted only if none of its uses was rewritten
  before its ``let`` was reached (a use inside its own value, which a
  recursive ``let`` allows): otherwise that use would be left dangling.
- [RULE FOLD-DEAD] In a function the pass changed, a ``let`` whose variable is
  unused is removed when its value can neither fail nor have an effect (an
  atom, a tuple of atoms, a projection of an atom). ``%t.1`` with
  ``let %t = (%a, %b)`` folds to ``%b``, but the tuple's ``let`` would still
  hold ``%b``: a second holder of a key or of the world token breaks the
  linearity of an A2 program. Other dead code is dead-code elimination's.

How it runs: the rewrites are three ``RewritePattern``s (``PATTERNS``)
applied by the greedy driver of ``effir.ir.rewrite``, whose walk finishes a
``let``'s value before it visits the body, so that what a variable holds
is known at every use; ``simplify`` uses the same driver with its own
patterns.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np

from effir.ir.expr import Call, Constant, Expr, If, Op, Tuple, TupleGetItem, Var, is_atom
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.ir.rewrite import (
    UNKNOWN,
    PatternRewriter,
    RewritePattern,
    apply_patterns,
    same_type,
    type_of,
)
from effir.ir.types import TensorType, TupleType, Type
from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import Option, module_pass

DEFAULT_MAX_ELEMENTS = 1024
"""The largest result (in elements, over all its tensors) that is folded."""


@module_pass(
    name="fold-constant",
    preserves={"anf", "a2", "bbnf"},  # a binding's value becomes a constant or an atom
    doc="calls of pure operators on constants, projections of tuple literals, "
    "ifs on constants and lets of atoms are computed at compile time",
    options={
        "max_elements": Option("largest result (in elements) computed at compile time", minimum=0)
    },
)
def fold_constant(module: IRModule, max_elements: int = DEFAULT_MAX_ELEMENTS) -> IRModule:
    """``module`` with constant sub-expressions computed (see the module doc).
    Returns ``module`` itself when nothing changed."""
    return apply_patterns(module, lambda: patterns(max_elements), check)


def patterns(max_elements: int = DEFAULT_MAX_ELEMENTS) -> list[RewritePattern]:
    """The rewrites 1-3 of the module doc (4 is the driver's)."""
    return [FoldCall(max_elements), FoldProjection(), FoldIf()]


class FoldCall(RewritePattern):
    """1. ``op(c1, ..., cn)`` of a pure operator on constants: its value."""

    roots: ClassVar[tuple[type, ...]] = (Call,)

    def __init__(self, max_elements: int) -> None:
        self.max_elements = max_elements

    def match_and_rewrite(self, new: Expr, old: Expr, rewriter: PatternRewriter) -> Expr | None:
        assert isinstance(new, Call)
        if not isinstance(new.callee, Op):
            return None
        definition = op_def(new.callee)
        if definition.effect != "pure" or "control_flow" in definition.traits:
            return None
        impl = definition.rules.get("numpy")
        result_type = type_of(old)
        if impl is None or result_type is None:
            return None
        size = _static_size(result_type)
        if size is None or size > self.max_elements:
            return None
        args = tuple(rewriter.constant_value(a) for a in new.args)
        if any(a is UNKNOWN for a in args):
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = impl(args, new.attrs)
        except Exception:  # the run-time error stays at run time
            return None
        return _as_constant(value, result_type, old)  # [RULE FOLD-VALUE] [RULE FOLD-TYPE]


class FoldProjection(RewritePattern):
    """2. ``(a, b).1``, and ``%t.1`` with ``let %t = (a, b)``: ``b``."""

    roots: ClassVar[tuple[type, ...]] = (TupleGetItem,)

    def match_and_rewrite(self, new: Expr, old: Expr, rewriter: PatternRewriter) -> Expr | None:
        assert isinstance(new, TupleGetItem)
        tup = new.tuple_value
        if isinstance(tup, Tuple):
            # A literal: the other fields are evaluated too, so they must be atoms.
            field = tup.fields[new.index]
            others = (f for i, f in enumerate(tup.fields) if i != new.index)
            if all(is_atom(f) for f in others) and same_type(field, old):  # [RULE FOLD-TYPE]
                return field
            return None
        value = rewriter.resolve(tup)
        if isinstance(value, Tuple):
            field = value.fields[new.index]
            # [RULE FOLD-ATOM] [RULE FOLD-TYPE]
            if isinstance(field, Var | Constant) and same_type(field, old):
                return field
        return None


class FoldIf(RewritePattern):
    """3. ``if (True) {A} else {B}``: ``A``."""

    roots: ClassVar[tuple[type, ...]] = (If,)

    def match_and_rewrite(self, new: Expr, old: Expr, rewriter: PatternRewriter) -> Expr | None:
        assert isinstance(new, If) and isinstance(old, If)
        cond = rewriter.constant_value(new.cond)
        if not isinstance(cond, np.ndarray) or cond.dtype != np.bool_ or cond.ndim != 0:
            return None
        taken, old_taken = (
            (new.then_branch, old.then_branch) if cond else (new.else_branch, old.else_branch)
        )
        return taken if same_type(old_taken, old) else None  # [RULE FOLD-TYPE]


def _static_size(t: Type) -> int | None:
    """Elements in all the tensors of ``t`` when it is made of statically
    shaped tensors only, else None."""
    if isinstance(t, TensorType):
        dims = [d for d in t.shape if isinstance(d, int) and not isinstance(d, bool)]
        return math.prod(dims) if len(dims) == len(t.shape) else None
    if isinstance(t, TupleType):
        sizes = [s for s in map(_static_size, t.fields) if s is not None]
        return sum(sizes) if len(sizes) == len(t.fields) else None
    return None


def _as_constant(value: Any, t: Type, old: Expr) -> Expr | None:
    """The folded value as an expression of type ``t``, or None when the
    value does not have exactly that type."""
    if isinstance(t, TensorType):
        if (
            isinstance(value, np.ndarray)
            and str(value.dtype) == t.dtype
            and value.shape == tuple(t.shape)
        ):
            return Constant(value, span=old.span)
        return None
    if isinstance(t, TupleType) and isinstance(value, tuple) and len(value) == len(t.fields):
        fields = [_as_constant(v, f, old) for v, f in zip(value, t.fields, strict=True)]
        if any(f is None for f in fields):
            return None
        return Tuple(tuple(fields), span=old.span)  # type: ignore[arg-type]
    return None
