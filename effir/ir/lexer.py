"""Tokens of the text format (docs/text-format.md).

A token is a tuple ``(kind, value, start, end)`` of character offsets into
the source; lines and columns are computed only when an error is reported.
"""

from __future__ import annotations

import re

from .diagnostics import ParseError, Source, Span
from .names import KEYWORDS

# Token kinds.
LOCAL = "local"  # %x      value: name
GRAPH = "graph"  # %0      value: int
GLOBAL = "global"  # @f      value: name
IDENT = "ident"  # nn.dense, Tensor, float32, Cons, True
INT = "int"  # value: (text, suffix)
FLOAT = "float"  # value: (text, suffix)
STRING = "string"  # value: decoded text
PUNCT = "punct"  # value: the punctuation itself
KEYWORD = "keyword"
METADATA = "metadata"  # value: (json text, offset of its first character)
EOF = "eof"


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(
    rf"""
    (?P<ws>[ \t\r\n]+)
  | (?P<linecomment>//[^\n]*)
  | (?P<blockcomment>/\*)
  | (?P<metadata>\#\[metadata\])
  | (?P<hashbracket>\#\[)
  | (?P<local>%{_NAME})
  | (?P<graph>%[0-9]+)
  | (?P<global>@{_NAME})
  | (?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?P<suffix>[fiu][0-9]*)?
  | (?P<ident>{_NAME}(?:\.{_NAME})*)
  | (?P<string>")
  | (?P<punct>=>|->|<=|>=|==|!=|[()\[\]{{}},;:=.+\-*/<>?!])
    """,
    re.VERBOSE,
)
MAX_NUMBER_LENGTH = 400  # far beyond any dtype; keeps int() within Python's digit limit
_DIGITS = re.compile(r"[0-9]+")
_SUFFIXES = frozenset(
    {"f", "f16", "f32", "f64", "i", "i8", "i16", "i32", "i64", "u", "u8", "u16", "u32", "u64"}
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "0": "\0"}


def _error(source: Source, start: int, end: int, message: str) -> ParseError:
    return ParseError(message, Span(source, start, max(end, start + 1)))


def _read_string(source: Source, pos: int) -> tuple[str, int]:
    """Decode a string literal whose opening quote is at ``pos - 1``."""
    text = source.text
    out: list[str] = []
    start = pos - 1
    while True:
        if pos >= len(text) or text[pos] == "\n":
            raise _error(source, start, start + 1, "unterminated string literal")
        ch = text[pos]
        if ch == '"':
            return "".join(out), pos + 1
        if ch == "\\":
            esc = text[pos + 1 : pos + 2]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                pos += 2
                continue
            if esc == "u":
                digits = text[pos + 2 : pos + 6]
                if len(digits) == 4 and all(c in "0123456789abcdefABCDEF" for c in digits):
                    out.append(chr(int(digits, 16)))
                    pos += 6
                    continue
                raise _error(source, pos, pos + 2, "\\u must be followed by four hex digits")
            raise _error(source, pos, pos + 2, f"unknown escape sequence '\\{esc}' in string")
        out.append(ch)
        pos += 1


def _skip_block_comment(source: Source, pos: int) -> int:
    """Skip a nested ``/* ... */`` comment whose ``/*`` ends at ``pos``."""
    text = source.text
    depth = 1
    start = pos - 2
    while depth:
        close = text.find("*/", pos)
        open_ = text.find("/*", pos)
        if close < 0:
            raise _error(source, start, start + 2, "unterminated comment: missing '*/'")
        if 0 <= open_ < close:
            depth += 1
            pos = open_ + 2
        else:
            depth -= 1
            pos = close + 2
    return pos


def tokenize(source: Source) -> list[tuple]:
    """All tokens of ``source``, ending with EOF (or METADATA then EOF)."""
    text = source.text
    tokens: list[tuple] = []
    append = tokens.append
    match = _TOKEN.match
    pos, length = 0, len(text)
    while pos < length:
        m = match(text, pos)
        if m is None:
            ch = text[pos]
            shown = repr(ch) if ch.isprintable() else f"U+{ord(ch):04X}"
            raise _error(source, pos, pos + 1, f"unexpected character {shown}")
        kind = m.lastgroup
        end = m.end()
        if kind == "suffix":
            kind = "number"
        if kind == "ws" or kind == "linecomment":
            pass
        elif kind == "blockcomment":
            end = _skip_block_comment(source, end)
        elif kind == "local":
            append((LOCAL, m.group("local")[1:], pos, end))
        elif kind == "graph":
            append((GRAPH, int(m.group("graph")[1:]), pos, end))
        elif kind == "global":
            append((GLOBAL, m.group("global")[1:], pos, end))
        elif kind == "ident":
            word = m.group("ident")
            append((KEYWORD if word in KEYWORDS else IDENT, word, pos, end))
        elif kind == "number":
            if tokens and tokens[-1][0] == PUNCT and tokens[-1][1] == ".":
                # After '.', only an index: `%t.0.1` is two projections, not `0.1`.
                m = _DIGITS.match(text, pos)
                assert m is not None  # the token's first character is a digit
                end = m.end()
                if end - pos > MAX_NUMBER_LENGTH:
                    raise _error(source, pos, end, "tuple index is too long")
                append((INT, (m.group(), None), pos, end))
            else:
                number, suffix = m.group("number"), m.group("suffix")
                if len(number) > MAX_NUMBER_LENGTH:
                    raise _error(source, pos, end, "number literal is too long")
                if suffix is not None and suffix not in _SUFFIXES:
                    raise _error(source, pos, end, f"unknown literal suffix '{suffix}'")
                if end < length and (text[end].isalnum() or text[end] == "_"):
                    raise _error(source, pos, end + 1, "malformed number literal")
                is_float = "." in number or "e" in number or "E" in number
                is_float = is_float or (suffix is not None and suffix.startswith("f"))
                append((FLOAT if is_float else INT, (number, suffix), pos, end))
        elif kind == "string":
            value, end = _read_string(source, end)
            append((STRING, value, pos, end))
        elif kind == "metadata":
            append((METADATA, (text[end:], end), pos, end))
            end = length
        elif kind == "hashbracket":
            append((PUNCT, "#[", pos, end))
        else:
            append((PUNCT, m.group(), pos, end))
        pos = end
    tokens.append((EOF, None, length, length))
    return tokens


def describe(token: tuple) -> str:
    """How a token is named in 'expected X, found Y' messages."""
    kind, value = token[0], token[1]
    if kind == EOF:
        return "end of input"
    if kind == LOCAL:
        return f"'%{value}'"
    if kind == GRAPH:
        return f"'%{value}'"
    if kind == GLOBAL:
        return f"'@{value}'"
    if kind in (INT, FLOAT):
        return f"number '{value[0]}{value[1] or ''}'"
    if kind == STRING:
        return "a string"
    if kind == METADATA:
        return "'#[metadata]'"
    return f"'{value}'"
