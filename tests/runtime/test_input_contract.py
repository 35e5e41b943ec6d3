"""One input contract (effir/runtime/arguments.py) for ``effir.interpret``,
a compiled module and a loaded artifact: the same values accepted and
converted the same way (numpy, Python values, anything with ``__dlpack__``
or ``__array__``, keyword arguments by parameter name, zero-length
sequences), and the same ``ArgumentError`` for the same bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import effir
from effir.ir.diagnostics import ArgumentError

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)

PROGRAM = """#[version = "0.0.5"]
def @main(%xs: Tensor[(t, b, 3), float32], %h: Tensor[(b, 3), float32]) {
  let %body = fn (%x: Tensor[(b, 3), float32], %s: Tensor[(b, 3), float32]) {
    let %n = tanh(add(%x, %s));
    (%n, %n)
  };
  let %r = cf.foreach(%body, %xs, %h);
  (%r.0, %r.1)
}
"""


class DLPackOnly:
    """An array of a foreign library that exports DLPack (as JAX and
    PyTorch arrays do), with no ``__array__``."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.shape, self.dtype = array.shape, array.dtype

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._array.__dlpack_device__()


class ArrayOnly:
    """An array-like with only ``__array__``, whose repr is huge: a message
    must never print it."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.shape, self.dtype = array.shape, array.dtype

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array

    def __repr__(self) -> str:
        return "HUGE" * 10000


@pytest.fixture(scope="module")
def callers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    module = effir.check(effir.parse(PROGRAM, source_name="contract.effir"))
    compiled = effir.compile(module)
    xs, h = np.ones((2, 2, 3), np.float32), np.zeros((2, 3), np.float32)
    compiled(xs, h)
    path = tmp_path_factory.mktemp("contract") / "model"
    compiled.export(path)
    loaded = effir.load(path)
    return {
        "interpret": lambda *a, **k: effir.interpret(module, *a, **k),
        "compiled": compiled,
        "loaded": loaded,
    }


CALLERS = ["interpret", "compiled", "loaded"]
XS = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 2, 3)
H = np.full((2, 3), 0.5, np.float32)


def expected() -> tuple[np.ndarray, np.ndarray]:
    s, outs = H, []
    for x in XS:
        s = np.tanh(x + s)
        outs.append(s)
    return np.stack(outs), s


def assert_expected(result: Any) -> None:
    outs, last = expected()
    np.testing.assert_allclose(result[0], outs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result[1], last, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("wrap", [np.asarray, DLPackOnly, ArrayOnly, lambda a: a.tolist()])
def test_every_caller_accepts_every_kind_of_array(callers, caller: str, wrap) -> None:
    assert_expected(callers[caller](wrap(XS), wrap(H)))


@pytest.mark.parametrize("caller", CALLERS)
def test_keyword_arguments_by_parameter_name(callers, caller: str) -> None:
    call = callers[caller]
    assert_expected(call(h=H, xs=XS))
    assert_expected(call(XS, h=H))
    with pytest.raises(
        ArgumentError, match=r"@main has no parameter named 'z' \(parameters: xs, h\)"
    ):
        call(XS, z=H)
    with pytest.raises(ArgumentError, match="@main got two values for parameter 'xs'"):
        call(XS, xs=XS)
    with pytest.raises(ArgumentError, match=r"@main is missing the argument\(s\) xs"):
        call(h=H)


@pytest.mark.parametrize("caller", CALLERS)
def test_a_zero_length_sequence(callers, caller: str) -> None:
    outs, last = callers[caller](XS[:0], H)
    assert outs.shape == (0, 2, 3) and outs.dtype == np.float32
    np.testing.assert_array_equal(last, H)


def messages(callers, *args: Any) -> set[str]:
    seen = set()
    for caller in CALLERS:
        with pytest.raises(ArgumentError) as err:
            callers[caller](*args)
        seen.add(err.value.message)
    return seen


@pytest.mark.parametrize(
    "args, message",
    [
        ((XS.astype(np.float64), H), "parameter %xs of @main expects Tensor[(t, b, 3), float32]"),
        ((XS, np.zeros((3, 3), np.float32)), "shape check failed: parameter %h of @main"),
        ((XS, "text"), "argument %h of @main expects a float32 tensor, got a str"),
        ((XS, [[1.5, 2.0], [1.0]]), "ragged"),
        ((XS, ArrayOnly(np.zeros((4, 3), np.float32))), "shape check failed"),
        ((XS,), "@main takes 2 argument(s), got 1"),
    ],
)
def test_the_same_bad_input_gets_the_same_error(callers, args, message: str) -> None:
    seen = messages(callers, *args)
    assert len(seen) == 1, seen
    (text,) = seen
    assert message in text and "HUGE" not in text


def test_a_float_is_never_truncated_to_an_int() -> None:
    module = effir.parse('#[version = "0.0.5"]\ndef @main(%x: int32) { %x }')
    assert effir.interpret(module, 3) == 3
    with pytest.raises(ArgumentError, match="expects int32, got 2.7"):
        effir.interpret(module, 2.7)


def test_keyword_arguments_with_state() -> None:
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\nglobal @rng: Ref[Key] = ref(random.key(1));\n'
            "def @main(%x: Tensor[(3,), float32]) { nn.dropout(%x, @rng) }"
        )
    )
    x = np.ones(3, np.float32)
    ref = effir.interpret(module, x, state=effir.State(module))
    np.testing.assert_array_equal(effir.interpret(module, x=x, state=effir.State(module)), ref)


class Raises:
    """A foreign array whose library fails in its own way."""

    def __init__(self, error: type[BaseException]) -> None:
        self.error = error

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise self.error("from the foreign library")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self.error("from the foreign library")


@pytest.mark.parametrize(
    "h, message",
    [
        (Raises(KeyError), "cannot be read as an array on the CPU"),
        (Raises(ZeroDivisionError), "cannot be read as an array on the CPU"),
        ([[Raises(ZeroDivisionError)] * 3] * 2, "ragged list or one of other values"),
        ([[10**5000] * 3] * 2, "expects a float32 tensor"),
        ([[1e40, 0.0, 0.0]] * 2, "out of its range"),
    ],
)
def test_foreign_failures_and_values_out_of_range_are_argument_errors(
    callers, h: Any, message: str
) -> None:
    seen = messages(callers, XS, h)
    assert len(seen) == 1 and message in seen.pop()


def test_python_ints_out_of_the_dtypes_range_are_refused() -> None:
    module = effir.parse('#[version = "0.0.5"]\ndef @main(%x: uint8, %y: int32) { %x }')
    for x, y in [(300, 1), (-1, 1), (1, 2**32 + 7)]:
        with pytest.raises(ArgumentError, match="out of its range"):
            effir.interpret(module, x, y)
    with pytest.raises(ArgumentError, match="an int of 16610 bits"):
        effir.interpret(effir.parse('#[version = "0.0.5"]\ndef @main(%x: bool) { %x }'), 10**5000)


@pytest.mark.parametrize("caller", CALLERS)
def test_a_call_option_given_the_wrong_value_is_an_argument_error(callers, caller: str) -> None:
    call = callers[caller]
    with pytest.raises(ArgumentError, match="state= must be an effir.State"):
        call(XS, H, state=np.float32(1))
    with pytest.raises(ArgumentError, match="entry= names the function"):
        call(XS, H, entry=3)
    with pytest.raises(ArgumentError, match="sink= must be a function"):
        call(XS, H, sink="stdout")
