"""Checking a VJP rule against central finite differences.

``check_vjp(name, inputs, **attrs)`` builds the forward call as IR,
type-checks it, calls the operator's ``"vjp"`` rule through a
``VjpContext`` into a ``LetBuilder`` with a random cotangent, runs the
backward program in the interpreter, and compares ``<grad, e>`` with
``<ct, (f(x + eps e) - f(x - eps e)) / (2 eps)>`` for random directions
``e`` over every float input (in float64, where central differences are
accurate to ~1e-10)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import effir
from effir.ir.builder import LetBuilder
from effir.ir.expr import Call, Function, Let, Tuple, Var
from effir.ir.module import IRModule
from effir.ir.op import call_op, op_def
from effir.ir.types import KeyType, TensorType, TupleType, Type
from effir.ir.vjp import NOT_DIFFERENTIABLE, VjpContext, vjp_rule
from effir.runtime.values import PRNGKey

EPS = 1e-6


def type_of_value(value: Any) -> Type:
    if isinstance(value, PRNGKey):
        return KeyType()
    if isinstance(value, tuple):
        return TupleType(tuple(type_of_value(v) for v in value))
    array = np.asarray(value)
    return TensorType(array.shape, str(array.dtype))


def _is_float(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def _leaves(value: Any) -> list[Any]:
    return [x for v in value for x in _leaves(v)] if isinstance(value, tuple) else [value]


def _rebuild(template: Any, leaves: list[Any]) -> Any:
    if isinstance(template, tuple):
        return tuple(_rebuild(t, leaves) for t in template)
    return leaves.pop(0)


def _same_type(a: Any, b: Any) -> bool:
    if isinstance(b, tuple):
        return isinstance(a, tuple) and all(_same_type(x, y) for x, y in zip(a, b, strict=True))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype


def _dot(a: Any, b: Any) -> float:
    return float(sum(np.vdot(x, y) for x, y in zip(_leaves(a), _leaves(b), strict=True)))


class Backward:
    """The forward call and its backward program, built and type-checked."""

    def __init__(
        self,
        name: str,
        types: Sequence[Type],
        attrs: dict[str, Any],
        with_ct: Sequence[bool] | None = None,
    ) -> None:
        params = [Var(f"a{i}", t) for i, t in enumerate(types)]
        call = call_op(name, *params, **attrs)
        call = Call(call.callee, call.args, call.attrs, span=None)
        out = Var("out")
        forward = Function(tuple(params), Let(out, call, out))
        effir.check(IRModule({"main": forward}))
        self.out_type = out.checked_type
        if isinstance(self.out_type, TupleType):
            fields = self.out_type.fields
            with_ct = with_ct or [True] * len(fields)
            ct_vars = [
                Var(f"ct{i}", f) if on else None
                for i, (f, on) in enumerate(zip(fields, with_ct, strict=True))
            ]
            ct: Any = tuple(ct_vars)
        else:
            ct_vars = [Var("ct", self.out_type)]
            ct = ct_vars[0]
        rule = vjp_rule(call)
        assert rule is not NOT_DIFFERENTIABLE, name
        builder = LetBuilder()
        grads = rule(VjpContext(builder, call), tuple(params), call.attrs, out, ct)
        assert len(grads) == len(params), (name, len(grads))
        self.present = [g is not None for g in grads]
        result = Tuple(tuple(g for g in grads if g is not None))
        body = Let(out, call, builder.finish(result))
        backward = Function(tuple(params) + tuple(v for v in ct_vars if v is not None), body)
        self.module = effir.check(IRModule({"main": backward}))
        self.params = params
        self.ct_vars = ct_vars
        self.grads = grads
        # each cotangent has its argument's type (symbols become ? at most)
        for g, p in zip(grads, params, strict=True):
            if g is not None:
                _conforms(g.checked_type, p.checked_type)

    def __call__(self, inputs: Sequence[Any], ct: Any) -> list[Any]:
        cts = [c for c in (ct if isinstance(ct, tuple) else (ct,)) if c is not None]
        values = effir.interpret(self.module, *inputs, *cts, sink=_silent)
        values = list(values)
        return [values.pop(0) if present else None for present in self.present]


def _conforms(got: Type, want: Type) -> None:
    if isinstance(want, TupleType):
        assert isinstance(got, TupleType) and len(got.fields) == len(want.fields)
        for g, w in zip(got.fields, want.fields, strict=True):
            _conforms(g, w)
        return
    assert isinstance(got, TensorType) and isinstance(want, TensorType), (got, want)
    assert got.dtype == want.dtype and got.ndim == want.ndim, (got, want)
    for g, w in zip(got.shape, want.shape, strict=True):
        assert g == w or "?" in (g, w), (got, want)


def evaluate(name: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    definition = op_def(name)
    rule = definition.rule("numpy")
    attrs = definition.normalize_attrs(attrs)
    if definition.effect == "io":  # the output operators take a sink
        return rule(tuple(inputs), attrs, _silent)
    return rule(tuple(inputs), attrs)


def _silent(label: str, value: Any) -> None:
    pass


def random_like(rng: np.random.Generator, value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(random_like(rng, v) for v in value)
    return rng.standard_normal(np.shape(value)).astype(value.dtype)


def check_vjp(
    name: str,
    inputs: Sequence[Any],
    seed: int = 0,
    types: Sequence[Type] | None = None,
    with_ct: Sequence[bool] | None = None,
    directions: int = 2,
    **attrs: Any,
) -> list[Any]:
    """Check ``name``'s rule at ``inputs`` (float inputs in float64); returns
    the gradients. ``types`` overrides the argument types (symbolic shapes);
    ``with_ct`` says which fields of a tuple result get a cotangent."""
    rng = np.random.default_rng(seed)
    types = types or [type_of_value(v) for v in inputs]
    backward = Backward(name, types, attrs, with_ct)
    out = evaluate(name, inputs, attrs)
    if isinstance(out, tuple):
        flags = with_ct or [True] * len(out)
        ct: Any = tuple(
            random_like(rng, o) if on else None for o, on in zip(out, flags, strict=True)
        )
    else:
        ct = random_like(rng, out)
    grads = backward(inputs, ct)
    for g, x, present in zip(grads, inputs, backward.present, strict=True):
        if present:
            assert _same_type(g, x), (name, type_of_value(g), type_of_value(x))
    differentiable = [i for i, x in enumerate(inputs) if all(_is_float(v) for v in _leaves(x))]
    for _ in range(directions):
        e = {i: random_like(rng, inputs[i]) for i in differentiable}

        def shifted(sign: float, e: dict[int, Any] = e) -> Any:
            moved = list(inputs)
            for i, d in e.items():
                moved[i] = _rebuild(
                    inputs[i],
                    [
                        x + sign * EPS * y
                        for x, y in zip(_leaves(inputs[i]), _leaves(d), strict=True)
                    ],
                )
            return evaluate(name, moved, attrs)

        plus, minus = shifted(1.0), shifted(-1.0)
        numeric = 0.0
        outs = zip(_leaves(plus), _leaves(minus), _leaves(ct), strict=True)
        for p, m, c in outs:
            if c is not None:
                numeric += float(np.vdot(c, (p - m) / (2 * EPS)))
        analytic = sum(_dot(grads[i], e[i]) for i in differentiable if backward.present[i])
        scale = 1.0 + abs(numeric) + abs(analytic)
        assert abs(numeric - analytic) <= 1e-6 * scale, (name, attrs, numeric, analytic)
    return grads


def compiled_backward_check() -> str:
    """A handful of backward programs (float32) compiled as one module with
    ``effir.compile`` against the interpreter; run in a fresh process by the
    test (compiled code). Returns "ok"."""
    from effir.ir.expr import GlobalVar

    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    cases: list[tuple[str, list[Any], dict[str, Any]]] = [
        ("nn.dense", [f32(4, 3), f32(5, 3)], {}),
        ("nn.softmax", [f32(4, 6)], {"axis": -1}),
        ("take", [f32(7, 3), np.array([[1, 6], [1, 0]], np.int32)], {"axis": 0}),
        (
            "nn.batch_norm_train",
            [f32(4, 3), f32(3), f32(3), f32(3), np.abs(f32(3)) + 1],
            {"axis": 1, "momentum": 0.1},
        ),
        ("random.dropout", [f32(4, 5), PRNGKey([3, 4])], {"rate": 0.3}),
        ("strided_slice", [f32(5, 4)], {"begin": [4, 0], "end": [0, 4], "strides": [-2, 3]}),
        # a symbolic number of tokens: the scatter's sizes are read at run time
        ("take", [f32(5, 2), np.array([4, 0, 4], np.int32)], {"axis": 0, "tokens": "n"}),
        # rows selected at run time (argwhere), scattered back
        ("boolean_mask", [f32(3, 4), np.array([True, False, True])], {}),
    ]
    functions: dict[str, Function] = {}
    params: list[Var] = []
    calls: list[Call] = []
    args: list[Any] = []
    for k, (name, inputs, attrs) in enumerate(cases):
        with_ct = [True, False, False] if name == "nn.batch_norm_train" else None
        types = [type_of_value(v) for v in inputs]
        if attrs.pop("tokens", None):
            types[1] = TensorType(("n",), "int32")
        backward = Backward(name, types, attrs, with_ct)
        out = evaluate(name, inputs, attrs)
        ct = out[0] if with_ct else out
        fn = backward.module["main"]
        functions[f"backward{k}"] = fn
        fresh = [Var(p.name_hint, p.type_annotation) for p in fn.params]
        params += fresh
        calls.append(Call(GlobalVar(f"backward{k}"), tuple(fresh)))
        args += [*inputs, rng.standard_normal(ct.shape).astype(np.float32)]
    main = Function(tuple(params), Tuple(tuple(calls)))
    module = effir.check(IRModule({**functions, "main": main}))
    want = effir.interpret(module, *args)
    got = effir.compile(module)(*args)
    for (name, _, _), w, g in zip(cases, want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            np.testing.assert_allclose(np.asarray(b), a, rtol=1e-5, atol=1e-6, err_msg=name)
    return "ok"
