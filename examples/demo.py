"""`make demo`: the effectful GRU language model through what effir has today.

It parses examples/gru_lm.effir, prints its canonical text and proves the
text round-trips, infers its types (symbolic dimensions included) and its
effects, then runs it twice with the reference interpreter on random inputs
from one explicit `State`, showing how the PRNG key and the batch-norm
statistics advance. Then it turns the program into explicit state passing
(A2), verifies keys and state are linear, and runs the A2 program for the
same two steps, checking results, key and statistics bit for bit against
the effectful run. Finally it compiles the model (effir.compile: explicate,
state passing, partial evaluation, basic-block optimisation, fusion, then
TVM for this CPU, run by Relax's virtual machine), runs the same two steps
and checks them against the interpreter (random values and the key bit for
bit, floats to 1e-5), exports it and runs the reloaded artifact, and prints
a report: IR size before and after, compile time, run time against the
interpreter.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir import Call, GlobalVar, Op, lookup_op, post_order
from effir.passes.analyses.infer_effects import effect_text, infer_effects
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.infra.pipeline import run_pipeline

EXAMPLE = Path(__file__).with_name("gru_lm.effir")


def effectful_calls(module: effir.IRModule) -> list[str]:
    """One line per call of a non-pure operator, in source order."""
    found = []
    for name, fn in module.functions.items():
        for node in post_order(fn):
            if isinstance(node, Call) and isinstance(node.callee, Op):
                effect = lookup_op(node.callee.name).effect
                if effect != "pure":
                    cells = [a.name for a in node.args if isinstance(a, GlobalVar)]
                    where = f"{node.span}" if node.span else f"@{name}"
                    target = f" on @{cells[0]}" if cells else ""
                    line = f"  {where}: {node.callee.name} ({effect}){target}"
                    found.append((node.span.start if node.span else 0, line))
    return [line for _, line in sorted(found)]


def example_inputs(module: effir.IRModule) -> list[np.ndarray]:
    """Random arguments for @main: t = 6 steps of a batch of b = 4 tokens."""
    rng = np.random.default_rng(0)
    sizes = {"t": 6, "b": 4}
    args = []
    for param in module["main"].params:
        t = param.type_annotation
        shape = tuple(sizes.get(d, d) for d in t.shape)
        if t.dtype == "int32":
            args.append(rng.integers(0, 1000, shape).astype(np.int32))
        else:
            args.append((0.1 * rng.standard_normal(shape)).astype(t.dtype))
    return args


def show_print(label: str, value) -> None:
    print(f"  debug.print {label}: {float(value):.6f}")


def main() -> int:
    text = EXAMPLE.read_text()
    start = time.perf_counter()
    module = effir.parse(text, source_name=f"examples/{EXAMPLE.name}")
    parsed = time.perf_counter()
    effir.check_well_formed(module)
    canonical = effir.astext(module)
    printed = time.perf_counter()

    print(f"== {EXAMPLE.name}: canonical text ==")
    print(canonical)
    reparsed = effir.parse(canonical)
    effir.assert_structural_equal(reparsed, module)
    if effir.astext(reparsed) != canonical:
        print("error: printing the reparsed module gave different text", file=sys.stderr)
        return 1

    print("== effects (from the operator registry) ==")
    for line in effectful_calls(module):
        print(line)
    print(f"  state cells: {', '.join('@' + c for c in module.cells)}")
    print()

    effir.check(module)
    checked = time.perf_counter()
    print("== types (effir.check) ==")
    for name, fn in module.functions.items():
        print(f"  @{name}: {effir.astext(fn.checked_type)}")
    print("== effects (inferred through calls and closures) ==")
    info = infer_effects(module)
    for name in module.functions:
        print(f"  @{name}: {effect_text(info.of(name))}")
    print()

    print("== run (reference interpreter, two steps from one State) ==")
    args = example_inputs(module)
    state = effir.State(module)
    a1_results = []
    for step in (1, 2):
        start_run = time.perf_counter()
        out = effir.interpret(module, *args, state=state, sink=show_print)
        a1_results.append((out, state["rng"].data.copy(), state["bn"]))
        took = time.perf_counter() - start_run
        probs = np.exp(out).sum(axis=1)
        if not np.allclose(probs, 1.0, atol=1e-4):
            print("error: the log-probabilities do not normalise", file=sys.stderr)
            return 1
        mean, var = state["bn"]
        print(
            f"  step {step}: logits {out.shape} {out.dtype}, rows sum to 1, "
            f"{1e3 * took:.0f} ms; @rng = {state['rng']}, "
            f"@bn mean[:3] = [{', '.join(f'{v:.4f}' for v in mean[:3])}]"
        )
    print()

    print("== state passing (explicate, state-passing; docs/passes.md) ==")
    start_sp = time.perf_counter()
    a2 = run_pipeline(module, "explicate,state-passing")
    passed = time.perf_counter()
    verify_linear(a2)
    main_a2 = a2["main"]
    for name, fn in a2.functions.items():
        if fn.attrs.get("state_in"):
            print(
                f"  @{name} takes {', '.join(fn.attrs['state_in'])} and returns "
                f"{', '.join(fn.attrs['state_out'])} after its result"
            )
    names = [p.name_hint for p in main_a2.params]
    print(f"  @main({', '.join('%' + n for n in names)})")
    print("  no ref_read/ref_write left; keys and the world token are linear")
    state2 = effir.State(a2)
    for step, (want, want_key, want_bn) in enumerate(a1_results, start=1):
        out = interpret_a2(a2, *args, state=state2, sink=lambda label, value: None)
        same = (
            np.array_equal(out, want)
            and np.array_equal(state2["rng"].data, want_key)
            and all(np.array_equal(a, b) for a, b in zip(state2["bn"], want_bn, strict=True))
        )
        if not same:
            print(f"error: step {step} of the A2 program differs from A1", file=sys.stderr)
            return 1
        print(f"  step {step}: A2 result, key and statistics equal A1's bit for bit")
    print()

    print("== compiled (effir.compile: the whole pipeline, TVM for this CPU, Relax VM) ==")
    start_compile = time.perf_counter()
    compiled = effir.compile(module)
    compiled.specialisation("main", {"t": 6, "b": 4})
    compile_seconds = time.perf_counter() - start_compile
    for line in compiled.report.table().splitlines():
        print(f"  {line}")
    state3 = effir.State(module)
    for step, (want, want_key, want_bn) in enumerate(a1_results, start=1):
        out = compiled(*args, state=state3, sink=lambda label, value: None)
        if not (
            np.allclose(out, want, rtol=1e-5, atol=1e-5)
            and np.array_equal(state3["rng"].data, want_key)
            and all(
                np.allclose(a, b, rtol=1e-5, atol=1e-6)
                for a, b in zip(state3["bn"], want_bn, strict=True)
            )
        ):
            print(f"error: step {step} of the compiled program differs", file=sys.stderr)
            return 1
        print(
            f"  step {step}: compiled result equals the interpreter's "
            f"(max difference {np.abs(out - want).max():.1e}), key bit for bit"
        )
    with tempfile.TemporaryDirectory() as tmp:
        compiled.export(Path(tmp) / "gru_lm")
        loaded = effir.load(Path(tmp) / "gru_lm")
        reloaded = loaded(*args, state=loaded.new_state(), sink=lambda label, value: None)
        if not np.allclose(reloaded, a1_results[0][0], rtol=1e-5, atol=1e-5):
            print("error: the exported program differs", file=sys.stderr)
            return 1
        print("  exported to a directory and reloaded with effir.load: same result")
    quiet = lambda label, value: None  # noqa: E731
    run_ms = _median_ms(lambda: compiled(*args, sink=quiet))
    interp_ms = _median_ms(lambda: effir.interpret(module, *args, sink=quiet))
    print()
    print("== report ==")
    print(
        f"  compiled: {compiled.report.nodes_before} IR nodes before, "
        f"{compiled.report.nodes_after} after the pipeline (kernels inlined as primitive "
        f"functions); compile {compile_seconds:.2f} s"
    )
    print(
        f"  run (t=6, b=4, median of 20): compiled {run_ms:.2f} ms, "
        f"interpreter {interp_ms:.2f} ms ({interp_ms / run_ms:.1f}x)"
    )
    nodes = sum(len(post_order(fn)) for fn in module.functions.values())
    print(f"  functions: {len(module.functions)}, IR nodes: {nodes}")
    print(
        f"  parse: {1e3 * (parsed - start):.1f} ms, check + print: {1e3 * (printed - parsed):.1f} ms"
        f", type inference: {1e3 * (checked - printed):.1f} ms"
    )
    print("  round trip: parse(astext(m)) == m and astext is a fixpoint: ok")
    print(f"  explicate + state-passing: {1e3 * (passed - start_sp):.1f} ms")
    return 0


def _median_ms(run, repeats: int = 20) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())
