"""Hypothesis strategies for random, well-formed effir modules.

``modules()`` builds an ``IRModule`` directly from the node classes (no
parsing), covering every construct of the IR and of the text format: ADTs
(recursive ones too), global state cells, global functions with type
parameters, closures capturing outer variables, let chains (``_`` bindings
included), calls of globals, closures and operators with attributes, ``if``,
``match``/``match?`` with nested patterns, tuples and projections,
references, constructors, scalar constants of every dtype (negative zero,
NaN, infinities, extreme integers), tensor constants (the ``#[metadata]``
section) and every kind of type.

Sharing: non-atomic sub-expressions already built are kept in a pool and
reused (the same object) wherever their free variables are in scope: twice
in one call, in both branches of an ``if``, in a closure and outside it, and
(for closed expressions) in several definitions. The printer prints them in
graph form ``%0 = ...;``.

The result is well formed (``check_well_formed`` passes) but not type
correct: there is no type checker, and the text format does not need one.
Modules are kept small (a few dozen nodes) so that property tests are fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from effir.ir import (
    DTYPES,
    Attrs,
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    FuncType,
    GlobalCell,
    GlobalTypeVar,
    GlobalVar,
    If,
    IRModule,
    KeyType,
    Let,
    Match,
    Op,
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
    TypeData,
    TypeVar,
    Var,
    check_well_formed,
    lookup_op,
)
from effir.ir.types import normalize_effects

# ------------------------------------------------------------------ names

# Variable hints may be anything: the printer turns them into identifiers.
var_hints = st.one_of(
    st.sampled_from(["x", "y", "acc", "_", "x_1", "v", "f", "0", "tmp"]),
    st.sampled_from(["_"]),  # unused "_" bindings print as `value;`
    st.text(max_size=4),
)
# Type parameter names, including ones the parser reads as something else
# (Key, dtypes, keywords, ADT names): the printer must rename those.
type_var_names = st.one_of(
    st.sampled_from(["A", "B", "T", "A_1"]),
    st.sampled_from(["Key", "Tensor", "Ref", "float32", "int8", "fn", "type", "List", ""]),
    st.text(max_size=3),
)
# Names the printer writes as they are (globals, ADTs, constructors, dims and
# function attributes); these must be identifiers the lexer reads back.
GLOBAL_NAMES = ["main", "f", "g", "loop_body", "helper_2", "def", "fn", "Main"]
CELL_NAMES = ["rng", "bn_state", "counter", "let", "s0"]
ADT_NAMES = ["List", "Option", "Tree", "Pair", "Nat", "Unit"]
CTOR_NAMES = ["Cons", "Nil", "Some", "NoneC", "Leaf", "Node", "Z", "S", "MkPair", "Red"]
SYMBOLIC_DIMS = ["n", "m", "batch", "seq_len", "d_1", "N"]
FN_ATTR_NAMES = ["Primitive", "Compiler", "global_symbol", "Inline", "kernel_layout"]
EFFECT_ITEMS = ["io", "random", "read @rng", "write @rng", "read @bn_state", "write @counter"]

# Attribute values of function attributes: None, bool, int, float, str, lists.
attr_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=5),
)
attr_values = st.recursive(attr_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=5)


def _ints(min_value: int = -4, max_value: int = 8, max_size: int = 4):
    return st.lists(st.integers(min_value, max_value), max_size=max_size)


def _float_attrs():
    return st.floats(width=64)


# Operators: name, number of arguments, strategy for the attribute dict.
_UNARY = ["negative", "exp", "log", "sqrt", "tanh", "sigmoid", "nn.relu", "logical_not"]
_BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "less", "equal"]
OPS_WITH_ATTRS = [
    (
        "sum",
        1,
        st.fixed_dictionaries(
            {},
            optional={
                "axis": st.one_of(st.none(), _ints(-3, 3, 3)),
                "keepdims": st.booleans(),
                "exclude": st.booleans(),
            },
        ),
    ),
    ("nn.softmax", 1, st.fixed_dictionaries({}, optional={"axis": st.integers(-4, 4)})),
    ("reshape", 1, st.fixed_dictionaries({"newshape": _ints(-1, 16)})),
    ("cast", 1, st.fixed_dictionaries({"dtype": st.sampled_from(DTYPES)})),
    (
        "strided_slice",
        1,
        st.fixed_dictionaries(
            {"begin": _ints(), "end": _ints()},
            optional={"strides": st.one_of(st.none(), _ints(1, 3))},
        ),
    ),
    (
        "random.uniform",
        1,
        st.fixed_dictionaries(
            {},
            optional={
                "shape": _ints(0, 8),
                "dtype": st.sampled_from(DTYPES),
                "low": _float_attrs(),
                "high": _float_attrs(),
            },
        ),
    ),
    ("debug.print", 1, st.fixed_dictionaries({}, optional={"label": st.text(max_size=8)})),
    (
        "zeros",
        0,
        st.fixed_dictionaries({"shape": _ints(0, 4)}, optional={"dtype": st.sampled_from(DTYPES)}),
    ),
    ("nn.dropout", 2, st.fixed_dictionaries({}, optional={"rate": _float_attrs()})),
    (
        "split",
        1,
        st.fixed_dictionaries(
            {"indices_or_sections": st.one_of(st.integers(1, 4), _ints(0, 9))},
            optional={"axis": st.integers(-2, 2)},
        ),
    ),
    (
        "cf.while_loop",
        3,
        st.fixed_dictionaries(
            {}, optional={"max_iterations": st.one_of(st.none(), st.integers(0, 100))}
        ),
    ),
    ("random.split", 1, st.fixed_dictionaries({}, optional={"num": st.integers(1, 4)})),
]
OPS = (
    [(name, 1, None) for name in _UNARY]
    + [(name, 2, None) for name in _BINARY]
    + [("where", 3, None), ("random.key", 1, None)]
    + OPS_WITH_ATTRS
)

# ---------------------------------------------------------------- constants


def _int_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


# int32 and float32 literals have the shortest text (`1`, `1f`): draw them more.
_SCALAR_DTYPES = st.sampled_from(DTYPES + ("int32", "float32", "int32"))


@st.composite
def scalar_constants(draw, dtype: str | None = None) -> Constant:
    """A 0-d constant of any dtype, with the values literals find hard."""
    dtype = dtype or draw(_SCALAR_DTYPES)
    if dtype == "bool":
        return Constant(np.array(draw(st.booleans())))
    if dtype.startswith("float"):
        width = int(dtype[5:])
        special = st.sampled_from([0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.0, -1.5])
        value = draw(st.one_of(special, st.floats(width=width)))
        if draw(st.integers(0, 4)) == 0:  # any bit pattern: NaN payloads, subnormals
            raw = draw(st.binary(min_size=width // 8, max_size=width // 8))
            return Constant(np.frombuffer(raw, dtype=dtype).reshape(()))
        return Constant(np.array(value, dtype=dtype))
    lo, hi = _int_range(dtype)
    value = draw(st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi)))
    return Constant(np.array(value, dtype=dtype))


@st.composite
def tensor_constants(draw) -> Constant:
    """A constant with at least one dimension: printed in the metadata section."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
    count = int(np.prod(shape))
    if dtype == "bool":
        data = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    else:
        size = count * np.dtype(dtype).itemsize
        data = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), dtype=dtype)
    return Constant(data.reshape(shape))


