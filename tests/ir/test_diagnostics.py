"""Every malformed input gets one located ParseError."""

import pytest

import effir

H = '#[version = "0.0.5"]\n'

# (name, source, message fragment, line, column)
CASES = [
    (
        "undefined variable",
        H + "def @main(%x) {\n  add(%x, %y)\n}\n",
        "undefined variable %y",
        3,
        11,
    ),
    (
        "undefined variable with suggestion",
        H + "def @main(%input) {\n  add(%inptu, %input)\n}\n",
        "did you mean %input?",
        3,
        7,
    ),
    (
        "unknown operator",
        H + "def @main(%x) {\n  nn.dens(%x, %x)\n}\n",
        "did you mean nn.dense?",
        3,
        3,
    ),
    (
        "unknown constructor in a pattern",
        H + "def @main(%x) {\n  match (%x) { Foo => 1 }\n}\n",
        "unknown constructor Foo",
        3,
        16,
    ),
    (
        "unknown constructor as a call",
        H + "def @main() {\n  Foo(1)\n}\n",
        "unknown operator or constructor Foo",
        3,
        3,
    ),
    ("undefined global", H + "def @main(%x) {\n  @g(%x)\n}\n", "undefined global @g", 3, 3),
    ("duplicate function", H + "def @f() { 1 }\ndef @f() { 2 }\n", "@f is defined twice", 3, 5),
    ("duplicate type", H + "type T { A }\ntype T { B }\n", "type T is defined twice", 3, 6),
    (
        "duplicate constructor",
        H + "type T { A }\ntype U { A }\n",
        "constructor A is defined twice",
        3,
        10,
    ),
    (
        "function and cell share a name",
        H + "global @f = ref(1);\ndef @f() { 1 }\n",
        "@f is defined twice",
        3,
        5,
    ),
    ("duplicate parameter", H + "def @f(%x, %x) { %x }\n", "parameter %x is declared twice", 2, 12),
    (
        "duplicate attribute",
        H + "def @f(%x) {\n  sum(%x, keepdims=True, keepdims=False)\n}\n",
        "given twice",
        3,
        26,
    ),
    (
        "bad attribute value",
        H + 'def @main(%x) {\n  sum(%x, axis="a")\n}\n',
        "'axis' expects an integer or a list of integers",
        3,
        11,
    ),
    (
        "unknown attribute",
        H + "def @main(%x) {\n  sum(%x, axes=[1])\n}\n",
        "unknown attribute 'axes'",
        3,
        11,
    ),
    (
        "missing attribute",
        H + "def @main(%x) {\n  reshape(%x)\n}\n",
        "missing required attribute 'newshape'",
        3,
        3,
    ),
    (
        "bad dtype attribute",
        H + 'def @main(%x) {\n  cast(%x, dtype="float128")\n}\n',
        "expects a dtype string",
        3,
        12,
    ),
    (
        "attribute on a function call",
        H + "def @f(%x) { %x }\ndef @main() {\n  @f(1, axis=1)\n}\n",
        "only operators take attributes",
        4,
        9,
    ),
    (
        "operator arity",
        H + "def @main(%x) {\n  add(%x)\n}\n",
        "add takes 2 argument(s), got 1",
        3,
        3,
    ),
    (
        "constructor arity",
        H + "type L { C(int32) }\ndef @main() {\n  C(1, 2)\n}\n",
        "constructor C takes 1 argument(s)",
        4,
        3,
    ),
    (
        "pattern arity",
        H + "type L { C(int32) }\ndef @main(%x) {\n  match (%x) { C => 1 }\n}\n",
        "takes 1 fields",
        4,
        16,
    ),
    (
        "wrong version",
        '#[version = "0.1.0"]\ndef @main() { 1 }\n',
        'unsupported version "0.1.0"',
        1,
        13,
    ),
    ("missing version", "def @main() { 1 }\n", "expected the version header", 1, 1),
    (
        "unterminated string",
        H + 'def @main(%x) {\n  debug.print(%x, label="abc)\n}\n',
        "unterminated string",
        3,
        25,
    ),
    (
        "unknown escape",
        H + 'def @main(%x) {\n  debug.print(%x, label="a\\q")\n}\n',
        "unknown escape sequence",
        3,
        27,
    ),
    (
        "unterminated comment",
        H + "def @main(%x) {\n  /* never /* closed */\n  %x\n}\n",
        "unterminated comment",
        3,
        3,
    ),
    ("control character", H + "def @main() {\x00}", "unexpected character U+0000", 2, 14),
    ("empty file", "", "empty program", 1, 1),
    ("only comments", "  \n// nothing here\n", "empty program", 3, 1),
    (
        "missing closing brace",
        H + "def @main(%x) {\n  %x\n",
        "expected '}' to close the function body",
        4,
        1,
    ),
    (
        "missing semicolon",
        H + "def @main(%x) {\n  let %y = %x\n  %y\n}\n",
        "expected ';' after the let binding",
        4,
        3,
    ),
    ("integer out of range", H + "def @main() {\n  300i8\n}\n", "does not fit in int8", 3, 3),
    ("float out of range", H + "def @main() {\n  1e40f\n}\n", "out of range for float32", 3, 3),
    ("malformed number", H + "def @main() {\n  1q\n}\n", "malformed number literal", 3, 3),
    (
        "unknown type",
        H + "def @main(%x: Tensr[(1), float32]) {\n  %x\n}\n",
        "unknown type Tensr; did you mean Tensor?",
        2,
        15,
    ),
    (
        "bad dtype",
        H + "def @main(%x: Tensor[(1), float33]) {\n  %x\n}\n",
        "expected a dtype",
        2,
        27,
    ),
    (
        "type arity",
        H + "type L[A] { N }\ndef @main(%x: L) {\n  %x\n}\n",
        "type L takes 1 type argument(s), got 0",
        3,
        15,
    ),
    (
        "missing metadata",
        H + "def @main() {\n  meta[relay.Constant][3]\n}\n",
        "does not exist",
        3,
        24,
    ),
    (
        "malformed metadata json",
        H + 'def @main() {\n  1\n}\n#[metadata]\n{ "relay.Constant": [ }\n',
        "malformed metadata section",
        6,
        23,
    ),
    (
        "junk at top level",
        H + "def @main() { 1 }\nfoo\n",
        "unknown operator or constructor foo",
        3,
        1,
    ),
    ("unbound graph name", H + "def @main() {\n  %3\n}\n", "%3 is not bound", 3, 3),
    (
        "cell without ref",
        H + "global @c: Ref[Key] = random.key(0);\n",
        "initialised with ref(...)",
        2,
        23,
    ),
    (
        "variable out of scope",
        H + "def @main() {\n  let %f = fn (%a) { %a };\n  %a\n}\n",
        "undefined variable %a",
        4,
        3,
    ),
]


