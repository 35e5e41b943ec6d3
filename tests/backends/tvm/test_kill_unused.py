"""A variable that holds memory and is never read is killed right after
its binding (relax/pipeline.py [RULE PIPELINE-KILLUNUSED]): ``KillAfterLastUse`` kills
only after a last read, so such a register kept its value until the
function returned, and a compiled VM loop (a chain of calls) kept every
step's. The end-to-end check (the compiled ``loop`` backward's memory per
step) is tests/autodiff/test_grad_hoist.py's nightly
``test_compiled_loop_backward_memory_per_step``."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from effir.backends.tvm.relax.pipeline import kill_unused, relax_pipeline

TENSOR = relax.TensorType((4,), "float32")


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
