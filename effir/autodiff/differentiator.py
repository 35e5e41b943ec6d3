"""What one ``grad`` run knows about the whole module.

The typed working copy of the module being differentiated, the
checkpointing mode, the global functions given a ``vjp`` form so far (a
worklist: each is differentiated once, however often and however
recursively it is called), and, per let-bound closure, how it is used and
its differentiated form.
"""

from __future__ import annotations

from dataclasses import dataclass

from effir.passes.analyses.infer_type import infer_expr

from ..ir.analysis import operands
from ..ir.builder import fresh_name
from ..ir.diagnostics import Span
from ..ir.expr import Call, Expr, Function, GlobalVar, Op, TypeData, Var
from ..ir.functor import pre_order
from ..ir.module import IRModule
from ..ir.op import op_def
from ..ir.vjp import DifferentiationError
from .adt import AdtCotangents
from .cotangent import differentiable
from .free import free_variable_table
from .instantiate import instance_key, instantiate, instantiation
from .keytape import TAPE, tape_type_def


@dataclass(frozen=True)
class ClosureVjp:
    """A let-bound closure's differentiated form: the variable bound to its
    ``vjp`` closure and the free variables its pullback returns cotangents for."""

    vjp: Var
    free: tuple[Var, ...]


class Differentiator:
    """Module-wide state of one differentiation (see the module docstring)."""

    def __init__(self, module: IRModule, checkpoint: object, taken: set[str]) -> None:
        self.module = module  # typed; its nodes are used (once) in the output
        # the run's CheckpointPolicy, read by the loops' rule (loop_rule.py):
        # checkpoint.py builds on this module, so it is carried untyped here
        self.checkpoint = checkpoint
        self.taken = taken  # global names in use
        # a global's vjp per name, or per (name, instantiation) for a
        # polymorphic one (instantiate.py), and the function it differentiates
        self.vjp_names: dict[object, str] = {}
        self.sources: dict[object, tuple[str, Function]] = {}
        self.pending: list[object] = []
        self.functions: dict[str, Function] = {}
        self.closures: dict[Var, ClosureVjp] = {}
        self.closure_vars: set[Var] = set()
        self.loop_bodies: dict[Var, Function] = {}
        self.unstacked: set[Call] = set()  # loops whose residuals cannot be stacked
        self.closure_use = _closure_uses(module)
        self._free: dict[int, list[Var]] = {}
        self._free_vars = free_variable_table(module)
        self.tape: TypeData | None = None  # the key tape's ADT, once a loop needs it
        self.adts = AdtCotangents(module, taken)  # cotangents of ADT values

    def global_vjp(self, name: str, span: Span | None, call: Call | None = None) -> GlobalVar:
        """``@name_vjp``, made when ``finish`` runs; for a polymorphic
        ``@name``, the one of ``call``'s instantiation (``instantiate``)."""
        fn = self.module.functions[name]
        key: object = name
        mapping = None
        if call is not None and fn.type_params:
            mapping = instantiation(fn, call.args, call.checked_type)
            if mapping is not None:
                key = (name, instance_key(fn, mapping))
        if key not in self.vjp_names:
            vjp = fresh_name(f"{name}_vjp", self.taken)
            self.taken.add(vjp)
            self.vjp_names[key] = vjp
            if mapping is not None:
                fn = self._instance(fn, mapping)
            self.sources[key] = (name, fn)
            self.pending.append(key)
        return GlobalVar(self.vjp_names[key], span=span)

    def _instance(self, fn: Function, mapping: dict) -> Function:
        """A type-checked monomorphic copy of ``fn``, known to the tables."""
        mono = instantiate(fn, mapping)
        infer_expr(mono, self.module)  # its own nodes only, not the module's again
        alone = IRModule({"instance": mono}, self.module.type_defs, self.module.cells)
        self._free_vars.update(free_variable_table(alone))
        for var, use in _closure_uses(alone).items():
            self.closure_use.setdefault(var, set()).update(use)
        return mono

    def tape_data(self) -> TypeData:
        """The key tape's ADT (``keytape``), added to the output module."""
        if self.tape is None:
            if TAPE in self.module.type_defs:
                raise DifferentiationError(
                    f"the program defines a type {TAPE}, the name grad gives its key tape"
                )
            self.tape = tape_type_def()
        return self.tape

    def free_differentiable(self, node: Expr, exclude: Var | None = None) -> list[Var]:
        """The free variables of ``node`` that gradients flow to: those of a
        float type, and through a known closure, the closure's own."""
        key = id(node)
        if key not in self._free:
            found: dict[Var, None] = {}
            for v in self._free_vars[key]:
                if v in self.closures:
                    found.update(dict.fromkeys(self.closures[v].free))
                elif v in self.loop_bodies:
                    found.update(dict.fromkeys(self.free_differentiable(self.loop_bodies[v])))
                elif v.has_type and differentiable(v.checked_type, self.adts):
                    found[v] = None
            self._free[key] = list(found)
        return [v for v in self._free[key] if v is not exclude]


def raise_primitive(name: str, fn: Function) -> None:
    raise DifferentiationError(
        f"@{name} is a fused primitive function: differentiate before fusion", fn.span
    )


def _closure_uses(module: IRModule) -> dict[Var, set[str]]:
    """How each variable is used: ``call`` (as a callee), ``loop`` (as a
    loop operator's body or condition), ``value`` (anything else)."""
    uses: dict[Var, set[str]] = {}
    for fn in module.functions.values():
        for node in pre_order(fn):
            if isinstance(node, Call):
                bodies: set[int] = set()
                if isinstance(node.callee, Op):
                    shape = op_def(node.callee).rules.get("loop")
                    if shape is not None:
                        bodies = {body.arg for body in shape.bodies}
                elif isinstance(node.callee, Var):
                    uses.setdefault(node.callee, set()).add("call")
                for i, arg in enumerate(node.args):
                    if isinstance(arg, Var):
                        uses.setdefault(arg, set()).add("loop" if i in bodies else "value")
                continue
            for child in operands(node):
                if isinstance(child, Var):
                    uses.setdefault(child, set()).add("value")
    return uses
