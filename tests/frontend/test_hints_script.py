"""The hints of ``@effir.script``'s refusals, applied: each case scripts a
function the converter refuses, checks the message and the hint, then runs
the function written as the hint says (interpreted, against numpy).

The hint's placeholders (the ``n, 8`` of a shape, the ``xs, ys`` of a
sequence) are filled in with the case's own names and sizes."""

from __future__ import annotations

import linecache
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import effir
from tests.frontend.helpers import define

F32 = "float32"
V = effir.Tensor[(2, 3), F32]
X = np.array([[-2.0, 0.25, 3.0], [0.5, -0.75, 1.5]], F32)
Y = np.array([[1.0, -1.0, 0.5], [2.0, 0.0, -3.0]], F32)
PRELUDE = """
V = effir.Tensor[(2, 3), F32]
box = type("Box", (), {})()
total = effir.cell("total", np.zeros((2, 3), np.float32))
opts = {"axis": 0}


@effir.adt
class Tree:
    class Leaf:
        value: effir.Tensor[(2, 3), "float32"]

    class Node:
        left: "Tree"
        right: "Tree"


@effir.script
def double(v: V):
    return v * 2.0
"""
SCRIPTS = "effir/frontend/script_{}.py: {}"


@dataclass(frozen=True)
class Case:
    """A refused function ``f(x, y)`` and the one its hint makes."""

    site: str  # the hint site's key (tests/support/hint_sites.py)
    message: str  # a part of the error's message
    hint: str  # the whole hint
    wrong: str  # f's body, or a whole source with a `def f`
    fixed: str
    want: Callable[[np.ndarray, np.ndarray], np.ndarray]
    before: str = ""  # module-level code before f
    extra: dict = field(default_factory=dict)


def _source(body: str, before: str) -> str:
    body = textwrap.dedent(body).strip("\n")
    if body.startswith(("def f(", "@effir")):
        text = body
    else:
        text = "def f(x: V, y: V):\n" + textwrap.indent(body, "    ")
    if not text.startswith("@"):
        text = "@effir.script\n" + text
    return PRELUDE + textwrap.dedent(before) + "\n\n" + text + "\n"


def refused(body: str, before: str = "") -> effir.FrontendError:
    """The error of scripting (and checking) ``f`` of ``body``."""
    with pytest.raises(effir.FrontendError) as err:
        effir.check(define(_source(body, before))["f"].module)
    assert err.value.span is not None
    return err.value


def run(body: str, before: str = "", args: tuple = (X, Y)) -> np.ndarray:
    """``f`` of ``body`` interpreted, checked to agree with running it eagerly."""
    f = define(_source(body, before))["f"]
    got = f.interpret(*args)
    np.testing.assert_allclose(np.asarray(f(*args)), np.asarray(got), rtol=1e-6)
    return np.asarray(got)


def check(case: Case) -> None:
    err = refused(case.wrong, case.before)
    assert case.message in err.message
    assert err.hint == case.hint
    np.testing.assert_allclose(run(case.fixed, case.before), case.want(X, Y), rtol=1e-6)


