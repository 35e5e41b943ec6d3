"""@effir.script, one test per construct: the scripted function's
interpreted result equals the Python function run eagerly on numpy, and
its module is well typed and round-trips through text."""

import numpy as np
import pytest

import effir

F32 = "float32"
S = effir.Tensor[(), F32]
I32 = effir.Tensor[(), "int32"]
V = effir.Tensor[(4,), F32]
SEQ = effir.Tensor[("t", 4), F32]
W = effir.Tensor[(4, 4), F32]

rs = np.random.default_rng(0)
x4 = rs.standard_normal(4).astype(F32)
y4 = rs.standard_normal(4).astype(F32)
xs = rs.standard_normal((5, 4)).astype(F32)
w44 = (rs.standard_normal((4, 4)) * 0.5).astype(F32)


def agree(sf, *args, rtol=1e-6):
    """Interpreted equals eager; the module checks and round-trips."""
    module = sf.module
    effir.check(module)
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    got = sf.interpret(*args)
    want = sf(*args)
    _close(got, want, rtol)
    return got


def _close(got, want, rtol):
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w, rtol)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=1e-6)
        if not isinstance(want, int | float):  # Python numbers: int32/float32 in effir
            assert np.asarray(got).dtype == np.asarray(want).dtype


@effir.script
def arith(x: V, y: V):
    z = (x + y) * 2.0 - x / (y * y + 1.0)
    return -(z**2.0), z @ np.ones((4, 4), F32) if False else z


def test_arithmetic():
    agree(arith, x4, y4)


@effir.script
def unpacking(x: V, y: V):
    a, b = x, y
    b, a = a, b
    p, q = effir.op.split(a, indices_or_sections=2, axis=0)
    return (a - b, p * q)


def test_assignment_and_tuple_unpacking():
    agree(unpacking, x4, y4)


@effir.script
def aliases(x: V, y: V):
    a = x * 2.0
    c: V = a  # annotated: before, a's binding was renamed %c under a's uses
    b = x + y
    d = b  # plain: the same
    e, f = d, a
    return c + a, d * b, e - f


def test_an_alias_of_a_bound_name_keeps_both_names():
    """``c = a`` where ``a`` is an earlier binding names no new binding:
    before, the frontend gave ``a``'s binding the name ``c``, and the later
    ``a`` was "used outside the scope of its binder"."""
    agree(aliases, x4, y4)
    effir.check_well_formed(aliases.module)


@effir.script
def elifs(x: S, y: S):
    z = x
    if x < y:
        r = x + y
    elif x > y * 2.0:
        r = x - y
        z = r * 2.0
    else:
        r = y * y
    return r, z


def test_if_elif_else():
    for a, b in ((1.0, 2.0), (5.0, 1.0), (1.5, 1.0)):
        agree(elifs, np.float32(a), np.float32(b))


@effir.script
def foo1(x: S, y: S):
    if x < y:
        return x + y
    else:
        return y * y


@effir.script
def early(x: S):
    if x > 0.0:
        return x
    y = x * 2.0
    if y < -4.0:
        return -y
    return y + 1.0


def test_return_inside_branches():
    for a, b in ((1.0, 2.0), (3.0, 2.0)):
        agree(foo1, np.float32(a), np.float32(b))
    for a in (1.0, -1.0, -3.0):
        agree(early, np.float32(a))


@effir.script
def rnn(xs: SEQ, h: V, w: W):
    outs = []
    for x in xs:
        h = np.tanh(x + effir.op.nn.dense(effir.op.expand_dims(h, axis=0), w)[0])
        outs.append(h * 2.0)
    return np.stack(outs), h


def test_for_over_tensor_with_carried_state_and_outputs():
    agree(rnn, xs, x4, w44)


@effir.script
def powers(x: V):
    acc = x
    outs = []
    for i in range(4):
        acc = acc * x
        outs.append(effir.op.cast(i, dtype="float32") + acc)
    return acc, np.stack(outs)


@effir.script
def dyn_range(n: I32, x: S):
    acc = x
    for i in range(n):
        acc = acc + effir.op.cast(i, dtype="float32")
    return acc


def test_for_range():
    agree(powers, x4)
    agree(dyn_range, np.int32(4), np.float32(0.5))


@effir.script
def foo2(n: I32):
    i = 0
    s = 0
    while i < 10:
        s = s + i * n
        i = i + 1
    return s


@effir.script
def collatz(n: I32):
    steps = 0
    seen = []
    while n != 1:
        if n % 2 == 0 if False else effir.op.equal(n - (n / 2) * 2, 0):
            n = n / 2
        else:
            n = 3 * n + 1
        steps = steps + 1
        seen.append(n)
    return steps, seen


def test_while():
    assert agree(foo2, np.int32(3)) == 135
    steps, seen = collatz.interpret(np.int32(6))
    assert int(steps) == 8 and seen.tolist() == [3, 10, 5, 16, 8, 4, 2, 1]


@effir.script
def nested_loops(xs: SEQ):
    total = 0.0
    for x in xs:
        row = 0.0
        for i in range(3):
            row = row + np.sum(x) * effir.op.cast(i, dtype="float32")
        total = total + row
    return total


def test_nested_loops():
    agree(nested_loops, xs, rtol=1e-5)


@effir.script
def square(x: V) -> V:
    return x * x


@effir.script
def calls(x: V):
    return square(square(x) + 1.0)


@effir.script
def fact(n: I32) -> I32:
    if n <= 1:
        return effir.op.cast(1, dtype="int32")
    return n * fact(n - 1)


@effir.script
def is_even(n: I32) -> effir.Tensor[(), "bool"]:
    if n == 0:
        return n == 0
    return is_odd(n - 1)


