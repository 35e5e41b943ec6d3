"""``Loop``, ``If`` and ``Scan`` written with onnx.helper, against
onnxruntime (and against numpy's reading of the specification where
onnxruntime fails: a ``Scan`` of length 0): every mode and attribute,
nesting, shapes that change, and the form each becomes in effir."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.types import ANY

from .onnx_models import (
    I64,
    B,
    F,
    check_against_ort,
    const,
    graph,
    helper,
    model,
    run,
    tensor,
)


def _counter_body(stop_at: float | None = None, scans: bool = True):
    """x += 1 each step; the step's x squared as a scan output; the
    condition passed on, or ``x < stop_at``."""
    nodes = [helper.make_node("Add", ["x_in", "one"], ["x_out"])]
    if stop_at is None:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        nodes.append(helper.make_node("ReduceMax", ["x_out"], ["top"], keepdims=0))
        nodes.append(helper.make_node("Less", ["top", "stop"], ["c_out"]))
    outputs = [tensor("c_out", B, []), tensor("x_out", F, [2])]
    if scans:
        nodes.append(helper.make_node("Mul", ["x_out", "x_out"], ["sq"]))
        outputs.append(tensor("sq", F, [2]))
    inputs = [tensor("i", I64, []), tensor("c_in", B, []), tensor("x_in", F, [2])]
    return graph(nodes, inputs, outputs)


def _loop_model(m: str, cond: str, stop_at: float | None, trips: object = None, go: object = None):
    nodes = [const("one", np.ones(2, np.float32)), const("stop", np.float32(stop_at or 0))]
    inputs = [tensor("x", F, [2])]
    if m == "M":
        if trips is None:
            inputs.append(tensor("M", I64, []))
        else:
            nodes.append(const("M", np.int64(trips)))
    if cond == "cond":
        if go is None:
            inputs.append(tensor("cond", B, []))
        else:
            nodes.append(const("cond", np.bool_(go)))
    nodes.append(helper.make_node("Loop", [m, cond, "x"], ["y", "ys"], body=_counter_body(stop_at)))
    return model(nodes, inputs, [tensor("y", F, [2]), tensor("ys", F, [None, 2])])


X = np.array([0.5, -1.0], np.float32)


@pytest.mark.parametrize(
    ("mode", "args"),
    [
        (("M", "", None, 7), ()),  # trip count only, constant: a foreach
        (("M", "", None, None), (np.array(4, np.int64),)),  # trip count known at run time
        (("", "cond", 3.0, None, None), (np.array(True),)),  # condition only
        (("M", "cond", 3.0, None, None), (np.array(9, np.int64), np.array(True))),  # both
        (("M", "cond", 30.0, None, None), (np.array(2, np.int64), np.array(True))),  # M stops it
        (("", "", 3.0), ()),  # neither: the body's condition stops it
        (("M", "", None, 0), ()),  # zero trips
        (("M", "cond", None, 5, False), ()),  # a false condition: zero trips
    ],
)
def test_loop_modes_match_onnxruntime(mode, args):
    made = _loop_model(*mode)
    check_against_ort(made, X, *args)


def test_loop_with_a_constant_trip_count_is_a_foreach_and_compiles_to_one_loop():
    made = _loop_model("M", "", None, 64)
    module = effir.from_onnx(made)
    text = effir.astext(module)
    assert "cf.foreach" in text and "cf.while_loop" not in text
    stops = effir.from_onnx(_loop_model("M", "cond", 3.0, 64, True))
    assert "cf.while_loop" in effir.astext(stops) and "max_iterations=64" in effir.astext(stops)


def test_loop_carried_value_whose_shape_changes_is_typed_with_unknown_dimensions():
    """x grows by one element per iteration (a Concat): the carried type
    has ``?`` where the size changes, and the values are onnxruntime's."""
    body = graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Concat", ["x_in", "tail"], ["x_out"], axis=0),
        ],
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("x_in", F, [None])],
        [tensor("c_out", B, []), tensor("x_out", F, [None])],
    )
    made = model(
        [
            const("tail", np.array([2.0], np.float32)),
            helper.make_node("Loop", ["M", "", "x"], ["y"], body=body),
        ],
        [tensor("x", F, [1]), tensor("M", I64, [])],
        [tensor("y", F, [None])],
    )
    check_against_ort(made, np.array([1.0], np.float32), np.array(3, np.int64))
    module = effir.from_onnx(made)
    assert module["main"].body.checked_type.shape == (ANY,)