CASES = [
    Case(
        SCRIPTS.format("convert", "script a function defined with def"),
        "f is not a def",
        "script a function defined with def",
        "@effir.script\nasync def f(x: V, y: V):\n    return x + y",
        "def f(x: V, y: V):\n    return x + y",
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("convert", "list each parameter with its type annotation"),
        "*args, **kwargs, keyword-only or default parameters",
        "list each parameter with its type annotation",
        "def f(x: V, *ys):\n    return x + ys[0]",
        "def f(x: V, y: V):\n    return x + y",
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("convert", 'write {}: effir.Tensor[(n, 8), "float32"] (or effir.Key, ...)'),
        "parameter y has no type annotation",
        'write y: effir.Tensor[(n, 8), "float32"] (or effir.Key, ...)',
        "def f(x: V, y):\n    return x + y",
        'def f(x: V, y: effir.Tensor[(2, 3), "float32"]):\n    return x + y',
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("convert", "end every path with `return value`"),
        "f does not return a value on every path: it can end after this statement",
        "end every path with `return value`",
        "z = x + y",
        "z = x + y\nreturn z",
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("stmts", "return in both branches (or after the if)"),
        "a branch of this if does not return a value",
        "return in both branches (or after the if)",
        "z = x + y\nif z[0][0] > 0.0:\n    return z",
        "z = x + y\nif z[0][0] > 0.0:\n    return z\nreturn x",
        lambda x, y: x,  # x + y's first element is negative
    ),
    Case(
        SCRIPTS.format("stmts", "return in every path"),
        "this path does not return a value",
        "return in every path",
        "if 1 > 2:\n    return x",
        "if 1 > 2:\n    return x\nreturn y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("convert", "return a value"),
        "None is not an effir value",
        "return a value",
        "return None",
        "return x",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("exprs", "use + - * / @ ** or an effir.op function"),
        "the operator FloorDiv is not supported",
        "use + - * / @ ** or an effir.op function",
        "return x // 2.0",
        "return effir.op.floor(x / 2.0)",
        lambda x, y: x // 2,
    ),
    Case(
        SCRIPTS.format("exprs", "use effir.op.logical_not"),
        "the operator ~ is not supported",
        "use effir.op.logical_not",
        "return ~(x > y)",
        "return effir.op.logical_not(x > y)",
        lambda x, y: ~(x > y),
    ),
    Case(
        SCRIPTS.format("exprs", "compare with < <= > >= == !="),
        "the comparison Is is not supported",
        "compare with < <= > >= == !=",
        "return x is y",
        "return x == y",
        lambda x, y: x == y,
    ),
    Case(
        SCRIPTS.format("exprs", "index tuples with constants"),
        "a tuple index must be a Python int",
        "index tuples with constants",
        "t = (x, y)\ni = effir.op.argmax(x)\nreturn t[i]",
        "t = (x, y)\nreturn t[1]",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("exprs", "index one axis at a time, or use effir.op.strided_slice"),
        "multi-dimensional indexing",
        "index one axis at a time, or use effir.op.strided_slice",
        "return x[1, 0:2]",
        "return x[1][0:2]",
        lambda x, y: x[1, 0:2],
    ),
    Case(
        SCRIPTS.format("exprs", "define it before this line"),
        "name z is not defined",
        "define it before this line",
        "return x + z",
        "z = y * 2.0\nreturn x + z",
        lambda x, y: x + y * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "append to {} in a loop, then use it after the loop"),
        "ys is an empty list here",
        "append to ys in a loop, then use it after the loop",
        "ys = []\nreturn ys",
        "ys = []\nfor row in x:\n    ys.append(row * 2.0)\nreturn ys",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "read {} after the loop"),
        "ys is being built by this loop",
        "read ys after the loop",
        "ys = []\nfor row in x:\n    ys.append(row)\n    z = ys\nreturn x",
        "ys = []\nfor row in x:\n    ys.append(row)\nz = ys\nreturn z",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("exprs", "pass keyword arguments by name"),
        "**kwargs in a call",
        "pass keyword arguments by name",
        "return effir.op.sum(x, **opts)",
        "return effir.op.sum(x, axis=0)",
        lambda x, y: x.sum(axis=0),
    ),
    Case(
        SCRIPTS.format("exprs", "pass them by position [keyword arguments to a nested function]"),
        "keyword arguments to a nested function",
        "pass them by position",
        "def g(a, b):\n    return a - b\nreturn g(b=x, a=y)",
        "def g(a, b):\n    return a - b\nreturn g(y, x)",
        lambda x, y: y - x,
    ),
    Case(
        SCRIPTS.format("exprs", "pass them by position [keyword arguments to a scripted function]"),
        "keyword arguments to a scripted function",
        "pass them by position",
        "return double(v=x)",
        "return double(x)",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("exprs", 'print("label", value) [print with keyword arguments]'),
        "print with keyword arguments",
        'print("label", value)',
        'print(x, sep=":")\nreturn x',
        'print("label", x)\nreturn x',
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format(
            "exprs",
            'print("label", value) [print takes one value (after an optional label string)]',
        ),
        "print takes one value",
        'print("label", value)',
        "print(x, y)\nreturn x",
        'print("x", x)\nprint("y", y)\nreturn x',
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "remove it"),
        "code after return never runs",
        "remove it",
        "return x\nz = y",
        "return x",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "return a value"),
        "return without a value",
        "return a value",
        "return",
        "return y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("stmts", "use + - * / @ **"),
        "the operator FloorDiv= is not supported",
        "use + - * / @ **",
        "x //= 2.0\nreturn x",
        "x = effir.op.floor(x / 2.0)\nreturn x",
        lambda x, y: x // 2,
    ),
    Case(
        SCRIPTS.format("stmts", "assign a new name: y = x + 1"),
        "augmented assignment to an item or attribute",
        "assign a new name: y = x + 1",
        "box.v += x\nreturn x",
        "z = x + 1.0\nreturn z",
        lambda x, y: x + 1,
    ),
    Case(
        SCRIPTS.format("stmts", "assign a value"),
        "a declaration without a value",
        "assign a value",
        "z: V\nreturn x",
        "z: V = x + y\nreturn z",
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("stmts", "define it without a decorator"),
        "a decorator on a nested function",
        "define it without a decorator",
        "@staticmethod\ndef g(a):\n    return a + 1.0\nreturn g(x)",
        "def g(a):\n    return a + 1.0\nreturn g(x)",
        lambda x, y: x + 1,
    ),
    Case(
        SCRIPTS.format("stmts", "list each parameter"),
        "*args, **kwargs or default parameters in a nested function",
        "list each parameter",
        "def g(a, b=1.0):\n    return a + b\nreturn g(x)",
        "def g(a, b):\n    return a + b\nreturn g(x, 1.0)",
        lambda x, y: x + 1,
    ),
    Case(
        SCRIPTS.format("stmts", "return the new value, or keep state in an effir.cell"),
        "attribute mutation is not supported",
        "return the new value, or keep state in an effir.cell",
        "box.last = x\nreturn y",
        "effir.write(total, effir.read(total) + x)\nreturn y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("stmts", "build a new value, e.g. with effir.op.where"),
        "item assignment is not supported",
        "build a new value, e.g. with effir.op.where",
        "x[0] = y[0]\nreturn x",
        "first = effir.op.less(effir.op.cumsum(effir.op.ones(shape=[2, 3], dtype=F32), axis=0), 1.5)"
        "\nreturn effir.op.where(first, y, x)",
        lambda x, y: np.stack([y[0], x[1]]),
    ),
    Case(
        SCRIPTS.format("stmts", "assign to a name"),
        "this assignment target is not supported",
        "assign to a name",
        "[*a, b] = (x, y)\nreturn b",
        "b = y\nreturn b",
        lambda x, y: y,
    ),
]


