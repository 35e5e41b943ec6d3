"""Every hint is right: each test triggers an error, reads its hint, writes
the program the hint says and runs it (interpreted, against numpy).

The hints of the numpy table (numpy_spellings.py: other spellings,
attributes) are checked entry by entry; the others one by one."""

import re

import numpy as np
import pytest

import effir
from effir import Tensor
from effir.frontend import numpy_spellings
from tests.frontend.helpers import define

F32 = "float32"
V = Tensor[(2, 3), F32]
X = np.array([[-2.0, 0.25, 3.0], [0.5, -0.75, 1.5]], F32)


def _traced_error(fn) -> effir.FrontendError:
    with pytest.raises(effir.FrontendError) as err:
        effir.trace(fn, V)
    assert err.value.span is not None
    return err.value


def _run(fn, *args):
    """``fn`` traced on ``V`` and interpreted, and run eagerly."""
    traced = effir.trace(fn, *([V] * len(args)))
    got = traced.interpret(*args)
    np.testing.assert_array_equal(np.asarray(traced(*args)), np.asarray(got))
    return got


# numpy spellings outside the table: the hint's expression, written out with x.
APPLIED = {
    "clip": (lambda x: np.clip(x, 0, 1), lambda x: np.clip(x, 0, 1)),
    "absolute": (lambda x: np.abs(x), np.abs),
    "square": (lambda x: np.square(x), np.square),
    "zeros_like": (lambda x: np.zeros_like(x), np.zeros_like),
    "ones_like": (lambda x: np.ones_like(x), np.ones_like),
}
WRITTEN = {  # the hint's text with x, lo, hi, [...] filled in
    "clip": "effir.op.minimum(effir.op.maximum(x, 0.0), 1.0)",
    "absolute": "effir.op.maximum(x, effir.op.negative(x))",
    "square": "effir.op.multiply(x, x)",
    "zeros_like": 'effir.op.zeros(shape=[2, 3], dtype="float32")',
    "ones_like": 'effir.op.ones(shape=[2, 3], dtype="float32")',
}


def _shape_of_hint(hint: str) -> str:
    """The hint with its placeholders (lo, hi, [...], "...") blanked, to
    compare with the filled-in program."""
    return re.sub(r"\[\.\.\.\]|\"\.\.\.\"|\blo\b|\bhi\b", "_", hint)


@pytest.mark.parametrize("name", sorted(APPLIED))
def test_numpy_spelling_hint_written_out_works(name: str) -> None:
    refused, reference = APPLIED[name]
    err = _traced_error(refused)
    hint = err.hint.removeprefix("write ")
    written = WRITTEN[name]
    blank = re.sub(r"0\.0|1\.0|\[2, 3\]|\"float32\"", "_", written)
    assert _shape_of_hint(hint) == blank
    got = _run(lambda x: eval(written, {"effir": effir, "x": x}), X)
    np.testing.assert_array_equal(got, reference(X))


def test_every_other_spelling_is_checked() -> None:
    # np.abs is np.absolute; astype is an attribute (ATTRIBUTES)
    assert set(numpy_spellings._OTHER_NAMES) - {"abs", "astype"} == set(APPLIED)


def test_every_effir_op_a_hint_names_exists() -> None:
    names = set()
    for n in dir(np):
        fn = getattr(np, n)
        if callable(fn) and not n.startswith("_"):
            names.update(re.findall(r"effir\.op\.([\w.]+)", numpy_spellings.unsupported(fn).hint))
    names.update(
        m for h in numpy_spellings.ATTRIBUTES.values() for m in re.findall(r"effir\.op\.(\w+)", h)
    )
    assert names >= {"shape_of", "cast", "minimum", "maximum", "squeeze", "split"}
    for name in names:
        target = effir.op
        for part in name.split("."):
            target = getattr(target, part)  # an AttributeError here is a wrong hint
        assert callable(target)


def test_named_operator_hint_works() -> None:
    err = _traced_error(lambda x: np.squeeze(x[0:1]))
    assert err.hint == "write effir.op.squeeze (its attributes are keyword arguments)"
    got = _run(lambda x: effir.op.squeeze(x[0:1], axis=[0]), X)
    np.testing.assert_array_equal(got, np.squeeze(X[0:1]))


ATTRIBUTE_FIXES = {
    "shape": ("effir.op.shape_of(x)", lambda x: np.asarray(x.shape, np.int32)),
    "T": ("np.transpose(x)", lambda x: x.T),
    "transpose": ("np.transpose(x, (1, 0))", lambda x: x.T),
    "reshape": ("np.reshape(x, (3, 2))", lambda x: x.reshape(3, 2)),
    "astype": ("np.float32(x)", lambda x: x.astype(F32)),
    "sum": ("np.sum(x, axis=1)", lambda x: x.sum(axis=1)),
    "mean": ("np.mean(x, axis=1)", lambda x: x.mean(axis=1)),
    "max": ("np.max(x, axis=1)", lambda x: x.max(axis=1)),
    "min": ("np.min(x, axis=1)", lambda x: x.min(axis=1)),
    "prod": ("np.prod(x, axis=1)", lambda x: x.prod(axis=1)),
    "argmax": ("np.argmax(x, axis=1)", lambda x: x.argmax(axis=1).astype(np.int32)),
    "clip": ("effir.op.minimum(effir.op.maximum(x, 0.0), 1.0)", lambda x: x.clip(0, 1)),
}


