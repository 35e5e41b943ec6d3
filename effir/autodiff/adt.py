"""Cotangents of ADT values: one generated cotangent ADT per ADT type.

The cotangent of a value of type ``T[A...]`` (with some float tensor
reachable in it) is a value of a *cotangent ADT* generated for that
instantiation: one constructor per constructor of ``T``, whose fields are
the cotangents of the original fields (``ct(Tensor[float])`` is the
tensor, an integer tensor, a key or a function ``()``, a nested ADT its own
cotangent ADT), plus a constructor ``...Zero`` with no fields. So
``List[Tensor[(3), float64]]`` gets::

    type ListCt { ConsCt(Tensor[(3), float64], ListCt), NilCt, ListCtZero }

The zero needs no shape and no walk over the forward value (a whole list
of zeros would); ``add`` is a generated recursive global per cotangent ADT
(``@ListCtAdd``: a zero is the identity, the same constructor adds field
by field; two cotangents of one value never have different constructors).
The cotangent ADTs are monomorphic (no type parameters): a field of type
``Tensor[(), int32]`` has cotangent ``()``, which a constructor of ``T``
itself could not hold, and every generated ``add`` is first order.

The backward of a constructor call ``C(x, y)`` takes the fields'
cotangents out of the value's (a ``match`` on ``CCt``; a zero gives zero
fields); the backward of a clause of a ``match`` builds the scrutinee's
cotangent from the pattern variables' (``reverse.py``). The instance of a
``grad`` run (``Differentiator.adts``) is passed explicitly to
``cotangent.ct_type``, ``differentiable`` and the functions that build
cotangents (their ``adts`` argument; None outside ``grad``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from effir.passes.analyses.type_solver import substitute

from ..ir.builder import LetBuilder, fresh_name
from ..ir.expr import (
    Clause,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    TypeData,
    Var,
)
from ..ir.module import IRModule
from ..ir.types import (
    FuncType,
    GlobalTypeVar,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
)
from .cotangent import ct_type, differentiable, materialize

TypeKey = tuple


def type_key(t: Type) -> TypeKey:
    """A structural key of ``t`` (types compare by identity)."""
    if isinstance(t, TensorType):
        return ("tensor", tuple(t.shape), t.dtype)
    if isinstance(t, TupleType):
        return ("tuple", *(type_key(f) for f in t.fields))
    if isinstance(t, TypeCall):
        return ("adt", t.func.name, *(type_key(a) for a in t.args))
    if isinstance(t, GlobalTypeVar):
        return ("adt", t.name)
    if isinstance(t, TypeVar):
        return ("var", t.name)
    if isinstance(t, FuncType):
        return ("fn",)  # no gradient, whatever its signature
    return (type(t).__name__,)


@dataclass
class CtAdt:
    """The cotangent ADT of one ADT type: its type, its constructor per
    original constructor name, its zero and its ``add`` global."""

    type: TypeCall
    ctors: dict[str, Constructor] = field(default_factory=dict)
    zero: Constructor | None = None
    add: str = ""
    data: TypeData | None = None


class AdtCotangents:
    """The cotangent ADTs and ``add`` functions of one ``grad`` run."""

    def __init__(self, module: IRModule, taken_globals: set[str]) -> None:
        self.type_defs = dict(module.type_defs)
        # type and constructor names: one set, so that no generated name is
        # both (or clashes with the program's)
        self.taken_names = set(self.type_defs) | {
            c.name for d in self.type_defs.values() for c in d.constructors
        }
        self.taken_globals = taken_globals
        self._differentiable: dict[TypeKey, bool] = {}
        self._ct: dict[TypeKey, CtAdt] = {}
        self._pending_adds: list[tuple[CtAdt, Type]] = []
        self.functions: dict[str, Function] = {}

    # ------------------------------------------------------------ types
    def fields(self, t: TypeCall, ctor: Constructor) -> tuple[Type, ...]:
        """The field types of ``ctor`` in the instantiation ``t``."""
        data = self.type_defs[t.func.name]
        mapping = dict(zip(data.type_params, t.args, strict=False))
        return tuple(substitute(f, mapping) for f in ctor.inputs)

    def constructors(self, t: TypeCall) -> tuple[Constructor, ...]:
        return self.type_defs[t.func.name].constructors

    def differentiable(self, t: TypeCall) -> bool:
        """Whether a float tensor is reachable in a value of type ``t``: a
        walk over the instantiated types (an explicit stack; a recursive
        type is visited once)."""
        key = type_key(t)
        known = self._differentiable.get(key)
        if known is not None:
            return known
        seen = {key}
        stack: list[Type] = [t]
        found = False
        while stack and not found:
            ty = stack.pop()
            if isinstance(ty, TensorType):
                found = ty.dtype.startswith(("float", "bfloat"))
                continue
            if isinstance(ty, TupleType):
                children: tuple[Type, ...] = ty.fields
            elif isinstance(ty, TypeCall) and ty.func.name in self.type_defs:
                k = type_key(ty)
                if k != key and self._differentiable.get(k) is not None:
                    found = self._differentiable[k]
                    continue
                children = tuple(f for c in self.constructors(ty) for f in self.fields(ty, c))
            else:
                continue
            for child in children:
                ck = type_key(child)
                if ck not in seen:
                    seen.add(ck)
                    stack.append(child)
        self._differentiable[key] = found
        return found

    def ct_type(self, t: TypeCall) -> Type:
        """The cotangent type of the (differentiable) ADT type ``t``."""
        return self.ct_adt(t).type

    def ct_adt(self, t: TypeCall) -> CtAdt:
        """The cotangent ADT of the (differentiable) ADT type ``t``."""
        key = type_key(t)
        info = self._ct.get(key)
        if info is not None:
            return info
        base = t.func.name
        name = self._fresh(f"{base}Ct", self.taken_names)
        info = CtAdt(TypeCall(GlobalTypeVar(name), ()))
        self._ct[key] = info  # before the fields: a recursive type refers to itself
        ctors = []
        for c in self.constructors(t):
            inputs = tuple(ct_type(f, self) for f in self.fields(t, c))
            ctor = Constructor(self._fresh(f"{c.name}Ct", self.taken_names), inputs, name)
            info.ctors[c.name] = ctor
            ctors.append(ctor)
        info.zero = Constructor(self._fresh(f"{name}Zero", self.taken_names), (), name)
        info.data = TypeData(name, (), (*ctors, info.zero))
        info.add = self._fresh(f"{name}Add", self.taken_globals)
        self._pending_adds.append((info, t))
        return info

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name = fresh_name(base, taken)
        taken.add(name)
        return name

    # ----------------------------------------------------------- values
    def zero(self, b: LetBuilder, t: TypeCall) -> Expr:
        """The zero cotangent of a value of type ``t``."""
        zero = self.ct_adt(t).zero
        assert zero is not None
        return b.emit(b.call(zero, []), "zero")

    def add(self, b: LetBuilder, x: Expr, y: Expr, t: TypeCall) -> Expr:
        """``x + y`` for cotangents of a value of type ``t``."""
        info = self.ct_adt(t)
        return b.emit(b.call(GlobalVar(info.add, span=b.current_span), [x, y]), "ct")

    def take_fields(
        self, b: LetBuilder, ct: Expr, t: TypeCall, ctor: Constructor, args: list[Expr]
    ) -> list[Expr]:
        """The cotangents of the fields ``args`` of the value ``ctor(args)``
        from its cotangent ``ct``: the fields of ``ctor``'s cotangent
        constructor, or zeros where ``ct`` is the zero."""
        info = self.ct_adt(t)
        types = self.fields(t, ctor)
        parts = [Var(f"ct_{i}") for i in range(len(args))]
        taken = Clause(
            PatternConstructor(info.ctors[ctor.name], tuple(PatternVar(p) for p in parts)),
            b.tuple(parts),
        )
        zb = b.child()
        zeros = [materialize(zb, None, a, ft, self) for a, ft in zip(args, types, strict=True)]
        other = Clause(PatternWildcard(), zb.finish(zb.emit(zb.tuple(zeros), "cts")))
        cts = b.emit(Match(ct, (taken, other), complete=True), "cts")
        return [b.emit_get(cts, i, "ct") for i in range(len(args))]

    # ---------------------------------------------------------- patterns
    def name_wildcards(self, pattern: Pattern, t: Type) -> Pattern:
        """``pattern`` with each wildcard that matches a differentiable value
        bound to a fresh (typed) variable: the scrutinee's cotangent needs
        a zero of that field's shape. Recursion over the pattern's depth."""
        if isinstance(pattern, PatternWildcard):
            if not differentiable(t, self):
                return pattern
            var = Var("field")
            var.set_checked_type(t)
            return PatternVar(var)
        if isinstance(pattern, PatternTuple) and isinstance(t, TupleType):
            ps = tuple(
                self.name_wildcards(p, f) for p, f in zip(pattern.patterns, t.fields, strict=True)
            )
            return PatternTuple(ps, span=pattern.span)
        if isinstance(pattern, PatternConstructor) and isinstance(t, TypeCall):
            types = self.fields(t, pattern.constructor)
            ps = tuple(
                self.name_wildcards(p, f) for p, f in zip(pattern.patterns, types, strict=True)
            )
            return PatternConstructor(pattern.constructor, ps, span=pattern.span)
        return pattern

    def pattern_cotangent(self, b: LetBuilder, pattern: Pattern, t: Type, total) -> Expr:
        """The cotangent of the value of type ``t`` that ``pattern`` matched,
        from ``total(var)``, the whole cotangent of each pattern variable."""
        if not differentiable(t, self):
            return materialize(b, None, b.tuple([]), t, self)
        if isinstance(pattern, PatternVar):
            return total(pattern.var)
        if isinstance(pattern, PatternTuple) and isinstance(t, TupleType):
            parts = [
                self.pattern_cotangent(b, p, f, total)
                for p, f in zip(pattern.patterns, t.fields, strict=True)
            ]
            return b.emit(b.tuple(parts), "ct")
        if isinstance(pattern, PatternConstructor) and isinstance(t, TypeCall):
            types = self.fields(t, pattern.constructor)
            parts = [
                self.pattern_cotangent(b, p, f, total)
                for p, f in zip(pattern.patterns, types, strict=True)
            ]
            ctor = self.ct_adt(t).ctors[pattern.constructor.name]
            return b.emit(b.call(ctor, parts), "ct")
        assert isinstance(t, TypeCall)  # a wildcard name_wildcards left: no tensor shape needed
        return self.zero(b, t)

    # ------------------------------------------------------------ output
    def finish(self) -> tuple[list[TypeData], dict[str, Function]]:
        """The cotangent ADTs and their ``add`` functions (a worklist: an
        ``add`` may ask for the cotangent ADT of a nested type)."""
        while self._pending_adds:
            info, t = self._pending_adds.pop()
            self.functions[info.add] = self._add_function(info, t)
        datas = [info.data for info in self._ct.values() if info.data is not None]
        return datas, self.functions

    def _add_function(self, info: CtAdt, t: TypeCall) -> Function:
        """``fn (%a, %b) { match (%a) { Zero => %b, C(..) => match (%b) {
        C(..) => C(a_i + b_i ...), _ => %a } ... } }``."""
        a, c = Var("a", info.type), Var("b", info.type)
        b = LetBuilder()
        clauses = [Clause(PatternConstructor(info.zero, ()), c)] if info.zero else []
        for orig in self.constructors(t):
            ctor = info.ctors[orig.name]
            types = self.fields(t, orig)
            xs = [Var(f"x{i}") for i in range(len(types))]
            ys = [Var(f"y{i}") for i in range(len(types))]
            inner = b.child()
            sums = [
                _add_values(inner, x, y, f, self) for x, y, f in zip(xs, ys, types, strict=True)
            ]
            both = Clause(
                PatternConstructor(ctor, tuple(PatternVar(y) for y in ys)),
                inner.finish(inner.emit(inner.call(ctor, sums), "sum")),
            )
            second = Match(c, (both, Clause(PatternWildcard(), a)), complete=True)
            clauses.append(
                Clause(PatternConstructor(ctor, tuple(PatternVar(x) for x in xs)), second)
            )
        body = Match(a, tuple(clauses), complete=True)
        return Function((a, c), body, info.type)


def _add_values(b: LetBuilder, x: Expr, y: Expr, t: Type, adts: AdtCotangents) -> Expr:
    """``x + y`` for two whole cotangents (expressions) of a value of type ``t``."""
    if not differentiable(t, adts):
        return x
    if isinstance(t, TupleType):
        parts = [
            _add_values(b, b.emit_get(x, i, "x"), b.emit_get(y, i, "y"), f, adts)
            for i, f in enumerate(t.fields)
        ]
        return b.emit(b.tuple(parts), "sum")
    if isinstance(t, TypeCall):
        return adts.add(b, x, y, t)
    return b.emit(b.call_op("add", x, y), "sum")
