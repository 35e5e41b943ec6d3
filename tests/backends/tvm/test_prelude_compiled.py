"""The prelude's higher-order and tree functions compile at every
optimisation level and compute what the interpreter computes: ``@iterate``
(whose result is ``@compose``'s closure, a function literal returned as a
value, before "a function literal that is not bound by a let is not
compiled"; at ``-O2`` partial evaluation made an ill-typed program),
``@tmap`` and ``@size``. In a subprocess (tests/support/isolated.py); the
partial-evaluation side is in tests/passes/test_partial_eval_polymorphic.py."""

from __future__ import annotations

import json

from tests.support.isolated import run_isolated

SCRIPT = r"""
import json
import numpy as np
import effir
from effir.backends.tvm.driver.compile import compile as compile_module
from tests.passes.test_partial_eval_polymorphic import PRELUDE_RECURSION

module = effir.check(effir.parse(PRELUDE_RECURSION, module=effir.prelude()))
mismatches = []
for level in (0, 1, 2):
    compiled = compile_module(module, opt_level=level)
    for n in (0, 3):
        args = (np.float32(1.5), np.int32(n))
        want = [float(v) for v in effir.interpret(module, *args)]
        got = [float(v) for v in compiled(*args)]
        if got != want:
            mismatches.append(f"O{level} n={n}: {got} != {want}")
print(json.dumps(mismatches))
"""


def test_iterate_tmap_and_size_compile_at_every_level() -> None:
    result = run_isolated(SCRIPT).check()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
