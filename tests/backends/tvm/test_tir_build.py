"""effir's TIR builds (target.py ``building``): TVM's TIR common-subexpression
elimination is off, since it substituted a variable inside ``Let``
expressions before the statement that binds it, and any dropout of 32
elements or more failed to build ("variable cse_v1 has been used before
definition"). Two of the build paths: a compiled program's
kernels (relax/lower.py) and a kernel built alone (kernel/primitive.py)."""

from __future__ import annotations

import numpy as np

import effir
from effir.backends.tvm.kernel.primitive import build_kernel
from effir.ir.expr import Function, Var
from effir.ir.op import call_op
from effir.ir.types import KeyType, TensorType
from effir.passes.analyses.infer_type import infer_expr
from effir.runtime.values import PRNGKey

HEADER = '#[version = "0.0.5"]\nglobal @rng: Ref[Key] = ref(random.key(5));\n'


def test_three_dropouts_over_100000_elements_compile_as_the_interpreter_runs_them() -> None:
    module = effir.check(
        effir.parse(
            HEADER
            + """
def @main(%x: Tensor[(100000), float32]) {
  let %a = nn.dropout(%x, @rng);
  let %b = nn.dropout(%a, @rng, rate=0.25);
  nn.dropout(%b, @rng)
}"""
        )
    )
    x = np.linspace(-1, 1, 100000, dtype=np.float32)
    state, ref_state = effir.State(module), effir.State(module)
    out = effir.compile(module)(x, state=state)
    np.testing.assert_array_equal(out, effir.interpret(module, x, state=ref_state))
    assert state["rng"] == ref_state["rng"]


def test_a_dropout_kernel_of_64_elements_builds_alone() -> None:
    x, key = Var("x", TensorType((64,))), Var("key", KeyType())
    fn = Function((x, key), call_op("random.dropout", x, key))
    infer_expr(fn)
    value = np.linspace(1, 2, 64, dtype=np.float32)
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\n'
            "def @main(%x: Tensor[(64), float32], %k: Key) { random.dropout(%x, %k) }"
        )
    )
    want = effir.interpret(module, value, PRNGKey([3, 4]))
    np.testing.assert_array_equal(build_kernel(fn)(value, PRNGKey([3, 4])), want)
