"""Syntax highlighting of effir's text format (docs/text-format.md).

``EffirLexer`` is a Pygments lexer, registered under the alias ``effir`` as a
``pygments.lexers`` entry point (pyproject.toml), so that documentation tools
and notebooks highlight effir programs; its token rules follow
effir/ir/lexer.py, the parser's lexer, so that anything the parser reads is
highlighted without an ``Error`` token. ``html`` is what notebooks show for a
module or an expression (``_repr_html_``).
"""

from __future__ import annotations

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer, bygroups, include, words
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
)

from .ir.display import register_renderer
from .ir.names import BUILTIN_TYPE_WORDS, EXPRESSION_WORDS, KEYWORDS
from .ir.printer import astext
from .ir.types import DTYPES

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class EffirLexer(RegexLexer):
    """effir's text format: Relay 0.0.5's syntax and effir's extensions."""

    name = "effir"
    aliases = ["effir", "relay"]
    filenames = ["*.effir", "*.rly"]
    mimetypes = ["text/x-effir"]

    tokens = {
        "root": [
            (r"[ \t\r\n]+", Whitespace),
            (r"//[^\n]*", Comment.Single),
            (r"/\*", Comment.Multiline, "comment"),
            (r"#\[metadata\]", Comment.Preproc, "metadata"),
            (r"#\[", Comment.Preproc, "attribute"),
            (rf"%{_NAME}", Name.Variable),
            (r"%[0-9]+", Name.Variable.Anonymous),
            (rf"@{_NAME}", Name.Function),
            include("number"),
            (r'"', String.Double, "string"),
            (words(sorted(KEYWORDS), suffix=r"\b"), Keyword),
            (words(("True", "False"), suffix=r"\b"), Keyword.Constant),
            (
                words(sorted((EXPRESSION_WORDS - {"True", "False"}) | {"meta"}), suffix=r"\b"),
                Keyword.Pseudo,
            ),
            (words(sorted(BUILTIN_TYPE_WORDS | set(DTYPES)), suffix=r"\b"), Keyword.Type),
            # A dotted name followed by '(' is an operator call; a capitalised
            # name is a constructor or an ADT; the rest are attribute names,
            # dimensions and type variables.
            (rf"({_NAME}(?:\.{_NAME})*)(\s*)(?=\()", bygroups(Name.Builtin, Whitespace)),
            (rf"[A-Z][A-Za-z0-9_]*(?:\.{_NAME})*", Name.Class),
            (rf"{_NAME}(?:\.{_NAME})*", Name),
            (r"=>|->|<=|>=|==|!=|[=+\-*/<>?!]", Operator),
            (r"[()\[\]{},;:.]", Punctuation),
        ],
        "number": [
            # After a projection '.', digits are a tuple index: `%t.0.1`.
            (r"(?<=\.)[0-9]+", Number.Integer),
            (r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?f[0-9]*", Number.Float),
            (
                r"[0-9]+(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)(?:[iu][0-9]*)?",
                Number.Float,
            ),
            (r"[0-9]+(?:[iu][0-9]*)?", Number.Integer),
        ],
        "comment": [
            (r"[^/*]+", Comment.Multiline),
            (r"/\*", Comment.Multiline, "#push"),
            (r"\*/", Comment.Multiline, "#pop"),
            (r"[/*]", Comment.Multiline),
        ],
        "string": [
            (r'\\(?:[ntr\\"0]|u[0-9a-fA-F]{4})', String.Escape),
            (r'[^"\\\n]+', String.Double),
            (r'"', String.Double, "#pop"),
        ],
        "attribute": [
            (r"\]", Comment.Preproc, "#pop"),
            (r'"', String.Double, "string"),
            include("number"),
            (r"[^\]\"0-9]+", Comment.Preproc),
        ],
        # Everything after #[metadata] is the JSON of the constants.
        "metadata": [(r"(?s).+", Text)],
    }


def html(text: str) -> str:
    """``text`` as highlighted HTML with inline styles (no style sheet
    needed: notebooks on a repository page drop ``<style>`` elements)."""
    return highlight(text, EffirLexer(), HtmlFormatter(noclasses=True, nobackground=True))


def _node_html(obj: object) -> str:
    """A node or module as notebooks show it: its text, highlighted."""
    return html(astext(obj))  # type: ignore[arg-type]


register_renderer("html", _node_html)
