"""Property tests of the text format and of structural equality and hashing,
on random well-formed modules (tests/ir/strategies.py):

- ``parse(astext(m))`` is structurally equal to ``m``, prints identically and
  hashes identically;
- structural hashing ignores variable names (alpha-renaming) and the order in
  which definitions were added;
- a small change (a constant, an attribute, an operator) makes two modules
  unequal, and ``structural_diff`` says where.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir.ir import (
    DTYPES,
    Attrs,
    Call,
    Constant,
    Function,
    IRModule,
    Let,
    Mutator,
    Op,
    Tuple,
    TypeVar,
    Var,
    check_well_formed,
    lookup_op,
    on,
    pre_order,
    structural_diff,
)

from .strategies import expressions, modules

COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _roundtrip_failure(mod: IRModule, text: str, problem: str) -> str:
    return f"{problem}\n--- printed text ---\n{text}"


# ------------------------------------------------------------ round trips


@settings(max_examples=500, **COMMON)
@given(modules())
def test_parse_of_print_is_structurally_equal_and_prints_the_same(mod):
    text = effir.astext(mod)
    back = effir.parse(text)
    problem = structural_diff(back, mod)
    assert problem is None, _roundtrip_failure(mod, text, problem)
    assert effir.structural_equal(back, mod)
    assert effir.astext(back) == text
    assert effir.structural_hash(back) == effir.structural_hash(mod)
    check_well_formed(back)


@settings(max_examples=150, **COMMON)
@given(expressions())
def test_expression_roundtrip(expr):
    text = effir.astext(expr)
    back = effir.parse_expr(text)
    problem = structural_diff(back, expr)
    assert problem is None, _roundtrip_failure(expr, text, problem)
    assert effir.astext(back) == text
    assert effir.structural_hash(back) == effir.structural_hash(expr)


@settings(max_examples=100, **COMMON)
@given(modules())
def test_printing_is_deterministic(mod):
    assert effir.astext(mod) == effir.astext(mod)


# --------------------------------------------------------- alpha-renaming


class _Renamer(Mutator):
    """Gives every variable and type variable a new object and a new name."""

    binders = True
    types = True

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    @on(Var)
    def var(self, new: Var, old: Var) -> Var:
        self.count += 1
        return Var(f"renamed_{self.count}", new.type_annotation)

    @on(TypeVar)
    def type_var(self, new: TypeVar, old: TypeVar) -> TypeVar:
        self.count += 1
        return TypeVar(f"Renamed{self.count}")


def rename(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with all its local names changed (ADT definitions kept, since
    constructors refer to their type parameters). One mutator for the whole
    module keeps what definitions share shared."""
    renamer = _Renamer()
    functions = {name: renamer.mutate(fn) for name, fn in mod.functions.items()}
    cells = {name: renamer.mutate(cell) for name, cell in mod.cells.items()}
    return IRModule(functions, mod.type_defs, cells), renamer.count


@settings(max_examples=150, **COMMON)
@given(modules())
def test_hash_and_equality_ignore_variable_names(mod):
    renamed, count = rename(mod)
    check_well_formed(renamed)
    assert structural_diff(renamed, mod) is None
    assert effir.structural_hash(renamed) == effir.structural_hash(mod)
    if count:
        assert effir.astext(renamed) != effir.astext(mod)
    back = effir.parse(effir.astext(renamed))
    assert effir.structural_hash(back) == effir.structural_hash(mod)


@settings(max_examples=100, **COMMON)
@given(modules())
def test_hash_and_equality_ignore_definition_order(mod):
    reordered = IRModule(
        list(mod.functions.items())[::-1],
        list(mod.type_defs.items())[::-1],
        list(mod.cells.items())[::-1],
    )
    assert structural_diff(reordered, mod) is None
    assert effir.structural_hash(reordered) == effir.structural_hash(mod)


# ---------------------------------------------------------------- mutations

