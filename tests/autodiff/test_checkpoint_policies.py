"""Loops as a registered rule and checkpointing as policy objects
(``effir.autodiff.loop_rule``, ``effir.autodiff.checkpoint``): every policy
gives ``none``'s gradient bit for bit (the interpreter runs the same
operations on the same values, recomputed or stored), and a new policy is
one small class."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir.autodiff import checkpoint
from effir.autodiff.checkpoint import (
    POLICIES,
    CheckpointPolicy,
    NoCheckpoint,
    RecomputeNames,
    SaveNames,
    register,
)
from effir.autodiff.loop_rule import loop_vjp
from effir.autodiff.rules import binding_vjp_rule
from effir.ir.expr import Op
from effir.ir.op import lookup_op
from effir.ir.type_tree import tuple_leaves
from effir.ir.vjp import DifferentiationError
from tests.support.isolated import run_isolated

AUTODIFF = Path(effir.__file__).parent / "autodiff"

GRU = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 2, 3), float64], %h0: Tensor[(2, 3), float64],
          %w: Tensor[(3, 3), float64], %u: Tensor[(3, 3), float64]) {
  let %r = cf.foreach(fn (%x: Tensor[(2, 3), float64], %h: Tensor[(2, 3), float64]) {
    let %p = nn.dense(%x, %w);
    let %q = nn.dense(%h, %u);
    let %z = sigmoid(add(%p, %q));
    let %a = tanh(add(%p, multiply(%z, %q)));
    let %n = add(multiply(%z, %h), multiply(subtract(1f64, %z), %a));
    (exp(%a), %n)
  }, %xs, %h0);
  add(sum(%r.0), sum(multiply(%r.1, %r.1)))
}
"""


def _gru(length: int, seed: int):
    module = effir.parse(GRU.replace("LEN", str(length)))
    rng = np.random.default_rng(seed)
    args = [
        rng.normal(size=(length, 2, 3)) * 0.5,
        rng.normal(size=(2, 3)),
        rng.normal(size=(3, 3)) * 0.4,
        rng.normal(size=(3, 3)) * 0.4,
    ]
    return module, args


def _grads(module, args, policy):
    g = effir.grad(module, wrt=["xs", "h0", "w", "u"], checkpoint=policy, specialise=False)
    return [np.asarray(x) for x in tuple_leaves(effir.interpret(g, *args, entry="main_grad"))]


def _grad_text(module, policy) -> str:
    g = effir.grad(module, wrt=["w"], checkpoint=policy, specialise=False)
    return effir.astext(g["main_grad"])


# ------------------------------------------------------------ the loop rule
def test_both_loops_are_differentiated_by_the_registered_rule():
    for name in ("cf.foreach", "cf.while_loop"):
        assert binding_vjp_rule(Op(name)) is loop_vjp
    assert binding_vjp_rule(Op("exp")) is None


def test_reverse_names_no_operator():
    """reverse.py dispatches on registered rules, never on an operator's name."""
    source = (AUTODIFF / "reverse.py").read_text()
    assert '"cf.' not in source and "'cf." not in source
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    literals = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]
    assert literals  # the walk sees the module's strings
    assert [s for s in literals if lookup_op(s) is not None] == []


