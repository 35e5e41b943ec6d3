"""Random small functions (arithmetic on floats and ints of mixed widths,
casts, reductions, argmax, a range loop with a Python counter, foreach and
while_loop with list outputs) give the same values, dtypes and errors run
eagerly, scripted (interpreted), traced and compiled (in a subprocess, few
examples): one promotion rule (promotion.py), the IR's integer widths,
lists as lists."""

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir import Tensor
from tests.frontend.helpers import define

EXAMPLES = int(os.environ.get("EFFIR_FRONTEND_EXAMPLES", "40"))
PARAMS = {  # name: (dtype, shape)
    "x": ("float32", (4,)),
    "y": ("float64", (4,)),
    "n": ("int32", (4,)),
    "m": ("int64", (4,)),
    "xs": ("float32", (3, 4)),
}
TYPES = [Tensor[shape, dtype] for dtype, shape in PARAMS.values()]


def arguments() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal(shape) * 3).astype(dtype)
        if dtype.startswith("float")
        # nonzero ints: no division by zero, no all-equal argmax
        else rng.integers(1, 9, shape).astype(dtype)
        for dtype, shape in PARAMS.values()
    ]


@st.composite
def programs(draw) -> str:
    """The source of a scripted function ``f`` of the parameters ``PARAMS``."""
    pool = {"x": "float32", "y": "float64", "n": "int32", "m": "int64"}  # (4,) values

    def operand(dtype: str) -> str:
        """Mostly an operand the rule accepts with a ``dtype`` one; at times any."""
        if draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from([*sorted(pool), "2", "0.5", "np.float32(1.5)"]))
        same = sorted(name for name, d in pool.items() if d == dtype)
        number = "0.5" if dtype.startswith("float") else "2"
        return draw(st.sampled_from([*same, number]))

    lines: list[str] = []
    results: list[str] = []
    for k in range(draw(st.integers(1, 4))):
        v = f"v{k}"
        form = draw(st.integers(0, 6))
        a = draw(st.sampled_from(sorted(pool)))
        dtype = pool[a]
        if form <= 1:
            op = draw(st.sampled_from(["+", "-", "*"]))
            lines.append(f"{v} = {a} {op} {operand(dtype)}")
        elif form == 2:
            dtype = draw(st.sampled_from(["float32", "int32", "float64"]))
            lines.append(f'{v} = effir.op.cast({a}, dtype="{dtype}") * {operand(dtype)}')
        elif form == 3:  # a scalar: a result, not an operand
            reduce = draw(st.sampled_from(["np.sum", "np.max", "np.argmax", "np.mean"]))
            lines.append(f"r{k} = {reduce}({a}, axis=0)")
            results.append(f"r{k}")
            continue
        else:
            if draw(st.integers(0, 3)):  # mostly a float32 start, as the loops need
                a = draw(st.sampled_from([*sorted(n for n, d in pool.items() if d == "float32")]))
                dtype = pool[a]
            if form == 4:  # a counter: a Python int eagerly and traced, int32 scripted
                lines.append(f"{v} = {a} * 0")
                lines.append("for i in range(3):")
                lines.append(f"    {v} = {v} + i * xs[i]")
            elif form == 5:  # foreach with a list output
                lines.append(
                    f"outs{k}, {v} = effir.foreach(lambda r, s: ([r * 2, np.argmax(r)], s + r), "
                    f"xs, {a})"
                )
                results += [f"outs{k}[0]", f"outs{k}[1]"]
            else:  # while_loop with two list outputs of different shapes
                lines.append(
                    f"outs{k}, (c{k}, {v}) = effir.while_loop(lambda s: s[0] < 3, "
                    "lambda s: ([s[1], np.sum(s[1])], (s[0] + 1, s[1] * 2)), "
                    f"(np.int32(0), {a}), outputs=True)"
                )
                results += [f"outs{k}[0]", f"outs{k}[1]", f"c{k}"]
        pool[v] = dtype
        results.append(v)
    params = ", ".join(
        f'{p}: effir.Tensor[{shape}, "{dtype}"]' for p, (dtype, shape) in PARAMS.items()
    )
    body = "\n".join(f"    {line}" for line in lines)
    return f"@effir.script\ndef f({params}):\n{body}\n    return ({', '.join(results)},)\n"


def outcome(run) -> tuple:
    """What a route gave: ("ok", [(dtype, shape, values)...]) or ("error",
    message, hint)."""
    try:
        result = run()
    except effir.FrontendError as err:
        return ("error", err.message, err.hint)
    return ("ok", [(str(np.asarray(r).dtype), np.shape(r), np.asarray(r)) for r in result])


def same(a: tuple, b: tuple, exact: bool = True) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "error":
        assert a[1:] == b[1:]
        return
    assert len(a[1]) == len(b[1])
    for (dt_a, sh_a, va), (dt_b, sh_b, vb) in zip(a[1], b[1], strict=True):
        assert (dt_a, sh_a) == (dt_b, sh_b)
        if exact:
            np.testing.assert_array_equal(va, vb)
        else:
            np.testing.assert_allclose(va, vb, rtol=1e-5, atol=1e-6)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(programs())
def test_eager_scripted_and_traced_agree(source: str) -> None:
    f = define(source)["f"]
    args = arguments()
    eager = outcome(lambda: f(*args))
    scripted = outcome(lambda: f.interpret(*args))
    traced = outcome(lambda: effir.trace(f.fn, *TYPES).interpret(*args))
    same(eager, scripted)
    same(eager, traced)


def check_compiled(sources: list[str]) -> None:
    """Run in a subprocess: each source compiled gives what it gives eagerly."""
    args = arguments()
    for source in sources:
        f = define(source)["f"]
        eager = outcome(lambda f=f: f(*args))
        compiled = outcome(lambda f=f: effir.compile(f)(*args))
        same(eager, compiled, exact=False)
    print("ok")


@pytest.mark.tvm
@settings(max_examples=2, deadline=None, derandomize=True)
@given(st.lists(programs(), min_size=3, max_size=3))
def test_eager_and_compiled_agree(sources: list[str]) -> None:
    from tests.support.isolated import run_isolated

    result = run_isolated(
        "from tests.frontend.test_eager_property import check_compiled; "
        f"check_compiled({json.dumps(sources)})"
    )
    result.check()
    assert "ok" in result.stdout