_UNARY = ("negative", "exp", "log", "sqrt", "tanh", "sigmoid", "nn.relu", "logical_not")
_BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "less", "equal")


def _other(options, current):
    return next(o for o in options if o != current)


def _different_float(value: float) -> float:
    return _other([0.5, 1.5], value)  # NaN differs from both


def _different_attr(kind: str, value):
    """A valid value of an attribute kind, different from ``value``."""
    if kind == "int":
        return 0 if value is None else value + 1
    if kind == "float":
        return _different_float(value)
    if kind == "bool":
        return not value
    if kind == "str":
        return value + "x"
    if kind == "dtype":
        return _other(DTYPES, value)
    if kind == "ints":
        return (0,) if value is None else tuple(value) + (1,)
    if kind == "int_or_ints":
        return value + 1 if isinstance(value, int) else tuple(value) + (1,)
    raise AssertionError(kind)


def _mutated_constant(constant: Constant) -> Constant:
    data = constant.data
    if data.size == 0:  # no element to change: change the dtype
        return Constant(data.astype(_other(DTYPES, str(data.dtype))))
    if data.dtype == np.bool_:
        flat = data.copy().reshape(-1)
        flat[0] = not flat[0]
        return Constant(flat.reshape(data.shape))
    raw = bytearray(np.ascontiguousarray(data).tobytes())
    raw[0] ^= 1
    return Constant(np.frombuffer(bytes(raw), dtype=data.dtype).reshape(data.shape))


def _mutated_call(call: Call, which: int) -> Call:
    """Another operator of the same arity, or one attribute changed."""
    name = call.callee.name
    definition = lookup_op(name)
    for family in (_UNARY, _BINARY):
        if name in family and not definition.attrs:
            return Call(lookup_op(_other(family, name)).op, call.args, call.attrs)
    spec = definition.attrs[which % len(definition.attrs)]
    attrs = dict(call.attrs.items())
    attrs[spec.name] = _different_attr(spec.kind, attrs[spec.name])
    return Call(call.callee, call.args, definition.normalize_attrs(attrs))


def _mutated_function(fn: Function) -> Function:
    attrs = dict(fn.attrs.items())
    attrs["Primitive"] = 2 if attrs.get("Primitive") == 1 else 1
    return Function(fn.params, fn.body, fn.ret_type, fn.type_params, Attrs(sorted(attrs.items())))


def _mutable(node) -> bool:
    if isinstance(node, Constant):
        return True
    if isinstance(node, Call) and isinstance(node.callee, Op):
        definition = lookup_op(node.callee.name)
        return bool(definition.attrs) or node.callee.name in _UNARY + _BINARY
    return isinstance(node, Function)


class _Mutate(Mutator):
    binders = True
    types = True

    def __init__(self, target, which: int) -> None:
        super().__init__()
        self.target, self.which = target, which

    @on(Constant, Call, Function)
    def replace(self, new, old):
        if old is not self.target:
            return new
        if isinstance(new, Constant):
            return _mutated_constant(new)
        if isinstance(new, Call):
            return _mutated_call(new, self.which)
        return _mutated_function(new)


@st.composite
def mutations(draw, mod: IRModule) -> tuple[IRModule, str]:
    """``mod`` with one constant, attribute or operator changed."""
    roots = list(mod.functions.values()) + list(mod.cells.values())
    sites = []
    seen: set[int] = set()
    for root in roots:
        for node in pre_order(root):
            if id(node) not in seen and _mutable(node):
                seen.add(id(node))
                sites.append(node)
    if not sites:  # nothing to change in place: wrap the first body in a tuple
        name, fn = next(iter(mod.functions.items()))
        wrapped = Function(fn.params, Tuple((fn.body,)), fn.ret_type, fn.type_params, fn.attrs)
        return mod.with_function(name, wrapped), "a body wrapped in a tuple"
    target = draw(st.sampled_from(sites))
    mutator = _Mutate(target, draw(st.integers(0, 7)))
    functions = {name: mutator.mutate(fn) for name, fn in mod.functions.items()}
    cells = {name: mutator.mutate(cell) for name, cell in mod.cells.items()}
    return IRModule(functions, mod.type_defs, cells), type(target).__name__


