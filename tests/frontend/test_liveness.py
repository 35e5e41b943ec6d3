"""The liveness analysis on its own: carried, output and dead variables of
loop bodies, branch outputs."""

import ast
import textwrap

from effir.frontend.liveness import analyze_loop, branch_outputs, live_in


def loop(source: str, index: int = 0):
    body = ast.parse(textwrap.dedent(source)).body
    return body[index], body[index + 1 :]


def analyze(source: str, index: int = 0):
    node, rest = loop(source, index)
    return analyze_loop(node, live_in(rest, set()))


def test_carried_outputs_and_dead():
    info = analyze(
        """
        for x in xs:
            h = h * x
            tmp = h + 1
            outs.append(tmp)
            junk = x * 2
        result = (h, outs)
        """
    )
    assert info.carried == ("h",)
    assert info.outputs == ("outs",)
    assert info.dead == ("tmp", "junk")
    assert info.targets == ("x",)


def test_live_after_only_is_carried():
    info = analyze(
        """
        for x in xs:
            last = x
        result = last
        """
    )
    assert info.carried == ("last",)


def test_written_before_read_is_not_carried():
    info = analyze(
        """
        for x in xs:
            t = x + 1
            acc = acc + t
        result = acc
        """
    )
    assert info.carried == ("acc",)
    assert info.dead == ("t",)


def test_read_before_written_is_carried():
    info = analyze(
        """
        for x in xs:
            y = prev * x
            prev = x
        result = 0
        """
    )
    assert info.carried == ("prev",)
    assert info.dead == ("y",)


def test_assigned_in_one_branch_is_carried():
    info = analyze(
        """
        for x in xs:
            if x > 0:
                best = x
        result = best
        """
    )
    assert info.carried == ("best",)


def test_nested_loops():
    source = """
        for x in xs:
            for y in ys:
                inner = inner + y
                waste = y
            outer = outer + inner
        result = outer
        """
    outer = analyze(source)
    assert set(outer.carried) == {"inner", "outer"}
    assert outer.dead == ("y", "waste")  # the inner target is dead outside
    node, _ = loop(source)
    inner_loop = node.body[0]
    inner = analyze_loop(inner_loop, live_in(node.body[1:], {"outer", "inner", "xs", "ys"}))
    assert inner.carried == ("inner",)


def test_while_condition_counts_as_a_read():
    info = analyze(
        """
        while i < 10:
            i = i + 1
            s = i * 2
        result = 0
        """
    )
    assert info.carried == ("i",)
    assert info.dead == ("s",)


def test_branch_outputs_only_live_names():
    node, rest = loop(
        """
        if c:
            a = 1
            b = 2
        else:
            a = 3
            d = 4
        result = a + d
        """
    )
    assert branch_outputs(node, live_in(rest, set())) == ("a", "d")


def test_lambda_parameters_are_not_uses():
    info = analyze(
        """
        for x in xs:
            f = lambda v: v + k
            k = f(x)
        result = k
        """
    )
    assert info.carried == ("k",)
