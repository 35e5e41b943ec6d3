"""An imported module is a program like a hand-written one: it prints and
parses back equal, passes the effect pipeline (its cells threaded, keys
and statistics linear), compiles to what the interpreter computes (random
draws bit for bit), differentiates, exports and reloads; importing is
linear in the model's size; ``import effir`` needs neither onnx nor
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.analyses.verify_linear import linearity_errors
from effir.transform import pipeline
from tests.deep_programs import work
from tests.support.isolated import run_isolated

from .onnx_models import F, check_against_ort, composite, helper, model, tensor

X = np.random.default_rng(0).standard_normal((6, 2, 3)).astype(np.float32)


def test_the_composite_model_matches_onnxruntime_without_its_dropout():
    made = composite()
    no_dropout = [n for n in made.graph.node if n.op_type != "Dropout"]
    for node in no_dropout:
        for k, name in enumerate(node.input):
            if name == "dropped":
                node.input[k] = "h"
    del made.graph.node[:]
    made.graph.node.extend(no_dropout)
    check_against_ort(made, X, rtol=1e-4)


def test_an_imported_module_prints_and_parses_back_equal():
    module = effir.from_onnx(composite())
    text = effir.astext(module)
    again = effir.parse(text)
    effir.assert_structural_equal(again, module)
    assert effir.astext(again) == text
    for construct in ("cf.foreach", "if (", "Cons(", "ref_read(@bn_norm)", "random.split"):
        assert construct in text, construct


def test_an_imported_module_passes_the_effect_pipeline():
    module = effir.from_onnx(composite())
    a2 = pipeline("to-anf,explicate,state-passing")(module)
    assert not linearity_errors(a2)
    state, reference = effir.State(a2, seed=1), effir.State(module, seed=1)
    got = interpret_a2(a2, X, entry="main", state=state)
    want = effir.interpret(module, X, state=reference)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert state.values().keys() == reference.values().keys()


def test_an_imported_module_differentiates():
    """The gradient of the loss w.r.t. the weights (``initializers=
    "parameters"``, float64) against central differences, dropout's key
    fixed by the seed."""
    made = composite(elem=11, dtype="float64")
    module = effir.from_onnx(made, initializers="parameters")
    weights = effir.importers.onnx.initializer_values(made)
    wrt = ["W", "R", "proj", "scale"]
    grads_module = effir.grad(module, wrt=wrt, output=0)
    x = X.astype(np.float64)
    args = [x, *weights.values()]
    grads = interpret_a2(
        grads_module, *args, entry="main_grad", state=effir.State(grads_module, seed=2)
    )
    names = list(weights)

    def loss(values):
        return effir.interpret(module, x, *values, state=effir.State(module, seed=2))[0]

    rng = np.random.default_rng(3)
    for name, grad in zip(wrt, grads, strict=True):
        k = names.index(name)
        direction = rng.standard_normal(grad.shape)
        eps = 1e-6
        plus = [v + eps * direction if j == k else v for j, v in enumerate(weights.values())]
        minus = [v - eps * direction if j == k else v for j, v in enumerate(weights.values())]
        numeric = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(np.sum(grad * direction), numeric, rtol=1e-5, err_msg=name)


@pytest.mark.tvm
def test_an_imported_module_compiles_exports_and_reloads(tmp_path):
    """Compiled (llvm) against the interpreter from the same seed, two calls
    on one State (dropout's key and the statistics move on, identically),
    two sequence lengths of the symbolic ``T``; exported, reloaded, run.
    And a Loop of a constant trip count compiles into one loop kernel."""
    code = f"""
import numpy as np, effir
from tests.importers.onnx_models import composite
from tests.importers.test_onnx_roundtrip import X
module = effir.from_onnx(composite())
compiled = effir.compile(module)
state, reference = effir.State(module, seed=4), effir.State(module, seed=4)
for x in (X, X[:3], X):
    got = compiled(x, state=state)
    want = effir.interpret(module, x, state=reference)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
assert state["rng"] == reference["rng"]
np.testing.assert_allclose(state["bn_norm"][0], reference["bn_norm"][0], rtol=1e-5)
path = compiled.export({str(tmp_path / "artifact")!r})
loaded = effir.load(path)
again = loaded(X, state=loaded.new_state())
from tests.importers.test_onnx_control_flow import _loop_model
loop = effir.compile(effir.from_onnx(_loop_model("M", "", None, 64)))
y, ys = loop(np.array([0.5, -1.0], np.float32))
assert ys.shape == (64, 2) and [b.loops for b in loop.report.builds] == [1], loop.report.table()
print("ok", float(again[0]) > 0)
"""
    run = run_isolated(code, timeout=600).check()
    assert "ok True" in run.stdout


def _chain(n: int):
    nodes, previous = [], "x"
    for k in range(n):
        op = ("Add", "Mul", "Sub", "Tanh")[k % 4]
        nodes.append(
            helper.make_node(op, [previous] if op == "Tanh" else [previous, "w"], [f"v{k}"])
        )
        previous = f"v{k}"
    nodes.append(helper.make_node("Identity", [previous], ["y"]))
    return model(
        nodes,
        [tensor("x", F, ["n", 8])],
        [tensor("y", F, ["n", 8])],
        [("w", np.ones(8, np.float32))],
    )


def _nested_ifs(depth: int):
    inner = None
    for level in range(depth):
        branch = [helper.make_node("Neg", ["x"], [f"n{level}"])]
        then = (
            [
                helper.make_node(
                    "If",
                    ["c"],
                    [f"r{level}"],
                    then_branch=inner,
                    else_branch=helper.make_graph(
                        branch, f"e{level}", [], [tensor(f"n{level}", F, [2])]
                    ),
                )
            ]
            if inner
            else branch
        )
        out = f"r{level}" if inner else f"n{level}"
        inner = helper.make_graph(then, f"t{level}", [], [tensor(out, F, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)
    return model([node], [tensor("x", F, [2]), tensor("c", 9, [])], [tensor("y", F, [2])])


def _nested_loops(depth: int):
    """``Loop``s nested ``depth`` deep, each carrying ``v`` (a ``Tanh`` at
    the bottom); every trip count is the outer ``M``, read as a capture."""
    body = None
    for level in range(depth):
        inner = (
            helper.make_node("Tanh", ["v"], ["v_out"])
            if body is None
            else helper.make_node("Loop", ["M", "", "v"], ["v_out"], body=body)
        )
        body = helper.make_graph(
            [helper.make_node("Identity", ["c"], ["c_out"]), inner],
            f"body{level}",
            [tensor("i", 7, []), tensor("c", 9, []), tensor("v", F, [2])],
            [tensor("c_out", 9, []), tensor("v_out", F, [2])],
        )
    node = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)
    return model([node], [tensor("M", 7, []), tensor("x", F, [2])], [tensor("y", F, [2])])


@pytest.mark.parametrize(
    ("make", "size"),
    [(_chain, 400), (_nested_ifs, 12), (_nested_loops, 12)],
    ids=["chain", "nested ifs", "nested loops"],
)
def test_importing_is_linear_in_the_model_s_size(make, size):
    """Twice the nodes (or the nesting), at most about twice the lines of
    Python executed (``work``, not time)."""
    small, large = make(size), make(2 * size)
    effir.from_onnx(make(size // 4))  # warm: imports, caches
    w_small = work(lambda: effir.from_onnx(small))
    w_large = work(lambda: effir.from_onnx(large))
    assert w_large <= 2.2 * w_small, (w_small, w_large)


def test_a_model_of_20000_nodes_imports():
    module = effir.from_onnx(_chain(20_000))
    assert effir.astext(module).count("tanh(") == 5_000


@pytest.mark.tvm
def test_import_effir_needs_neither_onnx_nor_onnxruntime():
    code = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("onnx", "onnxruntime"):
            raise ImportError(f"no {name} here")
sys.meta_path.insert(0, Refuse())
import effir
assert "onnx" not in sys.modules and "onnxruntime" not in sys.modules
try:
    effir.from_onnx(b"")
except effir.ModelImportError as err:
    print(err)
"""
    run = run_isolated(code, env={"EFFIR_ISOLATED_FORK": "0"}).check()
    assert "reading ONNX models needs the onnx package" in run.stdout