def _nested_loops(depth: int):
    """``depth`` loops, one inside the other, each adding its outer
    value (captured) to its own carried value, twice."""
    inner = None
    for level in range(depth):
        nodes = [helper.make_node("Identity", ["c_in"], [f"c_out{level}"])]
        nodes.append(helper.make_node("Add", [f"v{level}", "base"], [f"w{level}"]))
        if inner is not None:
            nodes.append(const(f"two{level}", np.int64(2)))
            nodes.append(
                helper.make_node(
                    "Loop", [f"two{level}", "", f"w{level}"], [f"u{level}"], body=inner
                )
            )
            result = f"u{level}"
        else:
            result = f"w{level}"
        inner = graph(
            nodes,
            [tensor(f"i{level}", I64, []), tensor("c_in", B, []), tensor(f"v{level}", F, [2])],
            [tensor(f"c_out{level}", B, []), tensor(result, F, [2])],
            name=f"body{level}",
        )
    return model(
        [const("two", np.int64(2)), helper.make_node("Loop", ["two", "", "x"], ["y"], body=inner)],
        [tensor("x", F, [2]), tensor("base", F, [2])],
        [tensor("y", F, [2])],
    )


def test_nested_loops_capture_outer_values():
    check_against_ort(_nested_loops(4), X, np.array([1.0, 10.0], np.float32))


def test_loop_inside_if_and_if_inside_loop():
    body = graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Less", ["i", "two"], ["early"]),
            helper.make_node(
                "If",
                ["early"],
                ["x_out"],
                then_branch=graph(
                    [helper.make_node("Add", ["x_in", "x_in"], ["a"])],
                    [],
                    [tensor("a", F, [2])],
                    "then",
                ),
                else_branch=graph(
                    [helper.make_node("Neg", ["x_in"], ["b"])], [], [tensor("b", F, [2])], "else"
                ),
            ),
        ],
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("x_in", F, [2])],
        [tensor("c_out", B, []), tensor("x_out", F, [2])],
    )
    loop = helper.make_node("Loop", ["five", "", "x"], ["looped"], body=body)
    made = model(
        [
            const("two", np.int64(2)),
            const("five", np.int64(5)),
            helper.make_node(
                "If",
                ["flag"],
                ["y"],
                then_branch=graph([loop], [], [tensor("looped", F, [2])], "with_loop"),
                else_branch=graph(
                    [helper.make_node("Identity", ["x"], ["same"])],
                    [],
                    [tensor("same", F, [2])],
                    "without",
                ),
            ),
        ],
        [tensor("x", F, [2]), tensor("flag", B, [])],
        [tensor("y", F, [2])],
    )
    for flag in (True, False):
        check_against_ort(made, X, np.array(flag))


# -------------------------------------------------------------------- If
def _branch(name: str, nodes, out: str, shape):
    return graph(nodes, [], [tensor(out, F, shape)], name)


def test_if_is_lazy_only_the_taken_branch_runs():
    """The branch not taken would fail (a Gather out of range): it does not run."""
    bad = _branch(
        "bad",
        [const("far", np.int64(100)), helper.make_node("Gather", ["x", "far"], ["g"])],
        "g",
        [],
    )
    good = _branch("good", [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)], "s", [])
    made = model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=bad, else_branch=good)],
        [tensor("x", F, [2]), tensor("flag", B, [])],
        [tensor("y", F, [])],
        opset=13,
    )
    check_against_ort(made, X, np.array(False))
    with pytest.raises(effir.EvalError, match="index 100 is out of range"):
        run(made, X, np.array(True))


def test_if_branches_of_different_shapes_join_to_unknown_dimensions():
    then = _branch("then", [const("a", np.ones((2, 3), np.float32))], "a", [2, 3])
    other = _branch("other", [const("b", np.zeros((4, 3), np.float32))], "b", [4, 3])
    made = model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)],
        [tensor("flag", B, [])],
        [tensor("y", F, [None, 3])],
    )
    module = effir.from_onnx(made)
    assert module["main"].body.checked_type.shape == (ANY, 3)
    for flag in (True, False):
        check_against_ort(made, np.array(flag))


def test_if_branches_of_different_ranks_are_a_located_error():
    then = _branch("then", [const("a", np.ones((2, 3), np.float32))], "a", [2, 3])
    other = _branch("other", [const("b", np.zeros(3, np.float32))], "b", [3])
    made = model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other, name="pick")],
        [tensor("flag", B, [])],
        [tensor("y", F, [None, 3])],
    )
    with pytest.raises(effir.ModelImportError) as err:
        effir.from_onnx(made)
    assert (
        "node 0 'pick' (If-16, opset 17): output 0 of its branches cannot be one value: ranks 2 and 1 differ"
        in str(err.value)
    )
    assert err.value.line == 3  # the node's line in the model's listing