# ------------------------------------------------------------------ builder

_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}
_DIMS = st.lists(
    st.one_of(
        st.integers(0, 64),
        st.sampled_from([1, 2**31 - 1, 2**40]),
        st.sampled_from(SYMBOLIC_DIMS),
        st.just("?"),
    ),
    max_size=4,
)
_EFFECTS = st.lists(st.sampled_from(EFFECT_ITEMS), max_size=3)
_TYPE_PARAM_NAMES = {n: st.lists(type_var_names, max_size=n) for n in range(3)}
_FN_ATTR_NAMES = st.lists(st.sampled_from(FN_ATTR_NAMES), unique=True, max_size=2)
_ADT_NAMES = st.lists(st.sampled_from(ADT_NAMES), unique=True, max_size=2)
_GLOBAL_NAMES = st.lists(st.sampled_from(GLOBAL_NAMES), unique=True, min_size=1, max_size=3)
_CELL_NAMES = st.lists(st.sampled_from(CELL_NAMES), unique=True, max_size=2)


def _binds_type_vars(t: Type) -> bool:
    """Whether a type contains a polymorphic function type (a binder).

    Such types are not shared: a type prints as a tree, and a type DAG whose
    shared part binds type variables does not equal that tree (see the report
    on structural equality)."""
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, FuncType) and node.type_params:
            return True
        stack.extend(c for c in node.children() if isinstance(c, Type))
    return False


