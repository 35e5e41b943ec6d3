"""explicate, state passing and split-keys on deep programs at Python's
default recursion limit: a long let chain full of effects, deeply nested
ifs whose innermost branch writes a cell, deep recursion through state."""

import numpy as np
import pytest

import effir
from effir.passes.transforms.split_keys import split_keys
from effir.passes.transforms.state_passing import state_passing

from .equivalence import assert_same_run

H = '#[version = "0.0.5"]\n'


pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def test_long_chain_of_dropouts_and_writes():
    n = 1_500
    lines = "".join(
        f"let %v{i} = nn.dropout(%v{i - 1}, @rng, rate=0.1f);\n"
        f"ref_write(@acc, add(ref_read(@acc), %v{i}));\n"
        for i in range(1, n)
    )
    text = (
        "global @rng: Ref[Key] = ref(random.key(0));\n"
        "global @acc: Ref[Tensor[(4), float32]] = ref(zeros(shape=[4]));\n"
        f"def @main(%v0: Tensor[(4), float32]) {{\n{lines}%v{n - 1}\n}}"
    )
    module = effir.parse(H + text)
    a2 = state_passing(module)
    assert_same_run(module, a2, (np.ones(4, np.float32),))
    tree = split_keys(a2)
    splits = [line for line in effir.astext(tree).splitlines() if "random.split" in line]
    assert splits == [f"  let %keys = random.split(%rng, num={n});"]


def test_deeply_nested_ifs_writing_a_cell():
    d = 2_000
    ifs = "if (%c) { " * d + "ref_write(@acc, %x); 1f" + " } else { 2f }" * d
    text = (
        "global @acc: Ref[float32] = ref(0f);\n"
        f"def @main(%c: bool, %x: float32) {{ let %r = {ifs}; (%r, ref_read(@acc)) }}"
    )
    module = effir.parse(H + text)
    a2 = state_passing(module)
    for c in (True, False):
        assert_same_run(module, a2, (np.bool_(c), np.float32(3)))


def test_deep_recursion_through_state():
    text = """
    global @count: Ref[int32] = ref(0);
    def @loop(%n: int32) -> int32 {
      ref_write(@count, add(ref_read(@count), 1));
      if (%n == 0) { ref_read(@count) } else { @loop(%n - 1) }
    }
    def @main(%n: int32) { @loop(%n) }
    """
    module = effir.parse(H + text)
    a2 = state_passing(module)
    assert_same_run(module, a2, (np.int32(10_000),))
