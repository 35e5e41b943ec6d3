"""The linearity verifier (effir.passes.analyses.verify_linear): each rule on a linear
A2 program and on violating ones, with both locations in the message; the
MLIR-style cases of checks/linearity.effir; deep programs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import effir
from effir.ir import Attrs, Function, IRModule, KeyType, Let, TensorType, Tuple, Var, call_op
from effir.passes.analyses.verify_linear import linearity_errors, verify_linear

H = '#[version = "0.0.5"]\n'
CHECKS = Path(__file__).parent / "checks" / "linearity.effir"
EXPECTED = re.compile(r"//\s*expected-linear-error(?:@([+-]\d+))?\s*\{\{(.*?)\}\}")


def errors_of(text: str) -> list[effir.LinearityError]:
    return linearity_errors(effir.parse(H + text, source_name="t.effir"))


def messages(text: str) -> list[str]:
    return [e.message for e in errors_of(text)]


def assert_linear(text: str) -> None:
    module = effir.parse(H + text, source_name="t.effir")
    assert linearity_errors(module) == []
    verify_linear(module)


# ------------------------------------------------------------ rule 1: keys
A2_DROPOUT = """
global @rng: Ref[Key] = ref(random.key(0));
def @main(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {
  let %ks = random.split(%rng);
  let %k1 = %ks.0;
  let %sub = %ks.1;
  let %y = random.dropout(%x, %sub, rate=0.5f);
  (%y, %k1)
}
"""


def test_a2_dropout_is_linear():
    assert_linear(A2_DROPOUT)


def test_key_used_twice_in_straight_line():
    # line 2 is the header's; %k is bound at 3:37.
    errors = errors_of(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  let %a = random.dropout(%x, %k);\n"
        "  let %b = random.dropout(%a, %k, rate=0.2f);\n"
        "  (%a, %b)\n"
        "}\n"
    )
    assert [e.message for e in errors] == [
        "key %k (bound at t.effir:2:37) is used twice: at 3:31 and at 4:31"
    ]
    assert (errors[0].line, errors[0].column) == (4, 31)
    assert "^~" in str(errors[0])  # the source line and a caret


def test_one_use_in_each_branch_is_linear():
    assert_linear(
        "def @main(%c: bool, %x: Tensor[(4), float32], %k: Key) {\n"
        "  if (%c) { random.dropout(%x, %k) } else { random.normal(%k, shape=[4]) }\n"
        "}\n"
    )


def test_use_in_a_branch_and_after_the_join():
    assert messages(
        "def @main(%c: bool, %x: Tensor[(4), float32], %k: Key) {\n"
        "  let %y = if (%c) { %x } else { random.dropout(%x, %k) };\n"
        "  random.dropout(%y, %k)\n"
        "}\n"
    ) == ["key %k (bound at t.effir:2:47) is used twice: at 3:53 and at 4:22"]


def test_key_captured_by_a_foreach_body_is_reused_every_iteration():
    errors = errors_of(
        "def @main(%xs: Tensor[(5, 4), float32], %k: Key) {\n"
        "  let %body = fn (%x: Tensor[(4), float32], %s: Tensor[(4), float32]) {\n"
        "    (random.dropout(%x, %k), %s + %x)\n"
        "  };\n"
        "  cf.foreach(%body, %xs, zeros(shape=[4]))\n"
        "}\n"
    )
    assert [e.message for e in errors] == [
        "key %k (bound at t.effir:2:41) is captured by %body (created at 3:15), which "
        "cf.foreach at 6:3 runs once per iteration: the same key is used in every iteration"
    ]
    assert (errors[0].line, errors[0].column) == (6, 14)


def test_key_captured_by_a_while_loop_body_inline():
    (message,) = messages(
        "def @main(%k: Key) {\n"
        "  cf.while_loop(fn (%s: int32) { %s < 3 },\n"
        "    fn (%s: int32) { (random.uniform(%k), %s + 1) }, 0)\n"
        "}\n"
    )
    assert message.startswith("key %k (bound at t.effir:2:11) is captured by the closure")
    assert "cf.while_loop at 3:3" in message


def test_key_threaded_through_the_loop_state_is_linear():
    assert_linear(
        "def @main(%xs: Tensor[(5, 4), float32], %k: Key) {\n"
        "  let %body = fn (%x: Tensor[(4), float32], %s: Key) {\n"
        "    let %ks = random.split(%s);\n"
        "    (random.dropout(%x, %ks.0), %ks.1)\n"
        "  };\n"
        "  cf.foreach(%body, %xs, %k)\n"
        "}\n"
    )


def test_key_used_twice_inside_a_closure_body():
    assert messages(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  let %f = fn () { (random.dropout(%x, %k), random.normal(%k)) };\n"
        "  %f()\n"
        "}\n"
    ) == ["key %k (bound at t.effir:2:37) is used twice: at 3:40 and at 3:59"]


def test_closure_called_twice_reuses_its_key_and_once_is_fine():
    text = (
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  let %f = fn (%y: Tensor[(4), float32]) { random.dropout(%y, %k) };\n"
        "  let %a = %f(%x);\n"
        "  {BODY}\n"
        "}\n"
    )
    assert messages(text.replace("{BODY}", "%f(%a)")) == [
        "key %k (bound at t.effir:2:37) is captured by %f (created at 3:12), which is used "
        "twice: at 4:12 and at 5:3"
    ]
    assert_linear(text.replace("{BODY}", "%a"))
    # the capture is the key's use: using it again afterwards is a second one
    assert messages(text.replace("{BODY}", "(%a, %k)")) == [
        "key %k (bound at t.effir:2:37) is used twice: at 3:12 and at 5:8"
    ]


def test_split_results_used_once_each():
    assert_linear(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  let %ks = random.split(%k, num=3);\n"
        "  let %a = random.dropout(%x, %ks.0);\n"
        "  (random.dropout(%a, %ks.1), random.normal(%ks.2, shape=[4]))\n"
        "}\n"
    )


def test_projection_used_twice_and_whole_after_part():
    errors = messages(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  let %ks = random.split(%k);\n"
        "  let %a = random.dropout(%x, %ks.0);\n"
        "  let %b = random.dropout(%a, %ks.0);\n"
        "  (%b, %ks)\n"
        "}\n"
    )
    assert errors == [
        "key %ks.0 (bound at t.effir:3:7) is used twice: at 4:31 and at 5:31",
        "key %ks.0 (bound at t.effir:3:7) is used twice: at 4:31 and at 6:8",
    ]


def test_let_alias_uses_its_source():
    assert messages(
        "def @main(%k: Key) {\n  let %a = %k;\n  (random.normal(%a), random.normal(%k))\n}\n"
    ) == ["key %k (bound at t.effir:2:11) is used twice: at 4:18 and at 4:37"]


# A let alias of a projection is a view: it uses the key parts of its source
# only where the alias's own key parts are used (so to-anf's one
# ``let %t = %p.0`` per occurrence of ``%p.0.0`` reads no key).
PAIR = "def @main(%h: Tensor[(2), float64], %k: Key) {\n  let %p = ((%h, %k), %h);\n  BODY\n}\n"


def test_aliases_of_a_projection_read_only_what_they_use():
    module = effir.check(effir.parse(H + PAIR.replace("BODY", "add(sum(%p.0.0), sum(%p.0.0))")))
    assert linearity_errors(module) == []
    anf = effir.pipeline("to-anf")(module)
    assert str(anf).count("= %p.0;") == 2  # one alias of the pair per occurrence
    assert linearity_errors(anf) == []


def test_alias_used_once_for_its_key():
    assert_linear(
        PAIR.replace(
            "BODY",
            "let %a = %p.0;\n  let %b = %p.0;\n  let %c = %b;\n"
            "  (random.normal(%a.1), sum(%b.0), sum(%c.0), %p.1)",
        )
    )


def test_alias_used_twice_for_its_key_is_reported():
    assert messages(
        PAIR.replace("BODY", "let %a = %p.0;\n  (random.normal(%a.1), random.normal(%a.1))")
    ) == ["key %a.1 (bound at t.effir:4:7) is used twice: at 5:18 and at 5:39"]


def test_two_aliases_used_for_the_same_key_are_reported():
    assert messages(
        PAIR.replace(
            "BODY", "let %a = %p.0;\n  let %b = %p.0;\n  (random.normal(%a.1), random.normal(%b.1))"
        )
    ) == ["key %p.0.1 (bound at t.effir:3:7) is used twice: at 6:18 and at 6:39"]
    # an alias of an alias: the first alias's key is the one used twice
    assert messages(
        PAIR.replace(
            "BODY", "let %a = %p.0;\n  let %b = %a;\n  (random.normal(%a.1), random.normal(%b.1))"
        )
    ) == ["key %a.1 (bound at t.effir:4:7) is used twice: at 6:18 and at 6:39"]


def test_alias_and_source_used_for_the_same_key_are_reported():
    assert messages(
        PAIR.replace("BODY", "let %a = %p;\n  (random.normal(%p.0.1), sum(%a.0.0), %a)")
    ) == ["key %p.0.1 (bound at t.effir:3:7) is used twice: at 5:18 and at 5:40"]


def test_uses_through_an_alias_in_closures_branches_and_patterns():
    pair = PAIR.replace("%k: Key)", "%k: Key, %c: bool)")
    # captured by a closure: used where the closure is created
    assert messages(
        pair.replace(
            "BODY",
            "let %a = %p.0;\n  let %f = fn () { random.normal(%a.1) };\n"
            "  (%f(), random.normal(%p.0.1))",
        )
    ) == ["key %p.0.1 (bound at t.effir:3:7) is used twice: at 5:12 and at 6:24"]
    # used on one branch: used
    assert messages(
        pair.replace(
            "BODY",
            "let %a = %p.0;\n  let %z = if (%c) { random.normal(%a.1) } else { 0f };\n"
            "  (%z, random.normal(%p.0.1))",
        )
    ) == ["key %p.0.1 (bound at t.effir:3:7) is used twice: at 5:36 and at 6:22"]
    # matched: the scrutinee is used whole
    assert messages(
        pair.replace(
            "BODY",
            "let %a = %p.0;\n  let %z = match (%a) { (%x, %y) => random.normal(%y) };\n"
            "  (%z, random.normal(%p.0.1))",
        )
    ) == ["key %p.0.1 (bound at t.effir:3:7) is used twice: at 5:19 and at 6:22"]
    # captured by a loop body: reused in every iteration
    errors = messages(
        pair.replace("%h: Tensor[(2), float64]", "%h: Tensor[(5, 4), float32]").replace(
            "BODY",
            "let %a = %p.0;\n"
            "  let %body = fn (%x: Tensor[(4), float32], %s: Tensor[(4), float32]) {\n"
            "    (random.dropout(%x, %a.1), %s + %x)\n  };\n"
            "  cf.foreach(%body, %a.0, zeros(shape=[4]))",
        )
    )
    assert len(errors) == 1 and "key %a.1" in errors[0] and "once per iteration" in errors[0]


WORLD_ALIAS = (
    'def @main(%x: Tensor[(4), float32], %w: Tensor[(), int64], state_in=["io"], '
    'state_out=["io"]) {\n  BODY\n}\n'
)


def test_world_token_through_an_alias():
    assert_linear(
        WORLD_ALIAS.replace(
            "BODY", 'let %v = %w;\n  let %p = io.print(%v, %x, label="a");\n  (%x, %p.0)'
        )
    )
    # an alias takes the world token at once: the source is then spent, and
    # an alias never used drops it
    assert messages(
        WORLD_ALIAS.replace(
            "BODY", 'let %v = %w;\n  let %p = io.print(%w, %x, label="a");\n  (%x, %p.0)'
        )
    ) == ["world token %w (bound at t.effir:2:37) is used twice: at 3:12 and at 4:21"]
    twice = messages(WORLD_ALIAS.replace("BODY", "let %v = %w;\n  let %u = %w;\n  (%x, %u)"))
    assert twice == ["world token %w (bound at t.effir:2:37) is used twice: at 3:12 and at 4:12"]


def test_nested_expressions_in_evaluation_order():
    assert messages(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  random.dropout(random.dropout(%x, %k), %k)\n"
        "}\n"
    ) == ["key %k (bound at t.effir:2:37) is used twice: at 3:37 and at 3:42"]


def test_match_pattern_variables_are_places():
    assert messages(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  match (random.split(%k)) {\n"
        "    (%a, %b) => (random.dropout(%x, %a), random.normal(%a), %b)\n"
        "  }\n"
        "}\n"
    ) == ["key %a (bound at t.effir:4:6) is used twice: at 4:37 and at 4:56"]


def test_graph_form_sharing_is_evaluated_once():
    assert_linear(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  %0 = random.split(%k);\n"
        "  (random.dropout(%x, %0.0), %0.1)\n"
        "}\n"
    )
    assert messages(
        "def @main(%x: Tensor[(4), float32], %k: Key) {\n"
        "  %0 = random.split(%k);\n"
        "  (random.dropout(%x, %0.0), %0.0)\n"
        "}\n"
    ) == ["the key (field 0) produced at t.effir:3:8 is used twice: at 4:23 and at 4:30"]


# ------------------------------------------------------- rule 2: the world
PRINTS = """
def @main(%x: Tensor[(4), float32], %w: Tensor[(), int64], state_in=["io"], state_out=["io"]) {
  let %p = io.print(%w, %x, label="a");
  let %q = io.print(%p.0, %x, label="b");
  (%q.1, %q.0)
}
"""


def test_world_token_threaded_through_prints():
    assert_linear(PRINTS)


def test_world_token_used_twice():
    errors = messages(PRINTS.replace("io.print(%p.0,", "io.print(%w,"))
    assert errors == [
        "the new world token (output 0 of io.print) produced at t.effir:4:12 is dropped on "
        "the path ending at 6:3",
        "world token %w (bound at t.effir:3:37) is used twice: at 4:21 and at 5:21",
    ]


def test_world_token_dropped():
    assert messages(PRINTS.replace("(%q.1, %q.0)", "(%q.1, %p.0)")) == [
        "the new world token (output 0 of io.print) produced at t.effir:5:12 is dropped on "
        "the path ending at 6:3",
        "world token %p.0 (bound at t.effir:4:7) is used twice: at 5:21 and at 6:10",
    ]


def test_world_parameter_dropped_on_one_path():
    assert messages(
        "def @main(%c: bool, %x: Tensor[(4), float32], %w: Tensor[(), int64],\n"
        '          state_in=["io"], state_out=["io"]) {\n'
        "  if (%c) {\n"
        '    let %p = io.print(%w, %x, label="yes");\n'
        "    (%x, %p.0)\n"
        "  } else {\n"
        "    (%x, 0i64)\n"
        "  }\n"
        "}\n"
    ) == ["the world token %w bound at t.effir:2:47 is dropped on the path ending at 8:5"]


def test_world_through_a_state_passing_call():
    text = (
        "def @show(%x: Tensor[(4), float32], %w: Tensor[(), int64],\n"
        '          state_in=["io"], state_out=["io"]) {\n'
        '  let %p = io.print(%w, %x, label="x");\n'
        "  (%p.1, %p.0)\n"
        "}\n"
        "def @main(%x: Tensor[(4), float32], %w: Tensor[(), int64],\n"
        '          state_in=["io"], state_out=["io"]) {\n'
        "  let %r = @show(%x, %w);\n"
        "  {BODY}\n"
        "}\n"
    )
    assert_linear(text.replace("{BODY}", "(%r.0, %r.1)"))
    assert messages(text.replace("{BODY}", "(%r.0, %w)")) == [
        "the new world token (from @show) produced at t.effir:9:12 is dropped on the path "
        "ending at 10:3",
        "world token %w (bound at t.effir:7:37) is used twice: at 9:22 and at 10:10",
    ]


# -------------------------------------------------------- rule 3: new state
BN = """
global @bn: Ref[(Tensor[(3), float32], Tensor[(3), float32])] = ref((zeros(shape=[3]), ones(shape=[3])));
def @main(%x: Tensor[(2, 3), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32],
          %bn: (Tensor[(3), float32], Tensor[(3), float32]), state_in=["bn"], state_out=["bn"]) {
  let %r = nn.batch_norm_train(%x, %g, %b, %bn.0, %bn.1);
  (%r.0, (%r.1, %r.2))
}
"""


def test_batch_norm_new_statistics_kept():
    assert_linear(BN)


def test_batch_norm_new_mean_dropped():
    assert messages(BN.replace("(%r.1, %r.2)", "(%bn.0, %r.2)")) == [
        "the new state (output 1 of nn.batch_norm_train) produced at t.effir:6:12 is "
        "dropped on the path ending at 7:3"
    ]


def test_binding_new_state_to_a_variable_counts_as_a_use():
    # A later write may overwrite the cell, so a bound but dead new value is
    # not dropped by the program (the world token is different: see below).
    text = BN.replace("  (%r.0, (%r.1, %r.2))", "  let %m = %r.1;\n  (%r.0, %bn)")
    assert messages(text) == [
        "the new state (output 2 of nn.batch_norm_train) produced at t.effir:6:12 is "
        "dropped on the path ending at 8:3"
    ]


STATE_CALL = """
global @rng: Ref[Key] = ref(random.key(0));
def @layer(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {
  let %ks = random.split(%rng);
  (random.dropout(%x, %ks.1), %ks.0)
}
def @main(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {
  let %r = @layer(%x, %rng);
  BODY
}
"""


def test_state_passing_call_threads_the_new_key():
    assert_linear(STATE_CALL.replace("BODY", "(%r.0, %r.1)"))
    assert_linear(STATE_CALL.replace("BODY", "%r"))


def test_state_passing_call_whose_new_state_is_never_used():
    errors = errors_of(STATE_CALL.replace("BODY", "let %y = %r.0;\n  (%y, random.key(1))"))
    assert [e.message for e in errors] == [
        "the new value of @rng (from @layer) produced at t.effir:9:12 is dropped on the path "
        "ending at 11:3"
    ]
    assert errors[0].line == 9


def test_let_bound_state_passing_closure():
    text = (
        'def @main(%x: Tensor[(4), float32], %k: Key, state_in=["rng"], state_out=["rng"]) {\n'
        '  let %g = fn (%y: Tensor[(4), float32], %s: Key, state_in=["rng"], state_out=["rng"]) {\n'
        "    let %ks = random.split(%s);\n"
        "    (random.dropout(%y, %ks.0), %ks.1)\n"
        "  };\n"
        "  let %r = %g(%x, %k);\n"
        "  BODY\n"
        "}\n"
    )
    assert_linear(text.replace("BODY", "%r"))
    assert messages(text.replace("BODY", "(%r.0, random.key(3))")) == [
        "the new value of @rng (from %g) produced at t.effir:7:12 is dropped on the path "
        "ending at 8:3"
    ]


def test_incoming_state_may_be_required_to_be_threaded():
    text = (
        'def @main(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {\n'
        "  (%x, random.key(7))\n"
        "}\n"
    )
    # by default, writing a cell without reading it is fine
    assert_linear(text)
    module = effir.parse(H + text, source_name="t.effir")
    assert [e.message for e in linearity_errors(module, require_incoming_use=True)] == [
        "the incoming value of @rng (%rng) bound at t.effir:2:37 is dropped on the path "
        "ending at 3:3"
    ]


WORLD_LOOP = """
def @main(%xs: Tensor[(3, 4), float32], %w: Tensor[(), int64], state_in=["io"], state_out=["io"]) {
  let %init = (zeros(shape=[4]), %w);
  let %body = fn (%x_t: Tensor[(4), float32], %carry: (Tensor[(4), float32], Tensor[(), int64])) {
    let %p = io.print(%carry.1, %x_t, label="x");
    (%x_t, (%carry.0 + %x_t, %p.0))
  };
  let %out = cf.foreach(%body, %xs, %init);
  (%out.1.0, %out.1.1)
}
"""


def test_world_token_threaded_through_a_loop():
    assert_linear(WORLD_LOOP)


def test_world_token_used_twice_in_a_loop_body():
    text = WORLD_LOOP.replace(
        "    (%x_t, (%carry.0 + %x_t, %p.0))",
        '    let %q = io.print(%carry.1, %x_t, label="y");\n    (%x_t, (%carry.0 + %x_t, %q.0))',
    )
    assert messages(text) == [
        "the new world token (output 0 of io.print) produced at t.effir:6:14 is dropped on "
        "the path ending at 8:5",
        "world token %carry.1 (bound at t.effir:5:47) is used twice: at 6:23 and at 7:23",
    ]


def test_world_token_dropped_after_a_loop_and_in_a_loop_body():
    assert messages(WORLD_LOOP.replace("(%out.1.0, %out.1.1)", "(%out.1.0, %w)")) == [
        "the world token threaded through cf.foreach produced at t.effir:9:14 is dropped on "
        "the path ending at 10:3",
        "world token %w (bound at t.effir:3:41) is used twice: at 4:34 and at 10:14",
    ]
    assert messages(
        'def @main(%w: Tensor[(), int64], state_in=["io"], state_out=["io"]) {\n'
        "  let %r = cf.while_loop(fn (%s: (int32, int64)) { %s.0 < 3 },\n"
        "    fn (%s: (int32, int64)) { (%s.0, (%s.0 + 1, 0i64)) }, (0, %w));\n"
        "  (%r.0, %r.1.1)\n"
        "}\n"
    ) == [
        "the world token %s.1 of the loop state bound at t.effir:4:9 is dropped on the path "
        "ending at 4:31"
    ]


def test_other_loop_state_may_be_dropped():
    # a loop's final state is the program's: only world tokens are followed
    text = BN.replace(
        "  let %r = nn.batch_norm_train(%x, %g, %b, %bn.0, %bn.1);\n  (%r.0, (%r.1, %r.2))",
        "  let %body = fn (%xt: Tensor[(3), float32],\n"
        "                  %s: (Tensor[(3), float32], Tensor[(3), float32])) {\n"
        "    let %r = nn.batch_norm_train(expand_dims(%xt, axis=0), %g, %b, %s.0, %s.1);\n"
        "    (%r.0, (%r.1, %r.2))\n"
        "  };\n"
        "  let %out = cf.foreach(%body, %x, %bn);\n"
        "  (%out.0, %bn)",
    )
    assert_linear(text)


# ---------------------------------------------------------- rule 4: shapes
def test_return_must_have_the_state_passing_shape():
    errors = errors_of(
        'def @main(%x: Tensor[(4), float32], %rng: Key, state_in=["rng"], state_out=["rng"]) {\n'
        "  let %ks = random.split(%rng);\n"
        "  (random.dropout(%x, %ks.0), %ks.1, %x)\n"
        "}\n"
    )
    assert [e.message for e in errors] == [
        '@main has state_out=["rng"], so it must return (result, new @rng): a tuple of 2 '
        "fields, but this returns a tuple of 3 field(s)"
    ]
    assert errors[0].line == 4


def test_every_branch_must_have_the_shape():
    errors = errors_of(
        'def @main(%c: bool, %rng: Key, state_in=["rng"], state_out=["rng"]) {\n'
        "  if (%c) { (1, %rng, 2) } else { (3, %rng, 4) }\n"
        "}\n"
    )
    assert [(e.line, e.column) for e in errors] == [(3, 13), (3, 35)]
    assert all("but this returns a tuple of 3 field(s)" in e.message for e in errors)


def test_state_in_longer_than_the_parameters():
    assert messages(
        'def @main(%rng: Key, state_in=["rng", "bn"], state_out=["rng"]) {\n  (1, %rng)\n}\n'
    ) == ["@main names 2 state cell(s) in state_in but has only 1 parameter(s)"]


def test_state_parameter_of_the_wrong_type():
    (message,) = messages(
        "global @rng: Ref[Key] = ref(random.key(0));\n"
        'def @main(%rng: int32, state_in=["rng"], state_out=["rng"]) {\n'
        "  (1, %rng)\n"
        "}\n"
    )
    assert message == (
        "parameter %rng of @main carries the state of @rng (state_in) but has type int32; "
        "@rng holds Key"
    )


def test_repeated_cell_in_state_out():
    assert messages(
        'def @main(%rng: Key, state_in=["rng"], state_out=["rng", "rng"]) {\n'
        "  (1, %rng, random.key(1))\n"
        "}\n"
    ) == ["state_out of @main names @rng twice"]


# ------------------------------------------------------------------ API
def test_verify_linear_raises_the_first_error_with_the_others_as_notes():
    module = effir.parse(H + PRINTS.replace("io.print(%p.0,", "io.print(%w,"), source_name="t")
    with pytest.raises(effir.LinearityError) as info:
        verify_linear(module)
    err = info.value
    assert err.line == 4 and "is dropped" in err.message
    assert len(err.notes) == 1 and "world token %w" in err.notes[0]
    assert "note: " in str(err)


def test_types_are_inferred_when_missing():
    module = effir.parse(H + A2_DROPOUT)
    assert not module.functions["main"].body.has_type
    assert linearity_errors(module) == []


def test_programs_built_in_python_without_spans():
    k = Var("k", KeyType())
    x = Var("x", TensorType((4,), "float32"))
    w = Var("w", TensorType((), "int64"))
    twice = Let(Var("a"), call_op("random.dropout", x, k), call_op("random.dropout", x, k))
    errors = linearity_errors(IRModule({"main": Function((x, k), twice)}))
    assert [e.message for e in errors] == [
        "key %k (bound at <unknown>) is used twice: at <unknown> and at <unknown>"
    ]
    state = Attrs({"state_in": ("io",), "state_out": ("io",)})
    assert linearity_errors(IRModule({"f": Function((x, w), Tuple((x, w)), attrs=state)})) == []
    dropped = linearity_errors(IRModule({"f": Function((x, w), Tuple((x, x)), attrs=state)}))
    assert [e.message for e in dropped] == [
        "the world token %w bound at <unknown> is dropped on the path ending at <unknown>"
    ]
    # located errors first, then the others
    parsed = effir.parse(H + PRINTS.replace("io.print(%p.0,", "io.print(%w,"), source_name="t")
    mixed = IRModule({"main": parsed.functions["main"], "f": Function((x, k), twice)})
    assert [e.line for e in linearity_errors(mixed)] == [4, 5, None]


# --------------------------------------------------------- deep programs
def test_deep_let_chain_threading_a_key(default_recursion_limit):
    # 10,000 lets: at the default recursion limit, one error at the very end
    # shows that the whole chain was followed and found linear.
    steps = 5_000
    lines = ["def @main(%x: Tensor[(4), float32], %k0: Key) {"]
    for i in range(steps):
        lines.append(f"  let %ks{i} = random.split(%k{i});")
        lines.append(f"  let %k{i + 1} = %ks{i}.0;")
    lines += [f"  (random.dropout(%x, %k{steps}), %ks{steps - 1}.1, %ks0.0)", "}"]
    assert messages("\n".join(lines) + "\n") == [
        f"key %ks0.0 (bound at t.effir:3:7) is used twice: at 5:27 and at {steps * 2 + 3}:43"
    ]


def test_deep_nested_ifs(default_recursion_limit):
    depth = 2_000
    text = "(random.dropout(%x, %k), %w)"
    for _ in range(depth):
        text = f"if (%c) {{ {text} }} else {{ (random.normal(%k, shape=[4]), %w) }}"
    header = (
        "def @main(%c: bool, %x: Tensor[(4), float32], %k: Key, %w: Tensor[(), int64],\n"
        '          state_in=["io"], state_out=["io"]) {\n'
    )
    assert_linear(header + text + "\n}\n")
    reused = header + f"let %y = {text};\n(random.dropout(%y.0, %k), %y.1)\n}}\n"
    (message,) = messages(reused)
    assert message.startswith("key %k (bound at t.effir:2:47) is used twice")


# ------------------------------------------------------ MLIR-style cases
def split_cases(path: Path) -> list[tuple[int, str]]:
    lines = path.read_text().splitlines()
    cases, start = [], 0
    for i, line in enumerate(lines + ["// -----"]):
        if line.strip() == "// -----":
            body = "\n".join(lines[start:i])
            cases.append(
                (start + 1, (H.rstrip("\n") + "\n" * start if start else "") + body + "\n")
            )
            start = i + 1
    return cases


@pytest.mark.parametrize(
    "line, text", [pytest.param(n, t, id=f"linearity:{n}") for n, t in split_cases(CHECKS)]
)
def test_check_file_case(line, text):
    expected = []
    for number, source_line in enumerate(text.splitlines(), start=1):
        for match in EXPECTED.finditer(source_line):
            expected.append((number + int(match.group(1) or 0), match.group(2)))
    errors = linearity_errors(effir.parse(text, source_name=str(CHECKS)))
    unmatched = list(errors)
    for want_line, want in expected:
        hit = next((e for e in unmatched if e.line == want_line and want in e.message), None)
        assert hit is not None, f"line {want_line}: no error containing {want!r} in:\n" + "\n".join(
            f"  {e.line}: {e.message}" for e in errors
        )
        unmatched.remove(hit)
    assert not unmatched, "unexpected errors:\n" + "\n".join(str(e) for e in unmatched)


# ------------------------------------------- keys replayed by a gradient
REPLAYING = """
def @main_grad(%x: Tensor[(4), float32], %k: Key, %io: int64,
               state_in=["io"], state_out=["io"], replays_keys=True) {
  let %y = random.dropout(%x, %k);
  let %back = fn (%ct: Tensor[(4), float32]) { random.dropout(%ct, %k) };
  let %g = random.dropout(%back(%y), %k);
  let %p = io.print(%io, %g);
  (%g, %p.0)
}
"""


def test_a_function_marked_replays_keys_may_read_a_key_again():
    """A gradient function (``replays_keys``, set by ``grad``) reads the
    forward's keys again on purpose, so that its backward draws the forward's
    masks; closures inside it (pullbacks, loop bodies) inherit the mark."""
    assert_linear(REPLAYING)
    unmarked = messages(REPLAYING.replace(", replays_keys=True", ""))
    assert unmarked and all("key %k" in m for m in unmarked)


def test_replays_keys_does_not_relax_the_world_token_or_the_state():
    twice = REPLAYING.replace("(%g, %p.0)", "let %q = io.print(%io, %g);\n  (%g, %q.0)")
    assert any("world token %io" in m and "used twice" in m for m in messages(twice))
    dropped = messages("""
def @f(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32],
       %m: Tensor[(4), float32], %v: Tensor[(4), float32], replays_keys=True) {
  let %r = nn.batch_norm_train(%x, %g, %b, %m, %v);
  %r.0
}
""")
    assert dropped and "dropped" in dropped[0]
