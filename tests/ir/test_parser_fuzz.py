"""Fuzzing the parser: whatever the input, ``effir.parse`` and
``effir.parse_expr`` either succeed or raise ``effir.ParseError`` pointing at
a line and column, with the source line and a caret. Inputs: random bytes,
random text, random token soup, and valid programs with random edits."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir

from .strategies import modules

COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_CARET = re.compile(r"^ *\^~*$", re.MULTILINE)


def check_parse_error(err: effir.ParseError) -> None:
    assert err.line is not None and err.column is not None, str(err)
    assert err.line >= 1 and err.column >= 1
    assert _CARET.search(str(err)), f"no caret line in:\n{err}"


def parse_or_parse_error(text: str | bytes) -> None:
    """Both entry points: success, or a ParseError with a location."""
    for parse in (effir.parse, effir.parse_expr):
        try:
            result = parse(text)
        except effir.ParseError as err:
            check_parse_error(err)
        else:
            # What parses is well formed and prints back to text that parses.
            effir.check_well_formed(result)
            printed = effir.astext(result)
            again = effir.parse(printed) if parse is effir.parse else effir.parse_expr(printed)
            assert effir.structural_equal(again, result)


# ---------------------------------------------------------- random input


@settings(max_examples=300, **COMMON)
@given(st.binary(max_size=120))
def test_random_bytes(data):
    parse_or_parse_error(data)


@settings(max_examples=300, **COMMON)
@given(st.text(max_size=120))
def test_random_text(text):
    parse_or_parse_error(text)


# Pieces of the text format, so that random sequences get past the lexer and
# into the parser's productions.
_TOKENS = [
    '#[version = "0.0.5"]',
    '#[version = "0.0.4"]',
    "#[metadata]",
    '{"relay.Constant": [{"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}]}',
    "def",
    "@main",
    "@f",
    "fn",
    "let",
    "%x",
    "%y",
    "%0",
    "%1",
    "=",
    ";",
    ",",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ":",
    "->",
    "=>",
    ".",
    "0",
    "1",
    "-",
    "+",
    "*",
    "/",
    "<=",
    "==",
    "?",
    "_",
    "1f",
    "2.5f64",
    "-7i64",
    "300i8",
    "1e999f",
    "1.5i",
    "True",
    "None",
    "inf",
    "nan",
    '"s\\n"',
    '"\\q"',
    '"\\u12"',
    "if",
    "else",
    "match",
    "match?",
    "type",
    "List",
    "Cons",
    "Nil",
    "A",
    "global",
    "@rng",
    "ref",
    "ref_read",
    "ref_write",
    "Ref",
    "Key",
    "Tensor",
    "float32",
    "int64",
    "n",
    "add",
    "sum",
    "axis",
    "keepdims",
    "reshape",
    "newshape",
    "debug.print",
    "label",
    "meta",
    "relay.Constant",
    "Primitive",
    "io",
    "random",
    "read",
    "/* c */",
    "/*",
    "// c\n",
]
token_soup = st.lists(st.sampled_from(_TOKENS), max_size=40).map(" ".join)
_HEADER = '#[version = "0.0.5"]\n'


@settings(max_examples=400, **COMMON)
@given(token_soup)
def test_token_soup(text):
    parse_or_parse_error(text)
    parse_or_parse_error(_HEADER + text)


# ------------------------------------------------- valid programs, edited

FIXED_PROGRAMS = [
    """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}

global @rng: Ref[Key] = ref(random.key(0));

def @sum_list(%l: List[float32]) -> float32 {
  match (%l) {
    Cons(%h, %t) => add(%h, @sum_list(%t)),
    Nil => 0f,
  }
}

def @main[T](%x: Tensor[(n, 4), float32], %f: fn [B](B) -> {io, read @rng} T) -> (float32, ()) {
  let %k = ref_read(@rng);
  let %parts = random.split(%k, num=3);
  ref_write(@rng, %parts.0);
  %0 = nn.softmax(%x, axis=0);
  let %y = if (less(-1.5f64, 2i64)) { %0 } else { sum(%0, axis=[1], keepdims=True) };
  debug.print(%y, label="caf\\u00e9 \\"q\\"\\n");
  let %g = fn (%z, Primitive=1) { multiply(%z, meta[relay.Constant][0]) };
  match? ((%g(%y), Nil)) {
    (%a, Cons(_, _)) => (%a, ()),
    _ => (1f, ()),
  }
}

#[metadata]
{
  "relay.Constant": [
    {"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}
  ]
}
""",
    """#[version = "0.0.5"]
def @main(%x: float32, %y: float32) -> float32 {
  /* a /* nested */ comment */
  let %z = %x * %y + -%x / 2f - 3f; // infix
  %z == %x;
  %z <= %y;
  reshape(%z, newshape=[-1, 1])
}
""",
]


def _edit(draw, text: str) -> str:
    """One random edit: delete, insert, replace or duplicate a piece, or truncate."""
    kind = draw(st.sampled_from(["delete", "insert", "replace", "token", "dup", "truncate"]))
    if not text:
        return draw(st.sampled_from(_TOKENS))
    pos = draw(st.integers(0, len(text) - 1))
    if kind == "truncate":
        return text[:pos]
    if kind == "delete":
        length = draw(st.integers(1, 8))
        return text[:pos] + text[pos + length :]
    if kind == "dup":
        length = draw(st.integers(1, 20))
        return text[:pos] + text[pos : pos + length] + text[pos:]
    piece = draw(
        st.one_of(
            st.sampled_from(list('(){}[],;:=.%@#"\\-_0123456789aZ \n?!/*')),
            st.sampled_from(_TOKENS),
            st.text(max_size=3),
        )
    )
    if kind == "insert" or kind == "token":
        return text[:pos] + piece + text[pos:]
    return text[:pos] + piece + text[pos + 1 :]


@st.composite
def edited(draw, programs) -> str:
    text = draw(programs)
    for _ in range(draw(st.integers(1, 3))):
        text = _edit(draw, text)
    return text


@settings(max_examples=300, **COMMON)
@given(edited(st.sampled_from(FIXED_PROGRAMS)))
def test_edited_fixed_programs(text):
    parse_or_parse_error(text)


@settings(max_examples=300, **COMMON)
@given(edited(modules(budget=12).map(effir.astext)))
def test_edited_generated_programs(text):
    parse_or_parse_error(text)


def test_fixed_programs_parse():
    for text in FIXED_PROGRAMS:
        mod = effir.parse(text)
        assert effir.structural_equal(effir.parse(effir.astext(mod)), mod)


# ------------------------------------------------------- fixed regressions

REGRESSIONS = [
    # a float attribute too large for a float
    '#[version = "0.0.5"]\ndef @f(%k) { random.uniform(%k, low=' + "9" * 400 + ") }",
    "random.uniform(1, high=-" + "9" * 400 + ")",
    # a metadata shape whose element count overflows int64 (2**90 wraps to 0)
    'meta[relay.Constant][0]\n#[metadata]\n{"relay.Constant": [{"dtype": "int8", '
    '"shape": [1073741824, 1073741824, 1073741824], "data": ""}]}',
    # attribute lists nested deeper than Python's recursion limit
    "fn (a=" + "[" * 5000 + "]" * 5000 + ") { 1 }",
    "sum(1, axis=" + "[" * 5000 + "]" * 5000 + ")",
]


@pytest.mark.parametrize("text", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_regressions(text):
    parse_or_parse_error(text)
