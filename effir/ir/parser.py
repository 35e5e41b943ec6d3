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

The grammar is written in layers, each a class extending the one below:
``parser_tokens.TokenParser`` (the token cursor, scopes, diagnostics and the
comma-separated list), ``parser_types.TypeParser`` (types, effects,
attribute values), ``parser_exprs.ExprParser`` (expressions and patterns)
and ``Parser`` here (the module: header, metadata, top-level items).

The only exception the parser raises is ``ParseError``.
"""

from __future__ import annotations

from collections.abc import Callable

from . import lexer as L
from . import metadata
from .collector import collector_paced
from .diagnostics import ParseError, Source, Span, WellFormedError
from .expr import Constructor, Expr, Function, GlobalCell, TypeData
from .module import IRModule, check_constructor_name
from .parser_exprs import ExprParser
from .parser_tokens import is_token
from .trampoline import run
from .types import RESERVED_TYPE_NAMES, Type

VERSION = "0.0.5"
ACCEPTED_VERSIONS = ("0.0.5", "0.0.4")

_OPEN = frozenset({"(", "[", "{", "#["})
_CLOSE = frozenset({")", "]", "}"})


class _Item:
    """A top-level definition located by the pre-scan."""

    __slots__ = ("keyword", "start", "end", "name")

    def __init__(self, keyword: str, start: int, end: int, name: str | None) -> None:
        self.keyword, self.start, self.end, self.name = keyword, start, end, name


class Parser(ExprParser):
    """The parser of a module: its header, metadata and top-level items."""

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
        if not (is_token(token, L.PUNCT, "#[") and is_token(self.peek(1), L.IDENT, "version")):
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
                if index + 1 < len(tokens) and is_token(tokens[index + 1], L.KEYWORD, "type"):
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
        if index >= len(tokens) or not is_token(tokens[index], L.PUNCT, "["):
            return 0
        count = 0
        index += 1
        while index < len(tokens) and tokens[index][0] == L.IDENT:
            count += 1
            index += 1
            if index < len(tokens) and is_token(tokens[index], L.PUNCT, ","):
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
        extern = is_token(self.peek(), L.IDENT, "extern")
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
        if not is_token(ref_token, L.KEYWORD, "ref"):
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


def _as_text(text: str | bytes, source_name: str) -> str:
    if isinstance(text, bytes | bytearray):
        data = bytes(text)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            prefix = data[: err.start].decode("utf-8", errors="replace")
            source = Source(source_name, prefix + "\ufffd")
            raise ParseError(
                f"the input is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})",
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
    may use the module's definitions, and the result holds both. Without,
    a text that uses a name of the prelude it does not define (``List``,
    ``Cons``, ``@map``) is parsed into ``effir.prelude()``, as Relay parsed
    its std files into a module holding its prelude."""
    text = _as_text(text, source_name)
    try:
        return _guard(lambda p: p.parse_module(module), lambda: Parser(text, source_name))
    except ParseError as err:
        prelude = _prelude_defining(err.unknown) if module is None else None
        if prelude is None:
            raise
        what, name = err.unknown  # type: ignore[misc]
    try:
        return _guard(lambda p: p.parse_module(prelude), lambda: Parser(text, source_name))
    except ParseError as again:
        note = (
            f"the text uses {what} {'@' if what == 'global' else ''}{name}, which the "
            "prelude defines, so it was parsed into the prelude "
            "(as effir.parse(text, module=effir.prelude()))"
        )
        raise ParseError(again.message, again.span, (*again.notes, note)) from None


# The standard library (effir.std, which parses its text with this module,
# so it sits above it) registers itself here, for the hint above.
_PRELUDE: list[Callable[[], IRModule]] = []


def register_prelude(load: Callable[[], IRModule]) -> None:
    """Let a parse error that names something ``load()`` defines say so."""
    _PRELUDE[:] = [load]


def _prelude_defining(unknown: tuple[str, str] | None) -> IRModule | None:
    """``effir.prelude()`` if it defines the name an error found unknown."""
    if unknown is None or unknown[0] == "variable" or not _PRELUDE:
        return None
    module = _PRELUDE[0]()
    what, name = unknown
    if what == "global":
        return module if name in module.functions else None
    if what == "type":
        return module if name in module.type_defs else None
    return module if name in module.constructors else None


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
