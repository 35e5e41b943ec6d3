"""The parser's token cursor, scopes and diagnostics, and the one loop
that parses a comma-separated list (``p_comma_list``); the base of the
parser's grammar classes (``parser_types``, ``parser_exprs``, ``parser``)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from types import GeneratorType
from typing import Any

from . import lexer as L
from .diagnostics import ParseError, Source, Span, WellFormedError
from .expr import Constant, Constructor, Expr, Var
from .names import require_name
from .trampoline import Computation
from .types import TypeVar

# Punctuation that ends an atom in an argument list or a tuple.
TERMINATORS = frozenset({",", ")", ";", "]", "}"})


def is_token(token: tuple, kind: str, value: Any = None) -> bool:
    return token[0] == kind and (value is None or token[1] == value)


class TokenParser:
    def __init__(self, text: str, source_name: str) -> None:
        self.source = Source(source_name, text)
        self.tokens = L.tokenize(self.source)
        self.pos = 0
        self.locals: dict[str, Var] = {}
        self.graph: dict[int, Expr] = {}
        self.type_vars: dict[str, TypeVar] = {}
        self.global_kinds: dict[str, str] = {}  # name -> "function" | "cell"
        self.adt_arity: dict[str, int] = {}
        self.constructors: dict[str, Constructor] = {}
        self.metadata: list[Constant] = []

    # ----------------------------------------------------------------- tokens
    def peek(self, ahead: int = 0) -> tuple:
        index = self.pos + ahead
        tokens = self.tokens
        return tokens[index] if index < len(tokens) else tokens[-1]

    def next(self) -> tuple:
        token = self.tokens[self.pos]
        if token[0] != L.EOF:
            self.pos += 1
        return token

    def at(self, kind: str, value: Any = None) -> bool:
        token = self.tokens[self.pos]
        return token[0] == kind and (value is None or token[1] == value)

    def at_punct(self, value: str) -> bool:
        token = self.tokens[self.pos]
        return token[0] == L.PUNCT and token[1] == value

    def accept(self, value: str) -> bool:
        token = self.tokens[self.pos]
        if token[0] == L.PUNCT and token[1] == value:
            self.pos += 1
            return True
        return False

    def expect(self, value: str, what: str | None = None) -> tuple:
        token = self.tokens[self.pos]
        if token[0] in (L.PUNCT, L.KEYWORD) and token[1] == value:
            self.pos += 1
            return token
        raise self.error(f"expected {what or repr(value)}, found {L.describe(token)}", token)

    def error(
        self, message: str, token: tuple | None = None, notes: tuple[str, ...] = ()
    ) -> ParseError:
        token = token or self.peek()
        return ParseError(message, Span(self.source, token[2], max(token[3], token[2] + 1)), notes)

    def span_from(self, start_token: tuple) -> Span:
        end = self.tokens[self.pos - 1][3] if self.pos else start_token[3]
        return Span(self.source, start_token[2], max(end, start_token[2]))

    def check_name(self, token: tuple, what: str, reserved: frozenset[str] = frozenset()) -> None:
        try:
            require_name(token[1], what, reserved)
        except WellFormedError as err:
            raise self.error(err.message, token) from None

    def p_comma_list(
        self,
        close: str,
        item: Callable[[], Any],
        *,
        empty: bool = True,
        trailing: bool = True,
    ) -> Computation[list]:
        """The items of a comma-separated list up to ``close`` (consumed).
        ``item()`` parses one: it returns the item, or a production (a
        generator) that gives it. With ``empty`` the list may have no item;
        with ``trailing`` a comma may end it. Every list of the grammar is
        parsed here, so all give the same error: "expected ',' or ')'"."""
        items: list = []
        if empty and self.at_punct(close):
            self.pos += 1
            return items
        while True:
            value = item()
            if type(value) is GeneratorType:
                value = yield value
            items.append(value)
            if not self.accept(","):
                break
            if trailing and self.at_punct(close):
                break
        self.expect(close, f"',' or '{close}'")
        return items

    # ----------------------------------------------------------------- scopes
    def bind_local(self, name: str, var: Var, undo: list) -> None:
        undo.append((self.locals, name, self.locals.get(name)))
        self.locals[name] = var

    def bind_graph(self, index: int, expr: Expr, undo: list) -> None:
        undo.append((self.graph, index, self.graph.get(index)))
        self.graph[index] = expr

    def bind_type_var(self, name: str, tv: TypeVar, undo: list) -> None:
        undo.append((self.type_vars, name, self.type_vars.get(name)))
        self.type_vars[name] = tv

    @staticmethod
    def restore(undo: list) -> None:
        for table, key, previous in reversed(undo):
            if previous is None:
                del table[key]
            else:
                table[key] = previous

    # ---------------------------------------------------------- diagnostics
    def undefined_local(self, token: tuple) -> ParseError:
        return self.unknown_name(token, "variable", list(self.locals), prefix="%")

    def undefined_global(self, token: tuple) -> ParseError:
        return self.unknown_name(token, "global", list(self.global_kinds), prefix="@")

    def unknown_name(self, token: tuple, what: str, known, prefix: str = "") -> ParseError:
        name = token[1]
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f"; did you mean {prefix}{close[0]}?" if close else ""
        adjective = "undefined" if what in ("variable", "global") else "unknown"
        error = self.error(f"{adjective} {what} {prefix}{name}{hint}", token)
        error.unknown = (what, name)
        return error
