"""How ``effir.compile`` checks its pipeline (driver/verification.py
[RULE COMPILE-VERIFY]): by default the input before the first pass and the
output after the last, so a pass that breaks the program is still a
located ``PassError`` (naming the pipeline), not a program lowered wrongly;
``EFFIR_VERIFY_PASSES=1`` (which the suite sets) or an entered context
with ``verify=True`` verifies every pass and names the one at fault; a
context with ``verify=False`` compiles (it failed with "Let has no type
yet" before). Compiled runs go through ``tests/support/isolated.py``."""

from __future__ import annotations

import pytest

import effir
from effir.backends.tvm.driver.compile import COMPILE_PIPELINES
from effir.backends.tvm.driver.verification import VERIFY_EACH_PASS, pipeline_context
from effir.ir.expr import Function, Let
from effir.passes.infra.pipeline import pipeline
from effir.passes.infra.transform import PassContext, PassError, Sequential, function_pass
from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'
PROGRAM = (
    HEADER
    + "def @main(%x: Tensor[(4, 3), float32], %w: Tensor[(3, 3), float32]) {\n"
    + "  let %h = tanh(nn.dense(%x, %w));\n"
    + "  sum(%h * %h)\n"
    + "}\n"
)


def _first_let_dropped(fn: Function) -> Function:
    """A broken pass's rewrite: the first binding of each function is
    dropped, so its variable is free where it is used."""
    body = fn.body
    return Function(fn.params, body.body if isinstance(body, Let) else body, None, (), fn.attrs)


def breaking_pipeline() -> Sequential:
    """The standard compile pipeline, then a pass that breaks the program."""
    breaking = function_pass(name="drop-first-let", register=False)(_first_let_dropped)
    return Sequential([pipeline(COMPILE_PIPELINES[2]), breaking.effir_pass])


def module() -> effir.IRModule:
    return effir.check(effir.parse(PROGRAM, source_name="verified.effir"))


def test_by_default_the_output_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERIFY_EACH_PASS, raising=False)
    assert pipeline_context().verify is False
    with pytest.raises(PassError, match="produced an invalid program") as raised:
        effir.compile(module(), pipeline=breaking_pipeline())
    assert raised.value.message.startswith("the pipeline ")
    assert raised.value.span is not None  # where the checker found the fault
    assert any(VERIFY_EACH_PASS in note for note in raised.value.notes)


def test_verifying_each_pass_names_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERIFY_EACH_PASS, "1")
    assert pipeline_context().verify is True
    with pytest.raises(PassError, match="pass drop-first-let produced an invalid program"):
        effir.compile(module(), pipeline=breaking_pipeline())
    monkeypatch.delenv(VERIFY_EACH_PASS)
    with PassContext(verify=True), pytest.raises(PassError, match="pass drop-first-let"):
        effir.compile(module(), pipeline=breaking_pipeline())


def test_an_entered_context_without_verification_is_checked_at_the_ends() -> None:
    with PassContext(verify=False), pytest.raises(PassError, match="the pipeline "):
        effir.compile(module(), pipeline=breaking_pipeline())


def test_the_input_s_own_errors_are_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = effir.parse(HEADER + "def @main(%x: Tensor[(3), float32]) { %x + 1i64 }")
    messages = []
    for verify in ("1", "0"):
        monkeypatch.setenv(VERIFY_EACH_PASS, verify)
        with pytest.raises(effir.Error) as raised:
            effir.compile(bad)
        messages.append((type(raised.value), str(raised.value)))
    assert messages[0] == messages[1]


CHECK = """
import numpy as np
import effir
from effir.passes.infra.transform import PassContext
from tests.backends.tvm.test_compile_verification import module
rng = np.random.default_rng(0)
x, w = rng.standard_normal((4, 3), np.float32), rng.standard_normal((3, 3), np.float32)
want = effir.interpret(module(), x, w)
with PassContext(verify={verify}):
    compiled = effir.compile(module())
np.testing.assert_allclose(compiled(x, w), want, rtol=1e-5)
print("ok")
"""


@pytest.mark.parametrize("verify", [False, True])
def test_a_context_with_or_without_verification_compiles_the_same(verify: bool) -> None:
    """``PassContext(verify=False)`` failed ("Let has no type yet"): nothing
    typed the pipeline's output."""
    done = run_isolated(CHECK.format(verify=verify)).check()
    assert done.stdout.strip().splitlines()[-1] == "ok"
