"""Hypothesis strategies for random WELL-TYPED effir programs, and for
programs with one deliberate type error.

``tests/ir/strategies.py`` builds well-formed modules for the parser round
trip and ignores types. This generator is type-directed instead: it picks a
target type and builds an expression of exactly that type, top-down, using
only productions whose argument types it can derive from the target. So it
knows the type of every sub-expression, and a test can compare what the
generator meant, what ``effir.check`` infers and what ``effir.interpret``
returns.

What a program contains: ``main`` with annotated tensor parameters (dtypes
float32/int32/bool, ranks 0..3, dims 1..4, sometimes main's symbolic dim
``n``) and a ``Key``; constants; let bindings (some annotated, some not, some
loosened to a ``?`` dim); tuples and projections; ``if``; local closures
that are called, some recursive (parameters often unannotated, so inference
must learn them from the call); polymorphic helpers (``@id``, ``@pair``,
``@unwrap_or``, ``@head_or``, ``@twice``, ``@length``, also ``@id`` as a
value) and helpers with symbolic dims of their own (``@outer``,
``@rowsum``); ``Option``/``List`` values built and matched (nested and
tuple patterns, ``match?``); references and global state cells; operators
(elementwise, broadcasting, comparisons, ``where``, ``cast``, reductions,
shape operators, ``nn.dense``, ``nn.softmax``, the random operators when
their rules are registered); ``cf.foreach`` / ``cf.while_loop`` with
closures as bodies; and shared sub-expressions (printed in graph form).

Run-time safety: programs never fail when run. Integer ``divide`` and
``power`` are not used; ``take`` clips or wraps; ``max``/``min``/``argmax``
never reduce an axis that may be empty; a ``?`` dimension (the iteration
count of a while loop, possibly 0) only ever sits at position 0 of a tensor
type and never meets another ``?`` in a broadcasting operator; loops that may
run zero times have static per-step outputs (the interpreter needs the
empty result's shape); recursion counts down from a constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import strategies as st

import effir
from effir.ir import (
    ANY,
    Clause,
    Constructor,
    Expr,
    Function,
    FuncType,
    GlobalTypeVar,
    GlobalVar,
    If,
    IRModule,
    KeyType,
    Let,
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    TypeCall,
    Var,
    astext,
    call_op,
    const,
    lookup_op,
)
from effir.ir.expr import Call
from effir.passes.analyses.type_solver import Solver, UnifyError
from effir.runtime.values import PRNGKey

# The fixed part of every module: ADTs and global helpers, polymorphic or
# with symbolic dims of their own (``n`` and ``m``, distinct from main's ``n``
# although spelled the same: [RULE TYPE-CALLDIMS] renames them at each call).
HELPERS_TEXT = """#[version = "0.0.5"]
type Option[A] { Some(A), None }
type List[A] { Cons(A, List[A]), Nil }
global @acc: Ref[float32] = ref(0f);
global @count = ref(0);
global @rng: Ref[Key] = ref(random.key(7));
def @id[A](%x: A) -> A { %x }
def @pair[A, B](%a: A, %b: B) -> (A, B) { (%a, %b) }
def @unwrap_or[A](%o: Option[A], %d: A) -> A {
  match (%o) { Some(%v) => %v, None => %d }
}
def @head_or[A](%l: List[A], %d: A) -> A {
  match (%l) { Cons(%h, _) => %h, Nil => %d }
}
def @twice[A](%f: fn (A) -> A, %x: A) -> A { %f(%f(%x)) }
def @length[A](%l: List[A]) -> int32 {
  match (%l) { Cons(_, %t) => 1 + @length(%t), Nil => 0 }
}
def @outer(%x: Tensor[(n), float32], %y: Tensor[(m), float32]) -> Tensor[(n, m), float32] {
  expand_dims(%x, axis=1) * %y
}
def @rowsum(%x: Tensor[(n, m), float32]) {
  sum(%x, axis=[1])
}
"""
HELPERS = effir.parse(HELPERS_TEXT, source_name="helpers.effir")
# Global state cells, usable anywhere like variables of type Ref[...].
CELLS: list[tuple[Expr, Type]] = [
    (GlobalVar("acc"), RefType(TensorType((), "float32"))),
    (GlobalVar("count"), RefType(TensorType((), "int32"))),
    (GlobalVar("rng"), RefType(KeyType())),
]
OPTION = GlobalTypeVar("Option")
LIST = GlobalTypeVar("List")
CTOR: dict[str, Constructor] = dict(HELPERS.constructors)

F32, I32, BOOL = "float32", "int32", "bool"
DTYPES = (F32, I32, BOOL)
SYM = "n"  # main's symbolic dimension
BOOL_SCALAR = TensorType((), BOOL)
I32_SCALAR = TensorType((), I32)
UNIT = TupleType(())

Dim = int | str
Shape = tuple[Dim, ...]


def tkey(t: Type) -> str:
    """Types are compared by their canonical text (nodes compare by identity)."""
    return astext(t)


def has_rules(name: str) -> bool:
    """Operators whose rules another helper may still be writing are used
    only once both rules exist."""
    definition = lookup_op(name)
    return definition is not None and {"type", "numpy"} <= set(definition.rules)


def is_static(t: Type) -> bool:
    """No symbolic or unknown dimension anywhere in ``t``."""
    if isinstance(t, TensorType):
        return all(isinstance(d, int) for d in t.shape)
    return all(is_static(c) for c in t.children() if isinstance(c, Type))


def well_placed(t: Type) -> bool:
    """``?`` only as the leading dimension of a tensor (see the module doc)."""
    if isinstance(t, TensorType):
        return ANY not in t.shape[1:]
    return all(well_placed(c) for c in t.children() if isinstance(c, Type))


def option_of(t: Type) -> TypeCall:
    return TypeCall(OPTION, (t,))


def list_of(t: Type) -> TypeCall:
    return TypeCall(LIST, (t,))


def unifies(a: Type, b: Type) -> bool:
    try:
        Solver().unify(a, b)
    except UnifyError:
        return False
    return True


class TypedProgram:
    """A module, arguments for ``@main``, and the type the generator built
    ``main``'s body to have (``n_size``: the run-time size of ``n``;
    ``expected``: every sub-expression built, with the type it was built to
    have; ``mutation``: the type error added, if any). Not a dataclass, so that
    hypothesis reports a failing example as program text."""

    def __init__(
        self,
        module: IRModule,
        args: tuple[Any, ...],
        result_type: Type,
        n_size: int,
        expected: list[tuple[Expr, Type]],
        mutation: str | None = None,
    ) -> None:
        self.module = module
        self.expected = expected
        self.args = args
        self.result_type = result_type
        self.n_size = n_size
        self.mutation = mutation

    def __repr__(self) -> str:
        return (
            f"TypedProgram(result_type={tkey(self.result_type)}, n={self.n_size}, "
            f"mutation={self.mutation})\n{astext(self.module)}"
        )


Production = Callable[[Type, int], Expr | None]

# Program size: productions (non-leaf nodes) at most, and nesting depth.
MAX_BUDGET = 40
MAX_DEPTH = 6

# Building a strategy per draw would dominate the run time: cache them.
_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}


class Gen:
    """The generator's state: hypothesis' ``draw``, the variables in scope
    with their types, and a budget of productions left."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any], budget: int) -> None:
        self.draw = draw
        self.budget = budget
        self.scope: list[tuple[Expr, Type]] = list(CELLS)
        self.use_n = draw(st.booleans())
        self.nv: Var | None = None
        self.counter = 0
        # Built expressions by type, with the variables in scope where they
        # were built, for sharing (the printer's graph form ``%0 = ...;``).
        self.pool: dict[str, list[tuple[Expr, frozenset[Expr]]]] = {}
        self.expected: list[tuple[Expr, Type]] = []

    # ------------------------------------------------------------ basics
    def flip(self, p_true: int = 1, out_of: int = 2) -> bool:
        return self.int_(0, out_of - 1) < p_true

    def pick(self, items: list[Any]) -> Any:
        return items[self.int_(0, len(items) - 1)]

    def int_(self, lo: int, hi: int) -> int:
        strategy = _INTEGERS.get((lo, hi))
        if strategy is None:
            strategy = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
        return self.draw(strategy)

    def var(self, hint: str, t: Type | None, annotate: bool | None = None) -> Var:
        """A fresh binder, annotated with ``t`` or not (drawn when None)."""
        self.counter += 1
        if annotate is None:
            annotate = self.flip()
        return Var(f"{hint}{self.counter}", t if annotate and t is not None else None)

    @contextmanager
    def bind(self, *pairs: tuple[Expr, Type]) -> Iterator[None]:
        self.scope.extend(pairs)
        try:
            yield
        finally:
            del self.scope[len(self.scope) - len(pairs) :]

    def ok(self, *types: Type) -> bool:
        """Types the generator may build: ``?`` well placed, ``n`` only when in use."""
        for t in types:
            if not well_placed(t):
                return False
            if not self.use_n and self._mentions_n(t):
                return False
        return True

    @staticmethod
    def _mentions_n(t: Type) -> bool:
        if isinstance(t, TensorType):
            return SYM in t.shape
        return any(Gen._mentions_n(c) for c in t.children() if isinstance(c, Type))

    # ------------------------------------------------------------ types
    def rand_dim(self, allow_n: bool = True) -> Dim:
        if allow_n and self.use_n and self.int_(0, 5) == 0:
            return SYM
        return self.int_(1, 4)

    def rand_shape(self, max_rank: int = 3, allow_n: bool = True) -> Shape:
        return tuple(self.rand_dim(allow_n) for _ in range(self.int_(0, max_rank)))

    def rand_tensor(
        self, dtypes: tuple[str, ...] = DTYPES, allow_any: bool = False, max_rank: int = 3
    ) -> TensorType:
        shape = self.rand_shape(max_rank)
        if allow_any and shape and self.int_(0, 7) == 0:
            shape = (ANY,) + shape[1:]
        return TensorType(shape, self.pick(list(dtypes)))

    def rand_type(self, depth: int = 2, allow_any: bool = True) -> Type:
        kinds = ["tensor"] * 8 + ["key"]
        if depth > 0:
            kinds += ["tuple", "tuple", "option", "list", "ref", "func"]
        kind = self.pick(kinds)
        if kind == "tensor":
            return self.rand_tensor(allow_any=allow_any)
        if kind == "key":
            return KeyType()
        if kind == "tuple":
            size = self.int_(0, 3)
            return TupleType(tuple(self.rand_type(depth - 1, allow_any) for _ in range(size)))
        if kind == "option":
            return option_of(self.rand_type(depth - 1, allow_any))
        if kind == "list":
            return list_of(self.rand_type(depth - 1, allow_any))
        if kind == "ref":
            return RefType(self.rand_type(depth - 1, allow_any))
        arity = self.int_(0, 2)
        args = tuple(self.rand_type(depth - 1, allow_any) for _ in range(arity))
        return FuncType(args, self.rand_type(depth - 1, allow_any))

    # -------------------------------------------------------- expressions
    def gen(self, t: Type, depth: int) -> Expr:
        """An expression of type ``t`` in the current scope."""
        expr = self._gen(t, depth)
        self.expected.append((expr, t))
        return expr

    def _gen(self, t: Type, depth: int) -> Expr:
        if depth <= 0 or self.budget <= 0:
            return self.leaf(t)
        shared = self.shareable(t)
        if shared and self.int_(0, 7) == 0:
            return self.pick(shared)
        self.budget -= 1
        productions = self.productions(t)
        for _ in range(4):
            expr = self.pick(productions)(t, depth - 1)
            if expr is not None:
                scope = frozenset(v for v, _ in self.scope)
                self.pool.setdefault(tkey(t), []).append((expr, scope))
                return expr
        return self.leaf(t)

    def shareable(self, t: Type) -> list[Expr]:
        """Expressions of type ``t`` built where every variable was in scope
        that is in scope here (so their free variables are)."""
        entries = self.pool.get(tkey(t))
        if not entries:
            return []
        scope = frozenset(v for v, _ in self.scope)
        return [e for e, built_in in entries if built_in <= scope]

    def scope_leaves(self, t: Type) -> list[Callable[[], Expr]]:
        """Ways to get a ``t`` from the scope: a variable, a field of a tuple
        variable, or the content of a reference variable."""
        want = tkey(t)
        found: list[Callable[[], Expr]] = []
        for var, vt in self.scope:
            if tkey(vt) == want:
                found.append(lambda var=var: var)
            if isinstance(vt, TupleType):
                for i, f in enumerate(vt.fields):
                    if tkey(f) == want:
                        found.append(lambda var=var, i=i: TupleGetItem(var, i))
            if isinstance(vt, RefType) and tkey(vt.value) == want:
                found.append(lambda var=var: RefRead(var))
        return found

    def leaf(self, t: Type) -> Expr:
        """A small expression of type ``t``; always succeeds."""
        found = self.scope_leaves(t)
        if found and self.int_(0, 3) > 0:
            return self.pick(found)()
        if isinstance(t, TensorType):
            if ANY in t.shape:
                return self.while_leaf(t)
            if SYM in t.shape:
                return self.symbolic_leaf(t)
            return self.constant(t)
        if isinstance(t, KeyType):
            return self.pick(self.scope_leaves(t))()  # main's %key is always in scope
        if isinstance(t, TupleType):
            return Tuple(tuple(self.leaf(f) for f in t.fields))
        if isinstance(t, RefType):
            return RefCreate(self.leaf(t.value))
        if isinstance(t, FuncType):
            params = tuple(self.var("p", a, annotate=True) for a in t.arg_types)
            with self.bind(*zip(params, t.arg_types, strict=True)):
                body = self.leaf(t.ret_type)
            return Function(params, body, t.ret_type if self.flip() else None)
        if isinstance(t, TypeCall):
            (elem,) = t.args
            if self.flip():
                ctor = CTOR["Some"] if t.func.name == "Option" else CTOR["Cons"]
                args = (
                    (self.leaf(elem),)
                    if ctor.name == "Some"
                    else (self.leaf(elem), self.empty_adt(t))
                )
                return Call(ctor, args)
            return self.empty_adt(t)
        raise AssertionError(f"no leaf for {tkey(t)}")

    def empty_adt(self, t: TypeCall) -> Expr:
        """``None``/``Nil`` alone has an unknown element type: bind it to an
        annotated variable so that inference can finish."""
        ctor = CTOR["None"] if t.func.name == "Option" else CTOR["Nil"]
        v = self.var("e", t, annotate=True)
        return Let(v, Call(ctor, ()), v)

    def constant(self, t: TensorType) -> Expr:
        shape = tuple(int(d) for d in t.shape)
        seed = self.int_(0, 2**16)
        rng = np.random.default_rng(seed)
        if t.dtype == F32:
            data = rng.uniform(-3, 3, shape).astype(np.float32)
            if self.flip(1, 4):
                data = np.round(data)
        elif t.dtype == I32:
            data = rng.integers(-4, 5, shape).astype(np.int32)
        else:
            data = rng.integers(0, 2, shape).astype(bool)
        return const(data, t.dtype)

    def symbolic_leaf(self, t: TensorType) -> Expr:
        """A tensor whose shape mentions ``n``, from main's ``%nv: Tensor[(n),
        float32]``: ``nv`` moved to each ``n`` position by ``expand_dims`` and
        broadcast against a constant that has 1 there."""
        assert self.nv is not None
        rank = len(t.shape)
        base = tuple(1 if d == SYM else d for d in t.shape)
        acc: Expr = self.constant(TensorType(base, F32))
        for p, d in enumerate(t.shape):
            if d != SYM:
                continue
            e: Expr = self.nv
            if p > 0:
                e = call_op("expand_dims", e, axis=0, num_newaxis=p)
            if rank - p - 1 > 0:
                e = call_op("expand_dims", e, axis=p + 1, num_newaxis=rank - p - 1)
            acc = call_op("add", acc, e)
        return acc if t.dtype == F32 else call_op("cast", acc, dtype=t.dtype)

    def while_leaf(self, t: TensorType) -> Expr:
        """A tensor with a leading ``?``: the stacked outputs of a while loop."""
        step = TensorType(t.shape[1:], t.dtype)
        state = self.pick([UNIT, I32_SCALAR])
        return TupleGetItem(self.while_loop(step, state, 0), 0)

    # ------------------------------------------------------- productions
    def productions(self, t: Type) -> list[Production]:
        """The productions that can build a ``t``, repeated to weight them."""
        generic: list[Production] = [
            self.p_let,
            self.p_let,
            self.p_if,
            self.p_project,
            self.p_closure,
            self.p_recursive,
            self.p_id,
            self.p_pair_project,
            self.p_unwrap_or,
            self.p_head_or,
            self.p_twice,
            self.p_match_option,
            self.p_match_list,
            self.p_match_tuple,
            self.p_ref,
            self.p_foreach_state,
            self.p_while_state,
        ]
        if self.callable_vars(t):
            generic += [self.p_call_var] * 3
        specific: list[Production] = []
        if isinstance(t, TensorType):
            specific = self.tensor_productions(t) * 2
        elif isinstance(t, TupleType):
            specific = [self.p_tuple] * 6
            if len(t.fields) == 2:
                specific.append(self.p_pair)
            if t.fields and all(isinstance(f, KeyType) for f in t.fields):
                specific += [self.p_split] * 2
            if not t.fields:
                specific += [self.p_ref_write] * 2
        elif isinstance(t, TypeCall):
            specific = [self.p_adt] * 6
        elif isinstance(t, RefType):
            specific = [self.p_ref_create] * 4
        elif isinstance(t, FuncType):
            specific = [self.p_function] * 4
        elif isinstance(t, KeyType):
            specific = [self.p_split_key] * 3
        return generic + specific

    # generic productions: any target type
    def p_let(self, t: Type, d: int) -> Expr:
        """A let; an annotation may loosen a tensor's leading dim to ``?``,
        and then the variable has the annotated type (as in Relay)."""
        u = t if self.flip(1, 4) else self.rand_type(1)
        value = self.gen(u, d)
        if isinstance(u, TensorType) and u.shape and u.shape[0] != ANY and self.flip(1, 6):
            u = TensorType((ANY,) + u.shape[1:], u.dtype)
            v = self.var("x", u, annotate=True)
        else:
            v = self.var("x", u)
        with self.bind((v, u)):
            body = self.gen(t, d)
        return Let(v, value, body)

    def p_if(self, t: Type, d: int) -> Expr:
        return If(self.gen(BOOL_SCALAR, d), self.gen(t, d), self.gen(t, d))

    def p_project(self, t: Type, d: int) -> Expr:
        fields = [self.rand_type(1) for _ in range(self.int_(0, 2))]
        i = self.int_(0, len(fields))
        fields.insert(i, t)
        return TupleGetItem(self.gen(TupleType(tuple(fields)), d), i)

    def p_closure(self, t: Type, d: int) -> Expr:
        """A local function, called once: directly, or bound by a let. Its
        unannotated parameters are learned from the call."""
        arg_types = [self.rand_type(1) for _ in range(self.int_(0, 2))]
        params = tuple(self.var("a", a) for a in arg_types)
        with self.bind(*zip(params, arg_types, strict=True)):
            body = self.gen(t, d)
        fn = Function(params, body, t if self.flip(1, 3) else None)
        args = tuple(self.gen(a, d) for a in arg_types)
        if self.flip():
            return Call(fn, args)
        f = self.var("f", FuncType(tuple(arg_types), t), annotate=self.flip(1, 4))
        return Let(f, fn, Call(f, args))

    def p_recursive(self, t: Type, d: int) -> Expr:
        """A let-bound local function that calls itself (the let's variable
        is in scope in its value), counting down from a small constant:
        ``let %f = fn (%i, %acc) { if (%i <= 0) { %acc } else { %f(%i - 1, ..) } }``.
        ``%f`` is not offered to the generator: only this call recurses."""
        fn_type = FuncType((I32_SCALAR, t), t)
        f = self.var("f", fn_type, annotate=self.flip(1, 3))
        i, acc = self.var("i", I32_SCALAR), self.var("acc", t)
        with self.bind((i, I32_SCALAR), (acc, t)):
            step = self.gen(t, d)
            base = acc if self.flip() else self.gen(t, d)
        again = Call(f, (call_op("subtract", i, const(1, I32)), step))
        body = If(call_op("less_equal", i, const(0, I32)), base, again)
        fn = Function((i, acc), body, t if self.flip(1, 3) else None)
        return Let(f, fn, Call(f, (const(self.int_(0, 3), I32), self.gen(t, d))))

    def p_id(self, t: Type, d: int) -> Expr:
        return Call(GlobalVar("id"), (self.gen(t, d),))

    def p_pair_project(self, t: Type, d: int) -> Expr:
        other = self.rand_type(1)
        if self.flip():
            return TupleGetItem(Call(GlobalVar("pair"), (self.gen(t, d), self.gen(other, d))), 0)
        return TupleGetItem(Call(GlobalVar("pair"), (self.gen(other, d), self.gen(t, d))), 1)

    def p_unwrap_or(self, t: Type, d: int) -> Expr:
        return Call(GlobalVar("unwrap_or"), (self.gen(option_of(t), d), self.gen(t, d)))

    def p_head_or(self, t: Type, d: int) -> Expr:
        return Call(GlobalVar("head_or"), (self.gen(list_of(t), d), self.gen(t, d)))

    def p_twice(self, t: Type, d: int) -> Expr:
        if self.flip(1, 5):  # a polymorphic global as a value
            return Call(GlobalVar("twice"), (GlobalVar("id"), self.gen(t, d)))
        z = self.var("z", t)
        with self.bind((z, t)):
            body = self.gen(t, d)
        fn = Function((z,), body, t if self.flip(1, 3) else None)
        return Call(GlobalVar("twice"), (fn, self.gen(t, d)))

    def p_match_option(self, t: Type, d: int) -> Expr:
        u = self.rand_type(1)
        known_some = self.flip(1, 4)
        if known_some:
            data: Expr = Call(CTOR["Some"], (self.gen(u, d),))
        else:
            data = self.gen(option_of(u), d)
        if isinstance(u, TupleType) and self.flip():  # Some((%y, _, ..))
            fields = [self.var("y", None) for _ in u.fields]
            used = [self.flip() for _ in u.fields]
            inner = PatternTuple(
                tuple(
                    PatternVar(y) if keep else PatternWildcard()
                    for y, keep in zip(fields, used, strict=True)
                )
            )
            bound = [(y, ft) for y, ft, keep in zip(fields, u.fields, used, strict=True) if keep]
        else:
            v = self.var("v", None)
            inner, bound = PatternVar(v), [(v, u)]
        with self.bind(*bound):
            some_body = self.gen(t, d)
        some = Clause(PatternConstructor(CTOR["Some"], (inner,)), some_body)
        if known_some and self.flip():  # `match?` that cannot fail here
            return Match(data, (some,), complete=False)
        other_pattern = (
            PatternConstructor(CTOR["None"], ()) if self.flip(2, 3) else PatternWildcard()
        )
        clauses = [some, Clause(other_pattern, self.gen(t, d))]
        if self.flip(1, 3) and isinstance(other_pattern, PatternConstructor):
            clauses.reverse()
        return Match(data, tuple(clauses))

    def p_match_list(self, t: Type, d: int) -> Expr:
        u = self.rand_type(1)
        data = self.gen(list_of(u), d)
        h, tl = self.var("h", None), self.var("tl", None)
        if self.flip(1, 3):  # a nested pattern first, then a catch-all
            h2 = self.var("h", None)
            pattern = PatternConstructor(
                CTOR["Cons"],
                (
                    PatternVar(h),
                    PatternConstructor(CTOR["Cons"], (PatternVar(h2), PatternWildcard())),
                ),
            )
            with self.bind((h, u), (h2, u)):
                first = self.gen(t, d)
            return Match(data, (Clause(pattern, first), Clause(PatternWildcard(), self.gen(t, d))))
        with self.bind((h, u), (tl, list_of(u))):
            cons = self.gen(t, d)
        cons_clause = Clause(
            PatternConstructor(CTOR["Cons"], (PatternVar(h), PatternVar(tl))), cons
        )
        nil_clause = Clause(PatternConstructor(CTOR["Nil"], ()), self.gen(t, d))
        return Match(data, (cons_clause, nil_clause))

    def p_match_tuple(self, t: Type, d: int) -> Expr:
        fields = tuple(self.rand_type(1) for _ in range(self.int_(1, 3)))
        data = self.gen(TupleType(fields), d)
        patterns = []
        bound = []
        for f in fields:
            if self.flip(2, 3):
                v = self.var("y", None)
                patterns.append(PatternVar(v))
                bound.append((v, f))
            else:
                patterns.append(PatternWildcard())
        with self.bind(*bound):
            body = self.gen(t, d)
        return Match(data, (Clause(PatternTuple(tuple(patterns)), body),))

    def p_ref(self, t: Type, d: int) -> Expr:
        """``let %r = ref(a); ref_write(%r, b); ref_read(%r)``: ``b`` may read %r."""
        r = self.var("r", RefType(t))
        init = self.gen(t, d)
        with self.bind((r, RefType(t))):
            new = self.gen(t, d)
        return Let(r, RefCreate(init), Let(Var("_"), RefWrite(r, new), RefRead(r)))

    def callable_vars(self, t: Type) -> list[tuple[Expr, FuncType]]:
        want = tkey(t)
        return [
            (v, vt)
            for v, vt in self.scope
            if isinstance(vt, FuncType) and tkey(vt.ret_type) == want
        ]

    def p_call_var(self, t: Type, d: int) -> Expr | None:
        """Call a function-typed variable in scope that returns ``t``."""
        f, ft = self.pick(self.callable_vars(t))
        return Call(f, tuple(self.gen(a, d) for a in ft.arg_types))

    def p_foreach_state(self, t: Type, d: int) -> Expr | None:
        return self.foreach_expr(self.rand_step_output(), t, self.rand_dim(), d, field=1)

    def p_while_state(self, t: Type, d: int) -> Expr:
        loop = self.while_loop(self.rand_step_output(), t, d)
        return TupleGetItem(TupleGetItem(loop, 1), 1)

    def rand_step_output(self) -> Type:
        if self.flip(1, 4):
            return UNIT if self.flip() else TupleType((self.rand_tensor(max_rank=2),) * 2)
        return self.rand_tensor(max_rank=2)

    def foreach_expr(self, out: Type, state: Type, length: Dim, d: int, field: int) -> Expr | None:
        """``cf.foreach(fn (%x, %st) { (out, new_state) }, xs, init).field``."""
        if length == ANY and not is_static(out):
            return None  # it may run zero times
        step = self.rand_tensor(max_rank=2)
        xs_type = TensorType((length,) + step.shape, step.dtype)
        if not self.ok(xs_type, stacked(out, length), state):
            return None
        x, s = self.var("x", step), self.var("st", state)
        with self.bind((x, step), (s, state)):
            body = Tuple((self.gen(out, d), self.gen(state, d)))
        ret = TupleType((out, state)) if self.flip(1, 4) else None
        loop = call_op(
            "cf.foreach", Function((x, s), body, ret), self.gen(xs_type, d), self.gen(state, d)
        )
        return TupleGetItem(loop, field)

    def while_loop(self, out: Type, state: Type, d: int) -> Expr:
        """``cf.while_loop`` with a counter in its state: ``(i, s)`` runs while
        ``i < N``; has type ``(stacked outs, (int32, state))`` (and, padded,
        the count after them). ``max_iterations``: none, the attribute, or
        an argument known at run time (``k`` or ``k + 1``, from data), with
        the outputs then padded to it when their shape is static."""
        zero_ok = is_static(out)
        limit = self.int_(0 if zero_ok else 1, 3)
        mode = self.int_(0, 3)
        max_iterations = None if mode < 2 else self.int_(0 if zero_ok else 1, 4)
        loop_state = TupleType((I32_SCALAR, state))
        c = self.var("c", loop_state)
        cond = Function(
            (c,),
            call_op("less", TupleGetItem(c, 0), const(limit, I32)),
            BOOL_SCALAR if self.flip(1, 4) else None,
        )
        s = self.var("s", loop_state)
        with self.bind((s, loop_state)):
            step_out = self.gen(out, d)
            new_state = self.gen(state, d)
        count = call_op("add", TupleGetItem(s, 0), const(1, I32))
        body = Function((s,), Tuple((step_out, Tuple((count, new_state)))))
        init = Tuple((const(0, I32), self.gen(state, d)))
        if mode != 1:
            return call_op("cf.while_loop", cond, body, init, max_iterations=max_iterations)
        k = const(self.int_(0 if zero_ok else 1, 3), "int64")
        data = call_op("greater", self.gen(TensorType((), F32), d), const(0.0, F32))
        bound = call_op("add", k, call_op("cast", data, dtype="int64"))
        pad = zero_ok and self.flip()
        return call_op("cf.while_loop", cond, body, init, bound, pad_outputs=pad)

    # type-specific productions
    def p_tuple(self, t: Type, d: int) -> Expr:
        assert isinstance(t, TupleType)
        return Tuple(tuple(self.gen(f, d) for f in t.fields))

    def p_pair(self, t: Type, d: int) -> Expr:
        assert isinstance(t, TupleType)
        return Call(GlobalVar("pair"), tuple(self.gen(f, d) for f in t.fields))

    def p_split(self, t: Type, d: int) -> Expr | None:
        assert isinstance(t, TupleType)
        if not has_rules("random.split"):
            return None
        return call_op("random.split", self.gen(KeyType(), d), num=len(t.fields))

    def p_split_key(self, t: Type, d: int) -> Expr | None:
        choice = self.int_(0, 3)
        if choice == 0 and has_rules("random.key"):
            return call_op("random.key", self.gen(I32_SCALAR, d))
        if choice == 1 and has_rules("random.fold_in"):
            return call_op("random.fold_in", self.gen(KeyType(), d), self.gen(I32_SCALAR, d))
        if not has_rules("random.split"):
            return None
        num = self.int_(1, 3)
        return TupleGetItem(
            call_op("random.split", self.gen(KeyType(), d), num=num), self.int_(0, num - 1)
        )

    def p_ref_write(self, t: Type, d: int) -> Expr:
        u = self.rand_type(1)
        r = self.var("r", RefType(u))
        init = self.gen(u, d)
        with self.bind((r, RefType(u))):
            return Let(r, RefCreate(init), RefWrite(r, self.gen(u, d)))

    def p_adt(self, t: Type, d: int) -> Expr:
        assert isinstance(t, TypeCall)
        (elem,) = t.args
        choice = self.int_(0, 3)
        if choice == 0:
            return self.empty_adt(t)
        if t.func.name == "Option":
            return Call(CTOR["Some"], (self.gen(elem, d),))
        return Call(CTOR["Cons"], (self.gen(elem, d), self.gen(t, d - 1)))

    def p_ref_create(self, t: Type, d: int) -> Expr:
        assert isinstance(t, RefType)
        return RefCreate(self.gen(t.value, d))

    def p_function(self, t: Type, d: int) -> Expr:
        """A function value: its parameters must be annotated, as nothing
        else says what they are."""
        assert isinstance(t, FuncType)
        if len(t.arg_types) == 1 and tkey(t.arg_types[0]) == tkey(t.ret_type) and self.flip(1, 3):
            return GlobalVar("id")
        params = tuple(self.var("p", a, annotate=True) for a in t.arg_types)
        with self.bind(*zip(params, t.arg_types, strict=True)):
            body = self.gen(t.ret_type, d)
        return Function(params, body, t.ret_type if self.flip() else None)

    # ---------------------------------------------------- tensor operators
    def tensor_productions(self, t: TensorType) -> list[Production]:
        ps: list[Production] = [self.p_unary, self.p_cast, self.p_reduce, self.p_reduce]
        ps += [self.p_transpose, self.p_expand_dims, self.p_squeeze, self.p_take]
        ps += [self.p_strided_slice, self.p_unary, self.p_reduce]
        if t.dtype == F32 and len(t.shape) in (1, 2):
            ps += [self.p_helper_symbolic] * 3
        if ANY not in t.shape:
            ps += [self.p_binary] * 3 + [self.p_where, self.p_concatenate, self.p_stack]
            if t.dtype == BOOL:
                ps += [self.p_compare, self.p_compare]
        if is_static(t):
            ps += [self.p_reshape, self.p_random]
        if t.dtype in (F32, I32) and t.shape:
            ps.append(self.p_dense)
        if t.dtype == F32 and t.shape:
            ps.append(self.p_softmax)
        if t.dtype == F32:
            ps.append(self.p_dropout)
        if t.shape:
            ps.append(self.p_foreach_out)
            if t.shape[0] == ANY:
                ps += [self.p_while_out] * 2
        if tkey(t) == tkey(I32_SCALAR):
            ps += [self.p_length, self.p_while_counter]
        return ps

    def p_unary(self, t: TensorType, d: int) -> Expr:
        names = {
            F32: ["negative", "exp", "log", "sqrt", "tanh", "sigmoid", "nn.relu"],
            I32: ["negative", "nn.relu"],
            BOOL: ["logical_not"],
        }[t.dtype]
        return call_op(self.pick(names), self.gen(t, d))

    def p_cast(self, t: TensorType, d: int) -> Expr:
        source = TensorType(t.shape, self.pick(list(DTYPES)))
        return call_op("cast", self.gen(source, d), dtype=t.dtype)

    def broadcast_parts(self, shape: Shape, count: int) -> list[Shape] | None:
        """``count`` shapes that broadcast to exactly ``shape``: per dim,
        some parts keep it and the others have 1; some parts drop leading
        dims (numpy pads them with 1)."""
        rank = len(shape)
        drops = [self.int_(0, rank) if self.flip(1, 3) else 0 for _ in range(count)]
        if min(drops) > 0:
            drops[self.int_(0, count - 1)] = 0
        parts: list[list[Dim]] = [[] for _ in range(count)]
        for i, dim in enumerate(shape):
            alive = [j for j in range(count) if drops[j] <= i]
            keep = {j for j in alive if self.flip()}
            if not keep:
                keep = {self.pick(alive)}
            for j in alive:
                parts[j].append(dim if j in keep or dim == 1 else 1)
        return [tuple(p) for p in parts]

    def p_binary(self, t: TensorType, d: int) -> Expr:
        names = {
            F32: ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum"],
            I32: ["add", "subtract", "multiply", "maximum", "minimum"],
            BOOL: ["logical_and", "logical_or"],
        }[t.dtype]
        a, b = self.broadcast_parts(t.shape, 2)
        return call_op(
            self.pick(names),
            self.gen(TensorType(a, t.dtype), d),
            self.gen(TensorType(b, t.dtype), d),
        )

    def p_compare(self, t: TensorType, d: int) -> Expr:
        name = self.pick(["less", "less_equal", "greater", "greater_equal", "equal", "not_equal"])
        dtype = self.pick(list(DTYPES))
        a, b = self.broadcast_parts(t.shape, 2)
        return call_op(name, self.gen(TensorType(a, dtype), d), self.gen(TensorType(b, dtype), d))

    def p_where(self, t: TensorType, d: int) -> Expr:
        c, x, y = self.broadcast_parts(t.shape, 3)
        return call_op(
            "where",
            self.gen(TensorType(c, BOOL), d),
            self.gen(TensorType(x, t.dtype), d),
            self.gen(TensorType(y, t.dtype), d),
        )

    def p_reduce(self, t: TensorType, d: int) -> Expr | None:
        """A reduction whose result is ``t``: the input is ``t`` with the
        reduced axes inserted (or, with keepdims, its 1s replaced)."""
        argmax = t.dtype == I32 and self.flip(1, 3)
        if argmax:
            name = "argmax"
            dtype = self.pick(list(DTYPES))
        else:
            name = self.pick(
                {
                    F32: ["sum", "mean", "max", "min", "prod"],
                    I32: ["sum", "max", "min", "prod"],
                    BOOL: ["max", "min"],
                }[t.dtype]
            )
            dtype = t.dtype
        keepdims = self.flip(1, 3)
        if keepdims:
            ones = [i for i, dim in enumerate(t.shape) if dim == 1]
            if not ones:
                return None
            reduced = sorted({self.pick(ones) for _ in range(self.int_(1, len(ones)))})
            shape = list(t.shape)
        else:
            shape = list(t.shape)
            reduced = []
            for _ in range(self.int_(1, 2)):
                pos = self.int_(0, len(shape))
                shape.insert(pos, 1)  # placeholder, sized below
                reduced = [r + 1 if r >= pos else r for r in reduced] + [pos]
            reduced.sort()
        for r in reduced:
            if r == 0 and name in ("sum", "mean") and self.flip(1, 5):
                shape[r] = ANY  # may be 0 at run time: fine for sum and mean only
            else:
                shape[r] = self.rand_dim()
        rank = len(shape)
        if argmax and 1 < len(reduced) < rank:
            return None
        source = TensorType(tuple(shape), dtype)
        if not self.ok(source):
            return None
        if len(reduced) == rank and self.flip():
            attrs: dict[str, Any] = {"axis": None}
        elif len(reduced) < rank and self.flip(1, 4):
            attrs = {"axis": [i for i in range(rank) if i not in reduced], "exclude": True}
        else:
            attrs = {"axis": [r - rank if self.flip(1, 4) else r for r in reduced]}
        return call_op(name, self.gen(source, d), keepdims=keepdims, **attrs)

    def p_reshape(self, t: TensorType, d: int) -> Expr:
        size = math.prod(int(x) for x in t.shape)
        dims: list[int] = []
        left = size
        for _ in range(self.int_(0, 2)):
            divisor = self.pick([k for k in range(1, left + 1) if left % k == 0])
            dims.append(divisor)
            left //= divisor
        if left > 1 or self.flip():
            dims.append(left)
        self.draw(st.randoms(use_true_random=False)).shuffle(dims)
        newshape = [int(x) for x in t.shape]
        if newshape and self.flip(1, 3):
            newshape[self.int_(0, len(newshape) - 1)] = -1
        source = TensorType(tuple(dims), t.dtype)
        return call_op("reshape", self.gen(source, d), newshape=newshape)

    def p_transpose(self, t: TensorType, d: int) -> Expr | None:
        rank = len(t.shape)
        if self.flip(1, 3):
            axes = None
            perm = list(reversed(range(rank)))
        else:
            perm = list(self.draw(st.permutations(list(range(rank)))))
            axes = perm
        shape: list[Dim] = [0] * rank
        for i, p in enumerate(perm):
            shape[p] = t.shape[i]
        source = TensorType(tuple(shape), t.dtype)
        if not self.ok(source):
            return None
        return call_op("transpose", self.gen(source, d), axes=axes)

    def p_expand_dims(self, t: TensorType, d: int) -> Expr | None:
        rank = len(t.shape)
        runs = [
            (a, c)
            for a in range(rank + 1)
            for c in range(0, rank - a + 1)
            if all(x == 1 for x in t.shape[a : a + c])
        ]
        a, c = self.pick(runs)
        shape = t.shape[:a] + t.shape[a + c :]
        source = TensorType(shape, t.dtype)
        if not self.ok(source):
            return None
        axis = a - len(shape) - 1 if self.flip(1, 4) else a
        return call_op("expand_dims", self.gen(source, d), axis=axis, num_newaxis=c)

    def p_squeeze(self, t: TensorType, d: int) -> Expr | None:
        shape = list(t.shape)
        inserted: list[int] = []
        for _ in range(self.int_(1, 2)):
            pos = self.int_(0, len(shape))
            shape.insert(pos, 1)
            inserted = [i + 1 if i >= pos else i for i in inserted] + [pos]
        source = TensorType(tuple(shape), t.dtype)
        if not self.ok(source):
            return None
        if is_static(source) and 1 not in t.shape and self.flip():
            axis = None
        else:
            axis = sorted(inserted)
        return call_op("squeeze", self.gen(source, d), axis=axis)

    def p_concatenate(self, t: TensorType, d: int) -> Expr | None:
        if not t.shape:
            return None
        axis = self.int_(0, len(t.shape) - 1)
        size = t.shape[axis]
        if isinstance(size, int):
            cuts = sorted(
                {self.int_(1, size - 1) for _ in range(self.int_(0, 2))} if size > 1 else set()
            )
            bounds = [0, *cuts, size]
            sizes: list[Dim] = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
        else:
            sizes = [size]
        pieces = tuple(
            TensorType(t.shape[:axis] + (s,) + t.shape[axis + 1 :], t.dtype) for s in sizes
        )
        written = axis - len(t.shape) if self.flip(1, 4) else axis
        return call_op("concatenate", self.gen(TupleType(pieces), d), axis=written)

    def p_stack(self, t: TensorType, d: int) -> Expr | None:
        axes = [i for i, dim in enumerate(t.shape) if isinstance(dim, int)]
        if not axes:
            return None
        axis = self.pick(axes)
        piece = TensorType(t.shape[:axis] + t.shape[axis + 1 :], t.dtype)
        pieces = TupleType((piece,) * int(t.shape[axis]))
        return call_op("stack", self.gen(pieces, d), axis=axis)

    def p_take(self, t: TensorType, d: int) -> Expr | None:
        mode = self.pick(["clip", "wrap"])
        rank = len(t.shape)
        if self.flip(1, 4):  # axis=None: index the flattened data
            data = TensorType(self.rand_shape(allow_n=False), t.dtype)
            indices = TensorType(t.shape, I32)
            if not self.ok(indices):
                return None
            return call_op("take", self.gen(data, d), self.gen(indices, d), mode=mode)
        p = self.int_(0, rank)
        q = self.int_(0, rank - p)
        indices = TensorType(t.shape[p : p + q], I32)
        data = TensorType(t.shape[:p] + (self.rand_dim(),) + t.shape[p + q :], t.dtype)
        if not self.ok(indices, data):
            return None
        axis = p - len(data.shape) if self.flip(1, 4) else p
        return call_op("take", self.gen(data, d), self.gen(indices, d), axis=axis, mode=mode)

    def slice_of(self, size: int) -> tuple[int, int, int, int]:
        """(input size, begin, end, stride) whose Python slice has ``size`` elements."""
        stride = self.pick([1, 1, 2, 3, -1, -2])
        span = (size - 1) * abs(stride) + 1
        full = span + self.int_(0, 3)
        if stride > 0:
            begin = self.int_(0, full - span)
            end = begin + span
            if end == full and self.flip():
                end = 2**31 - 1  # "to the end"
        else:
            begin = self.int_(span - 1, full - 1)
            end = begin - span
            if end < 0:
                end = -full - 1  # before the first element
        if begin < full and self.flip(1, 4):
            begin -= full  # the same index, counted from the end
        assert len(range(full)[begin:end:stride]) == size
        return full, begin, end, stride

    def p_strided_slice(self, t: TensorType, d: int) -> Expr | None:
        rank = len(t.shape)
        static = [i for i, dim in enumerate(t.shape) if isinstance(dim, int)]
        if not static:
            return None
        shape = list(t.shape)
        if self.flip():  # leading axes, no `axes` attribute
            count = self.int_(1, rank)
            sliced = list(range(count))
            if not all(i in static for i in sliced):
                return None
            axes = None
        else:
            sliced = sorted({self.pick(static) for _ in range(self.int_(1, len(static)))})
            axes = sliced
        begin, end, strides = [], [], []
        for i in sliced:
            full, b, e, s = self.slice_of(int(t.shape[i]))
            shape[i] = full
            begin.append(b)
            end.append(e)
            strides.append(s)
        source = TensorType(tuple(shape), t.dtype)
        if not self.ok(source):
            return None
        return call_op(
            "strided_slice",
            self.gen(source, d),
            begin=begin,
            end=end,
            strides=None if all(s == 1 for s in strides) and self.flip() else strides,
            axes=axes,
        )

    def p_dense(self, t: TensorType, d: int) -> Expr | None:
        k = self.rand_dim()
        units = t.shape[-1]
        x = TensorType(t.shape[:-1] + (k,), t.dtype)
        w = TensorType((units, k), t.dtype)
        if not self.ok(x, w):
            return None
        attrs = {"units": units} if isinstance(units, int) and self.flip() else {}
        return call_op("nn.dense", self.gen(x, d), self.gen(w, d), **attrs)

    def p_softmax(self, t: TensorType, d: int) -> Expr:
        rank = len(t.shape)
        name = self.pick(["nn.softmax", "nn.log_softmax"])
        return call_op(name, self.gen(t, d), axis=self.int_(-rank, rank - 1))

    def p_random(self, t: TensorType, d: int) -> Expr | None:
        if t.dtype == I32:
            return None
        shape = [int(x) for x in t.shape]
        key = self.gen(KeyType(), d)
        if t.dtype == F32 and has_rules("random.uniform") and self.flip():
            return call_op("random.uniform", key, shape=shape, low=-1.0, high=2.0)
        if t.dtype == F32 and has_rules("random.normal"):
            return call_op("random.normal", key, shape=shape)
        if t.dtype == BOOL and has_rules("random.bernoulli"):
            return call_op("random.bernoulli", key, p=0.3, shape=shape)
        return None

    def p_dropout(self, t: TensorType, d: int) -> Expr | None:
        if not has_rules("random.dropout"):
            return None
        return call_op("random.dropout", self.gen(t, d), self.gen(KeyType(), d), rate=0.25)

    def p_helper_symbolic(self, t: TensorType, d: int) -> Expr | None:
        """``@outer`` and ``@rowsum``: their own ``n``/``m`` become the caller's dims."""
        if t.dtype != F32 or len(t.shape) not in (1, 2):
            return None
        if len(t.shape) == 2:
            x, y = TensorType(t.shape[:1], F32), TensorType(t.shape[1:], F32)
            if not self.ok(x, y):
                return None
            return Call(GlobalVar("outer"), (self.gen(x, d), self.gen(y, d)))
        source = TensorType((t.shape[0], self.rand_dim()), F32)
        return Call(GlobalVar("rowsum"), (self.gen(source, d),))

    def p_foreach_out(self, t: TensorType, d: int) -> Expr | None:
        out = TensorType(t.shape[1:], t.dtype)
        return self.foreach_expr(out, self.rand_type(1), t.shape[0], d, field=0)

    def p_while_out(self, t: TensorType, d: int) -> Expr:
        out = TensorType(t.shape[1:], t.dtype)
        return TupleGetItem(self.while_loop(out, self.rand_type(1), d), 0)

    def p_while_counter(self, t: TensorType, d: int) -> Expr:
        loop = self.while_loop(self.rand_step_output(), self.rand_type(1), d)
        return TupleGetItem(TupleGetItem(loop, 1), 0)

    def p_length(self, t: TensorType, d: int) -> Expr:
        return Call(GlobalVar("length"), (self.gen(list_of(self.rand_type(1)), d),))