@settings(max_examples=200, **COMMON)
@given(st.data())
def test_a_small_change_is_detected(data):
    mod = data.draw(modules())
    mutated, what = data.draw(mutations(mod))
    check_well_formed(mutated)
    problem = structural_diff(mutated, mod)
    assert problem, f"changing a {what} was not detected"
    assert not effir.structural_equal(mutated, mod)
    assert structural_diff(mod, mutated)
    assert effir.structural_hash(mutated) != effir.structural_hash(mod)
    # The change survives printing.
    assert not effir.structural_equal(effir.parse(effir.astext(mutated)), mod)


# ------------------------------------------------------- fixed regressions


def test_int32_constant_projection_is_parenthesized():
    from effir.ir import TupleGetItem, const

    for value in (1, -2147483648):
        expr = TupleGetItem(const(value), 0)
        text = effir.astext(expr)
        assert text.startswith("(")
        assert effir.structural_equal(effir.parse_expr(text), expr)


def test_non_finite_and_negative_zero_float_attributes():
    uniform = lookup_op("random.uniform")
    for low in (float("inf"), float("-inf"), float("nan"), -0.0, 1e300):
        call = Call(
            uniform.op, (Constant(np.array(0, "int32")),), uniform.normalize_attrs({"low": low})
        )
        back = effir.parse_expr(effir.astext(call))
        assert effir.structural_equal(back, call), low
        assert effir.structural_hash(back) == effir.structural_hash(call), low
    # `-0.0` equals `0.0` as an attribute, so it must hash alike
    a = uniform.normalize_attrs({"low": -0.0})
    b = uniform.normalize_attrs({"low": 0.0})
    x = Constant(np.array(0, "int32"))
    assert effir.structural_hash(Call(uniform.op, (x,), a)) == effir.structural_hash(
        Call(uniform.op, (x,), b)
    )


def test_type_variables_never_print_as_reserved_names():
    from effir.ir import FuncType, KeyType, TypeCall, TypeData, scalar_type
    from effir.ir.types import GlobalTypeVar

    a = TypeVar("A")
    adt = TypeData("List", (a,), ())
    for name in ("Key", "float32", "fn", "type", "List"):
        tv = TypeVar(name)
        t = FuncType((tv, scalar_type("float32"), KeyType()), tv, (tv,))
        x = Var("x", TypeCall(GlobalTypeVar("List"), (t,)))
        mod = IRModule({"main": Function((x,), x)}, {"List": adt})
        text = effir.astext(mod)
        assert effir.structural_equal(effir.parse(text), mod), text


def test_a_variable_named_like_underscore_keeps_its_let():
    # The hint "-" becomes an identifier; it must not print as `%_`, which
    # reads back as a `_` binding and then prints as `value;`.
    v = Var("-")
    fn = Function((), Let(v, Constant(np.array(1, "int32")), Tuple(())))
    text = effir.astext(IRModule({"main": fn}))
    assert "%_ " not in text
    assert effir.astext(effir.parse(text)) == text


def test_sharing_across_definitions_and_definition_order():
    x = Var("x")
    shared = Function((x,), x)  # a closed closure used by two definitions
    f = Function((), Call(shared, (Constant(np.array(1, "int32")),)))
    g = Function((), Tuple((shared,)))
    mod = IRModule({"f": f, "g": g})
    back = effir.parse(effir.astext(mod))
    assert structural_diff(back, mod) is None
    assert effir.structural_hash(back) == effir.structural_hash(mod)
    y = Var("y")
    h = Function((y,), y)
    one, two = IRModule({"f": h, "g": g}), IRModule({"g": g, "f": h})
    assert effir.structural_hash(one) == effir.structural_hash(two)