LOOPS = [
    Case(
        SCRIPTS.format(
            "stmts",
            "start {} = [] just before the loop and append once per step, "
            "at the loop body's top level",
        ),
        "ys.append outside the loop that owns ys, or in a branch",
        "start ys = [] just before the loop and append once per step, at the loop body's top level",
        "ys = []\nys.append(x)\nreturn ys",
        "ys = []\nfor row in x:\n    ys.append(row)\nreturn ys",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "append once per step (append a tuple for several values)"),
        "ys is appended to twice in one step",
        "append once per step (append a tuple for several values)",
        "ys = []\nfor row in x:\n    ys.append(row)\n    ys.append(row * 2.0)\nreturn ys",
        "ys = []\nfor row in x:\n    ys.append((row, row * 2.0))\nreturn ys[1]",
        lambda x, y: np.stack([x[1], x[1] * 2]),  # step 1's pair
    ),
    Case(
        SCRIPTS.format(
            "exprs", "append each field to its own list and pass those, or index {} by step ({}[i])"
        ),
        "ys is a list of tuples a loop built: a function would get the tuple of its stacked fields",
        "append each field to its own list and pass those, or index ys by step (ys[i])",
        "def second(ps):\n    return ps[1][1]\nys = []\nfor row in x:\n"
        "    ys.append((row, row * 2.0))\nreturn second(ys)",
        "def second(p):\n    return p[1]\nys = []\nfor row in x:\n"
        "    ys.append((row, row * 2.0))\nreturn second(ys[1])",
        lambda x, y: x[1] * 2,
    ),
    Case(
        SCRIPTS.format("stmts", "give {} a value before the if, or in both branches"),
        "z is assigned in only one branch of this if and used after it",
        "give z a value before the if, or in both branches",
        "if effir.op.sum(x) < 0.0:\n    z = x\nreturn z",
        "z = y\nif effir.op.sum(x) < 0.0:\n    z = x\nreturn z",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("stmts", "write the code after the loop"),
        "a loop's else block is not supported",
        "write the code after the loop",
        "s = x[0]\nfor row in x:\n    s = s + row\nelse:\n    s = s * 2.0\nreturn s",
        "s = x[0]\nfor row in x:\n    s = s + row\ns = s * 2.0\nreturn s",
        lambda x, y: (x[0] + x.sum(axis=0)) * 2,
    ),
    Case(
        SCRIPTS.format("stmts", "give {} a value before the loop"),
        "s is first assigned inside this loop but needed after it or in the next step",
        "give s a value before the loop",
        "for row in x:\n    s = s + row\nreturn s",
        "s = x[0] * 0.0\nfor row in x:\n    s = s + row\nreturn s",
        lambda x, y: x.sum(axis=0),
    ),
    Case(
        SCRIPTS.format("stmts", "write {} = [] just before the loop"),
        "ys is appended to in the loop but is not an empty list before it",
        "write ys = [] just before the loop",
        "ys = y\nfor row in x:\n    ys.append(row)\nreturn ys",
        "ys = []\nfor row in x:\n    ys.append(row)\nreturn ys",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "for x in xs:"),
        "this loop target is not supported",
        "for x in xs:",
        "ys = []\nfor box.v in x:\n    ys.append(box.v)\nreturn ys",
        "ys = []\nfor v in x:\n    ys.append(v)\nreturn ys",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "zip(xs, ys)"),
        "zip takes the sequences only",
        "zip(xs, ys)",
        "zs = []\nfor a, b in zip(x, y, fill=0.0):\n    zs.append(a - b)\nreturn zs",
        "zs = []\nfor a, b in zip(x, y):\n    zs.append(a - b)\nreturn zs",
        lambda x, y: x - y,
    ),
    Case(
        SCRIPTS.format("stmts", "zip tensors of one length"),
        "zip of values that are not tensors",
        "zip tensors of one length",
        "zs = []\nfor a, b in zip((x[0], x[1]), y):\n    zs.append(a - b)\nreturn zs",
        "zs = []\nfor a, b in zip(x, y):\n    zs.append(a - b)\nreturn zs",
        lambda x, y: x - y,
    ),
    Case(
        SCRIPTS.format(
            "stmts",
            "iterate over a tensor's leading axis (for x in xs), zip(xs, ys) or range(n)",
        ),
        "a Python for loop over a value that is not a tensor",
        "iterate over a tensor's leading axis (for x in xs), zip(xs, ys) or range(n)",
        "zs = []\nfor v in (x[0], x[1]):\n    zs.append(v * 2.0)\nreturn zs",
        "zs = []\nfor v in x:\n    zs.append(v * 2.0)\nreturn zs",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("stmts", "assign a variable of the condition in the loop body"),
        "this while loop changes nothing its condition reads",
        "assign a variable of the condition in the loop body",
        's = x\nwhile effir.op.sum(s) < 10.0:\n    print("s", s)\nreturn s',
        "s = x\nwhile effir.op.sum(s) < 10.0:\n    s = s + 1.0\nreturn s",
        lambda x, y: x + 2,  # sum(x) is 2.5; each step adds 6
    ),
    Case(
        SCRIPTS.format("stmts", "make it read a variable the body assigns"),
        "the condition of this while loop does not depend on the loop's values",
        "make it read a variable the body assigns",
        "s = x\nwhile 1 < 2:\n    s = s + 1.0\nreturn s",
        "s = x\nwhile effir.op.sum(s) < 10.0:\n    s = s + 1.0\nreturn s",
        lambda x, y: x + 2,
    ),
]
NODE = "t = Tree.Node(Tree.Leaf(x), Tree.Leaf(y))\nmatch t:\n"
MATCHES = [
    Case(
        SCRIPTS.format("match", "give {} a value before the match, or in every case"),
        "z is assigned in only some cases of this match and used after it",
        "give z a value before the match, or in every case",
        NODE + "    case Tree.Leaf(v):\n        z = v\n    case _:\n        w = x\nreturn z",
        "z = y\n" + NODE + "    case Tree.Leaf(v):\n        z = v\n    case _:\n        w = x\n"
        "return z",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("match", "return in every case (or after the match)"),
        "this case of the match does not return a value",
        "return in every case (or after the match)",
        NODE + "    case Tree.Leaf(v):\n        return v\n    case _:\n        w = x",
        NODE + "    case Tree.Leaf(v):\n        return v\n    case _:\n        w = x\nreturn x",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("match", "test the condition with an if inside the case"),
        "a guard (case ... if ...) is not supported in @effir.script",
        "test the condition with an if inside the case",
        NODE + "    case Tree.Node(l, r) if effir.op.sum(x) > 0.0:\n        return x\n"
        "    case _:\n        return y",
        NODE + "    case Tree.Node(l, r):\n        if effir.op.sum(x) > 0.0:\n"
        "            return x\n        return y\n    case _:\n        return y",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("match", "add a case for it, or end with `case _:`"),
        "match is not exhaustive: no case matches",
        "add a case for it, or end with `case _:`",
        NODE + "    case Tree.Leaf(v):\n        return v",
        NODE + "    case Tree.Leaf(v):\n        return v\n    case _:\n        return y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("match", "name the part where it is: case Tree.Node(left, right):"),
        "an `as` pattern inside another pattern is not supported",
        "name the part where it is: case Tree.Node(left, right):",
        NODE + "    case Tree.Node(Tree.Leaf(a) as left, right):\n        return a\n"
        "    case _:\n        return y",
        NODE + "    case Tree.Node(left, right):\n        match left:\n"
        "            case Tree.Leaf(a):\n                return a\n"
        "            case _:\n                return y\n    case _:\n        return y",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format(
            "match",
            "declare the type with @effir.adt and match its constructors (Tree.Leaf(...))",
        ),
        "Plain is not the constructor of an effir type",
        "declare the type with @effir.adt and match its constructors (Tree.Leaf(...))",
        NODE + "    case Plain(v):\n        return x\n    case _:\n        return y",
        NODE + "    case Tree.Node(Tree.Leaf(v), r):\n        return v * 2.0\n"
        "    case _:\n        return y",
        lambda x, y: x * 2,
        before="class Plain:\n    pass",
    ),
    Case(
        SCRIPTS.format("match", "{}({})"),
        "Tree.Node has 2 field(s), this pattern gives 3",
        "Tree.Node(left, right)",
        NODE + "    case Tree.Node(l, r, extra):\n        return x\n    case _:\n        return y",
        NODE + "    case Tree.Node(left, right):\n        return x\n    case _:\n        return y",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("match", "its fields: {}"),
        "Tree.Node has no field lhs",
        "its fields: left, right",
        NODE
        + "    case Tree.Node(lhs=Tree.Leaf(v)):\n        return v\n    case _:\n        return y",
        NODE
        + "    case Tree.Node(left=Tree.Leaf(v)):\n        return v\n    case _:\n        return y",
        lambda x, y: x,
    ),
]
PAIR = "match (x, y):\n"
PATTERNS = [  # REFUSED_PATTERNS
    Case(
        SCRIPTS.format("match", "compare with if/elif: if x == 0:"),
        "a literal or value pattern is not supported in @effir.script",
        "compare with if/elif: if x == 0:",
        PAIR + "    case (a, 0.0):\n        return a\n    case _:\n        return y",
        "if effir.op.sum(y) == 0.0:\n    return x\nreturn y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("match", "compare with if/elif"),
        "a None/True/False pattern is not supported in @effir.script",
        "compare with if/elif",
        PAIR + "    case (a, None):\n        return a\n    case _:\n        return y",
        "if effir.op.sum(y) == 0.0:\n    return x\nelif effir.op.sum(y) < 0.0:\n    return y\n"
        "return x + y",
        lambda x, y: y,  # sum(y) is -0.5
    ),
    Case(
        SCRIPTS.format("match", "write one case per constructor"),
        "an or-pattern (|) is not supported in @effir.script",
        "write one case per constructor",
        NODE + "    case Tree.Leaf(v) | Tree.Node(Tree.Leaf(v), _):\n        return v\n"
        "    case _:\n        return y",
        NODE + "    case Tree.Leaf(v):\n        return v\n    case Tree.Node(Tree.Leaf(v), _):\n"
        "        return v\n    case _:\n        return y",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("match", "name each field of the tuple"),
        "a *rest pattern is not supported in @effir.script",
        "name each field of the tuple",
        PAIR + "    case (a, *rest):\n        return a",
        PAIR + "    case (a, b):\n        return a - b",
        lambda x, y: x - y,
    ),
    Case(
        SCRIPTS.format("match", "match constructors or tuples"),
        "a mapping pattern is not supported in @effir.script",
        "match constructors or tuples",
        PAIR + '    case {"a": a}:\n        return a\n    case _:\n        return y',
        PAIR + "    case (a, b):\n        return b",
        lambda x, y: y,
    ),
]
STATEMENTS = [  # REFUSED_STMTS
    Case(
        SCRIPTS.format("stmts", "check values with effir operators; errors stop the program"),
        "try/except is not supported in @effir.script",
        "check values with effir operators; errors stop the program",
        "try:\n    z = x / y\nexcept ZeroDivisionError:\n    z = x\nreturn z",
        "safe = effir.op.where(y != 0.0, y, 1.0)\nreturn effir.op.where(y != 0.0, x / safe, x)",
        lambda x, y: np.where(y != 0, x / np.where(y != 0, y, 1), x),
    ),
    Case(
        SCRIPTS.format("stmts", "move the with block outside the scripted function"),
        "with is not supported in @effir.script",
        "move the with block outside the scripted function",
        'with np.errstate(all="ignore"):\n    z = x * y\nreturn z',
        "return x * y",
        lambda x, y: x * y,
    ),
    Case(
        SCRIPTS.format("stmts", "effir programs stop on run-time errors of their operators"),
        "raise is not supported in @effir.script",
        "effir programs stop on run-time errors of their operators",
        'if effir.op.sum(x) < 0.0:\n    raise ValueError("bad")\nreturn x',
        "return x",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("stmts", "read module state through an effir.cell"),
        "global is not supported in @effir.script",
        "read module state through an effir.cell",
        "global offset\nreturn x + offset",
        "return x + effir.read(total)",
        lambda x, y: x,  # total holds zeros
        before="offset = np.zeros((2, 3), np.float32)",
    ),
    Case(
        SCRIPTS.format("stmts", "return the new value instead"),
        "nonlocal is not supported in @effir.script",
        "return the new value instead",
        "s = x\ndef g(v):\n    nonlocal s\n    s = s + v\n    return v\ng(y)\nreturn s",
        "s = x\ndef g(v):\n    return s + v\ns = g(y)\nreturn s",
        lambda x, y: x + y,
    ),
    Case(
        SCRIPTS.format("stmts", "leave the name unused"),
        "del is not supported in @effir.script",
        "leave the name unused",
        "z = x\ndel z\nreturn y",
        "z = x\nreturn y",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("stmts", "import at module level"),
        "import is not supported in @effir.script",
        "import at module level",
        "import math\nreturn x * math.pi",
        "return x * math.pi",
        lambda x, y: x * np.float32(np.pi),
        before="import math",
    ),
    Case(
        SCRIPTS.format("stmts", "import at module level"),
        "import is not supported in @effir.script",
        "import at module level",
        "from math import pi\nreturn x * pi",
        "return x * pi",
        lambda x, y: x * np.float32(np.pi),
        before="from math import pi",
    ),
    Case(
        SCRIPTS.format("stmts", "define classes outside the scripted function"),
        "a class definition is not supported in @effir.script",
        "define classes outside the scripted function",
        "class K:\n    scale = 2.0\nreturn x * K.scale",
        "return x * K.scale",
        lambda x, y: x * 2,
        before="class K:\n    scale = 2.0",
    ),
    Case(
        SCRIPTS.format("stmts", "write the loop as `while cond:` with the exit in its condition"),
        "break is not supported in @effir.script",
        "write the loop as `while cond:` with the exit in its condition",
        "s = x\nwhile effir.op.sum(s) < 100.0:\n    s = s + 1.0\n    if effir.op.sum(s) > 10.0:\n"
        "        break\nreturn s",
        "s = x\nwhile effir.op.sum(s) <= 10.0:\n    s = s + 1.0\nreturn s",
        lambda x, y: x + 2,
    ),
    Case(
        SCRIPTS.format("stmts", "use if/else inside the loop body"),
        "continue is not supported in @effir.script",
        "use if/else inside the loop body",
        "s = x[0] * 0.0\nfor row in x:\n    if row[0] < 0.0:\n        continue\n    s = s + row\n"
        "return s",
        "s = x[0] * 0.0\nfor row in x:\n    if row[0] >= 0.0:\n        s = s + row\nreturn s",
        lambda x, y: x[1],  # only the second row starts non-negative
    ),
    Case(
        SCRIPTS.format("stmts", "use a plain def"),
        "async def is not supported in @effir.script",
        "use a plain def",
        "async def g(v):\n    return v * 2.0\nreturn x",
        "def g(v):\n    return v * 2.0\nreturn g(x)",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("stmts", "check values before calling the program"),
        "assert is not supported in @effir.script",
        "check values before calling the program",
        "assert effir.op.sum(x) > 0.0\nreturn x",
        "return x",
        lambda x, y: x,
    ),
]
EXPRESSIONS = [  # REFUSED_EXPRS
    Case(
        SCRIPTS.format("exprs", "write a for loop that appends to a list"),
        "a list comprehension is not supported in @effir.script",
        "write a for loop that appends to a list",
        "return [r * 2.0 for r in x]",
        "zs = []\nfor r in x:\n    zs.append(r * 2.0)\nreturn zs",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "write a for loop that appends to a list"),
        "a generator expression is not supported in @effir.script",
        "write a for loop that appends to a list",
        "zs = tuple(r * 2.0 for r in x)\nreturn zs[1]",
        "zs = []\nfor r in x:\n    zs.append(r * 2.0)\nreturn zs[1]",
        lambda x, y: x[1] * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "write a for loop"),
        "a set comprehension is not supported in @effir.script",
        "write a for loop",
        "zs = {r * 2.0 for r in x}\nreturn x",
        "zs = []\nfor r in x:\n    zs.append(r * 2.0)\nreturn zs",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "use tuples"),
        "a dict comprehension is not supported in @effir.script",
        "use tuples",
        "d = {i: r for i, r in zip(x, y)}\nreturn x",
        "d = (x[0], x[1])\nreturn d[1]",
        lambda x, y: x[1],
    ),
    Case(
        SCRIPTS.format("exprs", "return the stacked outputs of a loop"),
        "yield (a generator) is not supported in @effir.script",
        "return the stacked outputs of a loop",
        "for r in x:\n    yield r * 2.0\nreturn x",
        "zs = []\nfor r in x:\n    zs.append(r * 2.0)\nreturn zs",
        lambda x, y: x * 2,
    ),
    Case(
        SCRIPTS.format("exprs", "return the stacked outputs of a loop"),
        "yield from (a generator) is not supported in @effir.script",
        "return the stacked outputs of a loop",
        "yield from x\nreturn x",
        "zs = []\nfor r in x:\n    zs.append(r)\nreturn zs",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("exprs", "use a tuple"),
        "a dict is not supported in @effir.script",
        "use a tuple",
        'd = {"a": x, "b": y}\nreturn d["b"]',
        "d = (x, y)\nreturn d[1]",
        lambda x, y: y,
    ),
    Case(
        SCRIPTS.format("exprs", "use a tuple"),
        "a set is not supported in @effir.script",
        "use a tuple",
        "s = {x, y}\nreturn x",
        "s = (x, y)\nreturn s[0]",
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("exprs", 'print("label", value) prints a value with a label'),
        "an f-string is not supported in @effir.script",
        'print("label", value) prints a value with a label',
        'print(f"x={x}")\nreturn x',
        'print("x", x)\nreturn x',
        lambda x, y: x,
    ),
    Case(
        SCRIPTS.format("exprs", "assign in a statement first"),
        "an assignment expression (:=) is not supported in @effir.script",
        "assign in a statement first",
        "return (z := x + y) * z",
        "z = x + y\nreturn z * z",
        lambda x, y: (x + y) * (x + y),
    ),
    Case(
        SCRIPTS.format("exprs", "pass the arguments one by one"),
        "a starred expression is not supported in @effir.script",
        "pass the arguments one by one",
        "t = (x, y)\nreturn effir.op.maximum(*t)",
        "t = (x, y)\nreturn effir.op.maximum(t[0], t[1])",
        lambda x, y: np.maximum(x, y),
    ),
]
PAIR_FN = """
@effir.script
def pair(v: V):
    return v, v * 2.0
"""
UNTYPED = [  # a scripted function without a return annotation: its result's length is unknown
    Case(
        "effir/frontend/operators.py: index from the front",
        "a negative index into a tuple of unknown length",
        "index from the front",
        "t = pair(x)\nreturn t[-1]",
        "t = pair(x)\nreturn t[1]",
        lambda x, y: x * 2,
        before=PAIR_FN,
    ),
    Case(
        "effir/frontend/operators.py: index it: t[0], t[1]",
        "cannot unpack a value whose tuple length is not known here",
        "index it: t[0], t[1]",
        "a, b = pair(x)\nreturn b - a",
        "t = pair(x)\na = t[0]\nb = t[1]\nreturn b - a",
        lambda x, y: x,
        before=PAIR_FN,
    ),
]
NUMPY = [
    Case(
        "effir/frontend/numpy_spellings.py: effir.op.transpose",
        "np.stack of one effir tensor with an axis",
        "effir.op.transpose",
        "ys = []\nfor row in x:\n    ys.append(row * 2.0)\nreturn np.stack(ys, axis=1)",
        "ys = []\nfor row in x:\n    ys.append(row * 2.0)\n"
        "return effir.op.transpose(np.stack(ys), axes=[1, 0])",
        lambda x, y: np.stack(list(x * 2), axis=1),
    ),
]
BUILTINS = [  # the builtins of script_exprs.builtin_call; test_hints.py has the others
    Case(
        SCRIPTS.format("exprs", "loop over it where it is made: for x, y in zip(xs, ys):"),
        "zip outside a for loop is not supported here",
        "loop over it where it is made: for x, y in zip(xs, ys):",
        "pairs = zip(x, y)\nzs = []\nfor a, b in pairs:\n    zs.append(a - b)\nreturn zs",
        "zs = []\nfor a, b in zip(x, y):\n    zs.append(a - b)\nreturn zs",
        lambda x, y: x - y,
    ),
    Case(
        SCRIPTS.format("exprs", "for i in range(n):"),
        "range outside a for loop is not supported here",
        "for i in range(n):",
        "rows = range(2)\nreturn x[rows[1]]",
        "s = x[0] * 0.0\nfor i in range(2):\n    s = s + x[i]\nreturn s",
        lambda x, y: x.sum(axis=0),
    ),
    Case(
        SCRIPTS.format("exprs", "for i in range(n): x = xs[i]"),
        "enumerate is not supported here",
        "for i in range(n): x = xs[i]",
        "zs = []\nfor i, r in enumerate(x):\n    zs.append(r * i)\nreturn zs",
        "zs = []\nfor i in range(2):\n    r = x[i]\n    zs.append(r * np.float32(i))\nreturn zs",
        lambda x, y: x * np.arange(2, dtype=F32)[:, None],
    ),
    Case(
        SCRIPTS.format("exprs", 'effir.op.cast(x, dtype="int32")'),
        "int() of an effir value is not supported here",
        'effir.op.cast(x, dtype="int32")',
        "return int(x)",
        'return effir.op.cast(x, dtype="int32")',
        lambda x, y: x.astype(np.int32),
    ),
    Case(
        SCRIPTS.format("exprs", "compare: x != 0"),
        "bool() of an effir value is not supported here",
        "compare: x != 0",
        "return bool(x)",
        "return x != 0",
        lambda x, y: x != 0,
    ),
]
CASES += LOOPS + MATCHES + PATTERNS + STATEMENTS + EXPRESSIONS + UNTYPED + NUMPY + BUILTINS


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.site.split(": ", 1)[1][:40])
def test_script_hint_applied(case: Case) -> None:
    check(case)


