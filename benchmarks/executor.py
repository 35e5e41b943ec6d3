"""The executor decision, measured: Relax's virtual machine against effir's
own executor (the interpreter, told to run compiled kernels in place of
primitive functions and whole compiled loops in place of cf.foreach).

Both run the same optimised program with the same TVM kernels; what
differs is who runs the rest (calls, ifs, recursion, loop steps, tuples).
Programs: the GRU language model of examples/ (t=20, b=8: a compiled loop
and a dozen kernels), a recursion 200 calls deep with a kernel per call, a
while loop of 200 steps, and a chain of 100 ifs on data. Times are medians
of ``--repeats`` calls, in one process, after warm-up.

    .venv/bin/python benchmarks/executor.py [--repeats N]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from timing import median_after_warmup

import effir
from effir.backends.interpreter import interpret_a2
from effir.backends.tvm.kernel.primitive import build_kernel
from effir.backends.tvm.loop import build_loop
from effir.ir.expr import Call, Function, Let, Op, Var
from effir.ir.visitor import pre_order
from effir.passes.transforms.fuse import is_primitive

H = '#[version = "0.0.5"]\n'

RECURSION = (
    H
    + """
def @power(%x: Tensor[(16), float32], %n: int32) -> Tensor[(16), float32] {
  if (less_equal(%n, 0)) { %x } else { @power(tanh(multiply(%x, 1.01f)), subtract(%n, 1)) }
}
def @main(%x: Tensor[(16), float32], %n: int32) { @power(%x, %n) }
"""
)

WHILE = (
    H
    + """
def @main(%x: Tensor[(16), float32], %steps: int32) {
  cf.while_loop(fn (%s: (int32, Tensor[(16), float32])) { less(%s.0, %steps) },
                fn (%s: (int32, Tensor[(16), float32])) {
                  let %y = tanh(multiply(%s.1, 1.01f));
                  (sum(%y), (add(%s.0, 1), %y))
                }, (0, %x)).1.1
}
"""
)


def if_chain(n: int) -> str:
    lets = "".join(
        f"  let %x{i} = if (greater(sum(%x{i - 1}), 0f)) {{ tanh(%x{i - 1}) }} "
        f"else {{ negative(%x{i - 1}) }};\n"
        for i in range(1, n + 1)
    )
    return H + f"def @main(%x0: Tensor[(16), float32]) {{\n{lets}  %x{n}\n}}\n"


def own_executor(compiled: Any) -> Callable[..., Any]:
    """The interpreter running ``compiled``'s optimised program with the
    same kinds of kernels: each primitive function and each static
    cf.foreach compiled, built for the shapes of the first call."""
    module = compiled.module
    kernels: dict[Any, Any] = {}
    ready = False

    def prepare(args: tuple[Any, ...]) -> None:
        for fn in module.functions.values():
            bound: dict[Var, Function] = {}
            for node in pre_order(fn):
                if isinstance(node, Let) and isinstance(node.value, Function):
                    bound[node.var] = node.value
                if isinstance(node, Function) and is_primitive(node):
                    try:
                        kernels[node] = build_kernel(node, dims=dims_of(module, args))
                    except effir.Error:
                        pass  # symbolic or data-dependent: the interpreter runs it
                if (
                    isinstance(node, Call)
                    and isinstance(node.callee, Op)
                    and node.callee.name == "cf.foreach"
                ):
                    body = (
                        bound.get(node.args[0]) if isinstance(node.args[0], Var) else node.args[0]
                    )
                    if isinstance(body, Function):
                        try:
                            loop = build_loop(body, functions=bound, module=module)
                            kernels[node] = loop.run_foreach
                        except effir.Error:
                            pass

    def run(*args: Any) -> Any:
        nonlocal ready
        if not ready:
            prepare(args)
            ready = True
        return interpret_a2(module, *args, kernels=kernels, sink=lambda label, value: None)

    return run


def dims_of(module: Any, args: tuple[Any, ...]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for p, a in zip(module["main"].params, args, strict=False):
        t = p.checked_type
        for d, n in zip(getattr(t, "shape", ()), np.shape(a), strict=False):
            if isinstance(d, str):
                dims.setdefault(d, int(n))
    return dims


def gru_lm_args(module: effir.IRModule) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    args = []
    for param in module["main"].params:
        t = param.type_annotation
        shape = tuple({"t": 20, "b": 8}.get(d, d) for d in t.shape)
        if t.dtype == "int32":
            args.append(rng.integers(0, 1000, shape).astype(np.int32))
        else:
            args.append((0.1 * rng.standard_normal(shape)).astype(np.float32))
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    repeats = parser.parse_args().repeats
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    gru = effir.parse((Path(__file__).parents[1] / "examples" / "gru_lm.effir").read_text())
    cases = [
        ("GRU LM (t=20, b=8)", gru, gru_lm_args(effir.check(gru))),
        ("recursion, 200 calls", effir.parse(RECURSION), [x, np.array(200, np.int32)]),
        ("while loop, 200 steps", effir.parse(WHILE), [x, np.array(200, np.int32)]),
        ("100 ifs on data", effir.parse(if_chain(100)), [x]),
    ]
    print(f"ms, median of {repeats}")
    print("| program | Relax VM | own executor (interpreter + kernels) | interpreter alone |")
    print("|---|---|---|---|")
    for name, module, args in cases:
        compiled = effir.compile(module)
        state = compiled.new_state()
        vm = median_after_warmup(
            lambda c=compiled, s=state, a=args: c(*a, state=s, sink=lambda *_: None), repeats
        )
        own = own_executor(compiled)
        mine = median_after_warmup(lambda o=own, a=args: o(*a), repeats)
        checked = effir.check(module)
        alone = median_after_warmup(
            lambda m=checked, a=args: effir.interpret(m, *a, sink=lambda *_: None), repeats
        )
        print(f"| {name} | {1e3 * vm:.3f} | {1e3 * mine:.3f} | {1e3 * alone:.3f} |", flush=True)


if __name__ == "__main__":
    main()
