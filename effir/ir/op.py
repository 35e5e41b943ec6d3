"""The operator registry.

Each operator is registered exactly once (in ``effir/ops/<family>.py``) with
its name, arity, attribute schema, effect kind and traits. Later layers attach
their own rules to the same ``OpDef`` through ``rules`` (the type relation,
the numpy implementation, the TVM lowering...), keyed by the rule's name, so
that a missing rule can be reported naming both the operator and the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .diagnostics import AttrError
from .expr import Call, Expr, Op
from .node import EMPTY_ATTRS, Attrs
from .types import DTYPES

# What an operator does besides computing its result (docs/semantics.md §4.1, "Effect kinds").
EFFECT_KINDS = ("pure", "random", "state", "io")

# Traits read by generic passes (fusion, CSE...) instead of operator names.
TRAITS = (
    "elementwise",  # out[i] = f(in[i]) with equal shapes
    "broadcast",  # elementwise after numpy broadcasting
    "injective",  # each output element reads one input element (reshape, take...)
    "reduction",  # reduces over axes
    # A compute-heavy kernel (matmul-like: nn.dense, nn.matmul) that anchors a
    # fusion group and takes an elementwise epilogue on its output, but no
    # producer on its inputs (each input element is read many times, so a
    # fused producer would be recomputed per read); Relay's kOutEWiseFusable.
    "out_fusable",
    "opaque",  # none of the above: a fusion barrier (softmax, layer_norm...)
    "dynamic_shape",  # the output shape depends on input values
    "control_flow",  # takes functions and runs them (cf.foreach...)
    "commutative",
)

_REQUIRED = object()


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its name, kind, default, and whether ``None`` is allowed.

    Kinds: ``int``, ``float``, ``bool``, ``str``, ``dtype``, ``ints`` (a list of
    ints), ``int_or_ints``.
    """

    name: str
    kind: str
    default: Any = _REQUIRED
    optional: bool = False

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def check(self, value: Any) -> Any:
        """The normalized value, or AttrError saying what was expected."""
        if value is None:
            if self.optional:
                return None
            raise AttrError(f"attribute '{self.name}' expects {self.describe()}, got None")
        checker = _CHECKERS[self.kind]
        result = checker(value)
        if result is _BAD:
            raise AttrError(
                f"attribute '{self.name}' expects {self.describe()}, got {_show(value)}"
            )
        return result

    def describe(self) -> str:
        text = _DESCRIPTIONS[self.kind]
        return text + " or None" if self.optional else text


_BAD = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(v: Any) -> Any:
    return v if _is_int(v) else _BAD


def _check_float(v: Any) -> Any:
    if isinstance(v, float) or _is_int(v):
        try:
            return float(v)
        except OverflowError:  # an int too large for a float
            return _BAD
    return _BAD


def _check_bool(v: Any) -> Any:
    return v if isinstance(v, bool) else _BAD


def _check_str(v: Any) -> Any:
    return v if isinstance(v, str) else _BAD


def _check_dtype(v: Any) -> Any:
    return v if isinstance(v, str) and v in DTYPES else _BAD


def _check_ints(v: Any) -> Any:
    if _is_int(v):  # `axis=1` means `axis=[1]`, as in numpy
        return (v,)
    if isinstance(v, tuple | list) and all(_is_int(x) for x in v):
        return tuple(v)
    return _BAD


def _check_int_or_ints(v: Any) -> Any:
    return v if _is_int(v) else _check_ints(v)


_CHECKERS: dict[str, Callable[[Any], Any]] = {
    "int": _check_int,
    "float": _check_float,
    "bool": _check_bool,
    "str": _check_str,
    "dtype": _check_dtype,
    "ints": _check_ints,
    "int_or_ints": _check_int_or_ints,
}

_DESCRIPTIONS = {
    "int": "an integer",
    "float": "a number",
    "bool": "True or False",
    "str": "a string",
    "dtype": "a dtype string (" + ", ".join(DTYPES) + ")",
    "ints": "an integer or a list of integers",
    "int_or_ints": "an integer or a list of integers",
}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