@dataclass
class _Scope:
    """What an expression may refer to: local variables and type variables."""

    vars: tuple[Var, ...] = ()
    type_vars: tuple[TypeVar, ...] = ()
    names: frozenset = frozenset()

    def with_vars(self, *items) -> _Scope:
        vars_ = self.vars + tuple(v for v in items if isinstance(v, Var))
        tvs = self.type_vars + tuple(v for v in items if isinstance(v, TypeVar))
        return _Scope(vars_, tvs, self.names | frozenset(items))

    def hidden(self, *items) -> _Scope:
        """In scope (for sharing) but never picked as an atom."""
        return _Scope(self.vars, self.type_vars, self.names | frozenset(items))


@dataclass
class _Module:
    adts: dict[str, int] = field(default_factory=dict)  # name -> number of type params
    constructors: list[Constructor] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)


class _Builder:
    """Draws one module; every method returns ``(node, free variables)``."""

    MAX_DEPTH = 5

    def __init__(self, draw, budget: int) -> None:
        self.draw = draw
        self.budget = budget
        self.mod = _Module()
        self.pool: list[tuple[Expr, frozenset]] = []  # shareable expressions
        self.type_pool: list[tuple[Type, frozenset]] = []
        self.recursive_vars: set[Var] = set()
        self.ctor_counter = 0

    # -------------------------------------------------------------- helpers
    def integer(self, lo: int, hi: int) -> int:
        # Strategies are cached: building one per draw would dominate the run time.
        strategy = _INTEGERS.get((lo, hi))
        if strategy is None:
            strategy = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
        return self.draw(strategy)

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def chance(self, n: int) -> bool:
        """True with probability about 1/n."""
        return self.integer(0, n - 1) == 0

    def share(self, expr: Expr, free: frozenset) -> None:
        # A shared expression that mentions a let variable inside that let's
        # own (recursive) value has no place for its graph binding; see the
        # report on the text format.
        if not free & self.recursive_vars:
            self.pool.append((expr, free))

    # ---------------------------------------------------------------- types
    def type_(self, tvs: tuple[TypeVar, ...], depth: int = 0) -> tuple[Type, frozenset]:
        if self.type_pool and self.chance(6):
            usable = [(t, f) for t, f in self.type_pool if f <= set(tvs)]
            if usable:
                return self.choice(usable)
        kinds = ["tensor", "tensor", "scalar", "key"]
        if depth < 2:
            kinds += ["tuple", "func", "ref"]
            if self.mod.adts:
                kinds += ["adt", "adt"]
        if tvs:
            kinds += ["tvar", "tvar"]
        kind = self.choice(kinds)
        free: frozenset = frozenset()
        if kind == "tensor":
            dims = self.draw(_DIMS)
            result: Type = TensorType(tuple(dims), self.choice(DTYPES))
        elif kind == "scalar":
            result = TensorType((), self.choice(DTYPES))
        elif kind == "key":
            result = KeyType()
        elif kind == "tvar":
            result = self.choice(tvs)
            free = frozenset([result])
        elif kind == "tuple":
            fields = []
            for _ in range(self.integer(0, 3)):
                t, f = self.type_(tvs, depth + 1)
                fields.append(t)
                free |= f
            result = TupleType(tuple(fields))
        elif kind == "ref":
            inner, free = self.type_(tvs, depth + 1)
            result = RefType(inner)
        elif kind == "adt":
            name = self.choice(sorted(self.mod.adts))
            args = []
            for _ in range(self.mod.adts[name]):
                t, f = self.type_(tvs, depth + 1)
                args.append(t)
                free |= f
            result = TypeCall(GlobalTypeVar(name), tuple(args))
        else:  # func
            params = self.type_params(max_size=2 if self.chance(2) else 0)
            inner_tvs = tvs + params
            args = []
            for _ in range(self.integer(0, 3)):
                t, f = self.type_(inner_tvs, depth + 1)
                args.append(t)
                free |= f
            ret, f = self.type_(inner_tvs, depth + 1)
            free = (free | f) - set(params)
            effects = None
            if self.chance(2):
                effects = normalize_effects(self.draw(_EFFECTS))
            result = FuncType(tuple(args), ret, params, effects)
        if kind != "tvar" and not _binds_type_vars(result):
            self.type_pool.append((result, free))
        return result, free

    def type_params(self, max_size: int = 2) -> tuple[TypeVar, ...]:
        names = self.draw(_TYPE_PARAM_NAMES[max_size])
        return tuple(TypeVar(name) for name in names)

    def maybe_type(self, tvs) -> tuple[Type | None, frozenset]:
        if self.chance(2):
            return self.type_(tvs)
        return None, frozenset()

    # ---------------------------------------------------------------- atoms
    def constant(self) -> Constant:
        if self.chance(6):
            return self.draw(tensor_constants())
        return self.draw(scalar_constants())

    def atom(self, scope: _Scope) -> tuple[Expr, frozenset]:
        kinds = ["const", "const", "op"]
        if scope.vars:
            kinds += ["var"] * 5
        if self.mod.functions or self.mod.cells:
            kinds += ["global"]
        if self.mod.constructors:
            kinds += ["ctor"]
        kind = self.choice(kinds)
        if kind == "var":
            var = self.choice(scope.vars)
            return var, frozenset([var])
        if kind == "global":
            return GlobalVar(self.choice(self.mod.functions + self.mod.cells)), frozenset()
        if kind == "ctor":
            ctor = self.choice(self.mod.constructors)
            # As in Relay, a nullary constructor as a value is the call `Nil()`.
            return (ctor if ctor.inputs else Call(ctor, ())), frozenset()
        if kind == "op":
            return lookup_op(self.choice(OPS)[0]).op, frozenset()
        return self.constant(), frozenset()

    # ---------------------------------------------------------- expressions
    def expr(self, scope: _Scope, depth: int) -> tuple[Expr, frozenset]:
        if self.budget <= 0 or depth >= self.MAX_DEPTH:
            return self.atom(scope)
        kinds = ["atom"] * 6 + ["op"] * 4 + ["let", "fn", "if", "tuple", "proj", "reuse"] * 2
        kinds += ["global_call", "local_call", "match", "ref", "ref_read", "ref_write", "ctor"]
        kind = self.choice(kinds)
        if kind == "atom":
            return self.atom(scope)
        if kind == "reuse":
            usable = [(e, f) for e, f in self.pool if f <= scope.names]
            if usable:
                return self.choice(usable)
            return self.atom(scope)
        self.budget -= 1
        expr, free = getattr(self, "e_" + kind)(scope, depth + 1)
        self.share(expr, free)
        return expr, free

    def args(self, scope: _Scope, depth: int, count: int) -> tuple[list[Expr], frozenset]:
        args: list[Expr] = []
        free: frozenset = frozenset()
        for _ in range(count):
            if args and self.chance(5):  # the same object twice in one call
                args.append(args[-1])
                continue
            arg, f = self.atom(scope) if self.chance(2) else self.expr(scope, depth)
            args.append(arg)
            free |= f
        return args, free

    def e_op(self, scope, depth):
        name, arity, attrs = self.choice(OPS)
        definition = lookup_op(name)
        args, free = self.args(scope, depth, arity)
        given = self.draw(attrs) if attrs is not None else {}
        return Call(definition.op, tuple(args), definition.normalize_attrs(given)), free

    def e_global_call(self, scope, depth):
        if not self.mod.functions:  # a standalone expression: no globals
            return self.e_local_call(scope, depth)
        callee = GlobalVar(self.choice(self.mod.functions))
        args, free = self.args(scope, depth, self.integer(0, 3))
        return Call(callee, tuple(args)), free

    def e_local_call(self, scope, depth):
        if scope.vars and self.chance(2):
            callee: Expr = self.choice(scope.vars)
            free = frozenset([callee])
        elif self.chance(2):
            callee, free = self.e_fn(scope, depth)
        else:
            callee, free = self.expr(scope, depth)
        if isinstance(callee, Op):  # operator calls need their arity and attributes
            call, f = self.e_op(scope, depth)
            return call, free | f
        count = self.integer(0, 2)
        if isinstance(callee, Constructor):
            count = len(callee.inputs)
        args, f = self.args(scope, depth, count)
        return Call(callee, tuple(args)), free | f

    def e_ctor(self, scope, depth):
        if not self.mod.constructors:
            return self.e_tuple(scope, depth)
        ctor = self.choice(self.mod.constructors)
        args, free = self.args(scope, depth, len(ctor.inputs))
        return Call(ctor, tuple(args)), free

    def e_tuple(self, scope, depth):
        fields, free = self.args(scope, depth, self.integer(0, 3))
        return Tuple(tuple(fields)), free

    def e_proj(self, scope, depth):
        if self.chance(2):
            value, free = self.e_tuple(scope, depth)
        elif self.chance(2):  # `%x.0`, and also `1.0` (an int32 constant)
            value, free = self.atom(scope)
        else:
            value, free = self.expr(scope, depth)
        return TupleGetItem(value, self.integer(0, 3)), free

    def e_ref(self, scope, depth):
        value, free = self.expr(scope, depth)
        return RefCreate(value), free

    def ref_target(self, scope, depth):
        if self.mod.cells and self.chance(2):
            return GlobalVar(self.choice(self.mod.cells)), frozenset()
        return self.expr(scope, depth)

    def e_ref_read(self, scope, depth):
        ref, free = self.ref_target(scope, depth)
        return RefRead(ref), free

    def e_ref_write(self, scope, depth):
        ref, free = self.ref_target(scope, depth)
        value, f = self.expr(scope, depth)
        return RefWrite(ref, value), free | f

    def e_if(self, scope, depth):
        cond, free = self.expr(scope, depth)
        then_branch, f1 = self.e_let(scope, depth)
        else_branch, f2 = self.e_let(scope, depth)
        return If(cond, then_branch, else_branch), free | f1 | f2

    def e_let(self, scope, depth):
        """A block: a let chain (possibly empty) and its result."""
        bindings = []
        for _ in range(self.integer(0, 3)):
            hint = self.draw(var_hints)
            annotation, ann_free = (
                self.maybe_type(scope.type_vars) if self.chance(3) else (None, frozenset())
            )
            var = Var(hint, annotation)
            recursive = self.chance(8)
            if recursive:  # as in Relay, the variable is in scope in its value
                self.recursive_vars.add(var)
                value, vfree = self.e_fn(scope.with_vars(var), depth)
            else:
                value, vfree = self.expr(scope, depth)
            unused = hint == "_" and self.chance(2)
            scope = scope.hidden(var) if unused else scope.with_vars(var)
            bindings.append((var, value, vfree | ann_free))
        body, free = self.expr(scope, depth)
        for var, value, vfree in reversed(bindings):
            body = Let(var, value, body)
            free = (free | vfree) - {var}
            self.share(body, free)
        return body, free

    def e_fn(self, scope, depth):
        type_params = self.type_params(max_size=2) if self.chance(3) else ()
        inner = scope.with_vars(*type_params)
        params = []
        free: frozenset = frozenset()
        for _ in range(self.integer(0, 3)):
            annotation, f = self.maybe_type(inner.type_vars)
            params.append(Var(self.draw(var_hints), annotation))
            free |= f
        ret_type, f = self.maybe_type(inner.type_vars) if self.chance(2) else (None, frozenset())
        free |= f
        attrs = Attrs()
        if self.chance(4):
            attrs = Attrs({"Primitive": 1})
        elif self.chance(6):
            names = self.draw(_FN_ATTR_NAMES)
            attrs = Attrs(tuple(sorted((n, self.draw(attr_values)) for n in names)))
        body, f = self.e_let(inner.with_vars(*params), depth)
        free = (free | f) - set(params) - set(type_params)
        return Function(tuple(params), body, ret_type, type_params, attrs), free

    def e_match(self, scope, depth):
        data, free = self.expr(scope, depth)
        clauses = []
        for _ in range(self.integer(1, 3)):
            binders: list[Var] = []
            pattern, pfree = self.pattern(scope, binders, 0)
            body, f = self.e_let(scope.with_vars(*binders), depth)
            clauses.append(Clause(pattern, body))
            free |= pfree | (f - set(binders))
        return Match(data, tuple(clauses), complete=self.chance(2)), free

    def pattern(self, scope, binders: list[Var], depth: int):
        kinds = ["wild", "var", "var"]
        if depth < 2:
            kinds += ["tuple"]
            if self.mod.constructors:
                kinds += ["ctor"] * 3
        kind = self.choice(kinds)
        if kind == "wild":
            return PatternWildcard(), frozenset()
        if kind == "var":
            annotation, free = (
                self.maybe_type(scope.type_vars) if self.chance(3) else (None, frozenset())
            )
            var = Var(self.draw(var_hints), annotation)
            binders.append(var)
            return PatternVar(var), free
        if kind == "ctor":
            ctor = self.choice(self.mod.constructors)
            count = len(ctor.inputs)
        else:
            ctor, count = None, self.integer(0, 3)
        subpatterns = []
        free: frozenset = frozenset()
        for _ in range(count):
            p, f = self.pattern(scope, binders, depth + 1)
            subpatterns.append(p)
            free |= f
        if ctor is None:
            return PatternTuple(tuple(subpatterns)), free
        return PatternConstructor(ctor, tuple(subpatterns)), free

    # ------------------------------------------------------------ the module
    def type_defs(self) -> list[TypeData]:
        names = self.draw(_ADT_NAMES)
        params = {name: self.type_params(max_size=2) for name in names}
        self.mod.adts = {name: len(p) for name, p in params.items()}
        used_ctor_names: set[str] = set()
        result = []
        for name in names:
            tvs = params[name]
            ctors = []
            for _ in range(self.integer(0, 3)):
                ctor_name = self.choice(CTOR_NAMES)
                if ctor_name in used_ctor_names:
                    self.ctor_counter += 1
                    ctor_name = f"{name}C{self.ctor_counter}"
                used_ctor_names.add(ctor_name)
                inputs = []
                for _ in range(self.integer(0, 2)):
                    if self.chance(3):  # recursive: List[A] inside List
                        args = tuple(self.type_(tvs, 2)[0] for _ in tvs)
                        inputs.append(TypeCall(GlobalTypeVar(name), args))
                    else:
                        inputs.append(self.type_(tvs, 1)[0])
                ctors.append(Constructor(ctor_name, tuple(inputs), name))
            data = TypeData(name, tvs, tuple(ctors))
            self.mod.constructors.extend(ctors)
            result.append(data)
        self.type_pool.clear()  # those types mention the ADTs' own parameters
        return result

    def build(self) -> IRModule:
        if self.chance(3):  # the classic recursive ADT, List[A]
            a = TypeVar("A")
            self.mod.adts["List"] = 1
            list_a = TypeCall(GlobalTypeVar("List"), (a,))
            cons, nil = Constructor("Cons", (a, list_a), "List"), Constructor("Nil", (), "List")
            type_defs = [TypeData("List", (a,), (cons, nil))]
            self.mod.constructors += [cons, nil]
        else:
            type_defs = self.type_defs()
        self.mod.functions = self.draw(_GLOBAL_NAMES)
        self.mod.cells = [n for n in self.draw(_CELL_NAMES) if n not in self.mod.functions]
        cells = []
        for name in self.mod.cells:
            value_type, _ = self.type_(())
            cell_type = RefType(value_type) if not self.chance(4) else None
            init, _ = self.expr(_Scope(), self.MAX_DEPTH - 2)
            cells.append(GlobalCell(name, cell_type, init))
        functions = []
        for name in self.mod.functions:
            fn, _ = self.e_fn(_Scope(), 0)
            functions.append((name, fn))
        return IRModule(functions, [(d.name, d) for d in type_defs], [(c.name, c) for c in cells])


@st.composite
def modules(draw, budget: int = 24) -> IRModule:
    """A random well-formed module of at most a few dozen expression nodes."""
    mod = _Builder(draw, budget).build()
    check_well_formed(mod)
    return mod


@st.composite
def expressions(draw, budget: int = 12) -> Expr:
    """A random closed expression (no ADTs, globals or cells)."""
    expr, free = _Builder(draw, budget).expr(_Scope(), 0)
    assert not free
    check_well_formed(expr)
    return expr