@pytest.mark.parametrize("name", sorted(numpy_spellings.ATTRIBUTES))
def test_attribute_hint_traced_and_scripted_works(name: str) -> None:
    """``x.<name>`` is refused, traced and scripted, with the hint; the
    written fix runs and gives numpy's value."""
    err = _traced_error(lambda x: getattr(x, name))
    assert err.message == f"attribute .{name} of an effir value"
    source = f"""
    @effir.script
    def f(x: effir.Tensor[(2, 3), F32]):
        return x.{name}
    """
    with pytest.raises(effir.FrontendError) as scripted:
        effir.check(define(source)["f"].module)
    assert (scripted.value.message, scripted.value.hint) == (err.message, err.hint)
    if name in ("dtype", "ndim"):
        assert "annotation" in err.hint
        return
    written, reference = ATTRIBUTE_FIXES[name]
    head = written.split("(")[0]
    assert head in err.hint
    fixed = define(source.replace(f"x.{name}", written))["f"]
    got = fixed.interpret(X)
    want = reference(X)
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(fixed(X), want, rtol=1e-6)


def test_attribute_hint_keeps_hasattr_working() -> None:
    x = effir.var("x", V)
    assert not hasattr(x, "shape")
    assert getattr(x, "dtype", None) is None


BUILTIN_FIXES = {
    "float(np.sum(x))": (
        'effir.op.cast(x, dtype="float32")',
        'effir.op.cast(np.sum(x), dtype="float32")',
    ),
    "abs(x)": ("effir.op.maximum(x, -x)", "effir.op.maximum(x, -x)"),
    "sum(x)": ("effir.op.sum", "effir.op.sum(x, axis=0)"),
    "max(x, x * 2.0)": ("effir.op.maximum", "effir.op.maximum(x, x * 2.0)"),
    "min(x, x * 2.0)": ("effir.op.minimum", "effir.op.minimum(x, x * 2.0)"),
}
BUILTIN_VALUES = {
    "float(np.sum(x))": lambda x: np.sum(x),
    "abs(x)": np.abs,
    "sum(x)": lambda x: x.sum(axis=0),
    "max(x, x * 2.0)": lambda x: np.maximum(x, x * 2),
    "min(x, x * 2.0)": lambda x: np.minimum(x, x * 2),
}


@pytest.mark.parametrize("call", sorted(BUILTIN_FIXES))
def test_builtin_hint_works(call: str) -> None:
    hint, written = BUILTIN_FIXES[call]
    source = f"""
    @effir.script
    def f(x: effir.Tensor[(2, 3), F32]):
        return {call}
    """
    with pytest.raises(effir.FrontendError) as err:
        effir.check(define(source)["f"].module)
    assert err.value.hint == hint
    fixed = define(source.replace(call, written))["f"]
    np.testing.assert_array_equal(fixed.interpret(X), BUILTIN_VALUES[call](X))


def test_traced_if_hint_effir_cond_works() -> None:
    err = _traced_error(lambda x: x * 2.0 if np.sum(x) > 0.0 else x)
    assert "effir.cond(pred, then_fn, else_fn)" in err.hint
    got = _run(lambda x: effir.cond(np.sum(x) > 0.0, lambda: x * 2.0, lambda: x), X)
    np.testing.assert_array_equal(got, X * 2)


def test_traced_equality_hint_works() -> None:
    err = _traced_error(lambda x: x == x * 2.0)
    assert "effir.op.equal(a, b)" in err.hint
    got = _run(lambda x: effir.op.equal(x, x * 2.0), X)
    np.testing.assert_array_equal(got, X == X * 2)


def test_promotion_hint_cast_works() -> None:
    n = np.arange(6, dtype="int32").reshape(2, 3)
    with pytest.raises(effir.FrontendError) as err:
        effir.trace(lambda x, n: x * n, V, Tensor[(2, 3), "int32"])
    assert err.value.hint.startswith('cast the int32 operand: effir.op.cast(x, dtype="float32")')
    traced = effir.trace(
        lambda x, n: x * effir.op.cast(n, dtype="float32"), V, Tensor[(2, 3), "int32"]
    )
    np.testing.assert_array_equal(traced.interpret(X, n), X * n.astype(F32))


def test_requires_grad_hint_detach_works() -> None:
    torch = pytest.importorskip("torch")
    f = effir.trace(lambda x: x * 2.0, V)
    t = torch.tensor(X, requires_grad=True)
    with pytest.raises(effir.ArgumentError) as err:
        f.interpret(t)
    assert "it records gradients: pass x.detach()" in str(err.value)
    assert "CPU (x.cpu())" not in str(err.value)
    np.testing.assert_array_equal(f.interpret(t.detach()), X * 2)


NUMPY = "effir/frontend/numpy_spellings.py: {}"
BUILTIN = "effir/frontend/script_exprs.py: {}"
HINTS_APPLIED = {
    NUMPY.format("write {} [attribute .{} of an effir value]"): (
        test_attribute_hint_traced_and_scripted_works
    ),
    NUMPY.format("write {} [np.{}{} is not supported on effir values]"): (
        test_numpy_spelling_hint_written_out_works
    ),
    NUMPY.format("write effir.op.{} (its attributes are keyword arguments)"): (
        test_named_operator_hint_works
    ),
    "effir/frontend/operators.py: write effir.cond(pred, then_fn, else_fn) or "
    "effir.while_loop(...), or convert the function with @effir.script": (
        test_traced_if_hint_effir_cond_works
    ),
    "effir/frontend/operators.py: write effir.op.{}(a, b) (or `is` to compare the nodes "
    "themselves)": test_traced_equality_hint_works,
    "effir/frontend/promotion.py: cast the {} operand: effir.op.cast(x, "
    'dtype="{}") (np.{}(x) in @effir.script and eagerly)': test_promotion_hint_cast_works,
    **{BUILTIN.format(hint): test_builtin_hint_works for hint, _ in BUILTIN_FIXES.values()},
}
