"""Deep programs through type inference, effect inference and the
interpreter at Python's default recursion limit (no recursion proportional
to program size anywhere)."""

import pytest

import effir
from effir.passes.analyses.infer_effects import infer_effects

H = '#[version = "0.0.5"]\n'


pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def pipeline(text: str, *args):
    module = effir.check(effir.parse(H + text))
    infer_effects(module)
    return effir.interpret(module, *args)


def test_long_let_chain():
    n = 20_000
    lets = "".join(f"let %v{i} = %v{i - 1} + 1f;\n" for i in range(1, n))
    assert float(pipeline(f"def @main(%v0: float32) {{\n{lets}%v{n - 1}\n}}", 0.0)) == n - 1


def test_deeply_nested_ifs():
    d = 10_000
    ifs = "if (%c) { " * d + "%x + 1f" + " } else { %x }" * d
    assert float(pipeline(f"def @main(%c: bool, %x: float32) {{ {ifs} }}", True, 1.0)) == 2.0


def test_deeply_nested_operator_calls():
    d = 10_000
    calls = "negative(" * d + "%x" + ")" * d
    assert float(pipeline(f"def @main(%x: float32) {{ {calls} }}", 3.0)) == 3.0


def test_deeply_nested_closures():
    d = 2_000
    text = "fn () { " * d + "%x" + " }" * d
    calls = "()" * d
    assert float(pipeline(f"def @main(%x: float32) {{ ({text}){calls} }}", 5.0)) == 5.0


def test_deep_match_on_a_long_list():
    n = 10_000
    text = """
    type List[A] { Cons(A, List[A]), Nil }
    def @build(%n: int32, %acc: List[int32]) -> List[int32] {
      if (%n == 0) { %acc } else { @build(%n - 1, Cons(%n, %acc)) }
    }
    def @sum(%xs: List[int32]) -> int32 {
      match (%xs) { Cons(%h, %t) => %h + @sum(%t), Nil => 0 }
    }
    def @main(%n: int32) { @sum(@build(%n, Nil)) }
    """
    assert int(pipeline(text, n)) == n * (n + 1) // 2