def test_nested_ifs_capture_outer_scopes():
    inner = helper.make_node(
        "If",
        ["b"],
        ["z"],
        then_branch=_branch("t2", [helper.make_node("Add", ["x", "x"], ["p"])], "p", [2]),
        else_branch=_branch("e2", [helper.make_node("Sub", ["x", "x"], ["q"])], "q", [2]),
    )
    made = model(
        [
            helper.make_node(
                "If",
                ["a"],
                ["y"],
                then_branch=graph([inner], [], [tensor("z", F, [2])], "t1"),
                else_branch=_branch("e1", [helper.make_node("Neg", ["x"], ["n"])], "n", [2]),
            )
        ],
        [tensor("x", F, [2]), tensor("a", B, []), tensor("b", B, [])],
        [tensor("y", F, [2])],
    )
    for a in (True, False):
        for b in (True, False):
            check_against_ort(made, X, np.array(a), np.array(b))


# ------------------------------------------------------------------ Scan
def _scan_model(in_axes, in_dirs, out_axes, out_dirs, length: int = 3):
    body = graph(
        [
            helper.make_node("Add", ["s_in", "a"], ["s_out"]),
            helper.make_node("Mul", ["p_in", "b"], ["p_out"]),
            helper.make_node("Sub", ["s_out", "b"], ["d"]),
            # (a new name: onnxruntime 1.32 gives garbage for a body output listed twice)
            helper.make_node("Identity", ["s_out"], ["e"]),
        ],
        [tensor("s_in", F, [2]), tensor("p_in", F, [2]), tensor("a", F, [2]), tensor("b", F, [2])],
        [
            tensor("s_out", F, [2]),
            tensor("p_out", F, [2]),
            tensor("e", F, [2]),
            tensor("d", F, [2]),
        ],
    )
    shape_a = [length, 2] if in_axes[0] == 0 else [2, length]
    shape_b = [length, 2] if in_axes[1] in (0, -2) else [2, length]
    node = helper.make_node(
        "Scan",
        ["s0", "p0", "xa", "xb"],
        ["s", "p", "ys", "ds"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=in_axes,
        scan_input_directions=in_dirs,
        scan_output_axes=out_axes,
        scan_output_directions=out_dirs,
    )
    made = model(
        [node],
        [
            tensor("s0", F, [2]),
            tensor("p0", F, [2]),
            tensor("xa", F, shape_a),
            tensor("xb", F, shape_b),
        ],
        [
            tensor("s", F, [2]),
            tensor("p", F, [2]),
            tensor("ys", F, [None, None]),
            tensor("ds", F, [None, None]),
        ],
    )
    rng = np.random.default_rng(len(shape_a))
    args = [
        rng.standard_normal(2).astype(np.float32),
        rng.standard_normal(2).astype(np.float32),
        rng.standard_normal(shape_a).astype(np.float32),
        rng.standard_normal(shape_b).astype(np.float32),
    ]
    return made, args


@pytest.mark.parametrize(
    ("in_axes", "in_dirs", "out_axes", "out_dirs"),
    [
        ([0, 0], [0, 0], [0, 0], [0, 0]),
        ([1, 0], [1, 0], [1, 0], [0, 1]),
        ([0, -2], [0, 1], [-1, 1], [1, 1]),
        ([1, 1], [1, 1], [0, 1], [1, 0]),
    ],
)
def test_scan_axes_directions_states_and_inputs_match_onnxruntime(
    in_axes, in_dirs, out_axes, out_dirs
):
    made, args = _scan_model(in_axes, in_dirs, out_axes, out_dirs)
    check_against_ort(made, *args)


def test_scan_of_length_zero_is_the_specification_s():
    """onnxruntime fails on a Scan of length 0; the specification gives the
    initial states and empty scan outputs, as numpy computes them here."""
    made, args = _scan_model([0, 0], [0, 0], [0, 1], [0, 0], length=0)
    args[2], args[3] = np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    s, p, ys, ds = run(made, *args)
    np.testing.assert_array_equal(s, args[0])
    np.testing.assert_array_equal(p, args[1])
    assert ys.shape == (0, 2) and ds.shape == (2, 0) and ys.dtype == np.float32