@pytest.mark.parametrize("name,source,fragment,line,column", CASES, ids=[c[0] for c in CASES])
def test_parse_error_is_located(name, source, fragment, line, column):
    with pytest.raises(effir.ParseError) as info:
        effir.parse(source, source_name="prog.effir")
    err = info.value
    assert isinstance(err, effir.Error)
    assert fragment in err.message
    assert (err.line, err.column) == (line, column)
    assert err.source_name == "prog.effir"
    text = str(err)
    assert text.startswith(f"prog.effir:{line}:{column}: parse error: ")
    caret_line = text.splitlines()[2]
    assert caret_line.strip().startswith("^")
    assert caret_line.index("^") == column + 1  # two spaces of margin, 1-based column


def test_binary_input_is_rejected_with_a_location():
    with pytest.raises(effir.ParseError) as info:
        effir.parse(b"\x89PNG\r\n\x1a\n\x00\x00", source_name="image.png")
    assert "not UTF-8" in info.value.message
    assert (info.value.line, info.value.column) == (1, 1)


def test_invalid_utf8_after_valid_lines_points_at_the_byte():
    source = H.encode() + b"def @main() {\n  1 \xff\n}\n"
    with pytest.raises(effir.ParseError) as info:
        effir.parse(source)
    assert (info.value.line, info.value.column) == (3, 5)


