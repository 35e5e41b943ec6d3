"""Robustness: on any well-formed module (tests/ir/strategies.py; nearly all
of them are ill-typed, so this exercises the error paths) type inference,
effect inference and the interpreter either succeed or raise an effir.Error;
never another exception (an internal error). Well-typed programs are
tests/passes/typed_programs.py's."""

from __future__ import annotations

import contextlib
import signal

from hypothesis import HealthCheck, given, settings

import effir
from effir.passes.analyses.infer_effects import infer_effects
from tests.ir.strategies import modules


class _RunsTooLong(Exception):
    """A generated program that does not finish in its time (a loop whose
    condition stays true): legitimate, and not a crash."""


@contextlib.contextmanager
def _time_budget(seconds: float):
    """Interrupts the interpreter after ``seconds``. Which programs the
    strategies draw depends on what the worker registered before (loadfile
    order), and one may loop forever; its outcome is the same (passed)
    whatever the machine's speed."""

    def interrupt(signum, frame):
        raise _RunsTooLong

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
            with _time_budget(10.0):
                effir.interpret(module, entry=name, sink=lambda label, value: None)
        except _RunsTooLong:
            pass
        except effir.EvalError:
            pass
        except RecursionError:  # a program that recurses forever, not a crash
            pass
