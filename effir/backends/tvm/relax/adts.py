"""ADT values and ``match`` in the Relax lowering [RULE LOWER-ADT].

A value of an algebraic data type is a VM tuple: its constructor's tag (an
``int64`` scalar tensor, the constructor's position in its type's
definition) and then its fields, ``Cons(%h, %t)`` as ``(0, %h, %t)`` and
``Nil`` as ``(1,)``. Relax's types are not recursive, so an ADT value (and
a value of a type parameter, in a polymorphic function) has Relax type
``Object``; where its parts are used it is cast (``match_cast``, checked by
the VM) to the tuple of its constructor's fields.

A ``match`` is a chain of tests, the first clause first: each clause's
pattern is tested as one boolean (nested ``If``s: a field is cast and
tested only once the tags above it matched), then an ``If`` runs the
clause's body with its variables bound, or the rest of the chain. The last
clause of a complete ``match`` is not tested. [RULE LOWER-MATCHFAIL] A
``match?`` whose clauses may all fail tests its last clause too, and the
chain ends in the interpreter's failure: a check that fails (runtime/errors.py
[RULE RUNTIME-CHECK], ``effir.check`` on the host, on every target), an
``EvalError`` at the ``match?``; the value after it, never reached, is a
null ``Object`` (the ``match``'s value is cast back to its type where it is
bound).

The rules are ``AdtRules``, a rule set relax/lower.py's walk holds; they
share relax/state.py's ``LoweringState``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, tirx

from effir.passes.analyses.type_solver import substitute

from ....ir.expr import (
    Clause,
    Constructor,
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    Var,
)
from ....ir.trampoline import Computation
from ....ir.type_tree import leaves
from ....ir.types import TupleType, Type, TypeCall
from ..runtime.errors import site_message
from .constants import constant
from .dynamic import DynamicRules
from .state import LoweringState, Walk
from .types import declare, relax_type


def has_constructor_pattern(match: Match) -> bool:
    """Whether ``match`` tests constructors (a tuple-only match binds)."""
    return any(refutable(c.pattern) for c in match.clauses)


def tag(index: int) -> Any:
    """The tag of a value built by a type's ``index``-th constructor."""
    return constant(np.int64(index), "int64")


