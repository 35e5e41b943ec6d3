"""specialise-dims (effir/passes/transforms/specialise_dims.py): each global function
copied per binding of its symbolic dimensions at its calls, written in the
entry's. Structure (copies, recursion calling its own copy, the limit, a
function used as a value, the names messages show) and a property test:
random call sites and bindings, the interpreter's results unchanged and
no function the entry reaches naming a dimension but the entry's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.types import ANY, TensorType
from effir.ir.visitor import pre_order
from effir.passes.analyses.call_graph import reachable
from effir.passes.infra.transform import PassError, lookup_pass
from effir.passes.transforms.specialise_dims import MAX_BINDINGS, source_name, specialise_dims

HEADER = '#[version = "0.0.5"]\n'

LIBRARY = """
def @g(%x: Tensor[(n), float32], %k: int32) -> Tensor[(n), float32] {
  if (greater(%k, 0)) { tanh(add(@g(%x, subtract(%k, 1)), %x)) } else { negative(%x) }
}

def @pair(%x: Tensor[(n), float32], %y: Tensor[(n, m), float32]) -> Tensor[(m), float32] {
  sum(multiply(expand_dims(%x, axis=1), %y), axis=[0])
}

def @shrink(%x: Tensor[(n), float32]) -> Tensor[(), float32] {
  if (greater(take(shape_of(%x), 0, axis=0), 1)) {
    add(@shrink(strided_slice(%x, begin=[1], end=[1000000])), take(%x, 0, axis=0))
  } else {
    sum(%x)
  }
}
"""


def parse(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="specialise.effir"))


def dims_named(fn: effir.ir.Function) -> set[str]:
    return {
        d
        for node in pre_order(fn)
        if isinstance(node, TensorType)
        for d in node.shape
        if isinstance(d, str) and d != ANY
    }


def reached(module: effir.IRModule, entry: str = "main") -> dict[str, effir.ir.Function]:
    return {n: module.functions[n] for n in reachable(module, entry)}


def test_a_callee_is_written_in_the_callers_sizes():
    module = parse(LIBRARY + "def @main(%a: Tensor[(p), float32]) { @g(%a, 2) }")
    out = specialise_dims(module, "main", {"p": 5})
    functions = reached(out)
    assert set(functions) == {"main", "g_dims"}
    copy = functions["g_dims"]
    assert effir.astext(copy.params[0].checked_type) == "Tensor[(5), float32]"
    assert source_name(copy, "g_dims") == "g"
    # the recursive call calls the copy itself [RULE DIMS-MEMO]
    callees = {n.name for n in pre_order(copy) if isinstance(n, effir.ir.GlobalVar)}
    assert callees == {"g_dims"}
    assert "g" in out.functions  # the original stays (other entries may call it)


def test_symbolic_sizes_become_the_entrys_names():
    module = parse(
        LIBRARY + "def @main(%a: Tensor[(p), float32], %b: Tensor[(p, q), float32]) {"
        " @pair(%a, %b) }"
    )
    out = specialise_dims(module, "main")
    copy = reached(out)["pair_dims"]
    assert dims_named(copy) == {"p", "q"}
    assert effir.astext(copy.body.checked_type) == "Tensor[(q), float32]"


def test_one_copy_per_binding():
    module = parse(
        LIBRARY
        + """
def @main(%a: Tensor[(p), float32], %b: Tensor[(3), float32]) {
  (@g(%a, 1), @g(%b, 1), @g(%a, 2), @g(negative(%b), 0))
}"""
    )
    out = specialise_dims(module, "main")
    copies = sorted(n for n in reached(out) if n != "main")
    assert copies == ["g_dims", "g_dims_1"]
    shapes = sorted(effir.astext(out.functions[c].params[0].checked_type) for c in copies)
    assert shapes == ["Tensor[(3), float32]", "Tensor[(p), float32]"]


def test_a_function_used_as_a_value_has_unknown_sizes():
    module = parse(
        LIBRARY
        + """
