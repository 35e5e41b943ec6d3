"""The parser of effir's text format (docs/text-format.md).

Relay 0.0.5's syntax plus effir's extensions. Recursive-descent in shape, but
every production is a generator driven by ``trampoline.run``, and let chains,
sequences and binary operators are parsed by loops, so neither a 100,000-line
let chain nor 10,000 nested ``if``s touches Python's recursion limit.

A module is parsed in three steps: (1) the metadata section at the end is
decoded, since ``meta[relay.Constant][i]`` references come before it; (2) the
top-level items are located and the names they define collected, so that
definitions may refer to later ones; (3) ADT definitions are parsed first (so
their constructors exist), then cells and functions in file order.

The only exception the parser raises is ``ParseError``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from types import GeneratorType
from typing import Any

import numpy as np

from . import lexer as L
from . import metadata
from .collector import collector_paced
from .diagnostics import AttrError, ParseError, Source, Span, WellFormedError
from .expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalCell,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
)
from .literals import LiteralError, literal_value
from .module import IRModule, check_constructor_name
from .names import KEYWORDS, require_name
from .node import EMPTY_ATTRS, Attrs
from .op import all_ops, lookup_op
from .trampoline import Computation, run
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

VERSION = "0.0.5"
ACCEPTED_VERSIONS = ("0.0.5", "0.0.4")

# Infix operators: precedence and the operator each one denotes.
_BINARY = {
    "*": (3, "multiply"),
    "/": (3, "divide"),
    "+": (2, "add"),
    "-": (2, "subtract"),
    "<": (1, "less"),
    "<=": (1, "less_equal"),
    ">": (1, "greater"),
    ">=": (1, "greater_equal"),
    "==": (1, "equal"),
    "!=": (1, "not_equal"),
}
_OPEN = frozenset({"(", "[", "{", "#["})
_CLOSE = frozenset({")", "]", "}"})
_METADATA_KIND = metadata.KIND
_TERMINATORS = frozenset({",", ")", ";", "]", "}"})
_ATTRIBUTE = object()  # what an attribute in a list of arguments or parameters gives


def _is(token: tuple, kind: str, value: Any = None) -> bool:
    return token[0] == kind and (value is None or token[1] == value)


class _Item:
    """A top-level definition located by the pre-scan."""

    __slots__ = ("keyword", "start", "end", "name")

    def __init__(self, keyword: str, start: int, end: int, name: str | None) -> None:
        self.keyword, self.start, self.end, self.name = keyword, start, end, name


class Parser:
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

    def quick_atom(self) -> Expr | None:
        """An atom followed by a terminator, parsed without generators (the
        common case of call arguments and tuple fields), or None."""
        tokens = self.tokens
        pos = self.pos
        follow = tokens[pos + 1] if pos + 1 < len(tokens) else tokens[-1]
        if follow[0] != L.PUNCT or follow[1] not in _TERMINATORS:
            return None
        token = tokens[pos]
        kind = token[0]
        if kind == L.LOCAL:
            var = self.locals.get(token[1])
            if var is not None:
                self.pos = pos + 1
            return var
        if kind in (L.INT, L.FLOAT):
            self.pos = pos + 1
            return self.literal(token, negative=False, start=token)
        return None

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

    # ---------------------------------------------------------------- module
    def parse_module(self, base: IRModule | None = None) -> IRModule:
        """The module the text defines; with ``base``, ``base`` extended by
        it (the text may use ``base``'s functions, cells, types and
        constructors, and may not define them again)."""
        self.read_metadata()
        self.read_header(required=True)
        if base is not None:
            self.know(base)
        items = self.locate_items(base)
        type_defs: dict[str, TypeData] = dict(base.type_defs) if base else {}
        functions: dict[str, Function] = dict(base.functions) if base else {}
        cells: dict[str, GlobalCell] = dict(base.cells) if base else {}
        type_ends: dict[int, int] = {}
        for item in items:
            if item.keyword in ("type", "extern"):
                self.pos = item.start
                data = self.p_type_def()
                type_defs[data.name] = data
                type_ends[item.start] = self.pos
                if item is not items[-1]:
                    self.finish_item(item)
        main: Function | None = None
        main_at = None
        for item in items:
            self.pos = item.start
            if item.keyword == "def":
                name, fn = run(self.p_def())
                functions[name] = fn
            elif item.keyword == "global":
                cell = run(self.p_cell())
                cells[cell.name] = cell
            elif item.keyword in ("type", "extern"):
                self.pos = type_ends[item.start]
            if item is items[-1] and self.pos != item.end:
                # Relay's module body: an expression after the definitions.
                main_at = self.peek()
                try:
                    main = run(self.p_main_expr())
                except ParseError as err:
                    note = (
                        "after the definitions, the parser reads the module's body: an "
                        "expression that becomes @main (or another 'def', 'type', 'global')"
                    )
                    raise ParseError(err.message, err.span, (*err.notes, note)) from None
            self.finish_item(item)
        if main is not None:
            if "main" in functions:
                raise self.error(
                    "the module's body expression becomes @main, and @main is already defined",
                    main_at,
                )
            functions = {"main": main, **functions}
        return IRModule(functions, type_defs, cells)

    def know(self, module: IRModule) -> None:
        """Make ``module``'s globals, types and constructors known, as if
        their definitions preceded the text."""
        for name in module.functions:
            self.global_kinds[name] = "function"
        for name in module.cells:
            self.global_kinds[name] = "cell"
        for name, data in module.type_defs.items():
            self.adt_arity[name] = len(data.type_params)
        self.constructors.update(module.constructors)

    def p_main_expr(self):
        """Relay's module body: an expression after the definitions becomes
        ``@main`` (a function literal gives its parameters, any other
        expression a function of none)."""
        start = self.peek()
        expr = yield self.p_expr()
        if isinstance(expr, Function):
            return expr
        return Function((), expr, span=self.span_from(start))

    def finish_item(self, item: _Item) -> None:
        if self.pos != item.end:
            raise self.error(
                f"unexpected {L.describe(self.peek())} after the definition; "
                "expected 'def', 'type', 'global' or the end of the file"
            )

    def read_header(self, required: bool) -> None:
        token = self.peek()
        if not (_is(token, L.PUNCT, "#[") and _is(self.peek(1), L.IDENT, "version")):
            if required:
                if token[0] == L.EOF:
                    raise self.error(
                        f'empty program: expected the version header #[version = "{VERSION}"]',
                        token,
                    )
                raise self.error(
                    f'expected the version header #[version = "{VERSION}"] at the start of the '
                    f"file, found {L.describe(token)}",
                    token,
                )
            return
        self.next()
        self.next()
        self.expect("=")
        version = self.next()
        if version[0] != L.STRING:
            raise self.error(f"expected a version string, found {L.describe(version)}", version)
        if version[1] not in ACCEPTED_VERSIONS:
            raise self.error(
                f'unsupported version "{version[1]}": effir reads version "{VERSION}" '
                f'(and Relay\'s "0.0.4")',
                version,
            )
        self.expect("]")

    def locate_items(self, base: IRModule | None = None) -> list[_Item]:
        """Find the top-level definitions and collect the names they define;
        an expression after the last one (or alone) is the module's body."""
        tokens = self.tokens
        starts: list[int] = []
        depth = 0
        first = self.pos
        for index in range(first, len(tokens)):
            kind, value = tokens[index][0], tokens[index][1]
            if kind == L.PUNCT:
                if value in _OPEN:
                    depth += 1
                elif value in _CLOSE:
                    depth -= 1
            elif kind == L.KEYWORD and depth == 0 and value in ("def", "type", "global"):
                if starts and starts[-1] == index - 1 and tokens[index - 1][1] == "extern":
                    continue  # `extern type`: the item starts at `extern`
                starts.append(index)
            elif kind == L.IDENT and value == "extern" and depth == 0:
                if index + 1 < len(tokens) and _is(tokens[index + 1], L.KEYWORD, "type"):
                    starts.append(index)
            elif kind in (L.METADATA, L.EOF):
                break
        body_end = index
        if not starts and first != body_end:
            # No definition at all: the whole text is the module's body.
            return [_Item("expr", first, body_end, None)]
        if starts and starts[0] != first:
            raise self.error(
                f"expected 'def', 'type' or 'global', found {L.describe(tokens[first])}",
                tokens[first],
            )
        return self._items(starts, body_end, base)

    def _items(self, starts: list[int], body_end: int, base: IRModule | None) -> list[_Item]:
        tokens = self.tokens
        items: list[_Item] = []
        defined_at: dict[str, tuple] = {}
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else body_end
            keyword = tokens[start][1]
            extern = keyword == "extern"
            name_token = (
                tokens[start + 1 + extern] if start + 1 + extern < len(tokens) else tokens[-1]
            )
            name = None
            if keyword in ("type", "extern") and name_token[0] == L.IDENT:
                name = name_token[1]
                key = "type " + name
                self.adt_arity[name] = self._count_type_params(start + 2 + extern)
            elif keyword in ("def", "global") and name_token[0] == L.GLOBAL:
                name = name_token[1]
                key = "@" + name
                self.global_kinds[name] = "function" if keyword == "def" else "cell"
            else:
                key = None
            if key is not None:
                if base is not None and _defined_in(base, key):
                    raise self.error(f"{key} is already defined in the module", name_token)
                if key in defined_at:
                    first_token = defined_at[key]
                    line, col = self.source.line_col(first_token[2])
                    raise self.error(
                        f"{key} is defined twice",
                        name_token,
                        (f"first defined at {self.source.name}:{line}:{col}",),
                    )
                defined_at[key] = name_token
            items.append(_Item(keyword, start, end, name))
        return items

    def _count_type_params(self, index: int) -> int:
        tokens = self.tokens
        if index >= len(tokens) or not _is(tokens[index], L.PUNCT, "["):
            return 0
        count = 0
        index += 1
        while index < len(tokens) and tokens[index][0] == L.IDENT:
            count += 1
            index += 1
            if index < len(tokens) and _is(tokens[index], L.PUNCT, ","):
                index += 1
        return count

    def read_metadata(self) -> None:
        """Decode the ``#[metadata]`` section, if any (it ends the token list)."""
        if len(self.tokens) < 2 or self.tokens[-2][0] != L.METADATA:
            return
        token = self.tokens[-2]
        text, offset = token[1]
        header = Span(self.source, token[2], token[3])
        self.metadata = metadata.decode(text, offset, self.source, header)

    # ------------------------------------------------------------ definitions
    def p_type_def(self) -> TypeData:
        extern = _is(self.peek(), L.IDENT, "extern")
        if extern:
            self.next()
        self.expect("type")
        name_token = self.next()
        if name_token[0] != L.IDENT:
            raise self.error(f"expected a type name, found {L.describe(name_token)}", name_token)
        name = name_token[1]
        self.check_name(name_token, "type name", RESERVED_TYPE_NAMES)
        undo: list = []
        params = self.p_type_params(undo)
        if extern:  # Relay's opaque type: no constructors, no body
            self.restore(undo)
            return TypeData(name, params, (), span=self.span_from(name_token))
        self.expect("{")

        def constructor() -> Constructor:
            ctor_token = self.next()
            if ctor_token[0] != L.IDENT:
                raise self.error(
                    f"expected a constructor name or '}}', found {L.describe(ctor_token)}",
                    ctor_token,
                )
            if ctor_token[1] in self.constructors:
                raise self.error(f"constructor {ctor_token[1]} is defined twice", ctor_token)
            try:
                check_constructor_name(ctor_token[1])
            except WellFormedError as err:
                raise self.error(err.message, ctor_token) from None
            inputs: list[Type] = []
            if self.accept("("):
                inputs = run(self.p_comma_list(")", self.p_type))
            ctor = Constructor(ctor_token[1], tuple(inputs), name, span=self.span_from(ctor_token))
            self.constructors[ctor.name] = ctor
            return ctor

        constructors = run(self.p_comma_list("}", constructor))
        self.restore(undo)
        return TypeData(name, params, tuple(constructors), span=self.span_from(name_token))

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

    def p_def(self):
        start = self.expect("def")
        name_token = self.next()
        if name_token[0] != L.GLOBAL:
            raise self.error(
                f"expected a global name such as @main, found {L.describe(name_token)}", name_token
            )
        fn = yield self.p_function_rest(start)
        return name_token[1], fn

    def p_cell(self):
        start = self.expect("global")
        name_token = self.next()
        if name_token[0] != L.GLOBAL:
            raise self.error(
                f"expected a global name such as @rng, found {L.describe(name_token)}", name_token
            )
        cell_type = None
        if self.accept(":"):
            cell_type = yield self.p_type()
        self.expect("=")
        ref_token = self.peek()
        if not _is(ref_token, L.KEYWORD, "ref"):
            raise self.error(
                f"a global state cell is initialised with ref(...), found {L.describe(ref_token)}",
                ref_token,
            )
        self.next()
        self.expect("(")
        init = yield self.p_expr()
        self.expect(")", "')'")
        self.expect(";", "';' after the global cell")
        return GlobalCell(name_token[1], cell_type, init, span=self.span_from(start))

    def p_function_rest(self, start: tuple):
        """Everything of a function after ``fn`` (or ``def @name``)."""
        undo: list = []
        type_params = self.p_type_params(undo)
        self.expect("(")
        attrs: dict[str, Any] = {}
        seen: dict[str, tuple] = {}

        def parameter():
            token = self.peek()
            if token[0] == L.LOCAL:
                if attrs:
                    raise self.error("parameters must come before attributes", token)
                self.next()
                if token[1] in seen:
                    raise self.error(f"parameter %{token[1]} is declared twice", token)
                seen[token[1]] = token
                if not self.at_punct(":"):
                    return Var(token[1], None, span=self.span_from(token))
                self.next()
                return self.p_annotated_var(token)
            if token[0] == L.IDENT and _is(self.peek(1), L.PUNCT, "="):
                self.check_name(token, "function attribute name", KEYWORDS)
                self.next()
                self.next()
                if token[1] in attrs:
                    raise self.error(f"attribute '{token[1]}' is given twice", token)
                return self.p_attribute(token[1], attrs)
            raise self.error(
                f"expected a parameter such as %x, an attribute or ')', found {L.describe(token)}",
                token,
            )

        items = yield self.p_comma_list(")", parameter)
        params: list[Var] = [p for p in items if p is not _ATTRIBUTE]
        ret_type = None
        if self.accept("->"):
            ret_type = yield self.p_type()
        for param in params:
            self.bind_local(param.name_hint, param, undo)
        self.expect("{", "'{' to open the function body")
        body = yield self.p_expr()
        self.expect("}", "'}' to close the function body")
        self.restore(undo)
        return Function(
            tuple(params),
            body,
            ret_type,
            type_params,
            Attrs(tuple(sorted(attrs.items()))) if attrs else EMPTY_ATTRS,
            span=self.span_from(start),
        )

    # ------------------------------------------------------------ expressions
    def p_expr(self):
        """A block: ``let`` bindings, graph bindings and sequencing, then a result."""
        bindings: list[tuple[Var | None, Expr, tuple]] = []
        undo: list = []
        while True:
            token = self.peek()
            if token[0] == L.KEYWORD and token[1] == "let":
                self.next()
                name_token = self.next()
                if name_token[0] != L.LOCAL:
                    raise self.error(
                        f"expected a variable such as %x after 'let', found {L.describe(name_token)}",
                        name_token,
                    )
                annotation = None
                if self.accept(":"):
                    annotation = yield self.p_type()
                var = Var(name_token[1], annotation, span=self.span_from(name_token))
                self.bind_local(name_token[1], var, undo)
                self.expect("=")
                value = yield self.p_binary()
                self.expect(";", "';' after the let binding")
                bindings.append((var, value, token))
            elif token[0] == L.GRAPH and _is(self.peek(1), L.PUNCT, "="):
                self.next()
                self.next()
                value = yield self.p_binary()
                self.expect(";", "';' after the graph binding")
                if token[1] in self.graph:
                    raise self.error(
                        f"%{token[1]} is already bound in this block or an enclosing one", token
                    )
                self.bind_graph(token[1], value, undo)
            else:
                value = yield self.p_binary()
                if self.accept(";"):
                    bindings.append((None, value, token))
                    continue
                body = value
                break
        self.restore(undo)
        for var, value, start in reversed(bindings):
            if var is None:
                var = Var("_", span=Span(self.source, start[2], start[3]))
            body = Let(var, value, body, span=Span(self.source, start[2], start[3]))
        return body

    def p_binary(self):
        operands = [(yield self.p_unary() if self.at_punct("-") else self.p_postfix())]
        operators: list[tuple] = []

        def reduce() -> None:
            op_token = operators.pop()
            rhs = operands.pop()
            lhs = operands.pop()
            name = _BINARY[op_token[1]][1]
            operands.append(self.make_call(self.op_node(name), (lhs, rhs), {}, op_token))

        while True:
            token = self.peek()
            if token[0] != L.PUNCT or token[1] not in _BINARY:
                break
            self.next()
            precedence = _BINARY[token[1]][0]
            while operators and _BINARY[operators[-1][1]][0] >= precedence:
                reduce()
            operators.append(token)
            operands.append((yield self.p_unary() if self.at_punct("-") else self.p_postfix()))
        while operators:
            reduce()
        return operands[0]

    def p_unary(self):
        minuses: list[tuple] = []
        while self.at_punct("-"):
            minuses.append(self.next())
        token = self.peek()
        if minuses and token[0] in (L.INT, L.FLOAT) and token[2] == minuses[-1][3]:
            self.next()
            start = minuses.pop()
            expr = self.literal(token, negative=True, start=start)
            expr = yield self.p_postfix_rest(expr, start)
        else:
            expr = yield self.p_postfix()
        for minus in reversed(minuses):
            expr = self.make_call(self.op_node("negative"), (expr,), {}, minus)
        return expr

    def p_postfix(self):
        token = self.peek()
        kind = token[0]
        if kind == L.LOCAL:
            self.next()
            expr = self.locals.get(token[1])
            if expr is None:
                raise self.undefined_local(token)
        elif kind == L.GLOBAL:
            self.next()
            if token[1] not in self.global_kinds:
                raise self.undefined_global(token)
            expr = GlobalVar(token[1], span=self.span_from(token))
        elif kind in (L.INT, L.FLOAT):
            self.next()
            expr = self.literal(token, negative=False, start=token)
        elif kind == L.IDENT:  # operators and constructors: no generator needed
            self.next()
            expr = self.identifier(token)
        else:
            expr = yield self.p_primary()
        follow = self.tokens[self.pos]
        if follow[0] == L.PUNCT and (follow[1] == "(" or follow[1] == "."):
            expr = yield self.p_postfix_rest(expr, token)
        return expr

    def p_postfix_rest(self, expr: Expr, start: tuple):
        """Calls and projections after a primary that began at token ``start``."""
        while True:
            token = self.peek()
            if token[0] != L.PUNCT:
                return expr
            if token[1] == "(":
                self.next()
                args, attrs, attr_tokens = yield self.p_arguments()
                expr = self.make_call(expr, args, attrs, start, attr_tokens)
            elif token[1] == ".":
                self.next()
                index = self.next()
                if index[0] != L.INT or index[1][1] is not None:
                    raise self.error(
                        f"expected a tuple index after '.', found {L.describe(index)}", index
                    )
                expr = TupleGetItem(
                    expr, int(index[1][0]), span=Span(self.source, start[2], index[3])
                )
            else:
                return expr

    def p_arguments(self):
        """A call's arguments and attributes after its ``(``: the arguments,
        the attributes' values and the token naming each attribute."""
        attrs: dict[str, Any] = {}
        attr_tokens: dict[str, tuple] = {}

        def argument():
            arg_token = self.peek()
            if arg_token[0] == L.IDENT and _is(self.peek(1), L.PUNCT, "="):
                self.next()
                self.next()
                if arg_token[1] in attrs:
                    raise self.error(f"attribute '{arg_token[1]}' is given twice", arg_token)
                attr_tokens[arg_token[1]] = arg_token
                return self.p_attribute(arg_token[1], attrs)
            if attrs:
                raise self.error("arguments must come before attributes", arg_token)
            arg = self.quick_atom()
            return arg if arg is not None else self.p_expr()

        items = yield self.p_comma_list(")", argument)
        args = tuple(a for a in items if a is not _ATTRIBUTE) if attrs else tuple(items)
        return args, attrs, attr_tokens

    def p_primary(self):
        token = self.peek()
        kind, value = token[0], token[1]
        if kind == L.GRAPH:
            self.next()
            found = self.graph.get(value)
            if found is None:
                raise self.error(
                    f"%{value} is not bound (graph bindings must come before use)", token
                )
            return found
        if kind == L.PUNCT:
            if value == "(":
                return (yield self.p_paren())
            if value == "{":
                self.next()
                body = yield self.p_expr()
                self.expect("}", "'}' to close the block")
                return body
        if kind == L.KEYWORD:
            if value == "fn":
                self.next()
                return (yield self.p_function_rest(token))
            if value == "if":
                return (yield self.p_if())
            if value == "match":
                return (yield self.p_match())
            if value == "ref":
                self.next()
                self.expect("(")
                inner = yield self.p_expr()
                self.expect(")", "')'")
                return RefCreate(inner, span=self.span_from(token))
            if value == "ref_read":
                self.next()
                self.expect("(")
                inner = yield self.p_expr()
                self.expect(")", "')'")
                return RefRead(inner, span=self.span_from(token))
            if value == "ref_write":
                self.next()
                self.expect("(")
                ref = yield self.p_expr()
                self.expect(",", "',' between the reference and the value")
                inner = yield self.p_expr()
                self.expect(")", "')'")
                return RefWrite(ref, inner, span=self.span_from(token))
            if value == "let":
                raise self.error("a 'let' inside an expression must be wrapped in '{ ... }'", token)
        if kind == L.EOF:
            raise self.error("expected an expression, found end of input", token)
        raise self.error(f"expected an expression, found {L.describe(token)}", token)

    def p_paren(self):
        start = self.expect("(")
        if self.accept(")"):
            return Tuple((), span=self.span_from(start))
        first = yield self.p_expr()
        if self.accept(")"):
            return first
        self.expect(",", "',' or ')'")
        rest = yield self.p_comma_list(")", self.p_expr)
        return Tuple((first, *rest), span=self.span_from(start))

    def p_if(self):
        start = self.expect("if")
        cond = yield self.p_binary()
        self.expect("{", "'{' to open the then-branch")
        then_branch = yield self.p_expr()
        self.expect("}", "'}' to close the then-branch")
        self.expect("else", "'else'")
        self.expect("{", "'{' to open the else-branch")
        else_branch = yield self.p_expr()
        self.expect("}", "'}' to close the else-branch")
        return If(cond, then_branch, else_branch, span=self.span_from(start))

    def p_match(self):
        start = self.expect("match")
        complete = True
        if self.at_punct("?") and self.peek()[2] == start[3]:
            self.next()
            complete = False
        data = yield self.p_binary()
        self.expect("{", "'{' to open the match clauses")
        clauses = yield self.p_comma_list("}", self.p_clause)
        return Match(data, tuple(clauses), complete, span=self.span_from(start))

    def p_clause(self):
        clause_start = self.peek()
        undo: list = []
        pattern = yield self.p_pattern(undo)
        self.expect("=>", "'=>' after the pattern")
        body = yield self.p_binary()
        self.restore(undo)
        return Clause(pattern, body, span=self.span_from(clause_start))

    def p_pattern(self, undo: list):
        token = self.next()
        kind, value = token[0], token[1]
        if kind == L.PUNCT and value == "_":
            return PatternWildcard(span=self.span_from(token))
        if kind == L.IDENT and value == "_":
            return PatternWildcard(span=self.span_from(token))
        if kind == L.LOCAL:
            annotation = None
            if self.accept(":"):
                annotation = yield self.p_type()
            var = Var(value, annotation, span=self.span_from(token))
            self.bind_local(value, var, undo)
            return PatternVar(var, span=self.span_from(token))
        if kind == L.IDENT:
            ctor = self.constructors.get(value)
            if ctor is None:
                raise self.unknown_name(token, "constructor", self.constructors)
            patterns: list = []
            if self.accept("("):
                patterns = yield self.p_comma_list(")", lambda: self.p_pattern(undo))
            if len(patterns) != len(ctor.inputs):
                raise self.error(
                    f"constructor {value} takes {len(ctor.inputs)} fields, "
                    f"the pattern has {len(patterns)}",
                    token,
                )
            return PatternConstructor(ctor, tuple(patterns), span=self.span_from(token))
        if kind == L.PUNCT and value == "(":
            patterns = yield self.p_comma_list(")", lambda: self.p_pattern(undo))
            trailing = _is(self.tokens[self.pos - 2], L.PUNCT, ",")  # `(%x,)` is a 1-tuple
            if len(patterns) == 1 and not trailing:
                return patterns[0]
            return PatternTuple(tuple(patterns), span=self.span_from(token))
        raise self.error(
            f"expected a pattern (_, %x, a constructor or a tuple), found {L.describe(token)}",
            token,
        )

    # --------------------------------------------------------------- helpers
    def identifier(self, token: tuple) -> Expr:
        name = token[1]
        if name == "True" or name == "False":
            return Constant(np.array(name == "True"), span=self.span_from(token))
        if name == "meta" and self.at_punct("["):
            return self.p_meta_ref(token)
        ctor = self.constructors.get(name)
        if ctor is not None:
            if not ctor.inputs and not self.at_punct("("):
                # As in Relay, a bare nullary constructor is its value: `Nil` is `Nil()`.
                return Call(ctor, (), EMPTY_ATTRS, span=self.span_from(token))
            return ctor
        definition = lookup_op(name)
        if definition is not None:
            return definition.op
        known = list(self.constructors) + [d.name for d in all_ops()]
        raise self.unknown_name(token, "operator or constructor", known)

    def p_meta_ref(self, start: tuple) -> Constant:
        self.expect("[")
        kind_token = self.next()
        if not _is(kind_token, L.IDENT, _METADATA_KIND):
            raise self.error(
                f"expected {_METADATA_KIND}, found {L.describe(kind_token)}", kind_token
            )
        self.expect("]")
        self.expect("[")
        index_token = self.next()
        if index_token[0] != L.INT or index_token[1][1] is not None:
            raise self.error(
                f"expected a metadata index, found {L.describe(index_token)}", index_token
            )
        self.expect("]")
        index = int(index_token[1][0])
        if index >= len(self.metadata):
            raise self.error(
                f"meta[{_METADATA_KIND}][{index}] does not exist: the metadata section has "
                f"{len(self.metadata)} constant(s)",
                index_token,
            )
        return self.metadata[index]

    def literal(self, token: tuple, negative: bool, start: tuple) -> Constant:
        text, suffix = token[1]
        try:
            array = literal_value(text, suffix, negative)
        except LiteralError as err:
            raise ParseError(str(err), Span(self.source, start[2], token[3])) from None
        return Constant(array, span=Span(self.source, start[2], token[3]))

    def op_node(self, name: str) -> Op:
        return lookup_op(name).op

    def make_call(
        self,
        callee: Expr,
        args: tuple[Expr, ...],
        attrs: dict[str, Any],
        token: tuple,
        attr_tokens: dict[str, tuple] | None = None,
    ) -> Call:
        span = self.span_from(token)
        if isinstance(callee, Op):
            definition = lookup_op(callee.name)
            if definition.num_inputs is not None and len(args) != definition.num_inputs:
                raise self.error(
                    f"{callee.name} takes {definition.num_inputs} argument(s), got {len(args)}",
                    token,
                )
            try:
                normalized = definition.normalize_attrs(attrs)
            except AttrError as err:
                culprit = next(
                    (t for name, t in (attr_tokens or {}).items() if f"'{name}'" in err.message),
                    token,
                )
                raise self.error(err.message, culprit) from None
            return Call(callee, args, normalized, span=span)
        if attrs:
            name = next(iter(attrs))
            raise self.error(
                f"attribute '{name}' given to a call of a non-operator; only operators take attributes",
                (attr_tokens or {}).get(name, token),
            )
        if isinstance(callee, Constructor) and len(args) != len(callee.inputs):
            raise self.error(
                f"constructor {callee.name} takes {len(callee.inputs)} argument(s), got {len(args)}",
                token,
            )
        return Call(callee, args, EMPTY_ATTRS, span=span)

    def p_attribute(self, name: str, attrs: dict[str, Any]):
        """The value of attribute ``name`` (after ``name =``), stored in
        ``attrs``; gives ``_ATTRIBUTE``, which is no argument or parameter."""
        attrs[name] = yield self.p_attr_value()
        return _ATTRIBUTE

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
            if _is(token, L.PUNCT, "?"):
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
        return self.error(f"{adjective} {what} {prefix}{name}{hint}", token)