class AdtRules:
    """Constructors and matches for relax/lower.py's walk."""

    def __init__(self, state: LoweringState, walk: Walk, dynamic: DynamicRules) -> None:
        self.state = state
        self.bb = state.bb
        self.walk = walk
        self.dynamic = dynamic

    # ---------------------------------------------------------- values
    def construct(self, ctor: Constructor, args: list[Any], name: str) -> Any:
        """``C(args)``: the tuple of its tag and fields."""
        if not args and ctor.inputs:  # a function value (relax/closures.py)
            return self._constructor_value(ctor)
        if links_values(ctor):
            # [RULE RUNTIME-STACK] a value linking to another ADT value may become a
            # chain as long as a loop runs (a list grown per step, the key
            # tape of a gradient): TVM's runtime frees a chain by a native
            # recursion per link, which overflowed 8 MB past ~130,000 links
            self.state.recursion = True
        return self.bb.emit(relax.Tuple([tag(self._ctor_index(ctor)), *args]), name)

    def _ctor_index(self, ctor: Constructor) -> int:
        data = self.state.module.type_defs[ctor.adt]
        return [c.name for c in data.constructors].index(ctor.name)

    def typed(self, value: Any, t: Type) -> Any:
        """``value`` with the Relax type of ``t``: a value that reached here
        as an ``Object``, or a tuple with an ``Object`` where ``t`` says more
        (a field, a type parameter's value, a closure call's result), is
        cast. The one place where such values get their effir type back:
        every let-bound value and pattern variable passes here."""
        if not holds_object(value.ty):  # most values: nothing to ask of t
            return value
        want = relax_type(t)
        if vaguer(value.ty, want):
            return self.bb.match_cast(value, want)
        return value

    def _fields(self, value: Any, ctor: Constructor, data_type: Type | None) -> list[Any]:
        """The fields of ``value``, known to be built by ``ctor``."""
        types = self._field_types(ctor, data_type)
        tuple_type = relax.TupleType(
            [relax.TensorType([], "int64"), *(relax_type(t) for t in types)]
        )
        cast = self.bb.match_cast(value, tuple_type)
        return [self.bb.emit(relax.TupleGetItem(cast, i + 1)) for i in range(len(types))]

    # ----------------------------------------------------------- match
    def adt_match(self, expr: Match, env: dict[Var, Any], name: str) -> Computation[Any]:
        """The chain of tests, on the trampoline (relax/lower.py's ``chain``):
        each clause's blocks are yielded, so matches nested in clause
        bodies are no Python recursion."""
        data = self.walk.atom(expr.data, env)
        clauses = list(expr.clauses)
        # Built from the last clause back: each clause's block holds its
        # test and an If of its body and the blocks after it.
        data_type = expr.data.checked_type
        # [RULE LOWER-DEADCLAUSE] a clause the value's Relax type rules out is not lowered
        clauses = [c for c in clauses if not never_matches(c.pattern, data.ty)]
        if not clauses:  # a match? fails; a complete match is never reached
            if not expr.complete:
                return self._no_clause_matches(expr)
            return self.bb.emit(relax.op.null_value(), name)
        rest: Any = None  # after the last clause: none, it matches
        if not expr.complete and refutable(clauses[-1].pattern):  # [RULE LOWER-MATCHFAIL]
            rest = self.bb.block(lambda: self._no_clause_matches(expr))
        for k in range(len(clauses) - 1, 0, -1):
            rest = yield self.bb.nested(self._clause(clauses[k], data, data_type, env, rest, name))
        return (yield self._clause(clauses[0], data, data_type, env, rest, name))

    def _no_clause_matches(self, expr: Match) -> Any:
        """[RULE LOWER-MATCHFAIL] The interpreter's failure of a ``match?`` no
        clause of which matched, at run time; then a value never reached."""
        message = "no clause matches the value"
        self.dynamic.emit_check(
            tirx.const(False, "bool"), site_message("match?", message, expr.span), []
        )
        return self.bb.emit(relax.op.null_value())

    def _clause(
        self, clause: Clause, data: Any, data_type: Type, env: dict[Var, Any], rest: Any, name: str
    ) -> Computation[Any]:
        if rest is None:  # the last clause: it matches
            return (yield self._clause_body(clause, data, data_type, env))
        test = yield self._test(clause.pattern, data, data_type)
        body = yield self.bb.nested(self._clause_body(clause, data, data_type, env))
        return self.bb.emit(relax.If(test, body, rest), name)

    def _clause_body(
        self, clause: Clause, data: Any, data_type: Type, env: dict[Var, Any]
    ) -> Computation[Any]:
        inner = dict(env)
        work: list[tuple[Pattern, Any, Type | None]] = [(clause.pattern, data, data_type)]
        while work:
            pattern, value, t = work.pop()
            if isinstance(pattern, PatternVar):
                inner[pattern.var] = self.typed(value, pattern.var.checked_type)
            elif isinstance(pattern, PatternTuple):
                fields = t.fields if isinstance(t, TupleType) else [None] * len(pattern.patterns)
                for i, (sub, ft) in enumerate(zip(pattern.patterns, fields, strict=True)):
                    work.append((sub, self.bb.emit(relax.TupleGetItem(value, i)), ft))
            elif isinstance(pattern, PatternConstructor):
                if pattern.patterns:
                    parts = self._fields(value, pattern.constructor, t)
                    types = self._field_types(pattern.constructor, t)
                    work.extend(zip(pattern.patterns, parts, types, strict=True))
        return (yield self.walk.chain(clause.body, inner))

    def _field_types(self, ctor: Constructor, data_type: Type | None) -> list[Type]:
        """The types of ``ctor``'s fields in a value of ``data_type`` (None:
        not known, the fields' declared types)."""
        definition = self.state.module.type_defs[ctor.adt]
        args = data_type.args if isinstance(data_type, TypeCall) else ()
        mapping = dict(zip(definition.type_params, args, strict=False))
        return [substitute(t, mapping) for t in ctor.inputs]

    def _test(self, pattern: Pattern, value: Any, t: Type | None) -> Computation[Any]:
        """A boolean scalar: whether ``value`` matches ``pattern`` (on the
        trampoline: a pattern nests as deep as the program may)."""
        if not refutable(pattern):
            return constant(np.bool_(True), "bool")
        if isinstance(pattern, PatternTuple):
            fields = t.fields if isinstance(t, TupleType) else [None] * len(pattern.patterns)
            test = None
            for i, (sub, ft) in enumerate(zip(pattern.patterns, fields, strict=True)):
                if refutable(sub):
                    part = yield self._test(sub, self.bb.emit(relax.TupleGetItem(value, i)), ft)
                    test = part if test is None else self._both(test, part)
            return test
        assert isinstance(pattern, PatternConstructor)
        found = self._tag_of(value)
        same = self.bb.emit(relax.op.equal(found, tag(self._ctor_index(pattern.constructor))))
        if not any(refutable(p) for p in pattern.patterns):
            return same

        def fields_match() -> Computation[Any]:
            parts = self._fields(value, pattern.constructor, t)
            types = self._field_types(pattern.constructor, t)
            test = None
            for sub, part, ft in zip(pattern.patterns, parts, types, strict=True):
                if refutable(sub):
                    one = yield self._test(sub, part, ft)
                    test = one if test is None else self._both(test, one)
            return test

        false = self.bb.block(lambda: constant(np.bool_(False), "bool"))
        fields = yield self.bb.nested(fields_match())
        return self.bb.emit(relax.If(same, fields, false))

    def _tag_of(self, value: Any) -> Any:
        """The tag of an ADT value: its tuple's first field (read without a
        cast, whose check would need the constructor)."""
        if isinstance(value.ty, relax.TupleType):
            return self.bb.emit(relax.TupleGetItem(value, 0))
        return self.bb.emit(
            relax.Call(
                relax.ExternFunc("vm.builtin.tuple_getitem"),
                [value, relax.prim_value(0)],
                ty_args=[relax.TensorType([], "int64")],
            )
        )

    def _both(self, a: Any, b: Any) -> Any:
        return self.bb.emit(relax.op.logical_and(a, b))

    def _constructor_value(self, ctor: Constructor) -> Any:
        """A constructor that takes arguments, as a value: the closure of a
        function building its value (made once per constructor)."""
        gv = self.state.constructor_functions.get(ctor.name)
        if gv is None:
            params = [relax.Var(f"field{i}", relax_type(t)) for i, t in enumerate(ctor.inputs)]
            gv = declare(self.bb, params, relax.ObjectType(), f"make_{ctor.name}")
            fields = [tag(self._ctor_index(ctor)), *params]
            body = self.bb.block(lambda: self.bb.emit(relax.Tuple(fields)))
            function = relax.Function(params, body, relax.ObjectType(), False)
            self.bb.update_func(gv, function.with_attr("effir_name", gv.name_hint))
            self.state.constructor_functions[ctor.name] = gv
        return self.bb.emit(relax.op.make_closure(gv, relax.Tuple([])), ctor.name)