def stacked(out: Type, length: Dim) -> Type:
    """The type of per-step outputs stacked along a new leading axis."""
    if isinstance(out, TupleType):
        return TupleType(tuple(stacked(f, length) for f in out.fields))
    assert isinstance(out, TensorType)
    return TensorType((length,) + out.shape, out.dtype)


def _argument(t: Type, n_size: int, rng: np.random.Generator) -> Any:
    if isinstance(t, KeyType):
        return PRNGKey(rng.integers(0, 2**32, 2, dtype=np.uint64))
    assert isinstance(t, TensorType)
    shape = tuple(n_size if dim == SYM else int(dim) for dim in t.shape)
    if t.dtype == F32:
        return rng.standard_normal(shape).astype(np.float32)
    if t.dtype == I32:
        return rng.integers(-5, 6, shape).astype(np.int32)
    return rng.integers(0, 2, shape).astype(bool)


def _build(draw: Callable[[st.SearchStrategy[Any]], Any], mutate: bool) -> TypedProgram:
    g = Gen(draw, budget=draw(st.integers(8, MAX_BUDGET)))
    n_size = draw(st.integers(1, 4))
    params: list[tuple[Var, Type]] = []
    key = Var("key", KeyType())
    params.append((key, KeyType()))
    if g.use_n:
        g.nv = Var("nv", TensorType((SYM,), F32))
        params.append((g.nv, g.nv.type_annotation))  # type: ignore[arg-type]
    for i in range(draw(st.integers(0, 3))):
        t = g.rand_tensor()
        params.append((Var(f"in{i}", t), t))
    order = draw(st.permutations(range(len(params))))
    params = [params[i] for i in order]
    result = g.rand_type(2)
    with g.bind(*params):
        body = g.gen(result, draw(st.integers(2, MAX_DEPTH)))
        mutation = None
        if mutate:
            body, mutation = mutate_body(g, body, result)
    main = Function(tuple(v for v, _ in params), body, result if g.flip(1, 3) else None)
    module = HELPERS.with_function("main", main)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args = tuple(_argument(t, n_size, rng) for _, t in params)
    return TypedProgram(module, args, result, n_size, g.expected, mutation)


