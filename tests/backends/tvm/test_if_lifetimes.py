"""Keys, tensors and tuples of them flowing out of an ``if`` in compiled code
(relax/pipeline.py [RULE PIPELINE-BRANCH]): a storage planned inside a branch was
reused after it, out of scope, and the VM crashed. Each program
runs in a fresh process (tests/support/isolated.py), both branches of each ``if``
taken, two calls from one State, against the interpreter bit for bit
(results and the final key)."""

from __future__ import annotations

from tests.support.isolated import run_isolated

SCRIPT = r'''
import numpy as np
import effir
from effir.runtime.values import PRNGKey

HEADER = '#[version = "0.0.5"]\nglobal @rng: Ref[Key] = ref(random.key(5));\n'
X = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
PROGRAMS = {
    # The first crash found: a dropout in one branch, another after the if.
    "dropout after an if": ("""
def @main(%x: Tensor[(4), float32]) {
  let %a = if (greater(sum(%x), 0f)) { nn.dropout(%x, @rng) } else { %x };
  nn.dropout(%a, @rng)
}""", [X, -X]),
    # A key returned from one branch and split again afterwards.
    "a key out of a branch, split after": ("""
def @main(%x: Tensor[(4), float32]) {
  let %k = ref_read(@rng);
  let %k2 = if (greater(sum(%x), 0f)) { let %s = random.split(%k); %s.1 } else { %k };
  let %ks = random.split(%k2);
  ref_write(@rng, %ks.0);
  add(%x, random.uniform(%ks.1, shape=[4]))
}""", [X, -X]),
    # A tuple of keys, made differently in each branch.
    "a tuple of keys out of either branch": ("""
def @main(%x: Tensor[(4), float32]) {
  let %k = ref_read(@rng);
  let %p = if (greater(sum(%x), 0f)) {
    random.split(%k)
  } else {
    let %s = random.split(%k, num=3); (%s.2, %s.0)
  };
  ref_write(@rng, %p.0);
  let %q = random.split(%p.1);
  (multiply(%x, random.uniform(%q.0, shape=[4])), %q.1)
}""", [X, -X]),
    # Nested ifs; tensors and keys out of the inner if used in the outer
    # branch, and tuples of both out of the outer one.
    "nested ifs": ("""
def @main(%x: Tensor[(4), float32]) {
  let %t = if (greater(sum(%x), 0f)) {
    let %i = if (greater(max(%x), 1f)) { nn.dropout(%x, @rng) } else { multiply(%x, 3f) };
    let %d = nn.dropout(%i, @rng);
    (multiply(%d, 2f), %d)
  } else {
    let %y = negative(%x); (nn.dropout(%y, @rng), %y)
  };
  let %z = nn.dropout(add(%t.0, %t.1), @rng);
  let %ks = random.split(ref_read(@rng), num=3);
  ref_write(@rng, %ks.2);
  (%z, %ks.0, nn.dropout(%z, @rng))
}""", [X, 0.25 * X, -X]),
    # A tuple's item returned by a branch that binds nothing: read only as
    # that branch's result, it was freed at its binding (relax/pipeline.py
    # [RULE PIPELINE-KILLUNUSED]) and the call returned None.
    "an item returned by a branch that binds nothing": ("""
def @main(%x: Tensor[(4), float32]) {
  let %t = if (greater(sum(%x), 0f)) { (multiply(%x, 2f), %x) } else { (%x, negative(%x)) };
  let %y = %t.0;
  if (greater(max(%x), 1f)) { %y } else { %t.1 }
}""", [X, 0.25 * X, -X]),
    # An if in the body of a loop the VM runs step by step.
    "an if in a foreach body": ("""
def @main(%xs: Tensor[(5, 4), float32]) {
  cf.foreach(fn (%x: Tensor[(4), float32], %h: Tensor[(4), float32]) {
    let %n = if (greater(sum(%x), 0f)) { nn.dropout(add(%h, %x), @rng) } else { subtract(%h, %x) };
    (nn.dropout(%n, @rng), %n)
  }, %xs, zeros(shape=[4]))
}""", [np.stack([X, -X, X, X, -X])]),
    "an if in a while_loop body": ("""
def @main(%x: Tensor[(4), float32]) {
  cf.while_loop(fn (%s: (int32, Tensor[(4), float32])) { less(%s.0, 6) },
                fn (%s: (int32, Tensor[(4), float32])) {
                  let %y = if (greater(sum(%s.1), 0f)) { nn.dropout(%s.1, @rng) } else { negative(%s.1) };
                  let %z = nn.dropout(add(%y, 1f), @rng);
                  (%z, (add(%s.0, 1), %z))
                }, (0, %x))
}""", [X, -X]),
}


def leaves(value):
    if isinstance(value, tuple):
        return [leaf for part in value for leaf in leaves(part)]
    return [np.asarray(value.data if isinstance(value, PRNGKey) else value)]


for name, (text, inputs) in PROGRAMS.items():
    module = effir.check(effir.parse(HEADER + text))
    compiled = effir.compile(module)
    for x in inputs:
        state, ref_state = effir.State(module), effir.State(module)
        for step in range(2):
            got = leaves(compiled(x, state=state))
            want = leaves(effir.interpret(module, x, state=ref_state))
            got.append(np.asarray(state["rng"].data))
            want.append(np.asarray(ref_state["rng"].data))
            same = len(got) == len(want) and all(
                g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want)
            )
            assert same, f"{name}, step {step}, x={x}:\n{got}\n!=\n{want}"
    print("ok:", name, flush=True)
'''


def test_keys_and_tensors_flowing_out_of_ifs_run_as_the_interpreter() -> None:
    run = run_isolated(SCRIPT).check()
    assert run.stdout.count("ok:") == 7, run.describe()
