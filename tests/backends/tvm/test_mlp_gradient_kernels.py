"""The kernels a cold compile of the MLP gradient of benchmarks/mlp_scan.py
(``effir.value_and_grad`` of a 16-unit MLP over a scan of 16 steps, the
program of benchmarks/compile_latency.py) builds, with the interpreter's
results: a count that must not go back up. Each kernel costs a cold
compile its lowering, TVM's passes and LLVM (docs/performance.md, "Compile
latency against JAX"). 46 kernels on main before this count was kept; 40
with a kernel's constant ``take`` index an argument (relax/take_indices.py
[RULE LOWER-TAKE-INDEX]); 38 with a chain of axis rearrangements that keeps
the order a view (relax/views.py [RULE LOWER-VIEW]). The compiled run goes
through ``tests/support/isolated.py``."""

from __future__ import annotations

import json

from tests.support.isolated import ROOT, run_isolated

MLP_GRADIENT_KERNELS = 38
MLP_GRADIENT_LOOPS = 3
"""The whole loops beside them (the gradient's scans, compiled whole)."""

MLP = """
import json, sys
sys.path.insert(0, {benchmarks!r})
import numpy as np
import effir
import mlp_scan

grad = effir.value_and_grad(mlp_scan.loss.module, entry="loss", wrt=mlp_scan.WRT)
compiled = effir.compile(grad, entry="loss_grad")
rs = np.random.default_rng(0)
t, b, d, h, c = mlp_scan.T, mlp_scan.B, mlp_scan.D, mlp_scan.H, mlp_scan.C
args = [rs.standard_normal(s).astype("float32") for s in
        [(t, b, d), (t, b, c), (h, d), (h,), (h,), (h,), (c, h), (c,)]]
program = effir.value_and_grad(mlp_scan.loss, wrt=mlp_scan.WRT)  # the cells bound by a State
value, grads = compiled(*args, state=compiled.new_state())
ref_value, ref_grads = effir.interpret(program, *args, state=effir.State(program))
np.testing.assert_allclose(value, ref_value, rtol=1e-5)
for g, r in zip(grads, ref_grads, strict=True):
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
build = compiled.report.builds[0]
print(json.dumps([build.kernels, build.loops]))
"""


def test_the_mlp_gradient_builds_no_more_kernels() -> None:
    code = MLP.format(benchmarks=str(ROOT / "benchmarks"))
    kernels, loops = json.loads(run_isolated(code).check().stdout.strip().splitlines()[-1])
    assert kernels <= MLP_GRADIENT_KERNELS and loops <= MLP_GRADIENT_LOOPS, (kernels, loops)
