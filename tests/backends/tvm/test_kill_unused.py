"""A variable that holds memory and is never read is killed right after
its binding (relax/pipeline.py [RULE PIPELINE-KILLUNUSED]): ``KillAfterLastUse`` kills
only after a last read, so such a register kept its value until the
function returned, and a compiled VM loop (a chain of calls) kept every
step's. The end-to-end check (the compiled ``loop`` backward's memory per
step) is tests/autodiff/test_grad_hoist.py's nightly
``test_compiled_loop_backward_memory_per_step``."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import tvm
from hypothesis import given
from hypothesis import strategies as st
from tvm import relax

from effir.backends.tvm.relax.pipeline import kill_unused, relax_pipeline

TENSOR = relax.TensorType((4,), "float32")
PAIR = relax.TupleType([TENSOR, TENSOR])
FLAG = relax.TensorType((), "bool")


def _module() -> tvm.IRModule:
    """``main(x, c)``: an unused tuple at the top and in a branch, an
    unused alias of ``x`` (shares its register: never killed), a used
    tensor."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", TENSOR)
    c = relax.Var("c", relax.TensorType((), "bool"))
    with bb.function("main", [x, c], pure=False):
        bb.emit(relax.Tuple([x, x]), "top")
        bb.emit(x, "alias")
        y = bb.emit(relax.op.add(x, x), "y")
        inner = relax.Var("inner", relax.TupleType([TENSOR, TENSOR]))
        branch = relax.SeqExpr(
            [relax.BindingBlock([relax.VarBinding(inner, relax.Tuple([y, y]))])], y
        )
        out = bb.emit(relax.If(c, branch, x), "out")
        bb.emit_func_output(out)
    return bb.get()


def _killed(module: tvm.IRModule) -> list[str]:
    text = module["main"].script()
    return [line.strip() for line in text.splitlines() if "kill_object" in line]


def test_unused_bindings_are_killed_after_their_binding():
    module = kill_unused()(_module())
    killed = _killed(module)
    assert sorted(killed) == ["R.vm.kill_object(inner)", "R.vm.kill_object(top)"], killed
    lines = [line.strip() for line in module["main"].script().splitlines()]
    top = next(i for i, line in enumerate(lines) if line.startswith("top"))
    assert lines[top + 1] == "R.vm.kill_object(top)", lines


def test_killed_module_builds_and_runs():
    target = tvm.target.Target("llvm")
    executable = relax.build(_module(), target=target, relax_pipeline=relax_pipeline(target))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    x = np.arange(4, dtype="float32")
    for flag, want in ((True, 2 * x), (False, x)):
        got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(flag)))
        np.testing.assert_array_equal(got.numpy(), want)


def test_a_value_read_only_as_the_result_of_a_branch_without_bindings_is_kept():
    # ``if (c) { %item } else { %x }``: the then-branch is a SeqExpr with no
    # bindings whose result is ``item``. Its result was counted as read only
    # when the walk met one of its bindings, so ``item`` was killed at its
    # binding and the branch returned None (the ONNX importer's @seq_at).
    bb = relax.BlockBuilder()
    x = relax.Var("x", TENSOR)
    c = relax.Var("c", FLAG)
    with bb.function("main", [x, c], pure=False):
        pair = bb.emit(relax.Tuple([x, x]), "pair")
        item = bb.emit(relax.TupleGetItem(pair, 0), "item")
        out = bb.emit(relax.If(c, item, x), "out")
        bb.emit_func_output(out)
    assert _killed(kill_unused()(bb.get())) == []


@st.composite
def branching_functions(draw: Any) -> tuple[tvm.IRModule, set[str], set[str]]:
    """A function of tuples, tuple items and ``If``s nested up to three
    deep, each branch returning any tensor in scope (bound in it or around
    it, or none bound in it at all); with the names of the variables it
    binds and of those it reads."""
    x, c = relax.Var("x", TENSOR), relax.Var("c", FLAG)
    bound: set[str] = set()
    read: set[str] = set()
    names = itertools.count()

    def use(var: relax.Var) -> relax.Var:
        read.add(var.name)
        return var

    def scope(depth: int, tensors: list[relax.Var], pairs: list[relax.Var]) -> relax.SeqExpr:
        tensors, pairs = list(tensors), list(pairs)
        bindings = []
        for _ in range(draw(st.integers(0, 3))):
            kinds = ["pair", *(["item"] if pairs else []), *(["if"] if depth < 3 else [])]
            kind = draw(st.sampled_from(kinds))
            if kind == "pair":
                parts = [use(draw(st.sampled_from(tensors))) for _ in range(2)]
                value: Any = relax.Tuple(parts)
                var = relax.Var(f"p{next(names)}", PAIR)
                pairs.append(var)
            else:
                if kind == "item":
                    value = relax.TupleGetItem(
                        use(draw(st.sampled_from(pairs))), draw(st.integers(0, 1))
                    )
                else:
                    then = scope(depth + 1, tensors, pairs)
                    value = relax.If(use(c), then, scope(depth + 1, tensors, pairs))
                var = relax.Var(f"v{next(names)}", TENSOR)
                tensors.append(var)
            bindings.append(relax.VarBinding(var, value))
            bound.add(var.name)
        body = use(draw(st.sampled_from(tensors)))
        return relax.SeqExpr([relax.BindingBlock(bindings)] if bindings else [], body)

    function = relax.Function([x, c], scope(0, [x], []), TENSOR, is_pure=False)
    module = tvm.IRModule({"main": relax.BlockBuilder().normalize(function)})
    return module, bound, read


@given(branching_functions())
def test_exactly_the_values_never_read_are_killed(case: tuple[tvm.IRModule, set[str], set[str]]):
    module, bound, read = case
    killed = [
        line.removeprefix("R.vm.kill_object(").removesuffix(")")
        for line in _killed(kill_unused()(module))
    ]
    assert sorted(killed) == sorted(bound - read), module["main"].script()
