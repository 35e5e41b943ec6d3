"""What the frontends build, compared structurally with the IR one would
write by hand (names aside): the textbook examples, scripted and traced."""

import numpy as np

import effir

F32 = "float32"
S = effir.Tensor[(), F32]
I32 = effir.Tensor[(), "int32"]


@effir.script
def foo1(x: S, y: S):
    if x < y:
        return x + y
    else:
        return y * y


@effir.script
def foo2(n: I32):
    i = 0
    s = 0
    while i < 10:
        s = s + i * n
        i = i + 1
    return s


FOO1 = """#[version = "0.0.5"]
def @foo1(%x: float32, %y: float32) {
  let %c = less(%x, %y);
  if (%c) { add(%x, %y) } else { multiply(%y, %y) }
}
"""

FOO2 = """#[version = "0.0.5"]
def @foo2(%n: int32) {
  let %cond = fn (%st: (int32, int32)) { less(%st.1, 10) };
  let %body = fn (%st2: (int32, int32)) {
    let %m = multiply(%st2.1, %n);
    let %s = add(%st2.0, %m);
    let %i = add(%st2.1, 1);
    ((), (%s, %i))
  };
  let %loop = cf.while_loop(%cond, %body, (0, 0));
  %loop.1.0
}
"""


def test_scripted_textbook_examples_are_the_ir_written_by_hand():
    effir.assert_structural_equal(foo1.module, effir.parse(FOO1))
    effir.assert_structural_equal(foo2.module, effir.parse(FOO2))


def test_traced_foo1_is_the_scripted_foo1():
    traced = effir.trace(
        lambda x, y: effir.cond(x < y, lambda: x + y, lambda: y * y), S, S, name="foo1"
    )
    effir.assert_structural_equal(traced.module, foo1.module)
    assert traced.interpret(np.float32(3), np.float32(2)) == 4