def @main(%a: Tensor[(p), float32]) {
  let %f = @g;
  %f(%a, 1)
}"""
    )
    out = specialise_dims(module, "main", {"p": 4})
    (copy,) = [fn for n, fn in reached(out).items() if n != "main"]
    assert effir.astext(copy.params[0].checked_type) == "Tensor[(?), float32]"
    a = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(effir.interpret(out, a), effir.interpret(module, a))


def test_sizes_that_change_at_each_call_stop_at_the_limit():
    module = parse(LIBRARY + "def @main(%a: Tensor[(p), float32]) { @shrink(%a) }")
    size = MAX_BINDINGS + 4
    out = specialise_dims(module, "main", {"p": size})
    copies = [fn for n, fn in reached(out).items() if n != "main"]
    shapes = {effir.astext(fn.params[0].checked_type) for fn in copies}
    assert len(copies) == MAX_BINDINGS + 1  # the sized copies, then the all-? one
    assert "Tensor[(?), float32]" in shapes
    a = np.arange(size, dtype="float32")
    np.testing.assert_array_equal(effir.interpret(out, a), effir.interpret(module, a))


def test_the_pass_is_registered():
    module = parse(LIBRARY + "def @main(%a: Tensor[(p), float32]) { @g(%a, 1) }")
    out = lookup_pass("specialise-dims")(module)
    assert "g_dims" in out.functions
    with pytest.raises(PassError, match=r"specialise-dims: the program has no function @nope"):
        effir.pipeline("specialise-dims{entry=nope}")(module)


# ----------------------------------------------------------------- property
CALLS = {
    # a call site, its result a (p)-vector
    "g_a": "@g(%a, {k})",
    "g_row": "@g(take(%b, 0, axis=1), {k})",
    "g_pair": "@g(@pair(take(%b, 1, axis=1), %b), {k})",  # q
    "g_mask": "@g(boolean_mask(%a, %m), {k})",
    "g_static": '@g(ones(shape=[3], dtype="float32"), {k})',
    "g_value": "%f(%a, {k})",
    "shrink": "@shrink(%a)",
    "main": "@main_again(%a, %b, %m)",
}


@st.composite
def programs(draw: Any) -> tuple[str, dict[str, int], dict[str, int]]:
    sites = draw(st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=5))
    lines = ["let %f = @g;"]
    results = []
    for i, site in enumerate(sites):
        k = draw(st.integers(0, 3))
        lines.append(f"let %v{i} = sum({CALLS[site].format(k=k)});")
        results.append(f"%v{i}")
    body = "\n  ".join(lines) + "\n  (" + ", ".join(results) + ",)"
    text = (
        LIBRARY + "def @main_again(%a: Tensor[(p), float32], %b: Tensor[(p, q), float32],"
        " %m: Tensor[(p), bool]) -> float32 { sum(@g(%a, 1)) }\n"
        + "def @main(%a: Tensor[(p), float32], %b: Tensor[(p, q), float32],"
        f" %m: Tensor[(p), bool]) {{\n  {body}\n}}"
    )
    sizes = {"p": draw(st.integers(1, 6)), "q": draw(st.integers(1, 4))}
    bound = {d: sizes[d] for d in draw(st.sets(st.sampled_from(["p", "q"])))}
    return text, sizes, bound


@settings(max_examples=40)
@given(programs(), st.integers(0, 2**31 - 1))
def test_specialising_calls_keeps_results(program, seed):
    text, sizes, bound = program
    module = parse(text)
    out = specialise_dims(module, "main", bound)
    allowed = {"p", "q"} - set(bound)
    for name, fn in reached(out).items():
        assert dims_named(fn) <= allowed, (name, effir.astext(fn))
    rs = np.random.default_rng(seed)
    a = rs.standard_normal(sizes["p"]).astype("float32")
    b = rs.standard_normal((sizes["p"], sizes["q"])).astype("float32")
    m = rs.random(sizes["p"]) < 0.5
    want = effir.interpret(module, a, b, m)
    got = effir.interpret(out, a, b, m)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
