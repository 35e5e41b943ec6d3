"""The parser's grammar of types, effects, type parameters and attribute
values: the productions that contain no expression."""

from __future__ import annotations

from typing import Any

from . import lexer as L
from .expr import Var
from .parser_tokens import TokenParser, is_token
from .trampoline import run
from .types import (
    ANY,
    DTYPES,
    EFFECT_KEYWORDS,
    RESERVED_TYPE_NAMES,
    FuncType,
    GlobalTypeVar,
    KeyType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    is_dim,
    normalize_effects,
)

ATTRIBUTE = object()  # what an attribute in a list of arguments or parameters gives


class TypeParser(TokenParser):
    def p_type_params(self, undo: list) -> tuple[TypeVar, ...]:
        if not self.accept("["):
            return ()
        seen: set[str] = set()

        def type_param() -> TypeVar:
            token = self.next()
            if token[0] != L.IDENT:
                raise self.error(
                    f"expected a type parameter name, found {L.describe(token)}", token
                )
            if token[1] in seen:
                raise self.error(f"type parameter {token[1]} is declared twice", token)
            self.check_name(token, "type parameter name", RESERVED_TYPE_NAMES)
            seen.add(token[1])
            tv = TypeVar(token[1], span=self.span_from(token))
            self.bind_type_var(token[1], tv, undo)
            return tv

        return tuple(run(self.p_comma_list("]", type_param, empty=False, trailing=False)))

    def p_attribute(self, name: str, attrs: dict[str, Any]):
        """The value of attribute ``name`` (after ``name =``), stored in
        ``attrs``; gives ``ATTRIBUTE``, which is no argument or parameter."""
        attrs[name] = yield self.p_attr_value()
        return ATTRIBUTE

    def p_annotated_var(self, token: tuple):
        """A parameter ``%x: T`` after its ``:``."""
        annotation = yield self.p_type()
        return Var(token[1], annotation, span=self.span_from(token))

    def p_attr_value(self):
        token = self.next()
        kind, value = token[0], token[1]
        if kind == L.PUNCT and value in ("[", "("):
            closing = "]" if value == "[" else ")"
            items = yield self.p_comma_list(closing, self.p_attr_value)
            return tuple(items)
        negative = False
        if kind == L.PUNCT and value == "-":
            negative = True
            token = self.next()
            kind, value = token[0], token[1]
        if kind == L.INT:
            number = int(value[0])
            return -number if negative else number
        if kind == L.FLOAT:
            try:
                number = float(value[0])
            except (ValueError, OverflowError):  # pragma: no cover - the lexer checked the text
                raise self.error("malformed number", token) from None
            return -number if negative else number
        if kind == L.IDENT and value in ("inf", "nan"):  # as the printer writes them
            number = float(value)
            return -number if negative else number
        if not negative:
            if kind == L.STRING:
                return value
            if kind == L.IDENT and value in ("True", "False"):
                return value == "True"
            if kind == L.IDENT and value == "None":
                return None
        raise self.error(
            f"expected an attribute value (a number, inf, nan, a string, True, False, None or a list), "
            f"found {L.describe(token)}",
            token,
        )

    # ------------------------------------------------------------------ types
    def p_type(self):
        token = self.next()
        kind, value = token[0], token[1]
        if kind == L.KEYWORD and value == "fn":
            undo: list = []
            type_params = self.p_type_params(undo)
            self.expect("(", "'(' to open the parameter types")
            args: list[Type] = yield self.p_comma_list(")", self.p_type)
            self.expect("->", "'->' and the return type")
            effects = None
            if self.at_punct("{"):
                effects = self.p_effects()
            ret = yield self.p_type()
            self.restore(undo)
            return FuncType(tuple(args), ret, type_params, effects, span=self.span_from(token))
        if kind == L.PUNCT and value == "(":
            if self.accept(")"):
                return TupleType((), span=self.span_from(token))
            fields = [(yield self.p_type())]
            if self.accept(")"):
                return fields[0]
            self.expect(",", "',' or ')'")
            fields.extend((yield self.p_comma_list(")", self.p_type)))
            return TupleType(tuple(fields), span=self.span_from(token))
        if kind == L.IDENT:
            if value == "Tensor" and self.at_punct("["):
                return self.p_tensor_type(token)
            if value == "Ref" and self.at_punct("["):
                self.next()
                inner = yield self.p_type()
                self.expect("]", "']'")
                return RefType(inner, span=self.span_from(token))
            if value == "Key":
                return KeyType(span=self.span_from(token))
            tv = self.type_vars.get(value)
            if tv is not None:
                return tv
            if value in DTYPES:
                return TensorType((), value, span=self.span_from(token))
            arity = self.adt_arity.get(value)
            if arity is not None:
                args = []
                if self.accept("["):
                    args = yield self.p_comma_list("]", self.p_type)
                if len(args) != arity:
                    raise self.error(
                        f"type {value} takes {arity} type argument(s), got {len(args)}", token
                    )
                return TypeCall(GlobalTypeVar(value), tuple(args), span=self.span_from(token))
            known = (
                list(self.type_vars)
                + list(self.adt_arity)
                + list(DTYPES)
                + ["Tensor", "Ref", "Key"]
            )
            raise self.unknown_name(token, "type", known)
        raise self.error(f"expected a type, found {L.describe(token)}", token)

    def p_tensor_type(self, start: tuple) -> TensorType:
        self.expect("[")
        self.expect("(", "'(' to open the shape")

        def dim() -> int | str:
            token = self.next()
            if token[0] == L.INT and token[1][1] is None:
                return int(token[1][0])
            if token[0] == L.IDENT and is_dim(token[1]):
                return token[1]
            if is_token(token, L.PUNCT, "?"):
                return ANY
            raise self.error(
                f"expected a dimension (an integer, a name or ?), found {L.describe(token)}",
                token,
            )

        dims: list[int | str] = run(self.p_comma_list(")", dim))
        self.expect(",", "',' and the dtype")
        dtype_token = self.next()
        if dtype_token[0] != L.IDENT or dtype_token[1] not in DTYPES:
            raise self.error(
                f"expected a dtype ({', '.join(DTYPES)}), found {L.describe(dtype_token)}",
                dtype_token,
            )
        self.expect("]", "']'")
        return TensorType(tuple(dims), dtype_token[1], span=self.span_from(start))

    def p_effects(self) -> tuple[str, ...]:
        self.expect("{")

        def effect() -> str:
            token = self.next()
            if token[0] == L.IDENT and token[1] in EFFECT_KEYWORDS:
                return token[1]
            if token[0] == L.IDENT and token[1] in ("read", "write"):
                cell = self.next()
                if cell[0] != L.GLOBAL:
                    raise self.error(
                        f"expected a state cell such as @rng, found {L.describe(cell)}", cell
                    )
                return f"{token[1]} @{cell[1]}"
            raise self.error(
                f"expected an effect (io, random, read @cell, write @cell), found {L.describe(token)}",
                token,
            )

        return normalize_effects(run(self.p_comma_list("}", effect)))
