"""Constructs outside @effir.script's subset: each is refused with an
effir.FrontendError (never a SyntaxError, KeyError...) at the Python line
and column, with a caret and a one-line hint."""

import textwrap

import pytest

import effir
from tests.frontend.helpers import define, marked_line

HEADER = """
import effir
import numpy as np
T = effir.Tensor[(4,), "float32"]
class Box:
    pass
box = Box()

@effir.script
def f(x: T, y: T):
"""

CASES = {
    "try": """
    try:  # <-
        z = x
    except Exception:
        z = y
    return z
    """,
    "with": """
    with open("f"):  # <-
        pass
    return x
    """,
    "raise": """
    raise ValueError("no")  # <-
    """,
    "global": """
    global box  # <-
    return x
    """,
    "nonlocal_in_nested": """
    def g(v):
        nonlocal x  # <-
        return v
    return g(x)
    """,
    "del": """
    z = x
    del z  # <-
    return x
    """,
    "import": """
    import math  # <-
    return x
    """,
    "class": """
    class C:  # <-
        pass
    return x
    """,
    "break": """
    for v in x:
        break  # <-
    return x
    """,
    "continue": """
    for v in x:
        continue  # <-
    return x
    """,
    "assert": """
    assert x is not None  # <-
    return x
    """,
    "list_comprehension": """
    z = [v * 2.0 for v in x]  # <-
    return x
    """,
    "generator": """
    z = sum(v for v in x)  # <-
    return z
    """,
    "dict_comprehension": """
    z = {v: v for v in (1, 2)}  # <-
    return x
    """,
    "yield": """
    yield x  # <-
    """,
    "dict_literal": """
    z = {"a": x}  # <-
    return x
    """,
    "set_literal": """
    z = {x, y}  # <-
    return x
    """,
    "fstring": """
    print(f"{x}")  # <-
    return x
    """,
    "walrus": """
    if (z := x) is None:  # <-
        return z
    return x
    """,
    "attribute_mutation": """
    box.value = x  # <-
    return x
    """,
    "item_assignment": """
    x[0] = 1.0  # <-
    return x
    """,
    "for_over_python_list": """
    z = x
    for v in [x, y]:  # <-
        z = z + v
    return z
    """,
    "return_in_loop": """
    for v in x:
        return v  # <-
    return x
    """,
    "floor_division": """
    return x // y  # <-
    """,
    "modulo": """
    return x % y  # <-
    """,
    "invert": """
    return ~x  # <-
    """,
    "is_comparison": """
    return x is y  # <-
    """,
    "in_comparison": """
    return x in y  # <-
    """,
    "assigned_in_one_branch": """
    if effir.op.sum(x) > 0.0:  # <-
        z = x
    else:
        w = y
    return z
    """,
    "first_assigned_in_loop": """
    for v in x:  # <-
        last = v
    return last
    """,
    "append_twice": """
    outs = []
    for v in x:
        outs.append(v)
        outs.append(v)  # <-
    return np.stack(outs)
    """,
    "append_in_branch": """
    outs = []
    for v in x:
        if v > 0.0:
            outs.append(v)  # <-
        else:
            outs.append(-v)
    return np.stack(outs)
    """,
    "loop_else": """
    for v in x:
        z = v
    else:
        z = x  # <-
    return z
    """,
    "tensor_attribute": """
    return x.T  # <-
    """,
    "range_outside_for": """
    r = range(3)  # <-
    return x
    """,
    "enumerate": """
    z = x
    for a in enumerate(x):  # <-
        z = a
    return z
    """,
    "for_over_python_tuple": """
    z = x
    for v in (x, y):  # <-
        z = z + v
    return z
    """,
    "starred": """
    return effir.op.add(*(x, y))  # <-
    """,
    "kwargs_call": """
    return effir.op.sum(x, **{"axis": 0})  # <-
    """,
    "undefined_name": """
    return x + nowhere  # <-
    """,
    "unpack_unknown_length": """
    a, b = effir.call(x)  # <-
    return a
    """,
    "missing_return": """
    z = x + y  # <-
    """,
    "code_after_return": """
    return x
    z = y  # <-
    """,
    "bad_attribute": """
    return effir.op.sum(x, axis="all")  # <-
    """,
    "none_value": """
    z = None
    return z  # <-
    """,
}


def _source(body: str) -> str:
    return (
        textwrap.dedent(HEADER) + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused(case):
    source = _source(CASES[case])
    ns = define(source)
    with pytest.raises(effir.FrontendError) as err:
        _ = ns["f"].module
    e = err.value
    assert e.line == marked_line(source), (case, str(e))
    assert e.source_name.startswith("<effir-test-")
    assert "^" in str(e)
    if case not in ("bad_attribute",):
        assert e.hint, case


def test_at_least_25_refused_constructs():
    assert len(CASES) >= 25


def test_missing_annotation_and_varargs():
    source = """
    @effir.script
    def g(x):  # <-
        return x
    """
    ns = define(source)
    with pytest.raises(effir.FrontendError, match="no type annotation") as err:
        _ = ns["g"].module
    assert err.value.line == marked_line(source)
    source = """
    @effir.script
    def g(*xs):  # <-
        return xs
    """
    with pytest.raises(effir.FrontendError, match=r"\*args"):
        _ = define(source)["g"].module


def test_column_points_at_the_construct():
    source = _source(
        """
    z = x + y
    return z // y  # <-
    """
    )
    ns = define(source)
    with pytest.raises(effir.FrontendError) as err:
        _ = ns["f"].module
    line = source.splitlines()[err.value.line - 1]
    assert line[err.value.column - 1 :].startswith("z // y")
