"""Algebraic data types from Python: ``@effir.adt``, constructors called as
Python classes, and ``effir.match``.

A type is a decorated class whose nested classes are its constructors,
each declaring its fields as annotations (a dataclass's spelling)::

    @effir.adt
    class Tree:
        class Leaf:
            value: effir.Tensor[(4,), "float32"]
        class Node:
            left: "Tree"
            right: "Tree"

``Tree`` is then a type (``t: Tree`` in a signature), ``Tree.Leaf(x)``
builds a value and ``Tree.Leaf``, ``Tree.Node`` are the class patterns of
Python's ``match`` (scripted: script_match.py; eagerly, Python's own). A
generic type names its parameters, ``@effir.adt(type_params=("A",))``,
and its fields use them by name (``head: "A"``, ``tail: "MyList[A]"``).
The prelude's ``List[A]`` (``Cons``, ``Nil``) and ``Option[A]`` (``Some``,
``None_``, as ``None`` is Python's) are declared so: ``effir.List``,
``effir.Option``.

A constructor class is the value's class too: effir's values of the type
(the interpreter's, compiled code's) are its instances, subclasses of
``effir.runtime.values.ADTValue`` with the declared field names as
attributes and ``__match_args__`` (runtime/values.py ``adt_value``). Called
on effir values, or while a function is being built, a constructor builds
IR (the builder's dispatch, builder.py); on Python values it makes the
value at once. A module built from functions that use a type defines it
(``type_defs_for``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from effir.passes.analyses.type_solver import substitute

from ..ir.diagnostics import FrontendError
from ..ir.expr import (
    Call,
    Constructor,
    Expr,
    Function,
    Pattern,
    PatternConstructor,
    PatternVar,
    PatternWildcard,
    TypeData,
)
from ..ir.functor import pre_order
from ..ir.module import IRModule
from ..ir.types import DTYPES, GlobalTypeVar, Type, TypeCall, TypeVar
from ..runtime.values import ADTValue, register_adt_class
from ..std import prelude
from . import builder as B
from .spans import current_span
from .values import as_type, is_symbolic, register_adt_expressions, to_expr, to_value

RESERVED_FIELDS = frozenset({"constructor", "fields"})
"""``ADTValue``'s own attributes: no field may take their names."""

_DECLARED: dict[str, AdtInfo] = {}
"""Every type declared, by name (the last declaration of a name wins): how
a module built from functions whose annotations name a type finds its
definition."""


class AdtInfo:
    """A declared type: its name, parameters, constructor classes, and (made
    on first use, once every name its fields use is defined) its
    ``TypeData``."""

    def __init__(
        self,
        name: str,
        type_params: tuple[str, ...],
        namespace: Mapping[str, Any],
    ) -> None:
        self.name = name
        self.type_params = type_params
        self.namespace = namespace  # where string annotations are evaluated
        self.constructors: list[ConstructorClass] = []
        self._data: TypeData | None = None
        self._annotations: dict[str, tuple[Any, ...]] = {}
        self.load: Callable[[], TypeData] | None = None  # a definition made elsewhere
        self.pyclass: type | None = None  # the decorated class

    # ------------------------------------------------------------ the type
    def type_call(self, args: tuple[Type, ...] = ()) -> TypeCall:
        """The type ``Name[args]``."""
        if len(args) != len(self.type_params):
            raise FrontendError(
                f"the type {self.name} takes {len(self.type_params)} type argument(s), "
                f"got {len(args)}",
                current_span(),
                hint=f"write {self.name}[{', '.join(self.type_params)}]",
            )  # only a generic type is subscripted (``_apply``)
        return TypeCall(GlobalTypeVar(self.name), tuple(args))

    def data(self) -> TypeData:
        """The type's definition (its field annotations evaluated now)."""
        if self._data is None and self.load is not None:
            self._data = self.load()
        if self._data is None:
            params = tuple(TypeVar(p) for p in self.type_params)
            own = {p: p for p in params}  # a field's "A" is this type's A (by name)
            constructors = []
            for cls in self.constructors:
                inputs = tuple(
                    substitute(self._field_type(a, cls), own)
                    for a in self._annotations[cls.ir_name]
                )
                constructors.append(Constructor(cls.ir_name, inputs, self.name))
            self._data = TypeData(self.name, params, tuple(constructors))
        return self._data

    def constructor(self, name: str) -> Constructor:
        for ctor in self.data().constructors:
            if ctor.name == name:
                return ctor
        raise AssertionError(f"{self.name} has no constructor {name}")

    def _field_type(self, annotation: Any, cls: type) -> Type:
        """A field's annotation as a type: the type's own name and its
        parameters by name, other strings evaluated where it was declared
        (twice at most: ``from __future__ import annotations`` makes a
        quoted ``"Tree"`` the string ``'"Tree"'``)."""
        where = f"a field of {self.name}.{cls.__name__}"
        scope = {**self.namespace, **{p: p for p in self.type_params}}
        if self.pyclass is not None:
            scope.setdefault(self.name, self.pyclass)
        for _ in range(2):
            if not isinstance(annotation, str):
                break
            text = annotation.strip()
            if text == self.name:
                return self.type_call(tuple(TypeVar(p) for p in self.type_params))
            if text in self.type_params:
                return TypeVar(text)
            if text in DTYPES:
                break
            try:
                annotation = eval(text, scope)  # the user's own annotation
            except Exception as err:
                raise FrontendError(
                    f"cannot evaluate the annotation {text!r} of {where} ({err})",
                    hint="name a type defined at module level, or the type itself in quotes",
                ) from None
        return as_field_type(annotation, where)