@st.composite
def typed_programs(draw: Callable[[st.SearchStrategy[Any]], Any]) -> TypedProgram:
    """Well-typed modules whose ``main`` body has type ``result_type``."""
    return _build(draw, mutate=False)


@st.composite
def ill_typed_programs(draw: Callable[[st.SearchStrategy[Any]], Any]) -> TypedProgram:
    """Well-typed modules with one type error added to ``main``
    (``mutation`` names it)."""
    return _build(draw, mutate=True)


# ------------------------------------------------------------ type errors
def different_type(g: Gen, t: Type) -> Type:
    """A type that does not unify with ``t``."""
    for _ in range(3):
        u = g.rand_type(1, allow_any=False)
        if g.ok(u) and not unifies(t, u):
            return u
    if isinstance(t, TensorType):
        return TensorType(t.shape, F32 if t.dtype != F32 else I32)
    return TensorType((), F32) if isinstance(t, KeyType) else KeyType()


def mutate_body(g: Gen, body: Expr, t: Type) -> tuple[Expr, str]:
    """Add one type error to ``body`` (of type ``t``), in main's scope."""
    kind = g.pick(
        [
            "if-branches",
            "if-condition",
            "unary-dtype",
            "binary-dtypes",
            "broadcast",
            "tuple-index",
            "let-annotation",
            "constructor-argument",
            "ref-write",
            "arity",
            "closure-parameter",
            "dense-reduction",
            "match-clauses",
            "foreach-state",
        ]
    )
    d = 2
    bad: Expr
    if kind == "if-branches":
        return If(g.gen(BOOL_SCALAR, d), body, g.gen(different_type(g, t), d)), kind
    if kind == "if-condition":
        cond_type = g.pick([TensorType((), F32), TensorType((), I32), TensorType((2,), BOOL)])
        return If(g.gen(cond_type, d), body, g.gen(t, d)), kind
    if kind == "unary-dtype":
        name, dtype = g.pick(
            [
                ("exp", I32),
                ("log", BOOL),
                ("sqrt", I32),
                ("tanh", BOOL),
                ("logical_not", F32),
                ("logical_not", I32),
                ("mean", I32),
                ("mean", BOOL),
                ("nn.softmax", I32),
            ]
        )
        shape = g.rand_shape(allow_n=False)
        if name == "nn.softmax" and not shape:
            shape = (3,)
        bad = call_op(name, g.gen(TensorType(shape, dtype), d))
    elif kind == "binary-dtypes":
        shape = g.rand_shape()
        a, b = g.draw(st.permutations(list(DTYPES)))[:2]
        name = g.pick(["add", "multiply", "less", "maximum"])
        bad = call_op(name, g.gen(TensorType(shape, a), d), g.gen(TensorType(shape, b), d))
    elif kind == "broadcast":
        shape = list(g.rand_shape(allow_n=False)) or [2]
        other = list(shape)
        i = g.int_(0, len(shape) - 1)
        if shape[i] == 1:
            shape[i] = g.int_(2, 4)
        other[i] = g.pick([x for x in (2, 3, 4, 5) if x != shape[i]])
        bad = call_op(
            g.pick(["add", "subtract", "maximum"]),
            g.gen(TensorType(tuple(shape), F32), d),
            g.gen(TensorType(tuple(other), F32), d),
        )
    elif kind == "tuple-index":
        fields = tuple(g.rand_type(1) for _ in range(g.int_(0, 3)))
        bad = TupleGetItem(g.gen(TupleType(fields), d), len(fields) + g.int_(0, 2))
    elif kind == "let-annotation":
        u = g.rand_type(1, allow_any=False)
        x = Var("wrong", different_type(g, u))
        bad = Let(x, g.gen(u, d), x)
    elif kind == "constructor-argument":
        u = g.rand_type(1, allow_any=False)
        x = Var("wrong", option_of(different_type(g, u)))
        bad = Let(x, Call(CTOR["Some"], (g.gen(u, d),)), x)
    elif kind == "ref-write":
        u = g.rand_type(1, allow_any=False)
        r = g.var("r", None)
        bad = Let(r, RefCreate(g.gen(u, d)), RefWrite(r, g.gen(different_type(g, u), d)))
    elif kind == "arity":
        u = g.rand_type(1)
        if g.flip():
            bad = Call(GlobalVar("id"), (g.gen(u, d), g.gen(u, d)))
        else:
            p = g.var("p", u)
            with g.bind((p, u)):
                fn = Function((p,), g.gen(u, d))
            bad = Call(fn, ())
    elif kind == "closure-parameter":
        u = g.rand_type(1, allow_any=False)
        p = Var("p", different_type(g, u))
        bad = Call(Function((p,), p), (g.gen(u, d),))
    elif kind == "dense-reduction":
        k = g.int_(1, 4)
        bad = call_op(
            "nn.dense",
            g.gen(TensorType((2, k), F32), d),
            g.gen(TensorType((3, k + g.int_(1, 2)), F32), d),
        )
    elif kind == "match-clauses":
        u = g.rand_type(1)
        v = g.var("v", None)
        with g.bind((v, u)):
            some = g.gen(t, d)
        other = g.gen(different_type(g, t), d)
        bad = Match(
            g.gen(option_of(u), d),
            (
                Clause(PatternConstructor(CTOR["Some"], (PatternVar(v),)), some),
                Clause(PatternWildcard(), other),
            ),
        )
        return bad, kind
    else:  # foreach-state: the body's new state differs from the initial state
        u = g.rand_type(1, allow_any=False)
        w = different_type(g, u)
        x, s = g.var("x", None), g.var("st", None)
        step = TensorType((3,), F32)
        with g.bind((x, step), (s, u)):
            new = g.gen(w, d)
        fn = Function((x, s), Tuple((x, new)))
        bad = call_op("cf.foreach", fn, g.gen(TensorType((2, 3), F32), d), g.gen(u, d))
    return Let(Var("_"), bad, body), kind
