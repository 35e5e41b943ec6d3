"""The gradient of a ``cf.while_loop`` whose ``max_iterations`` is known at
run time (its fourth argument) or whose outputs are padded to it
(``pad_outputs``): against central finite differences for random loops
and every checkpointing mode (Hypothesis), bit-identical across the modes,
keys on the tape, and compiled as interpreted (in a subprocess). The
backward of a padded loop is its exact loop's (autodiff/unpad.py): it
never runs over the padding rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from tests.support.grad_harness import check_grad
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'
OUTS = {
    "tensor": "multiply(%s.1, %w)",
    "tuple": "(multiply(%s.1, %w), %s.0)",
    "scalar": "sum(tanh(%s.1))",
}


def program(out: str, limit: str, dtype: str | None) -> str:
    """A loop over (counter, vector) running while sum(vector) < %bound;
    the loss reads every padded row (so a wrong row would show)."""
    params = "%w: Tensor[(3), float64], %bound: float64" + (f", %m: {dtype}" if dtype else "")
    reads = {
        "tensor": "sum(multiply(%o, %o))",
        "tuple": 'add(sum(multiply(%o.0, %o.0)), cast(sum(%o.1), dtype="float64"))',
        "scalar": "sum(multiply(%o, %o))",
    }[out]
    return (
        HEADER + f"def @main({params}) {{\n"
        "  let %c = fn (%s: (int32, Tensor[(3), float64])) { less(sum(%s.1), %bound) };\n"
        "  let %b = fn (%s: (int32, Tensor[(3), float64])) {\n"
        f"    ({OUTS[out]}, (add(%s.0, 1), add(tanh(%s.1), %w)))\n"
        "  };\n"
        f"  let %r = cf.while_loop(%c, %b, (0, %w){limit});\n"
        "  let %o = %r.0;\n"
        f"  add({reads}, sum(%r.1.1))\n"
        "}\n"
    )


@st.composite
def loops(draw):
    out = draw(st.sampled_from(sorted(OUTS)))
    form = draw(st.sampled_from(["attribute", "argument"]))
    pad = draw(st.booleans())
    dtype = draw(st.sampled_from(["int32", "int64", "uint8"])) if form == "argument" else None
    m = draw(st.integers(0, 6))
    limit = f", max_iterations={m}" if form == "attribute" else ", %m"
    if pad:
        limit += ", pad_outputs=True"
    extra = (np.asarray(m, dtype),) if dtype else ()
    bound = draw(st.sampled_from([-1.0, 1.5, 4.0, 40.0]))  # 0, 1, 2 steps, the limit
    mode = draw(st.sampled_from(["none", "loop", "sqrt"]))
    return program(out, limit, dtype), extra, bound, mode


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loops())
def test_gradients_equal_finite_differences(loop) -> None:
    text, extra, bound, mode = loop
    module = effir.check(effir.parse(text))
    w = np.array([0.3, -0.2, 0.5])
    check_grad(module, (w, np.float64(bound), *extra), ["w"], checkpoint=mode)


@pytest.mark.parametrize("limit", [0, 2, 9])
def test_checkpoint_modes_agree_bit_for_bit(limit) -> None:
    text = program("tuple", ", %m, pad_outputs=True", "int64")
    module = effir.check(effir.parse(text))
    args = (np.array([0.3, -0.2, 0.5]), np.float64(40.0), np.int64(limit))
    results = []
    for mode in ("none", "loop", "sqrt"):
        g = effir.value_and_grad(module, wrt=["w"], checkpoint=mode, specialise=False)
        results.append(effir.interpret(g, *args, entry="main_grad"))
    for other in results[1:]:
        np.testing.assert_array_equal(other[0], results[0][0])
        np.testing.assert_array_equal(other[1][0], results[0][1][0])


KEYED = HEADER + (
    "def @main(%w: Tensor[(3), float64], %k: Key, %m: int32) {\n"
    "  let %v = cf.while_loop(fn (%s: (Tensor[(3), float64], Key, int32)) { less(%s.2, 5) },\n"
    "    fn (%s: (Tensor[(3), float64], Key, int32)) {\n"
    "      let %keys = random.split(%s.1);\n"
    "      let %d = random.dropout(multiply(%s.0, %w), %keys.1, rate=0.25);\n"
    "      (%d, (tanh(%d), %keys.0, add(%s.2, 1)))\n"
    "    }, (%w, %k, 0), %m, pad_outputs=True);\n"
    "  add(sum(multiply(%v.0, %v.0)), sum(%v.1.0))\n"
    "}\n"
)


def test_keys_in_a_padded_loop_with_a_run_time_limit_go_on_the_tape() -> None:
    from effir.runtime.values import PRNGKey

    module = effir.check(effir.parse(KEYED))
    for m in (0, 3, 8):
        args = (np.array([0.3, -0.2, 0.5]), PRNGKey([0, 7]), np.int32(m))
        for mode in ("none", "loop", "sqrt"):
            check_grad(module, args, ["w"], checkpoint=mode)


@pytest.mark.tvm
def test_compiled_gradients_equal_the_interpreted_ones() -> None:
    programs = [  # (text, the limit's dtype, the modes built: a build each)
        (program("tuple", ", %m, pad_outputs=True", "int64"), "np.int64", ("none", "sqrt")),
        (program("tensor", ", %m", "int32"), "np.int32", ("loop",)),
        (program("scalar", ", max_iterations=4, pad_outputs=True", None), None, ("none",)),
    ]
    lines = [
        "import numpy as np, effir",
        "from tests.support.grad_harness import check_compiled_runs_equal_interpreted",
        "w = np.array([0.3, -0.2, 0.5])",
    ]
    for text, dtype, modes in programs:
        extra = [f", {dtype}({m})" for m in (0, 2, 30)] if dtype else [""]
        runs = ", ".join(f"(w, np.float64({b}){e})" for b in (-1.0, 4.0, 40.0) for e in extra)
        lines += [
            f"m = effir.check(effir.parse({text!r}))",
            f"for mode in {modes!r}:",
            "    g = effir.value_and_grad(m, wrt=['w'], checkpoint=mode)",
            f"    check_compiled_runs_equal_interpreted(g, [{runs}])",
        ]
    lines.append("print('ok')")
    run_isolated("\n".join(lines), timeout=1800).check()