def as_field_type(spec: Any, where: str) -> Type:
    """A field's type from its spelling (``as_type``'s, and type parameters
    as strings inside generic types)."""
    if isinstance(spec, str) and spec not in DTYPES and spec.isidentifier():
        return TypeVar(spec)
    try:
        return as_type(spec)
    except FrontendError as err:
        raise FrontendError(f"{where}: {err.message}", err.span, hint=err.hint) from None


class ConstructorClass(type):
    """The metaclass of constructor classes: calling one builds a value (or
    IR); ``isinstance`` holds for any effir value of that constructor."""

    adt: AdtInfo
    ir_name: str
    field_names: tuple[str, ...]

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        values = _bind(cls, args, kwargs)
        if B.building() or is_symbolic(values):
            return build(cls, values)
        return _instance(cls, tuple(to_value(v) for v in values))

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, ADTValue) and obj.constructor == cls.ir_name

    def __repr__(cls) -> str:
        return f"<effir constructor {cls.adt.name}.{cls.__name__}>"


def _bind(cls: ConstructorClass, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    """The fields in order, from positional and keyword arguments."""
    names = cls.field_names
    shown = f"{cls.adt.name}.{cls.__name__}({', '.join(names)})"
    if len(args) > len(names):
        raise FrontendError(f"{shown} takes {len(names)} field(s), got {len(args)}", current_span())
    bound = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise FrontendError(f"{shown} has no field {key!r}", current_span())
        if key in bound:
            raise FrontendError(f"{shown} got two values for {key!r}", current_span())
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise FrontendError(f"{shown} is missing {', '.join(missing)}", current_span())
    return tuple(bound[n] for n in names)


def _instance(cls: ConstructorClass, fields: tuple[Any, ...]) -> ADTValue:
    value = object.__new__(cls)
    ADTValue.__init__(value, cls.ir_name, fields)
    return value


def build(cls: ConstructorClass, values: tuple[Any, ...]) -> Any:
    """``C(values...)`` as IR: the call, bound while a function is built."""
    note_adt(cls.adt)
    call = Call(
        cls.adt.constructor(cls.ir_name), tuple(to_expr(v) for v in values), span=current_span()
    )
    return B.emit(call) if B.building() else call


def note_adt(info: AdtInfo) -> None:
    """Record that the function being built uses the type ``info``."""
    block = B.current_block()
    if block is not None:
        block.root.adts[info.name] = info.data()


def is_constructor(value: Any) -> bool:
    return isinstance(value, ConstructorClass)


def adt_of(value: Any) -> AdtInfo | None:
    """The declared type a Python class stands for, if it is one."""
    info = getattr(value, "__effir_adt__", None)
    return info if isinstance(info, AdtInfo) else None


# ------------------------------------------------------------- declaring
def adt(
    cls: type | None = None, *, type_params: Iterable[str] = (), name: str | None = None
) -> Any:
    """``@effir.adt``: the decorated class becomes an effir type and its
    nested classes its constructors (the module docstring). ``type_params``
    names a generic type's parameters; ``name`` the type's name in effir
    (default: the class's). String annotations are evaluated in the
    namespace the decorator is used in (a module's, or ``exec``'s)."""
    namespace = sys._getframe(1).f_globals  # where the class is written

    def declare(c: type) -> type:
        info = AdtInfo(name or c.__name__, tuple(type_params), namespace)
        _declare(c, info, _nested_constructors(c))
        return c

    return declare if cls is None else declare(cls)


def _nested_constructors(cls: type) -> list[tuple[str, str, tuple[str, ...], tuple[Any, ...]]]:
    """``(python name, effir name, field names, annotations)`` of each
    nested class, in the order written."""
    found = []
    for attr, value in vars(cls).items():
        if attr.startswith("__") or not isinstance(value, type):
            continue
        annotations = dict(vars(value).get("__annotations__", {}))
        found.append((attr, attr, tuple(annotations), tuple(annotations.values())))
    if not found:
        raise FrontendError(
            f"the type {cls.__name__} declares no constructor",
            hint="declare each constructor as a nested class with its fields: "
            "class Leaf: value: effir.Tensor[(4,), 'float32']",
        )
    return found


def _declare(
    cls: type,
    info: AdtInfo,
    constructors: list[tuple[str, str, tuple[str, ...], tuple[Any, ...]]],
) -> None:
    """Make each constructor's class, attach them and the type to ``cls``."""
    info.pyclass = cls
    for attr, ir_name, fields, spelled in constructors:
        bad = sorted(set(fields) & RESERVED_FIELDS)
        if bad:
            raise FrontendError(
                f"{info.name}.{attr}: a field may not be named {bad[0]} (an attribute of "
                "every effir value)",
                hint="rename the field",
            )
        namespace: dict[str, Any] = {
            "__slots__": (),
            "__match_args__": fields,
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.{attr}",
            "__doc__": _constructor_doc(cls, info, attr, fields),
            "__repr__": _value_repr,
        }
        for i, field in enumerate(fields):
            namespace[field] = property(_field_getter(i), doc=f"field {i} of {ir_name}")
        ctor = ConstructorClass(attr, (ADTValue,), namespace)
        ctor.adt, ctor.ir_name, ctor.field_names = info, ir_name, fields
        info.constructors.append(ctor)
        info._annotations[ir_name] = spelled
        register_adt_class(info.name, ir_name, ctor)
        setattr(cls, attr, ctor)
    cls.__effir_adt__ = info  # type: ignore[attr-defined]
    if info.type_params:
        cls.__class_getitem__ = classmethod(_apply)  # type: ignore[attr-defined]
    _DECLARED[info.name] = info


def _field_getter(index: int) -> Callable[[ADTValue], Any]:
    return lambda self: self.fields[index]


def _value_repr(self: ADTValue) -> str:
    cls = type(self)
    parts = ", ".join(f"{n}={v!r}" for n, v in zip(cls.field_names, self.fields, strict=True))
    return f"{cls.adt.name}.{cls.__name__}({parts})"


def _apply(cls: type, items: Any) -> TypeCall:
    """``List[T]``: the generic type applied (a string not a dtype is a type
    parameter, inside a generic declaration)."""
    info = adt_of(cls)
    assert info is not None
    args = items if isinstance(items, tuple) else (items,)
    return info.type_call(tuple(as_field_type(a, f"{info.name}[...]") for a in args))


# ------------------------------------------------------------- the prelude
def _constructor_doc(cls: type, info: AdtInfo, attr: str, fields: tuple[str, ...]) -> str:
    """The docstring of a constructor's class: the nested class's own, else
    one that says how to call it (help() and the API reference show it)."""
    declared = vars(cls).get(attr)
    own = declared.__doc__ if isinstance(declared, type) else None
    return own or f"{info.name}.{attr}({', '.join(fields)}): a constructor of {info.name}."


def prelude_adt(
    name: str, type_params: tuple[str, ...], constructors: Mapping[str, tuple[str, ...]]
) -> type:
    """A type of the prelude (effir.prelude()) as a Python class: its
    ``constructors`` (effir name to field names; ``None`` is spelled
    ``None_`` in Python) declared now, its definition the prelude's, read
    on first use (so that ``import effir`` parses no prelude)."""
    cls = type(name, (), {"__module__": "effir", "__doc__": f"The prelude's {name}."})
    info = AdtInfo(name, type_params, {})
    info.load = _prelude_type(name)
    declared = [
        (ctor + "_" if ctor == "None" else ctor, ctor, fields, ())
        for ctor, fields in constructors.items()
    ]
    _declare(cls, info, declared)
    return cls


def _prelude_type(name: str) -> Callable[[], TypeData]:
    def load() -> TypeData:
        return prelude().type_defs[name]

    return load


# ---------------------------------------------------------- modules
def type_defs_for(functions: Iterable[Function], noted: Mapping[str, TypeData]) -> list[TypeData]:
    """The definitions of the types ``functions`` use (constructors, type
    annotations), and those their fields use in turn: ``noted`` ones
    first, else the declared ones of that name."""
    wanted: list[str] = []
    for fn in functions:
        wanted += _type_names(pre_order(fn))
    return _closure(wanted, noted)


def adt_module(names: Iterable[str], noted: Mapping[str, TypeData]) -> IRModule:
    """A module defining the types ``names`` (and those they use): what the
    exhaustiveness check reads."""
    return IRModule((), {d.name: d for d in _closure(list(names), noted)})


def _closure(wanted: list[str], noted: Mapping[str, TypeData]) -> list[TypeData]:
    found: dict[str, TypeData] = {}
    while wanted:
        name = wanted.pop()
        if name in found:
            continue
        data = noted.get(name)
        if data is None and name in _DECLARED:
            data = _DECLARED[name].data()
        if data is None:
            continue  # the type checker reports an unknown type
        found[name] = data
        for ctor in data.constructors:
            wanted += _type_names(n for t in ctor.inputs for n in pre_order(t))
    return list(found.values())


def _type_names(nodes: Iterable[Any]) -> list[str]:
    names = []
    for node in nodes:
        if isinstance(node, GlobalTypeVar):
            names.append(node.name)
        elif isinstance(node, Constructor):
            names.append(node.adt)
    return names


def adt_expr(value: Any) -> Expr | None:
    """An ADT value made in Python (``Tree.Leaf(x)`` run eagerly), or a bare
    nullary constructor (``effir.Nil``), as the expression building it;
    None for anything else. Iterative: a list nests as deep as it is long."""
    if isinstance(value, ConstructorClass) and not value.field_names:
        return build(value, ())
    if not isinstance(value, ADTValue):
        return None
    # post-order: a value's fields are built before it
    done: list[Expr] = []
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, ready = stack.pop()
        if not isinstance(item, ADTValue):
            done.append(to_expr(item))
            continue
        cls = type(item)
        if not isinstance(cls, ConstructorClass):
            raise FrontendError(
                f"a value of the constructor {item.constructor} whose type was not declared "
                "in Python cannot be used here",
                current_span(),
                hint="declare the type with @effir.adt and build the value with its classes",
            )
        if not ready:
            stack.append((item, True))
            stack.extend((f, False) for f in reversed(item.fields))
            continue
        n = len(item.fields)
        fields = tuple(done[len(done) - n :]) if n else ()
        del done[len(done) - n :]
        note_adt(cls.adt)
        ctor = cls.adt.constructor(cls.ir_name)
        done.append(Call(ctor, fields, span=current_span()))
    return done[0]


register_adt_expressions(adt_expr)


# ------------------------------------------------------------- match
def match(value: Any, cases: Mapping[Any, Callable[..., Any]], default: Any = None) -> Any:
    """``effir.match(t, {Tree.Leaf: lambda value: ..., Tree.Node: lambda
    left, right: ...})``: the case of ``t``'s constructor, called on its
    fields; ``default()`` (no argument) for the constructors without a
    case. Every constructor of the type needs a case, or ``default``
    (the exhaustiveness of ``match``). On a value made in Python the case
    runs at once; on an effir value (the builder, ``effir.trace``) the
    cases build a ``match``, their results of one structure (as
    ``effir.cond``'s branches)."""
    span = current_span()
    if not isinstance(cases, Mapping) or not cases:
        raise FrontendError(
            "effir.match takes the value and a dict from constructors to functions",
            span,
            hint="effir.match(t, {Tree.Leaf: lambda value: ..., Tree.Node: lambda l, r: ...})",
        )
    info: AdtInfo | None = None
    for ctor in cases:
        if not is_constructor(ctor):
            raise FrontendError(
                f"effir.match: {ctor!r} is not an effir constructor",
                span,
                hint="key the cases by constructor classes: Tree.Leaf, effir.List.Cons",
            )
        if info is not None and ctor.adt is not info:
            raise FrontendError(
                f"effir.match: the cases mix the types {info.name} and {ctor.adt.name}", span
            )
        info = ctor.adt
        if not callable(cases[ctor]):
            raise FrontendError(f"effir.match: the case of {ctor.__name__} is not a function", span)
    assert info is not None
    missing = [c for c in info.constructors if c not in cases]
    if missing and default is None:
        first = missing[0]
        raise FrontendError(
            f"effir.match is not exhaustive: no case for {info.name}.{first.__name__}",
            span,
            hint=f"add {info.name}.{first.__name__}: lambda "
            f"{', '.join(first.field_names) or ''}: ..., or default=lambda: ...",
        )
    if not B.building() and isinstance(value, ADTValue):
        for ctor, fn in cases.items():
            if isinstance(value, ctor):
                return fn(*value.fields)
        return default()
    note_adt(info)
    clauses: list[tuple[Pattern, Callable[[], Any]]] = []
    for ctor, fn in cases.items():
        fields = [B.new_var(name) for name in ctor.field_names]
        pattern = PatternConstructor(
            info.constructor(ctor.ir_name), tuple(PatternVar(v) for v in fields), span=span
        )
        clauses.append((pattern, _case(fn, fields)))
    if missing:
        clauses.append((PatternWildcard(span=span), default))
    return B.match_clauses(value, clauses)


def _case(fn: Callable[..., Any], fields: list[Any]) -> Callable[[], Any]:
    return lambda: fn(*fields)