def test_duplicate_definition_notes_the_first_one():
    with pytest.raises(effir.ParseError) as info:
        effir.parse(H + "def @f() { 1 }\ndef @f() { 2 }\n", source_name="d.effir")
    assert "note: first defined at d.effir:2:5" in str(info.value)


def test_parse_expr_errors_are_located():
    with pytest.raises(effir.ParseError) as info:
        effir.parse_expr("add(1f, %nope)", source_name="<expr>")
    assert (info.value.line, info.value.column) == (1, 9)
    with pytest.raises(effir.ParseError, match="empty input"):
        effir.parse_expr("   ")
    with pytest.raises(effir.ParseError, match="after the expression"):
        effir.parse_expr("1f 2f")


def test_long_lines_are_shortened_around_the_error():
    source = H + "def @main() {\n  (" + "1, " * 200 + "%nope)\n}\n"
    with pytest.raises(effir.ParseError) as info:
        effir.parse(source)
    excerpt = str(info.value).splitlines()[1]
    assert len(excerpt) < 220 and "%nope" in excerpt


MORE_CASES = [
    ("constructor named like an operator", H + "type T { add }\n", "name of an operator", 2, 10),
    ("constructor named True", H + "type T { True }\n", "reserved word", 2, 10),
    ("type named like a dtype", H + "type float32 { A }\n", "reserved word", 2, 6),
    ("type parameter named Key", H + "def @f[Key](%x: Key) { %x }\n", "reserved word", 2, 8),
    ("dotted function attribute", H + "def @f(%x, a.b=1) { %x }\n", "not a valid name", 2, 12),
    (
        "dotted dimension",
        H + "def @f(%x: Tensor[(a.b), float32]) { %x }\n",
        "expected a dimension",
        2,
        20,
    ),
    (
        "huge integer",
        H + "def @f() {\n  " + "9" * 5000 + "\n}\n",
        "number literal is too long",
        3,
        3,
    ),
    (
        "huge tuple index",
        H + "def @f() {\n  ().1" + "0" * 5000 + "\n}\n",
        "tuple index is too long",
        3,
        6,
    ),
    (
        "cell name missing",
        H + "global rng = ref(1);\n",
        "expected a global name such as @rng",
        2,
        8,
    ),
    (
        "graph name rebound in a nested block",
        H + "def @f(%c) {\n  %0 = 1;\n  if (%c) {\n    %0 = 2;\n    %0\n  } else { %0 }\n}\n",
        "enclosing one",
        5,
        5,
    ),
]


@pytest.mark.parametrize(
    "name,source,fragment,line,column", MORE_CASES, ids=[c[0] for c in MORE_CASES]
)
def test_names_the_text_cannot_spell_are_rejected(name, source, fragment, line, column):
    test_parse_error_is_located(name, source, fragment, line, column)


def test_negative_literal_out_of_range_underlines_the_sign():
    with pytest.raises(effir.ParseError) as info:
        effir.parse(H + "def @f() {\n  -1u8\n}\n")
    assert (info.value.line, info.value.column) == (3, 3)
    assert "~~~" in str(info.value)


def test_crlf_source_lines_print_without_carriage_returns():
    with pytest.raises(effir.ParseError) as info:
        effir.parse(H.replace("\n", "\r\n") + "def @f() {\r\n  %nope\r\n}\r\n")
    assert "\r" not in str(info.value) and "?" not in str(info.value).splitlines()[1]


def test_a_utf8_byte_order_mark_is_accepted():
    module = effir.parse(b"\xef\xbb\xbf" + H.encode() + b"def @f() { 1 }\n")
    assert "f" in module