LENGTH = """
@effir.script
def total(xs: effir.Tensor[("n", 3), F32]):
    s = xs[0] * 0.0
    for i in range(len(xs)):
        s = s + xs[i]
    return s
"""


def test_len_of_a_run_time_length_hint() -> None:
    with pytest.raises(effir.FrontendError) as err:
        effir.check(define(LENGTH)["total"].module)
    assert err.value.message == (
        "len of a value whose length is known only at run time is not supported here"
    )
    assert err.value.hint == "pass the length as an argument"
    assert err.value.span is not None
    fixed = LENGTH.replace("F32]):", 'F32], n: effir.Tensor[(), "int32"]):')
    total = define(fixed.replace("len(xs)", "n"))["total"]
    n = np.int32(len(X))
    np.testing.assert_allclose(total.interpret(X, n), X.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(total(X, n), X.sum(axis=0), rtol=1e-6)


NAMED = """
@effir.script(name="g")
def helper(v: V):
    return v * 2.0


@effir.script
def g(x: V):
    return helper(x) + 1.0
"""


def test_two_functions_of_one_name_hint() -> None:
    with pytest.raises(effir.FrontendError) as err:
        effir.check(define(PRELUDE + NAMED)["g"].module)
    assert err.value.message == "two scripted functions are named g"
    assert err.value.hint == "give one another name with @effir.script(name=...)"
    assert err.value.span is not None
    g = define(PRELUDE + NAMED.replace('name="g"', 'name="twice"'))["g"]
    np.testing.assert_array_equal(g.interpret(X), X * 2 + 1)
    np.testing.assert_array_equal(g(X), X * 2 + 1)


def test_source_not_available_hint() -> None:
    text = "def f(x: V):\n    return x * 2.0\n"
    filename = f"<no-source-{id(text)}>"
    namespace = {"effir": effir, "V": V}
    exec(compile(text, filename, "exec"), namespace)
    f = effir.script(namespace["f"])
    with pytest.raises(effir.FrontendError) as err:
        effir.check(f.module)
    assert err.value.message.startswith("the source of f is not available (")
    assert err.value.hint == "define the function in a file (or register its source in linecache)"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    try:
        np.testing.assert_array_equal(f.interpret(X), X * 2)
        np.testing.assert_array_equal(f(X), X * 2)
    finally:
        del linecache.cache[filename]


HINTS_APPLIED = {
    **{case.site: test_script_hint_applied for case in CASES},
    "effir/frontend/script_exprs.py: pass the length as an argument": (
        test_len_of_a_run_time_length_hint
    ),
    "effir/frontend/script.py: give one another name with @effir.script(name=...)": (
        test_two_functions_of_one_name_hint
    ),
    "effir/frontend/script_convert.py: define the function in a file (or register its source "
    "in linecache)": test_source_not_available_hint,
}
