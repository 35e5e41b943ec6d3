"""Lambda lifting (``specialise-function-arguments``) as a registered pass:
it runs on its own, and the pass framework's checks (well typed, linear
state) hold of what it makes."""

from __future__ import annotations

import numpy as np

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.infra.pipeline import pipeline
from effir.passes.infra.transform import lookup_pass

HEADER = '#[version = "0.0.5"]\n'

DROPOUT = """
global @rng: Ref[Key] = ref(random.key(3));
def @main(%x: Tensor[(3), float64], %w: Tensor[(3), float64]) {
  let %xs = Cons(%x, Cons(tanh(%x), Cons(multiply(%x, %x), Nil)));
  let %f = fn (%acc: Tensor[(3), float64], %v: Tensor[(3), float64]) {
    add(%acc, nn.dropout(multiply(%v, %w), @rng, rate=0.5))
  };
  let %s = @foldl(%f, %w, %xs);
  sum(multiply(%s, %s))
}
"""


def _a2_module():
    module = effir.parse(HEADER + DROPOUT, module=effir.prelude())
    return pipeline("to-anf,explicate,state-passing")(module)


def test_the_pass_is_registered_with_its_option():
    p = lookup_pass("specialise-function-arguments")
    assert p.with_options(entry="main").spelled() == "specialise-function-arguments{entry=main}"


def test_a_copy_taking_a_closure_s_captured_state_keeps_the_state_last():
    """The copy of @foldl takes the closure's captured key and weight as
    new parameters; A2 puts state parameters last, so the lifted ones go
    before them (they went after, and the linearity check of the pass
    framework read a tensor as the key's state)."""
    module = _a2_module()
    out = pipeline("specialise-function-arguments{entry=main}")(module)
    copy = out["foldl_spec"]
    n_state = len(copy.attrs.get("state_in", ()))
    assert n_state == 1
    assert str(copy.params[-1].checked_type) == "Key"
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=3), rng.normal(size=3)
    want = interpret_a2(module, x, w, state=effir.State(module))
    got = interpret_a2(out, x, w, state=effir.State(out))
    np.testing.assert_array_equal(got, want)
