"""The widened generator's fragments: the shapes of program an
adversarial review found defects in and the original groups never drew.

Each ``f_*`` function is a fragment of one group of ``generator.WIDENED``
(``WIDENED_FRAGMENTS`` is the table ``generator`` merges into its own): it
takes the program being drawn (``generator._Gen``), draws its choices from
it and binds ``let``s over the typed values already in its pool, so every
program type-checks. Values whose size is not static (``?``, ``n``) leave
the pool: their results are reduced (``sum``, ``shape_of``) and returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .generator import (
    F3,
    INT_DTYPES,
    NESTED_IF_DEPTHS,
    boundary_values,
    int_literal,
    tensor_type,
)

if TYPE_CHECKING:
    from .generator import _Gen

F43 = tensor_type((4, 3), "float32")


def _result(g: _Gen, value: str, rank: int, dtype: str = "float32") -> None:
    """Return ``value``'s run-time shape and a reduction of it (the sizes a
    join got wrong show in both)."""
    g.forced.append(g.bind(f"shape_of({value})", (rank,), "int32", pool=False))
    reduced = f"sum({value}, axis=[0])" if rank > 1 else f"sum({value})"
    g.forced.append(g.bind(reduced, (), dtype, pool=False))


def _cond(g: _Gen) -> str:
    """A condition: data, a parameter, or a constant (partial evaluation
    then keeps one branch, and the join's type is what the other had)."""
    kind = g.c.integer(0, 2)
    if kind == 0:
        return g.cond()
    if kind == 1:
        return g.param("bool", np.array(g.chance(2)), "c")
    return g.choice(["less(0, 1)", "greater(0, 1)"])


def _rows(g: _Gen) -> tuple[str, str]:
    """A float (?, 3) / (0, 3) / (n, 3) / (k, 3) value: its text and a tag."""
    kind = g.choice(["mask", "zeros", "symbolic", "unknown", "static", "slice"])
    if kind == "mask":
        x = g.pick((4, 3))
        low = g.choice(["-1f", "0f", "0.5f", "100f"])
        return f"boolean_mask({x.name}, greater(sum({x.name}, axis=[1]), {low}))", kind
    if kind == "zeros":
        return 'zeros(shape=[0, 3], dtype="float32")', kind
    if kind in ("symbolic", "unknown"):
        return g.sequence(kind), kind
    if kind == "static":
        return g.pick((4, 3)).name, kind
    x = g.pick((4, 3))
    return f"strided_slice({x.name}, begin=[1], end=[3])", kind


# ------------------------------------------------------------------ joins
def f_join_if(g: _Gen) -> None:
    a, _ = _rows(g)
    b, _ = _rows(g)
    y = g.bind(f"if ({_cond(g)}) {{ {a} }} else {{ {b} }}", ("?", 3), "float32", False, False)
    _result(g, y, 2)


def f_join_match(g: _Gen) -> None:
    """A match's arms of different sizes, over a List the data decides."""
    g.uses_list = True
    a, _ = _rows(g)
    b, _ = _rows(g)
    lst = g.bind(f"if ({_cond(g)}) {{ Cons({a}, Nil) }} else {{ Nil }}", (), "list", False, False)
    y = g.bind(
        f"match ({lst}) {{ Cons(%h, _) => %h, Nil => {b} }}", ("?", 3), "float32", False, False
    )
    _result(g, y, 2)


def f_zero_trip_while(g: _Gen) -> None:
    """Stacked outputs of a loop that may run no step (partial evaluation
    folds a constant zero-trip loop to a (0, 3) constant), joined with data."""
    limit: int | str = g.choice([0, 0, 2])
    if g.chance(2):
        limit = g.param("int32", np.array(limit, np.int32), "n")
    r = g.bind(
        f"cf.while_loop(fn (%s: int32) {{ less(%s, {limit}) }}, "
        f'fn (%s: int32) {{ (ones(shape=[3], dtype="float32"), add(%s, 1)) }}, 0)',
        (),
        "tuple",
        False,
        False,
    )
    other, _ = _rows(g)
    y = g.bind(f"if ({_cond(g)}) {{ {other} }} else {{ {r}.0 }}", ("?", 3), "float32", False, False)
    _result(g, y, 2)


# ------------------------------------------------------------------ growing state
def _grown_start(g: _Gen) -> str:
    if g.chance(2):
        return 'zeros(shape=[0], dtype="float32")'
    x = g.pick((3,))
    return f"boolean_mask({x.name}, greater({x.name}, 0f))"


def f_growing_while(g: _Gen) -> None:
    limit: int | str = g.c.integer(0, 4)
    if g.chance(2):
        limit = g.param("int32", np.array(limit, np.int32), "n")
    x = g.pick((3,))
    piece = g.choice([f"tanh({x.name})", 'ones(shape=[1], dtype="float32")', "%s.1"])
    grown = "Tensor[(?,), float32]"
    r = g.bind(
        f"cf.while_loop(fn (%s: (int32, {grown})) {{ less(%s.0, {limit}) }}, "
        f"fn (%s: (int32, {grown})) {{ ((), (add(%s.0, 1), concatenate((%s.1, {piece})))) }}, "
        f"(0, {_grown_start(g)}), max_iterations=6)",
        (),
        "tuple",
        False,
        False,
    )
    _result(g, f"{r}.1.1", 1)


def f_growing_foreach(g: _Gen) -> None:
    xs = g.sequence(g.choice(["static", "symbolic", "unknown"]))
    grown = "Tensor[(?,), float32]"
    if g.chance(2):  # a (?) vector grown by each step's row
        r = g.bind(
            f"cf.foreach(fn (%xt: {F3}, %h: {grown}) {{ ((), concatenate((%h, tanh(%xt)))) }}, "
            f"{xs}, {_grown_start(g)})",
            (),
            "tuple",
            False,
            False,
        )
        _result(g, f"{r}.1", 1)
    else:  # a (?, 3) matrix grown by rows
        rows = "Tensor[(?, 3), float32]"
        r = g.bind(
            f"cf.foreach(fn (%xt: {F3}, %h: {rows}) {{ (sum(%xt), "
            f"concatenate((%h, reshape(%xt, newshape=[1, 3])))) }}, "
            f'{xs}, zeros(shape=[0, 3], dtype="float32"))',
            (),
            "tuple",
            False,
            False,
        )
        _result(g, f"{r}.1", 2)
        g.forced.append(f"{r}.0")


# ------------------------------------------------------------------ strided
def _slice_attrs(g: _Gen, length: int) -> tuple[str, int]:
    """begin/end/strides for one axis of ``length`` (negative strides mostly,
    bounds out of range too) and the slice's length."""
    stride = g.choice([-1, -1, -2, -3, 1, 2])
    begin, end = g.c.integer(-length - 2, length + 1), g.c.integer(-length - 2, length + 1)
    count = len(range(length)[slice(begin, end, stride)])
    return f"begin=[{begin}], end=[{end}], strides=[{stride}]", count


def f_strided_slice(g: _Gen) -> None:
    x = g.pick((4, 3))
    if g.chance(2):
        attrs, count = _slice_attrs(g, 4)
        shape: tuple[int, ...] = (count, 3)
    else:
        attrs, count = _slice_attrs(g, 3)
        attrs += ", axes=[1]"
        shape = (4, count)
    r = g.bind(f"strided_slice({x.name}, {attrs})", shape, "float32", pool=False)
    g.bind(f"tanh({r})", shape, "float32", pool=False)


def f_strided_set(g: _Gen) -> None:
    x = g.pick((4, 3))
    y = g.pick((4, 3))
    axis, length = (0, 4) if g.chance(2) else (1, 3)
    attrs, _ = _slice_attrs(g, length)
    attrs += f", axes=[{axis}]"
    v = f"multiply(strided_slice({y.name}, {attrs}), -2f)"
    g.bind(f"strided_set({x.name}, {v}, {attrs})", (4, 3), "float32")


def f_strided_unknown(g: _Gen) -> None:
    """A negative-stride slice of a ? or symbolic number of rows."""
    xs = g.sequence(g.choice(["symbolic", "unknown"]))
    attrs, _ = _slice_attrs(g, 4)
    r = g.bind(f"strided_slice({xs}, {attrs})", ("?", 3), "float32", False, False)
    _result(g, r, 2)


# ------------------------------------------------------------------ mixed-width ints
def f_int_accumulate(g: _Gen) -> None:
    """An int64 (or other wider) accumulator of a narrower loop counter."""
    counter = g.choice(["int8", "int16", "int32", "uint8", "uint16", "uint32"])
    acc = g.choice(["int64", "int32", "uint64"])
    one, zero = int_literal(1, counter), int_literal(0, counter)
    limit = int_literal(g.c.integer(0, 6), counter)
    r = g.bind(
        f"cf.while_loop(fn (%s: ({counter}, {acc})) {{ less(%s.0, {limit}) }}, "
        f"fn (%s: ({counter}, {acc})) {{ ((), (add(%s.0, {one}), "
        f'add(%s.1, cast(%s.0, dtype="{acc}")))) }}, ({zero}, {int_literal(0, acc)}))',
        (),
        "tuple",
        False,
        False,
    )
    g.forced.append(g.bind(f"{r}.1", (), "tuple", pool=False))
    x = g.int_value()
    g.bind(f'add({g.int_value(acc).name}, cast({x.name}, dtype="{acc}"))', (4,), acc)


def _int_tree(g: _Gen, dtype: str, depth: int) -> str:
    """Nested integer arithmetic of ``dtype`` over values of any width."""
    if depth == 0 or g.chance(4):
        if g.chance(3):
            return int_literal(g.choice(boundary_values(dtype)), dtype)
        x = g.int_value()
        return x.name if x.dtype == dtype else f'cast({x.name}, dtype="{dtype}")'
    op = g.choice(["add", "subtract", "multiply", "divide", "maximum", "minimum"])
    a, b = _int_tree(g, dtype, depth - 1), _int_tree(g, dtype, depth - 1)
    if op == "divide":
        b = g.nonzero(b, dtype)
    return f"{op}({a}, {b})"


def f_int_nested(g: _Gen) -> None:
    dtype = g.choice(INT_DTYPES)
    expr = _int_tree(g, dtype, g.c.integer(1, 3))
    if g.chance(3):  # divide(divide(a, b), c): the range analysis case
        a, b, c = (g.int_value(dtype).name for _ in range(3))
        expr = f"divide(divide({a}, {g.nonzero(b, dtype)}), {g.nonzero(c, dtype)})"
    shape = (4,) if "%" in expr else ()
    g.bind(f"add({expr}, {int_literal(0, dtype)})", shape, dtype, pool=shape == (4,))


# ------------------------------------------------------------------ constant folding
def _float_zero(g: _Gen) -> str:
    return g.choice(["0f", "-0f", "subtract(1.5f, 1.5f)", "multiply(0f, 3f)", "negative(0f)"])


def f_divide_by_constant_zero(g: _Gen) -> None:
    x = g.pick()
    numerator = g.choice([x.name, f"negative({x.name})", "0f", "-1f"])
    shape = x.shape if numerator.endswith(")") or numerator.startswith("%") else ()
    g.bind(f"divide({numerator}, {_float_zero(g)})", shape, "float32", pool=False)


def f_negative_literals(g: _Gen) -> None:
    x = g.pick()
    a = g.choice(["-2.5f", "-0f", "-1e30f", "-1e-30f"])
    op = g.choice(["add", "multiply", "subtract", "maximum", "power"])
    rhs = f"abs({x.name})" if op == "power" else x.name
    g.bind(f"{op}({rhs}, {a})", x.shape, "float32", pool=False)
    dtype = g.choice(["int8", "int16", "int32", "int64"])
    lit = int_literal(g.choice([-1, -7, int(np.iinfo(dtype).min)]), dtype)
    g.bind(f"multiply({g.int_value(dtype).name}, {lit})", (4,), dtype, pool=False)


def f_int_divide_constant_zero(g: _Gen) -> None:
    """Integer division by a constant that folds to zero: an EvalError in
    both, with the same message."""
    dtype = g.choice(INT_DTYPES)
    one = int_literal(g.c.integer(1, 5), dtype)
    zero = g.choice([int_literal(0, dtype), f"subtract({one}, {one})"])
    g.forced.append(g.bind(f"divide({g.int_value(dtype).name}, {zero})", (4,), dtype, False))


def f_negative_keys(g: _Gen) -> None:
    seed = g.choice([-5, -1, -2147483648, 7])
    k = g.bind(f"random.key({seed})", (), "key", False, False)
    k2 = g.bind(f"random.fold_in({k}, {g.choice([-1, -3, 2147483647])})", (), "key", False, False)
    g.bind(f"random.uniform({k2}, shape=[3])", (3,), "float32")
    g.forced.append(k2)


# ------------------------------------------------------------------ ADT tuples
def f_adt_tuple_match(g: _Gen) -> None:
    """A match on a tuple of ADT values in a global function called with
    constructors partial evaluation sees (or the data picks)."""
    g.uses_maybe = True
    n = g.counter + 1
    maybe = f"Maybe[{F3}]"
    g.defs.append(
        f"def @both{n}(%a: {maybe}, %b: {maybe}) -> {F3} {{\n"
        "  match ((%a, %b)) {\n"
        "    (Just(%x), Just(%y)) => add(%x, %y),\n"
        "    (Just(%x), Nothing) => tanh(%x),\n"
        "    (Nothing, Just(%y)) => negative(%y),\n"
        '    (Nothing, Nothing) => zeros(shape=[3], dtype="float32")\n'
        "  }\n}\n"
    )

    def operand() -> str:
        x = g.pick((3,))
        kind = g.c.integer(0, 2)
        if kind == 0:
            return f"Just({x.name})"
        if kind == 1:
            return "Nothing"
        return f"if ({_cond(g)}) {{ Just({x.name}) }} else {{ Nothing }}"

    g.bind(f"@both{n}({operand()}, {operand()})", (3,), "float32")


# ------------------------------------------------------------------ the prelude
def _list(g: _Gen) -> str:
    """A prelude List of (3) floats, 0 to 3 long."""
    items = [g.pick((3,)).name for _ in range(g.c.integer(0, 3))]
    text = "Nil"
    for item in reversed(items):
        text = f"Cons({item}, {text})"
    return text


def f_prelude_list(g: _Gen) -> None:
    g.uses_prelude = True
    x = g.pick((3,))
    # Annotated: `@length(Nil)` alone would leave the element type unknown.
    lst = g.bind(_list(g), (), "list", False, False, annotation=f"List[{F3}]")
    step = f"fn (%v: {F3}) {{ multiply(%v, 2f) }}"
    kind = g.choice(["map_foldl", "foldr", "length", "rev", "zip", "filter"])
    if kind == "map_foldl":
        expr = f"@foldl(fn (%a: {F3}, %v: {F3}) {{ add(%a, tanh(%v)) }}, {x.name}, @map({step}, {lst}))"
        g.bind(expr, (3,), "float32")
    elif kind == "foldr":
        g.bind(
            f"@foldr(fn (%v: {F3}, %a: {F3}) {{ subtract(%v, %a) }}, {x.name}, {lst})",
            (3,),
            "float32",
        )
    elif kind == "length":
        g.forced.append(g.bind(f"@length({lst})", (), "int32", pool=False))
    elif kind == "rev":
        r = g.bind(f"@rev({lst})", (), "list", False, False)
        g.bind(f"match ({r}) {{ Cons(%h, _) => %h, Nil => {x.name} }}", (3,), "float32")
    elif kind == "zip":
        z = g.bind(f"@zip({lst}, @map({step}, {lst}))", (), "list", False, False)
        g.bind(
            f"@foldl(fn (%a: {F3}, %p: ({F3}, {F3})) {{ add(%a, multiply(%p.0, %p.1)) }}, "
            f"{x.name}, {z})",
            (3,),
            "float32",
        )
    else:
        f = g.bind(
            f"@filter(fn (%v: {F3}) {{ greater(sum(%v), 0f) }}, {lst})", (), "list", False, False
        )
        g.forced.append(g.bind(f"@length({f})", (), "int32", pool=False))


def f_prelude_iterate(g: _Gen) -> None:
    g.uses_prelude = True
    x = g.pick((3,))
    count: int | str = g.c.integer(0, 4)
    if g.chance(2):
        count = g.param("int32", np.array(count, np.int32), "n")
    g.bind(f"@iterate(fn (%y: {F3}) {{ tanh(add(%y, 1f)) }}, {count})({x.name})", (3,), "float32")


def f_prelude_tree(g: _Gen) -> None:
    g.uses_prelude = True
    x, y = g.pick((3,)), g.pick((3,))
    t = g.bind(
        f"Rose({x.name}, Cons(Rose({y.name}, Nil), Cons(Rose({x.name}, Nil), Nil)))",
        (),
        "tree",
        False,
        False,
    )
    u = g.bind(f"@tmap(fn (%v: {F3}) {{ multiply(%v, 2f) }}, {t})", (), "tree", False, False)
    g.forced.append(g.bind(f"@size({u})", (), "int32", pool=False))
    g.bind(f"match ({u}) {{ Rose(%v, _) => %v }}", (3,), "float32")


# ------------------------------------------------------------------ prints
def f_prints(g: _Gen) -> None:
    x = g.pick()
    kind = g.choice(["tensor", "tuple", "key", "adt", "unit", "list"])
    if kind == "tensor":
        value = x.name
    elif kind == "tuple":
        value = f"({x.name}, sum({x.name}), ())"
    elif kind == "key":
        value = f"random.key({g.c.integer(-3, 9)})"
    elif kind == "adt":
        g.uses_maybe = True
        value = f"Just({x.name})"
        if g.chance(2):  # Nothing, typed by the other branch
            value = f"if ({_cond(g)}) {{ {value} }} else {{ Nothing }}"
    elif kind == "list":
        g.uses_list = True
        value = f"Cons({x.name}, Cons(tanh({x.name}), Nil))"
    else:
        value = "()"
    p = g.bind(f'debug.print({value}, label="{kind}{g.counter}")', (), kind, False, False)
    if g.chance(2) or not g.outputs:  # returned, or only printed
        g.forced.append(p)


# ------------------------------------------------------------------ global loop bodies
def f_global_foreach_body(g: _Gen) -> None:
    n = g.counter + 1
    g.defs.append(
        f"def @step{n}(%xt: {F3}, %h: {F3}) -> (float32, {F3}) {{\n"
        f"  let %y = {g.foreach_step('%xt', '%h')};\n  (sum(%y), %y)\n}}\n"
    )
    xs = g.sequence(g.choice(["static", "symbolic", "unknown"]))
    h = g.pick((3,))
    r = g.bind(f"cf.foreach(@step{n}, {xs}, {h.name})", (), "tuple", False, False)
    g.bind(f"{r}.1", (3,), "float32")
    g.forced.append(f"{r}.0")


def f_global_while(g: _Gen) -> None:
    n = g.counter + 1
    state = f"(int32, {F3})"
    limit = g.c.integer(0, 5)
    g.defs.append(
        f"def @cond{n}(%s: {state}) -> bool {{ less(%s.0, {limit}) }}\n"
        f"def @body{n}(%s: {state}) -> (float32, {state}) {{\n"
        f"  let %y = tanh(add(%s.1, 0.5f));\n  (sum(%y), (add(%s.0, 1), %y))\n}}\n"
    )
    h = g.pick((3,))
    r = g.bind(f"cf.while_loop(@cond{n}, @body{n}, (0, {h.name}))", (), "tuple", False, False)
    g.bind(f"{r}.1.1", (3,), "float32")
    g.forced.append(f"{r}.0")


def f_unit_foreach(g: _Gen) -> None:
    """A symbolic-length foreach with () state and () outputs, returned whole."""
    xs = g.sequence("symbolic")
    body = "((), ())"
    if g.chance(2):  # an effect in each step, nothing carried
        body = 'let %p = debug.print(sum(%xt), label="step"); ((), ())'
    r = g.bind(
        f"cf.foreach(fn (%xt: {F3}, %u: ()) {{ {body} }}, {xs}, ())", (), "tuple", False, False
    )
    g.forced.append(r)


# ------------------------------------------------------------------ nesting
def f_nested_ifs(g: _Gen) -> None:
    """``depth`` nested ifs (499: the most docs/backend.md says compile)."""
    x = g.pick((3,))
    depth = g.choice(NESTED_IF_DEPTHS)
    thresholds = g.floats((depth,), 2.0)
    text = f"tanh({x.name})"
    for i in reversed(range(depth)):
        text = (
            f"if (greater(sum({x.name}), {float(thresholds[i]):.3f}f)) {{ {text} }} "
            f"else {{ multiply({x.name}, {float(i % 7)}f) }}"
        )
    g.bind(text, (3,), "float32")


def f_fold_limit(g: _Gen) -> None:
    """Constants at constant folding's limit (1024 elements) and past it."""
    size = g.choice([1023, 1024, 1025])
    x = g.pick((3,))
    big = f'add(multiply(ones(shape=[{size}], dtype="float32"), -3f), 1f)'
    g.bind(f"add(max({big}), sum({x.name}))", (), "float32", pool=False)


def f_let_chain(g: _Gen) -> None:
    """A long chain of lets (the trampoline's walks, no recursion)."""
    x = g.pick((3,))
    length = g.choice([50, 500, 3000])
    prev = x.name
    for i in range(length):
        prev = g.bind(
            f"add(multiply({prev}, 0.5f), {float(i % 3)}f)", (3,), "float32", False, False
        )
    g.bind(f"tanh({prev})", (3,), "float32")


def f_nested_tuples(g: _Gen) -> None:
    x = g.pick((3,))
    depth = g.choice([5, 50, 300])
    text = x.name
    for _ in range(depth):
        text = f"({text}, 1f)"
    t = g.bind(text, (), "tuple", False, False)
    g.bind(f"tanh({t}{'.0' * depth})", (3,), "float32")


WIDENED_FRAGMENTS: dict[str, list[Callable[[_Gen], None]]] = {
    "joins": [f_join_if, f_join_match, f_zero_trip_while],
    "growing": [f_growing_while, f_growing_foreach],
    "strided": [f_strided_slice, f_strided_set, f_strided_unknown],
    "int_mixed": [f_int_accumulate, f_int_nested],
    "const_fold": [
        f_divide_by_constant_zero,
        f_negative_literals,
        f_int_divide_constant_zero,
        f_negative_keys,
    ],
    "adt_tuples": [f_adt_tuple_match],
    "prelude": [f_prelude_list, f_prelude_iterate, f_prelude_tree],
    "prints": [f_prints],
    "global_body": [f_global_foreach_body, f_global_while, f_unit_foreach],
    "nesting": [f_nested_ifs, f_fold_limit, f_let_chain, f_nested_tuples],
}
