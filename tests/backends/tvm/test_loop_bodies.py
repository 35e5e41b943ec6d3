"""Loops whose body is not a function literal, loops that compute nothing,
and blocks nested to the documented limit compile.

- driver/loop_bodies.py: a loop's body or condition that is a global
  function (``cf.foreach(@step, ...)``, what ``effir.grad`` may make), a
  parameter or a computed closure is wrapped in a function literal before
  the lowering; before, "a loop's body and condition must be function
  literals". The property checks the rewrite against the interpreter on
  every form of body; the compiled runs are in a subprocess.
- relax/loops.py: a ``cf.foreach`` with ``()`` output and ``()`` state runs
  as a VM loop (TVM cannot schedule a whole-loop kernel without a buffer:
  "Cannot find a block with the name: root").
- relax/pipeline.py: effir's Relax passes walk ``If`` branches without
  recursion (TVM's ``PyExprMutator`` called back into Python per nested
  ``If``: "maximum recursion depth exceeded" near 250); 499 nested ``if``
  expressions (500 blocks, ``MAX_NESTED_BLOCKS``) build and run, 500 are
  a located CompileError."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.backends.tvm.driver.loop_bodies import literal_loop_bodies
from effir.ir.expr import Call, Function
from effir.ir.visitor import pre_order
from tests.support.isolated import run_isolated
from tests.support.type_mismatch import COMMON

HEADER = '#[version = "0.0.5"]\n'
F2 = "Tensor[(2), float32]"
STEP = f"fn (%x: {F2}, %h: {F2}) {{ (sum(multiply(%x, %h)), add(%h, %x)) }}"
COND = "fn (%s: (int32, float32)) { less(%s.0, 3) }"
BODY = "fn (%s: (int32, float32)) { (%s.1, (add(%s.0, 1), multiply(%s.1, 2f))) }"


def loop_program(step: str, cond: str, body: str) -> str:
    """A foreach and a while_loop whose body (and condition) are given as a
    literal (``lit``), a global (``global``), a parameter of a global
    (``param``) or a let-bound literal (``let``)."""
    lets, calls = [], {}
    for role, form, literal in (("step", step, STEP), ("cond", cond, COND), ("body", body, BODY)):
        if form == "lit":
            calls[role] = literal
        elif form == "let":
            lets.append(f"let %{role} = {literal};")
            calls[role] = f"%{role}"
        else:
            calls[role] = f"@{role}" if form == "global" else f"%{role}_param"
    globals_ = "\n".join(
        f"def @{role}{literal[3:]}"
        for role, literal in (("step", STEP), ("cond", COND), ("body", BODY))
    )
    return (
        HEADER
        + globals_
        + f"""
def @run(%step_param: fn ({F2}, {F2}) -> (float32, {F2}),
         %cond_param: fn ((int32, float32)) -> bool,
         %body_param: fn ((int32, float32)) -> (float32, (int32, float32)),
         %xs: Tensor[(t, 2), float32], %n: int32) {{
  {" ".join(lets)}
  (cf.foreach({calls["step"]}, %xs, zeros(shape=[2], dtype="float32")),
   cf.while_loop({calls["cond"]}, {calls["body"]}, (0, 1f)))
}}
def @main(%xs: Tensor[(t, 2), float32], %n: int32) {{
  @run(@step, @cond, @body, %xs, %n)
}}
"""
    )


FORMS = st.sampled_from(["lit", "global", "param", "let"])


@settings(max_examples=40, **COMMON)
@given(step=FORMS, cond=FORMS, body=FORMS, t=st.integers(0, 3), n=st.integers(0, 3))
def test_loop_bodies_as_literals_mean_the_same(
    step: str, cond: str, body: str, t: int, n: int
) -> None:
    module = effir.check(effir.parse(loop_program(step, cond, body)))
    wrapped = effir.check(literal_loop_bodies(module))
    for node in pre_order(wrapped["run"]):
        if isinstance(node, Call) and getattr(node.callee, "name", "").startswith("cf."):
            bodies = [node.args[0]] if node.callee.name == "cf.foreach" else node.args[:2]
            assert all(
                isinstance(b, Function) or b.name_hint in ("step", "cond", "body") for b in bodies
            )
    xs = np.arange(2 * t, dtype=np.float32).reshape(t, 2)
    args = (xs, np.int32(n))
    want, got = effir.interpret(module, *args), effir.interpret(wrapped, *args)
    np.testing.assert_allclose(got[0][0], want[0][0])
    np.testing.assert_allclose(got[0][1], want[0][1])
    np.testing.assert_allclose(got[1][0], want[1][0])
    assert got[1][1][0] == want[1][1][0]


def test_a_module_with_literal_bodies_is_left_as_it_is() -> None:
    module = effir.check(effir.parse(loop_program("lit", "let", "lit")))
    assert literal_loop_bodies(module) is module


COMPILED = r'''
import json
import numpy as np
import effir
from effir.backends.tvm.driver.compile import compile as compile_module
from tests.backends.tvm.test_loop_bodies import loop_program

HEADER = '#[version = "0.0.5"]\n'
programs = {
    "global bodies": loop_program("global", "global", "global"),
    "parameters": loop_program("param", "param", "param"),
    "nothing computed": HEADER + """def @main(%xs: Tensor[(t, 2), float32], %n: int32) {
  cf.foreach(fn (%x: Tensor[(2), float32], %s: ()) { ((), ()) }, %xs, ())
}""",
}
xs = np.arange(6, dtype=np.float32).reshape(3, 2)
args = (xs, np.int32(2))
mismatches = []
for name, text in programs.items():
    module = effir.check(effir.parse(text))
    want = repr(effir.interpret(module, *args))
    for level in (0, 2):
        got = repr(compile_module(module, opt_level=level)(*args))
        if got != want:
            mismatches.append(f"{name} O{level}: {got} != {want}")
print(json.dumps(mismatches))
'''


def test_loops_with_global_parameter_and_empty_bodies_compile() -> None:
    result = run_isolated(COMPILED).check()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


NESTED_IFS = r"""
import json
import numpy as np
import effir
from effir.backends.tvm.driver.compile import compile as compile_module


def nested(n):
    body = "add(%x, 1f)"
    for i in range(n):
        body = f"if (%c) {{ let %y{i} = {body}; multiply(%y{i}, 0.5f) }} else {{ %x }}"
    text = f'#[version = "0.0.5"]\ndef @main(%x: float32, %c: bool) {{ {body} }}'
    return effir.check(effir.parse(text))


module = nested(499)
compiled = compile_module(module, opt_level=0)
results = [
    float(compiled(np.float32(3), np.bool_(c))) == float(effir.interpret(module, np.float32(3), np.bool_(c)))
    for c in (True, False)
]
try:
    compile_module(nested(500), opt_level=0)
    refused = "built"
except effir.CompileError as err:
    refused = f"{err.span is not None} {'nested more than 500 deep' in err.message}"
print(json.dumps([results, refused]))
"""


def test_ifs_nested_to_the_documented_limit_build_and_run() -> None:
    result = run_isolated(NESTED_IFS).check()
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[True, True], "True True"]