def _imports(path: Path) -> tuple[set[str], list[int]]:
    """The autodiff modules ``path`` imports when it runs (not under
    TYPE_CHECKING), and the lines of imports written inside functions."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    inside: list[int] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names.update([node.module] if node.module else [a.name for a in node.names])
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            inside += [
                n.lineno for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)
            ]
    return names, inside


def test_autodiff_has_no_import_cycle_and_no_import_inside_a_function():
    graph = {}
    for path in sorted(AUTODIFF.glob("*.py")):
        names, inside = _imports(path)
        assert inside == [], f"{path.name}: imports inside functions at lines {inside}"
        graph[path.stem] = {n for n in names if (AUTODIFF / f"{n}.py").exists()}
    # Kahn's algorithm: every module is ordered iff there is no cycle
    pending = {m: set(deps) for m, deps in graph.items()}
    while True:
        ready = [m for m, deps in pending.items() if not deps]
        if not ready:
            break
        for m in ready:
            del pending[m]
        for deps in pending.values():
            deps.difference_update(ready)
    assert pending == {}, f"an import cycle among {sorted(pending)}"


# ---------------------------------------------------------------- policies
def test_the_table_holds_todays_modes_and_dots():
    assert {"none", "loop", "sqrt", "dots"} <= set(POLICIES)
    assert all(p.name == name for name, p in POLICIES.items())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_every_policy_gives_none_s_gradient_bit_for_bit(length, seed):
    """Bit-identical, not close: each policy stores or recomputes the same
    values with the same operations, and sums the hoisted terms in the same
    chunks (interpreter)."""
    module, args = _gru(length, seed)
    expected = _grads(module, args, "none")
    policies = [*POLICIES, SaveNames({"p", "q"}), RecomputeNames({"a", "z"})]
    for policy in policies:
        for a, b in zip(expected, _grads(module, args, policy), strict=True):
            np.testing.assert_array_equal(a, b)


def test_dots_stores_the_products_and_recomputes_the_elementwise_work():
    module, _ = _gru(5, 0)
    none, dots = _grad_text(module, "none"), _grad_text(module, "dots")
    # the step's sigmoid and tanh run again in the backward under dots
    assert dots.count("sigmoid(") > none.count("sigmoid(")
    assert dots.count("tanh(") > none.count("tanh(")
    # and the products are not recomputed: they are stored
    assert dots.count("nn.dense(%x") == none.count("nn.dense(%x")


def test_a_mark_recomputes_only_the_named_value():
    module, _ = _gru(5, 0)
    none = _grad_text(module, "none")
    marked = _grad_text(module, RecomputeNames({"a"}))
    assert marked.count("tanh(") == none.count("tanh(") + 1
    assert marked.count("sigmoid(") == none.count("sigmoid(")
    only = _grad_text(module, SaveNames({"p", "q"}))
    assert only.count("sigmoid(") == none.count("sigmoid(") + 1


def test_a_new_policy_is_one_small_class(monkeypatch):
    monkeypatch.setattr(checkpoint, "POLICIES", dict(POLICIES))

    class SaveExp(NoCheckpoint):
        """Store only what exp computed."""

        name = "save-exp"

        def saves(self, var, call):
            return call.callee.name == "exp"

    register(SaveExp())
    module, args = _gru(6, 3)
    for a, b in zip(_grads(module, args, "none"), _grads(module, args, "save-exp"), strict=True):
        np.testing.assert_array_equal(a, b)
    assert _grad_text(module, "save-exp") != _grad_text(module, "none")
    with pytest.raises(ValueError, match="already registered"):
        register(SaveExp())


def test_a_policy_from_scratch_is_one_method(monkeypatch):
    """A policy that is not a residual filter: every loop recomputed."""
    monkeypatch.setattr(checkpoint, "POLICIES", dict(POLICIES))

    class Recompute(CheckpointPolicy):
        name = "recompute"

        def bind(self, loop, b):
            yield from POLICIES["loop"].bind(loop, b)

    register(Recompute())
    module, args = _gru(4, 1)
    assert _grad_text(module, "recompute") == _grad_text(module, "loop")
    for a, b in zip(_grads(module, args, "none"), _grads(module, args, "recompute"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_unknown_policy_is_a_located_error_listing_the_known_ones():
    module, _ = _gru(3, 0)
    with pytest.raises(DifferentiationError) as err:
        effir.grad(module, checkpoint="everything", specialise=False)
    assert "checkpoint must be one of none, loop, sqrt, dots" in str(err.value)
    assert "'everything'" in str(err.value)
    with pytest.raises(DifferentiationError, match="not 3"):
        effir.grad(module, checkpoint=3, specialise=False)


def test_a_policy_needs_a_name_to_be_registered():
    class Nameless(NoCheckpoint):
        name = ""

    with pytest.raises(ValueError, match="needs a name"):
        register(Nameless())


def test_a_mark_survives_specialisation():
    """Partial evaluation (grad's default) keeps the body's names: the
    marked value is still recomputed."""
    module, _ = _gru(12, 2)
    texts = {}
    for policy in ("none", RecomputeNames({"a"})):
        g = effir.grad(module, wrt=["w"], checkpoint=policy)
        texts[policy if isinstance(policy, str) else "marked"] = effir.astext(g["main_grad"])
    assert texts["marked"].count("tanh(") == texts["none"].count("tanh(") + 1


def check_compiled_policies_are_bit_identical() -> None:
    """Compiled (LLVM), ``dots`` and a mark give ``none``'s bits: the
    backend rounds each operator of a gradient program where it ends, so a
    recomputed value does not depend on the kernel it is computed in."""
    module, args = _gru(10, 1)
    wrt = ["xs", "h0", "w", "u"]
    results = []
    for policy in ("none", "dots", RecomputeNames({"a", "z"})):
        g = effir.grad(module, wrt=wrt, checkpoint=policy, specialise=False)
        compiled = effir.compile(g, entry="main_grad")
        results.append([np.asarray(x) for x in tuple_leaves(compiled(*args, entry="main_grad"))])
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    print("ok")


@pytest.mark.tvm
def test_compiled_policies_are_bit_identical():
    run = run_isolated(
        "from tests.autodiff.test_checkpoint_policies import "
        "check_compiled_policies_are_bit_identical; check_compiled_policies_are_bit_identical()",
        timeout=600,
    )
    run.check()
    assert "ok" in run.stdout
