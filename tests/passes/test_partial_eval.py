"""partial-eval preserves meaning (random typed programs, random A2
programs), terminates on recursion, and stays within its size budget."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.visitor import pre_order
from effir.passes.partial_eval import partial_eval
from effir.passes.state_passing import state_passing

from .a1_programs import A1Program, a1_programs
from .test_state_passing_property import observe, parse_a1
from .test_transforms_on_typed_programs import SETTINGS, assert_same
from .typed_programs import TypedProgram, typed_programs

A2_SETTINGS = dict(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(**SETTINGS)
@given(typed_programs())
def test_partial_eval_preserves_typed_programs(program: TypedProgram) -> None:
    after = effir.check(partial_eval(program.module))
    assert_same(program, after)


@settings(**A2_SETTINGS)
@given(a1_programs())
def test_partial_eval_preserves_a2_programs(program: A1Program) -> None:
    a1 = parse_a1(program)
    a2 = state_passing(a1)
    after = effir.check(partial_eval(a2))
    expected = observe(interpret_a2, a2, program, a1)
    got = observe(interpret_a2, after, program, a1)
    assert (problem := expected.difference(got)) is None, problem


def size(module: effir.IRModule) -> int:
    return sum(1 for fn in module.functions.values() for _ in pre_order(fn))


def test_recursion_is_residualised_and_inlining_is_bounded():
    text = """#[version = "0.0.5"]
    def @fact(%n: int32) -> int32 { if (%n == 0) { 1 } else { %n * @fact(%n - 1) } }
    def @twice(%x: float32) -> float32 { %x + %x }
    def @main(%x: float32) {
      let %a = @twice(@twice(@twice(@twice(%x))));
      (@fact(5), %a)
    }
    """
    module = effir.parse(text)
    after = effir.check(partial_eval(module))
    assert size(after) <= 11 * size(module)
    assert "@fact(" in effir.astext(after["main"])  # the recursive call stays a call
    assert "@twice(" not in effir.astext(after["main"])  # the others are inlined
    result = effir.interpret(after, np.float32(1.5))
    assert int(result[0]) == 120 and float(result[1]) == 24.0


def test_deep_programs(default_recursion_limit):
    n = 20_000
    lets = "".join(f"let %v{i} = add(%v{i - 1}, 1f);\n" for i in range(1, n))
    chain = effir.parse(f'#[version = "0.0.5"]\ndef @main(%v0: float32) {{\n{lets}%v{n - 1}\n}}')
    assert float(effir.interpret(partial_eval(chain), np.float32(0))) == n - 1
    d = 2_000
    ifs = "if (%c) { " * d + "add(%x, 1f)" + " } else { %x }" * d
    nested = effir.parse(f'#[version = "0.0.5"]\ndef @main(%c: bool, %x: float32) {{ {ifs} }}')
    assert float(effir.interpret(partial_eval(nested), True, np.float32(1))) == 2.0
