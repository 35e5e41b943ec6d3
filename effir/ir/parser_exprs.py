"""The parser's grammar of expressions: blocks of ``let`` and graph
bindings, infix operators, calls, projections, functions, ``if``, ``match``
and its patterns, references, literals and metadata references. Let chains,
sequences and infix operators are loops; nesting goes through the
trampoline (``run``), never Python recursion."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import lexer as L
from . import metadata
from .diagnostics import AttrError, ParseError, Span
from .expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
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
    Var,
)
from .literals import LiteralError, literal_value
from .names import KEYWORDS
from .node import EMPTY_ATTRS, Attrs
from .op import all_ops, get_op, lookup_op, op_def
from .parser_tokens import TERMINATORS, is_token
from .parser_types import ATTRIBUTE, TypeParser

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
_METADATA_KIND = metadata.KIND


class ExprParser(TypeParser):
    def quick_atom(self) -> Expr | None:
        """An atom followed by a terminator, parsed without generators (the
        common case of call arguments and tuple fields), or None."""
        tokens = self.tokens
        pos = self.pos
        follow = tokens[pos + 1] if pos + 1 < len(tokens) else tokens[-1]
        if follow[0] != L.PUNCT or follow[1] not in TERMINATORS:
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
            if token[0] == L.IDENT and is_token(self.peek(1), L.PUNCT, "="):
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
        params: list[Var] = [p for p in items if p is not ATTRIBUTE]
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
            elif token[0] == L.GRAPH and is_token(self.peek(1), L.PUNCT, "="):
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
            if arg_token[0] == L.IDENT and is_token(self.peek(1), L.PUNCT, "="):
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
        args = tuple(a for a in items if a is not ATTRIBUTE) if attrs else tuple(items)
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
            trailing = is_token(self.tokens[self.pos - 2], L.PUNCT, ",")  # `(%x,)` is a 1-tuple
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
        if not is_token(kind_token, L.IDENT, _METADATA_KIND):
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
        return get_op(name)

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
            definition = op_def(callee)
            if not definition.takes(len(args)):
                raise self.error(definition.arity_error(len(args)), token)
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