def never_matches(pattern: Pattern, ty: Any) -> bool:
    """[RULE LOWER-DEADCLAUSE] Whether ``pattern`` cannot match a value of
    Relax type ``ty``: somewhere in it, a constructor whose tuple has
    another length than the value's there. A value built in place keeps
    its constructor's precise tuple type (``Nothing`` as ``(tag,)``, also
    through a tuple, a let or an ``If`` whose branches agree), and reading
    another constructor's fields of it, even in a clause its tag test
    never runs, is what TVM refuses at build time: a ``match_cast`` that
    cannot succeed ("tuple size mismatch"), or, cast through ``Object``
    first, a field its memory planner tracks and finds missing
    ("field_tokens.size() > tuple_item->index"). Such a clause is dropped
    before lowering: the clauses after it are the same chain without it,
    and a complete match's last remaining clause is still the one left."""
    work = [(pattern, ty)]
    while work:
        pat, t = work.pop()
        if not isinstance(t, relax.TupleType):
            continue  # an Object: any constructor may have built it
        if isinstance(pat, PatternConstructor):
            if len(t.fields) != 1 + len(pat.constructor.inputs):
                return True
            work.extend(zip(pat.patterns, list(t.fields)[1:], strict=False))
        elif isinstance(pat, PatternTuple):
            work.extend(zip(pat.patterns, t.fields, strict=False))
    return False


def links_values(ctor: Constructor) -> bool:
    """Whether a ``ctor`` value may hold another ADT value (a field of an
    ADT type, in a tuple too): such values can chain without bound."""
    return any(isinstance(leaf, TypeCall) for t in ctor.inputs for leaf in leaves(t))


def holds_object(ty: Any) -> bool:
    """Whether the Relax type ``ty`` is or holds (in a tuple) an ``Object``."""
    work = [ty]
    while work:
        t = work.pop()
        if isinstance(t, relax.ObjectType):
            return True
        if isinstance(t, relax.TupleType):
            work.extend(t.fields)
    return False


def vaguer(have: Any, want: Any) -> bool:
    """Whether the Relax type ``have`` is ``Object`` where ``want`` (of the
    same value) is more precise, at the top or inside a tuple."""
    work = [(have, want)]
    while work:
        a, b = work.pop()
        if isinstance(a, relax.ObjectType) and not isinstance(b, relax.ObjectType):
            return True
        if isinstance(a, relax.TupleType) and isinstance(b, relax.TupleType):
            if len(a.fields) == len(b.fields):
                work.extend(zip(a.fields, b.fields, strict=True))
    return False


def refutable(pattern: Pattern) -> bool:
    """Whether ``pattern`` may fail to match (it tests a constructor)."""
    work = [pattern]
    while work:
        p = work.pop()
        if isinstance(p, PatternConstructor):
            return True
        if isinstance(p, PatternTuple):
            work.extend(p.patterns)
    return False
