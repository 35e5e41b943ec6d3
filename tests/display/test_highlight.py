"""The Pygments lexer (effir/highlight.py) reads every program the parser
reads without an Error token, and notebooks show nodes and modules through it."""

import importlib
import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from pygments.lexers import get_lexer_by_name
from pygments.token import Error, Keyword, Name, Number, String

import effir
from effir.highlight import EffirLexer

ROOT = Path(__file__).parents[2]
PROGRAMS = sorted(
    [
        *ROOT.glob("tests/ir/golden/*.effir"),
        *ROOT.glob("tests/ir/relay_std/*.rly"),
        *ROOT.glob("examples/*.effir"),
        *ROOT.glob("effir/std/*.rly"),
    ]
)


def _installed_with_entry_point() -> bool:
    found = importlib.metadata.entry_points(group="pygments.lexers", name="effir")
    return bool(found)


def error_tokens(text: str) -> list[tuple[int, str]]:
    return [(i, v) for i, tok, v in EffirLexer().get_tokens_unprocessed(text) if tok in Error]


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_no_error_token_in_programs_and_their_printed_form(path: Path):
    text = path.read_text()
    assert error_tokens(text) == []
    try:
        module = effir.parse(text, source_name=str(path))
    except effir.ParseError:  # a file that uses the prelude without defining it
        module = effir.parse(text, source_name=str(path), module=effir.prelude())
    assert error_tokens(effir.astext(module)) == []


def test_programs_found():
    assert len(PROGRAMS) >= 10


def test_token_kinds():
    text = 'def @f(%x: Tensor[(n), float32]) { let %y = nn.relu(%x) + 1.5f; debug.print(%y, label="a\\n") }'
    kinds = {v: tok for tok, v in EffirLexer().get_tokens(text)}
    assert kinds["def"] in Keyword and kinds["let"] in Keyword
    assert kinds["@f"] in Name.Function and kinds["%x"] in Name.Variable
    assert kinds["nn.relu"] in Name.Builtin and kinds["float32"] in Keyword.Type
    assert kinds["1.5f"] in Number.Float and kinds["\\n"] in String.Escape


def test_an_unknown_character_is_an_error_token():
    assert error_tokens("let %x = $;") != []


def test_registered_as_a_pygments_entry_point():
    """pyproject.toml registers the lexer; once installed (``make``),
    ``get_lexer_by_name("effir")`` finds it (docs use that name)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    value = project["project"]["entry-points"]["pygments.lexers"]["effir"]
    module_name, _, attr = value.partition(":")
    assert getattr(importlib.import_module(module_name), attr) is EffirLexer
    if _installed_with_entry_point():  # installed from this pyproject.toml
        assert isinstance(get_lexer_by_name("effir"), EffirLexer)


def test_html_repr_of_module_and_expression():
    module = effir.parse('#[version = "0.0.5"]\ndef @main(%x) { add(%x, 1f) }')
    page = module._repr_html_()
    assert "<span" in page and "@main" in page and "<style" not in page
    body = module["main"].body
    assert "add" in body._repr_html_()