def _as_text(text: str | bytes, source_name: str) -> str:
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            prefix = bytes(text[: err.start]).decode("utf-8", errors="replace")
            source = Source(source_name, prefix + "\ufffd")
            raise ParseError(
                f"the input is not UTF-8 text (byte 0x{text[err.start]:02x} at offset {err.start})",
                Span(source, len(prefix), len(prefix) + 1),
            ) from None
    elif not isinstance(text, str):
        raise TypeError(f"parse expects str or bytes, got {type(text).__name__}")
    return text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the program


def _guard(action, parser_factory):
    """Run a parse, turning the rare non-ParseError failure into a ParseError."""
    parser = parser_factory()
    try:
        with collector_paced():
            return action(parser)
    except RecursionError:
        # The parser does not recurse, but nested attribute values (lists of
        # lists...) are built and checked recursively: point where it stopped.
        raise parser.error("the program is nested too deeply to parse") from None


def parse(
    text: str | bytes, source_name: str = "<string>", module: IRModule | None = None
) -> IRModule:
    """Parse a module (a file starting with ``#[version = "0.0.5"]``). With
    ``module`` (``effir.prelude()``, say), the text is parsed into it: it
    may use the module's definitions, and the result holds both."""
    text = _as_text(text, source_name)
    return _guard(lambda p: p.parse_module(module), lambda: Parser(text, source_name))


def parse_expr(
    text: str | bytes, source_name: str = "<string>", module: IRModule | None = None
) -> Expr:
    """Parse one expression; ``module`` supplies globals and constructors."""
    text = _as_text(text, source_name)

    def action(parser: Parser) -> Expr:
        parser.read_metadata()
        parser.read_header(required=False)
        if module is not None:
            parser.know(module)
        if parser.at(L.EOF) or parser.at(L.METADATA):
            raise parser.error("empty input: expected an expression")
        expr = run(parser.p_expr())
        if not (parser.at(L.EOF) or parser.at(L.METADATA)):
            raise parser.error(f"unexpected {L.describe(parser.peek())} after the expression")
        return expr

    return _guard(action, lambda: Parser(text, source_name))


def _defined_in(module: IRModule, key: str) -> bool:
    """Whether ``module`` already defines the item ``key`` ("@f", "type T")."""
    if key.startswith("@"):
        return key[1:] in module.functions or key[1:] in module.cells
    return key.removeprefix("type ") in module.type_defs
