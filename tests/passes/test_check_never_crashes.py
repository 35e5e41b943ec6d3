"""Robustness: on any well-formed module (tests/ir/strategies.py; nearly all
of them are ill-typed, so this exercises the error paths) type inference,
effect inference and the interpreter either succeed or raise an effir.Error;
never another exception (an internal error). Well-typed programs are
tests/passes/typed_programs.py's."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import effir
from effir.passes.infer_effects import infer_effects
from tests.ir.strategies import modules


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(modules())
def test_check_effects_and_interpret_raise_only_effir_errors(module):
    infer_effects(module)
    try:
        effir.check(module)
    except effir.TypeError as err:
        assert err.errors and all(isinstance(e, effir.TypeError) for e in err.errors)
        return
    for name, fn in module.functions.items():
        if fn.params or fn.type_params:
            continue
        try:
            effir.interpret(module, entry=name, sink=lambda label, value: None)
        except effir.EvalError:
            pass
        except RecursionError:  # a program that recurses forever, not a crash
            pass
