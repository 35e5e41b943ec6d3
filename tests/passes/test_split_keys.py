"""split-keys: a chain of n key splits in a block becomes one split into
n + 1 keys, by a reference model computed with the PRNG directly; what it
changes and what it keeps (docs/passes.md), and that removing an unused
random operator changes no other value, before and after the pass."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.expr import Call, Function, Let
from effir.ir.module import IRModule
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.transforms.split_keys import split_keys
from effir.passes.transforms.state_passing import state_passing
from effir.runtime import prng

H = '#[version = "0.0.5"]\nglobal @rng: Ref[Key] = ref(random.key(0));\n'
X = np.linspace(-1, 1, 8, dtype=np.float32)


def dropouts(rates: list[float]) -> str:
    """@main: dropouts of %x in a row; returns them all."""
    lets = "".join(f"  let %d{i} = nn.dropout(%x, @rng, rate={r}f);\n" for i, r in enumerate(rates))
    results = ", ".join(f"%d{i}" for i in range(len(rates)))
    return H + f"def @main(%x: Tensor[(8), float32]) {{\n{lets}  ({results},)\n}}\n"


def run(module: IRModule, seed: int):
    state = effir.State(module, seed=seed)
    return interpret_a2(module, X, state=state), state["rng"]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([0.1, 0.5, 0.75]), min_size=1, max_size=6), st.integers(0, 99))
def test_the_tree_is_one_split_of_the_first_key(rates, seed):
    a2 = state_passing(effir.parse(dropouts(rates)))
    tree = split_keys(a2)
    verify_linear(tree)
    results, final = run(tree, seed)
    # Reference: sub-key i is split(k0, n + 1)[i], the cell keeps [0].
    n = len(rates)
    k0 = effir.State(a2, seed=seed)["rng"].data
    keys = prng.split(k0, n + 1)  # n == 1: no chain to rewrite, the same keys
    for i, rate in enumerate(rates):
        want = prng.dropout(keys[i + 1], X, rate).astype(np.float32)
        assert np.array_equal(results[i], want)
    assert np.array_equal(final.data, keys[0])


def test_what_changes_and_what_stays():
    """With JAX's partitionable threefry, split(k, n)[i] does not depend on
    n: the first random operator of a chain keeps its value; the later ones
    and the key left in the cell change."""
    a2 = state_passing(effir.parse(dropouts([0.5, 0.5, 0.5])))
    chain, chain_key = run(a2, 0)
    tree, tree_key = run(split_keys(a2), 0)
    assert np.array_equal(chain[0], tree[0])
    assert not np.array_equal(chain[1], tree[1])
    assert not np.array_equal(chain[2], tree[2])
    assert not np.array_equal(chain_key.data, tree_key.data)


def test_a_single_split_per_block_is_left_alone():
    text = (
        H
        + """
    def @main(%xs: Tensor[(3, 8), float32]) {
      let %body = fn (%x: Tensor[(8), float32], %s: ()) { (nn.dropout(%x, @rng), %s) };
      cf.foreach(%body, %xs, ())
    }
    """
    )
    a2 = state_passing(effir.parse(text))
    assert effir.astext(split_keys(a2)) == effir.astext(a2)


def without_binding(module: IRModule, name: str) -> IRModule:
    """@main without the let of %name (an unused value), as DCE would do."""
    fn = module["main"]
    bindings, expr = [], fn.body
    while isinstance(expr, Let):
        if expr.var.name_hint != name:
            bindings.append((expr.var, expr.value))
        expr = expr.body
    for var, value in reversed(bindings):
        expr = Let(var, value, expr)
    new = Function(fn.params, expr, None, fn.type_params, fn.attrs)
    return module.with_function("main", new)


def test_removing_an_unused_dropout_changes_no_other_value():
    text = (
        H
        + """
    def @main(%x: Tensor[(8), float32]) {
      let %a = nn.dropout(%x, @rng);
      let %unused = nn.dropout(%x, @rng);
      let %c = nn.dropout(%x, @rng);
      (%a, %c)
    }
    """
    )
    a2 = state_passing(effir.parse(text))
    for program in (a2, split_keys(a2)):
        dropped = without_binding(program, "unused")
        calls = [n for n in effir.ir.visitor.pre_order(dropped["main"]) if isinstance(n, Call)]
        assert sum(getattr(c.callee, "name", "") == "random.dropout" for c in calls) == 2
        (a, c), key = run(program, 3)
        (a2_, c2), key2 = run(dropped, 3)
        assert np.array_equal(a, a2_) and np.array_equal(c, c2)
        assert np.array_equal(key.data, key2.data)


def test_the_work_is_linear_in_the_splits_of_a_block():
    """Twice the splits in one block, at most about twice the lines of
    Python executed (``work``: not time). Each split used to look at every
    other split of its block for the one consuming its first half."""
    from tests.deep_programs import work

    def split_work(n: int) -> int:
        a2 = state_passing(effir.parse(dropouts([0.5] * n)))
        return work(lambda: split_keys(a2))

    split_work(20)  # warm: imports and caches filled once
    small, large = split_work(150), split_work(300)
    assert large <= 2.1 * small, f"{small} lines for 150 splits, {large} for 300: not linear"