@effir.script
def is_odd(n: I32) -> effir.Tensor[(), "bool"]:
    if n == 0:
        return n != 0
    return is_even(n - 1)


def test_calls_recursion_and_mutual_recursion():
    agree(calls, x4)
    assert set(calls.module.functions) == {"calls", "square"}
    assert agree(fact, np.int32(5)) == 120
    for n in (0, 3, 6):
        assert bool(is_even.interpret(np.int32(n))) == (n % 2 == 0)
    assert set(is_even.module.functions) == {"is_even", "is_odd"}


@effir.script
def closures(x: V, k: S):
    def scale(v):
        return v * k

    shift = lambda v: v + 1.0  # noqa: E731
    return scale(shift(x)), scale(x)


@effir.script
def rec_closure(n: I32):
    def down(m: I32):
        if m <= 0:
            return m
        return down(m - 1)

    return down(n)


def test_nested_def_and_lambda_are_closures():
    agree(closures, x4, np.float32(3))
    text = effir.astext(closures.module)
    assert "fn (" in text
    assert int(rec_closure.interpret(np.int32(4))) == 0


@effir.script
def printing(x: V):
    print("value", x)
    print(x * 2.0)
    return x


def test_print_becomes_debug_print():
    printed = []
    effir.interpret(
        printing.module, x4, entry="printing", sink=lambda label, v: printed.append((label, v))
    )
    assert [p[0] for p in printed] == ["value", ""]
    np.testing.assert_array_equal(printed[1][1], x4 * 2)


@effir.script
def numpy_spellings(x: effir.Tensor[(1, 4), F32], w: W):
    y = np.maximum(x @ w, 0.0)
    return np.exp(-y), np.sum(y, axis=0), np.where(x > 0.0, x, y), np.mean(np.sqrt(y * y))


def test_op_namespace_and_numpy_spellings():
    agree(numpy_spellings, x4.reshape(1, 4), w44, rtol=1e-5)


rng = effir.cell("rng", effir.random.key(0))
stats = effir.cell("stats", np.zeros(4, F32))


@effir.script
def uses_cells(x: V):
    y = effir.op.nn.dropout(x, rng, rate=0.5)
    old = effir.read(stats)
    effir.write(stats, old + y)
    return y


def test_global_cells_by_name():
    module = uses_cells.module
    assert set(module.cells) == {"rng", "stats"}
    effir.check(module)
    state = effir.State(module)
    got = effir.interpret(module, x4, entry="uses_cells", state=state)
    want = uses_cells(x4)  # eager: the cells' own state, from the same seed
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(state["stats"], got)


@effir.script
def conditional_expr(x: S, y: S):
    m = x if x > y else y
    both = (x > 0.0) and (y > 0.0)
    return m, effir.cond(both, lambda: x * y, lambda: x + y), 0.0 < x <= 2.0


def test_if_expression_bool_ops_chained_comparison():
    for a, b in ((1.0, 2.0), (-1.0, 2.0), (3.0, 2.5)):
        agree(conditional_expr, np.float32(a), np.float32(b))


@effir.script
def builder_loops(xs: SEQ, h: V):
    outs, last = effir.foreach(lambda x, s: (s * 2.0, s + x), xs, h)
    i, total = effir.while_loop(
        lambda st: st[0] < 3, lambda st: (st[0] + 1, st[1] * 2.0), (0, last)
    )
    return outs, total


def test_builder_control_flow_inside_script():
    agree(builder_loops, xs, x4)


def test_scripted_type_error_points_at_python_line():
    from tests.frontend.helpers import define, marked_line

    source = """
        @effir.script
        def bad(x: effir.Tensor[(4,), F32]):
            y = x + 1.0
            return effir.op.nn.dense(y, y)  # <-
        """
    ns = define(source)
    with pytest.raises(effir.TypeError) as err:
        effir.check(ns["bad"].module)
    assert err.value.line == marked_line(source)
    assert err.value.source_name.startswith("<effir-test-")


def test_spans_of_script_nodes_point_into_the_python_file():
    let = rnn.module["rnn"].body
    assert let.span.source.name == __file__
    assert "for x in xs" in let.span.source.line_text(let.span.line)


@effir.script
def pairs_and_slices(xs: SEQ, ys: SEQ, x: V):
    acc = x
    for a, b in zip(xs, ys, strict=True):
        acc = acc + a * b
    head = x[1:3]
    return acc, head, np.float32(effir.op.cast(x, dtype="int32")), (x > 0.0) | (x < -1.0)


def test_tuple_iteration_slices_casts_bitwise_bool_ops():
    agree(pairs_and_slices, xs, xs * 2.0, x4)


def helper_with_python_if(a, b):
    if a < b:  # a Python if on effir values, in a helper the script calls
        return a
    return b


@effir.script
def calls_helper(x: S, y: S):
    return helper_with_python_if(x, y)


def test_python_if_in_a_called_helper_is_refused_not_silently_true():
    import inspect

    with pytest.raises(effir.FrontendError, match="traced value") as err:
        _ = calls_helper.module
    assert err.value.line == inspect.getsourcelines(helper_with_python_if)[1] + 1


@effir.script
def int_started_sums(xs: SEQ, n: I32):
    s = 0
    for x in xs:
        s = s + np.sum(x)
    count = 0
    for _i in range(n):
        count = count + 1
    t = 0
    while t < 2.5:
        t = t + 1.0
    return s, count, t


def test_carried_python_numbers_take_the_dtype_of_their_first_step():
    got = agree(int_started_sums, xs, np.int32(3), rtol=1e-5)
    assert got[0].dtype == np.float32 and got[1].dtype == np.int32
