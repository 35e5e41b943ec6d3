"""Symbolic dimensions bound at each call: a global function copied per
binding of its dimensions, so that its code is written in its caller's.

Purpose
-------
A symbolic dimension is rigid and scoped to its global function (docs/
architecture.md): ``def @encode(%t: Tensor[(n), int32])`` means one
unknown size per call, matched against the caller's types. A backend that
generates code per concrete shape (the TVM backend's kernels, driver/
specialise.py) binds the *entry*'s dimensions from a call's arguments;
``@encode``'s ``n`` would stay unknown however the entry is bound, and its
kernels could not be built. This pass writes every function the entry
reaches in the entry's terms:

1. The entry's own dimensions are replaced by ``dims`` (sizes, or left as
   they are: a symbolic size the backend keeps symbolic).
2. Walking from the entry (a worklist: no Python recursion per call), each
   call of a global function ``@g`` that has dimensions of its own gives
   them values from the call's argument and result types [RULE DIMS-BIND]: a
   size, a dimension of the entry, or ``?`` (a size known only at run
   time, or one the call does not determine). The call then calls the copy
   of ``@g`` made for that binding, ``@g`` with the binding substituted in
   every type it holds, typed on its own and walked in turn. Copies are
   memoised by ``(@g, binding)``: a recursive call whose arguments have
   the caller's sizes calls the copy itself [RULE DIMS-MEMO].
3. A function with no dimensions of its own is walked once, in place (its
   calls are specialised; its code is the same for every caller).
4. A global function used as a value (passed, stored), not called, has
   ``?`` for its dimensions (as the type checker gives it): its reference
   is to the copy with every dimension ``?`` [RULE DIMS-VALUE].
5. At most ``MAX_BINDINGS`` bindings with sizes are copied per function; a
   call beyond calls the all-``?`` copy [RULE DIMS-LIMIT]. A recursion whose
   sizes change at each call (``@f(%x[1:])``) would otherwise copy the
   function once per size.

What it establishes: a module in which every function the entry reaches
names no dimension but the entry's (sizes, the entry's names, ``?``),
type-checked. Its results are the input's (property-tested against the
interpreter, tests/passes/test_specialise_dims.py): a copy differs from
its function only in its types, and each binding is what the call's types
already imply, so the run-time shape checks of the copy are the checks the
interpreter makes at that call.

Each copy carries its function's name (``source_name``), which messages
about it show (the backend names ``@encode``, never ``@encode_1``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from effir.ir.builder import fresh_name
from effir.ir.dims import bind_dims, own_dims, substitute_dims
from effir.ir.expr import Call, Function, GlobalVar
from effir.ir.functor import Mutator, on, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Attrs, Node
from effir.ir.program import missing_entry
from effir.ir.types import ANY, Dim, Type
from effir.passes.analyses.anf_sharing import fresh_binders
from effir.passes.analyses.infer_type import check, infer_expr
from effir.passes.infra.transform import PassError, module_pass

MAX_BINDINGS = 8
"""Copies with sizes per function [RULE DIMS-LIMIT]."""

SOURCE_NAME = "source_name"
"""The attribute of a copy holding the name of the function it copies."""

Binding = tuple[tuple[str, Dim], ...]


def source_name(fn: Function, name: str) -> str:
    """The name a user wrote for the global ``@name`` (``fn``): the
    function it copies, for a copy made here."""
    source = fn.attrs.get(SOURCE_NAME)
    return source if isinstance(source, str) else name


def specialise_dims(
    module: IRModule, entry: str = "main", dims: Mapping[str, Dim] | None = None
) -> IRModule:
    """``module`` with ``@entry``'s dimensions bound by ``dims`` and every
    function it reaches written in the entry's dimensions (the module
    docstring); type-checked."""
    if entry not in module.functions:
        raise PassError(f"specialise-dims: {missing_entry(module.functions, entry)}")
    return check(_Specialiser(check(module), entry, dict(dims or {})).run())


@module_pass(
    name="specialise-dims",
    preserves={"a2", "anf", "bbnf", "gnf"},
    options={"entry": "the function whose dimensions the others are written in"},
)
def specialise_dims_pass(module: IRModule, entry: str = "main") -> IRModule:
    """Copies each global function per binding of its symbolic dimensions at its calls."""
    return specialise_dims(module, entry)


class _Specialiser:
    """One run (the module docstring's steps)."""

    def __init__(self, module: IRModule, entry: str, given: dict[str, Dim]) -> None:
        self.module = module
        self.entry = entry
        self.given = given
        self.originals = dict(module.functions)
        self.functions: dict[str, Function] = dict(module.functions)
        self.taken = set(module.functions) | set(module.cells)
        self.dims = {name: own_dims(fn) for name, fn in self.originals.items()}
        self.copies: dict[tuple[str, Binding], str] = {}
        self.sized: dict[str, int] = {}  # copies with a size, per function [RULE DIMS-LIMIT]
        self.pending: list[str] = []
        self.walked: set[str] = set()

    def run(self) -> IRModule:
        entry = self.entry
        if self.given:  # step 1
            fn = substitute_dims(self.originals[entry], self.given)
            assert isinstance(fn, Function)
            self.functions[entry] = fn
            self._typed(entry)
        # [RULE DIMS-MEMO] a call of the entry at its own binding calls the entry
        own = {d: self.given.get(d, d) for d in self.dims[entry]}
        self.copies[(entry, _key(own))] = entry
        self.pending.append(entry)
        while self.pending:
            name = self.pending.pop()
            if name in self.walked:
                continue
            self.walked.add(name)
            new = _Calls(self).mutate(self.functions[name])
            assert isinstance(new, Function)
            self.functions[name] = new
        return IRModule(self.functions, self.module.type_defs, self.module.cells)

    # ------------------------------------------------------------ copies
    def callee(self, name: str, call: Call) -> str:
        """The function ``call`` (of ``@name``) should call [RULE DIMS-BIND]."""
        if not self.dims[name]:
            self.pending.append(name)  # walked in place (step 3)
            return name
        binding = _binding(self.originals[name], call, self.dims[name])
        sized = any(isinstance(v, int) for v in binding.values())
        key = (name, _key(binding))
        if key not in self.copies and sized and self.sized.get(name, 0) >= MAX_BINDINGS:
            return self.generic(name)  # [RULE DIMS-LIMIT]
        return self.copy(name, binding)

    def generic(self, name: str) -> str:
        """The copy of ``@name`` with every dimension ``?`` [RULE DIMS-VALUE]."""
        if not self.dims[name]:
            self.pending.append(name)
            return name
        return self.copy(name, dict.fromkeys(self.dims[name], ANY))

    def copy(self, name: str, binding: dict[str, Dim]) -> str:
        key = (name, _key(binding))
        known = self.copies.get(key)
        if known is not None:
            return known
        if any(isinstance(v, int) for v in binding.values()):
            self.sized[name] = self.sized.get(name, 0) + 1
        original = self.originals[name]
        fn = substitute_dims(fresh_binders(original), binding)
        assert isinstance(fn, Function)
        attrs = Attrs((*fn.attrs.items(), (SOURCE_NAME, source_name(original, name))))
        target = fresh_name(f"{source_name(original, name)}_dims", self.taken)
        self.taken.add(target)
        self.functions[target] = dataclasses.replace(fn, attrs=attrs)
        self.copies[key] = target
        self._typed(target)
        self.pending.append(target)
        return target

    def _typed(self, name: str) -> None:
        """Type ``@name`` on its own (its calls' argument types decide the
        bindings of its callees), against the input module's signatures:
        a copy still calls the functions it was copied from (its calls are
        redirected after), so no module is rebuilt per copy."""
        infer_expr(self.functions[name], self.module)


class _Calls(Mutator):
    """One function's calls (and references) of globals redirected to
    their copies (``_Specialiser.callee``, ``generic``)."""

    def __init__(self, owner: _Specialiser) -> None:
        super().__init__()
        self.owner = owner
        self.callees: set[int] = set()

    def mutate(self, node: Node) -> Node:
        self.callees = {
            id(n.callee)
            for n in pre_order(node)
            if isinstance(n, Call) and isinstance(n.callee, GlobalVar)
        }
        return super().mutate(node)

    @on(GlobalVar)
    def _reference(self, new: Node, old: Node) -> Node:
        assert isinstance(old, GlobalVar)
        if id(old) in self.callees or old.name not in self.owner.originals:
            return new
        target = self.owner.generic(old.name)
        return new if target == old.name else GlobalVar(target, span=old.span)

    @on(Call)
    def _call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call) and isinstance(old, Call)
        callee = old.callee
        if not isinstance(callee, GlobalVar) or callee.name not in self.owner.originals:
            return new
        target = self.owner.callee(callee.name, old)
        if target == callee.name:
            return new
        return Call(GlobalVar(target, span=callee.span), new.args, new.attrs, span=new.span)


def _binding(fn: Function, call: Call, dims: frozenset[str]) -> dict[str, Dim]:
    """[RULE DIMS-BIND] What ``call`` gives each dimension of ``fn``, from its
    argument and result types (``bind_dims``)."""
    pairs: list[tuple[Type, Type]] = [
        (p.checked_type, a.checked_type) for p, a in zip(fn.params, call.args, strict=True)
    ]
    pairs.append((fn.body.checked_type, call.checked_type))
    return bind_dims(dims, pairs)


def _key(binding: Mapping[str, Dim]) -> Binding:
    return tuple(sorted(binding.items()))


__all__ = ["MAX_BINDINGS", "SOURCE_NAME", "source_name", "specialise_dims"]