@dataclass
class OpDef:
    """Everything known about one operator."""

    name: str
    num_inputs: int | None  # None: any number
    attrs: tuple[AttrSpec, ...] = ()
    effect: str = "pure"
    traits: frozenset[str] = frozenset()
    doc: str = ""
    rules: dict[str, Any] = field(default_factory=dict)
    optional_inputs: int = 0  # trailing inputs a call may leave out (ONNX's optional inputs)
    op: Op = field(init=False)

    def __post_init__(self) -> None:
        if self.effect not in EFFECT_KINDS:
            raise ValueError(f"{self.name}: unknown effect kind {self.effect!r}")
        unknown = set(self.traits) - set(TRAITS)
        if unknown:
            raise ValueError(f"{self.name}: unknown traits {sorted(unknown)}")
        self.op = Op(self.name)

    def takes(self, count: int) -> bool:
        """Whether a call may pass ``count`` inputs."""
        if self.num_inputs is None:
            return True
        return self.num_inputs <= count <= self.num_inputs + self.optional_inputs

    def arity_error(self, count: int) -> str:
        """The message of a call that passes ``count`` inputs (``takes`` is False)."""
        expected = str(self.num_inputs)
        if self.num_inputs is not None and self.optional_inputs:
            expected = f"{self.num_inputs} to {self.num_inputs + self.optional_inputs}"
        return f"{self.name} takes {expected} argument(s), got {count}"

    @property
    def attr_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.attrs)

    def normalize_attrs(self, given: Mapping[str, Any] | None) -> Attrs:
        """Validate ``given`` against the schema and fill in defaults.

        Raises AttrError naming the operator and the attribute."""
        given = dict(given or {})
        if not self.attrs and not given:
            return EMPTY_ATTRS
        result = []
        for spec in self.attrs:
            if spec.name in given:
                try:
                    value = spec.check(given.pop(spec.name))
                except AttrError as err:
                    raise AttrError(f"{self.name}: {err.message}") from None
            elif spec.required:
                raise AttrError(f"{self.name}: missing required attribute '{spec.name}'")
            else:
                value = spec.default
            result.append((spec.name, value))
        if given:
            name = next(iter(given))
            known = ", ".join(self.attr_names) or "none"
            raise AttrError(f"{self.name}: unknown attribute '{name}' (known attributes: {known})")
        return Attrs(tuple(result))

    def rule(self, rule_name: str) -> Any:
        """The rule registered for this operator, or an error naming both."""
        try:
            return self.rules[rule_name]
        except KeyError:
            raise NotImplementedError(
                f"operator {self.name} has no '{rule_name}' rule registered"
            ) from None

    def is_default(self, name: str, value: Any) -> bool:
        for spec in self.attrs:
            if spec.name == name:
                return not spec.required and Attrs({name: value}) == Attrs({name: spec.default})
        return False


_REGISTRY: dict[str, OpDef] = {}
_BY_OP: dict[int, OpDef] = {}


def register_op(
    name: str,
    num_inputs: int | None,
    attrs: tuple[AttrSpec, ...] = (),
    effect: str = "pure",
    traits: tuple[str, ...] | frozenset[str] = (),
    doc: str = "",
    optional_inputs: int = 0,
) -> OpDef:
    """Register an operator once; registering a name twice is a bug.
    ``optional_inputs``: how many inputs after the first ``num_inputs`` a
    call may leave out (from the end)."""
    if name in _REGISTRY:
        raise ValueError(f"operator {name} is already registered")
    definition = OpDef(
        name, num_inputs, tuple(attrs), effect, frozenset(traits), doc, {}, optional_inputs
    )
    _REGISTRY[name] = definition
    _BY_OP[id(definition.op)] = definition
    return definition


def lookup_op(name: str) -> OpDef | None:
    """The operator's definition, or None if no operator has that name."""
    return _REGISTRY.get(name)


def get_op(name: str) -> Op:
    """The (unique) ``Op`` node for an operator name."""
    definition = _REGISTRY.get(name)
    if definition is None:
        raise AttrError(f"unknown operator '{name}'")
    return definition.op


def op_def(op: Op | str) -> OpDef:
    """The definition behind an ``Op`` node (or a name)."""
    if isinstance(op, str):
        found = _REGISTRY.get(op)
    else:
        found = _BY_OP.get(id(op)) or _REGISTRY.get(op.name)
    if found is None:
        raise AttrError(f"unknown operator '{op if isinstance(op, str) else op.name}'")
    return found


def all_ops() -> tuple[OpDef, ...]:
    return tuple(_REGISTRY.values())


def call_op(name: str, *args: Expr, **attrs: Any) -> Call:
    """Build a call of operator ``name`` with validated, normalized attributes:
    ``call_op("sum", x, axis=[1])``. Raises AttrError on a bad attribute or a
    wrong number of arguments."""
    definition = _REGISTRY.get(name)
    if definition is None:
        raise AttrError(f"unknown operator '{name}'")
    if not definition.takes(len(args)):
        raise AttrError(definition.arity_error(len(args)))
    return Call(definition.op, tuple(args), definition.normalize_attrs(attrs))
