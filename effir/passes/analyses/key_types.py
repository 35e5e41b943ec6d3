"""Which types may hold a PRNG key: the question behind key linearity.

A ``Key`` is a linear value in an A2 program (docs/passes.md, "The
linearity verifier"): each is used at most once. The verifier asks which
values are keys, and so must every pass that could make two uses of one
value out of two values (``cse`` merging two ``random.key(-2)``): both
ask here, so they agree on what a key is.

A type holds a key when it is ``Key``, or a tuple, a type argument or an
ADT's constructor field (through nested ADTs) holds one. Each part of a
type is looked at once per ``KeyTypes``: the types of a program share their
parts (nested tuples, a let's type inside the next one's), and a walk of
each whole type would be quadratic in the depth. No Python recursion.
"""

from __future__ import annotations

from effir.ir.module import IRModule
from effir.ir.types import KeyType, TupleType, Type, TypeCall


class KeyTypes:
    """The answers for the types of one module (its ADTs' definitions)."""

    def __init__(self, module: IRModule) -> None:
        self.module = module
        self._holds: dict[Type, bool] = {}
        self._adt_holds: dict[str, bool] = {}

    def holds_key(self, ty: Type | None) -> bool:
        """Whether a value of type ``ty`` may hold a key: in its tuple
        fields, type arguments or an ADT's constructors."""
        if ty is None:
            return False
        holds = self._holds
        stack: list[tuple[Type, list[Type] | None]] = [(ty, None)]
        while stack:
            t, parts = stack.pop()
            if parts is not None:  # its parts are done
                holds[t] = any(holds[p] for p in parts) or (
                    isinstance(t, TypeCall) and self.adt_holds_key(t.func.name)
                )
            elif t in holds:
                continue
            elif isinstance(t, KeyType):
                holds[t] = True
            elif isinstance(t, TupleType | TypeCall):
                parts = list(t.fields if isinstance(t, TupleType) else t.args)
                stack.append((t, parts))
                stack.extend((p, None) for p in parts)
            else:
                holds[t] = False
        return holds[ty]

    def adt_holds_key(self, name: str) -> bool:
        """Whether a constructor of the ADT ``name`` may hold a key (its
        definition walked once)."""
        known = self._adt_holds.get(name)
        if known is None:
            data = self.module.type_defs.get(name)
            stack = [i for c in data.constructors for i in c.inputs] if data is not None else []
            known, adts = False, {name}
            while stack and not known:
                t = stack.pop()
                if isinstance(t, KeyType):
                    known = True
                elif isinstance(t, TupleType):
                    stack.extend(t.fields)
                elif isinstance(t, TypeCall):
                    stack.extend(t.args)
                    inner = self.module.type_defs.get(t.func.name)
                    if inner is not None and inner.name not in adts:
                        adts.add(inner.name)
                        stack.extend(i for c in inner.constructors for i in c.inputs)
            self._adt_holds[name] = known
        return known


__all__ = ["KeyTypes"]
