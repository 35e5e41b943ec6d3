"""effir on a real GPU: the CUDA build run, checked and timed.

Run on a machine with an NVIDIA GPU (the CPU machines that run the suite
have none: there the CUDA build is only compiled to PTX, see
tests/backends/tvm/test_run_time_checks.py):

    python benchmarks/cuda_device.py [--repeats N] [--out results.json]

Part 1, correctness (issue 12's CUDA checks, which no CPU machine can run):
every run-time check of tests/backends/tvm/test_run_time_checks.py compiled
with ``target="cuda"`` raises the interpreter's EvalError (same message),
the passing cases give the interpreter's values, the recursion-depth check
fires, and the GRU of benchmarks/gru_loop.py and the effectful GRU language
model (examples/gru_lm.effir: dropout, batch norm, a printed value) and
the gradient (``effir.value_and_grad``) of a loss over a recurrence equal
the interpreter.

Part 2, speed (issue 18's GPU row): the GRU (weights ``(3H, I)`` as
``nn.dense`` takes them, batch symbolic) compiled for CUDA by effir against
the same GRU on the same GPU in JAX (``jit(lax.scan)``, weights
pre-transposed and closed over: the layout XLA likes) and PyTorch
(``nn.GRU``, the cuDNN kernel, and an eager hand-written loop). effir's
compiled module takes and returns numpy arrays, so its times include the
host-device copies of the inputs and outputs; the peers are timed twice:
on device-resident arrays (their best) and from numpy to numpy (what
effir's call does). Times: median of ``--repeats`` calls after warm-up,
each call synchronised.

Every item is run on its own and reported (a failure is printed with its
traceback, and the script goes on), so one run on a lent machine gives
everything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gru_peers  # noqa: E402
from gru_loop import gru_text, numpy_gru  # noqa: E402
from gru_peers import weights  # noqa: E402
from timing import median_after_warmup  # noqa: E402

import effir  # noqa: E402

RESULTS: dict[str, Any] = {}

# A loss over a recurrence: its gradient program has a forward and a reverse loop.
RNN_LOSS = """#[version = "0.0.5"]
def @main(%xs: Tensor[(8, 2, 4), float32], %h0: Tensor[(2, 4), float32],
          %w: Tensor[(4, 4), float32]) -> float32 {
  let %scan = cf.foreach(fn (%x: Tensor[(2, 4), float32], %h: Tensor[(2, 4), float32]) {
    let %n = tanh(nn.dense(%x, %w) + %h);
    (%n, %n)
  }, %xs, %h0);
  sum(%scan.1)
}
"""


def item(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Run the decorated check now; record its value or its failure."""

    def run(fn: Callable[[], Any]) -> Callable[[], Any]:
        start = time.perf_counter()
        try:
            value = fn()
            RESULTS[name] = {"ok": True, "value": value}
            print(f"[ok]   {name}: {value}", flush=True)
        except Exception:
            text = traceback.format_exc()
            RESULTS[name] = {"ok": False, "error": text}
            print(f"[FAIL] {name}:\n{text}", flush=True)
        RESULTS[name]["seconds"] = round(time.perf_counter() - start, 2)
        return fn

    return run


def outcome(action: Callable[[], Any]) -> str:
    try:
        action()
    except Exception as err:  # the message is what is compared
        return f"{type(err).__name__}: {err}"
    return "no error"


# ------------------------------------------------------------ correctness
def check_case(name: str, text: str, args_text: str, message: str) -> None:
    @item(f"check {name}")
    def _() -> str:
        module = effir.check(effir.parse(text, source_name="checks.effir"))
        args = eval(f"({args_text})", {"np": np})
        compiled = effir.compile(module, target="cuda")
        want = outcome(lambda: effir.interpret(module, *args))
        got = outcome(lambda: compiled(*args))
        assert got == want, (got, want)
        assert message in got, got
        return got


def check_cases() -> None:
    from tests.backends.tvm.test_run_time_checks import CASES, RECURSION, source

    for name, (_, _, args_text, message) in CASES.items():
        check_case(name, source(name), args_text, message)

    @item("checks pass: values equal the interpreter")
    def _() -> str:
        for name, args in (
            ("divide", (np.array([7, -7, 9, 5], "int32"), np.array([2, 2, -3, 1], "int32"))),
            ("take", (np.array([1, 2, 3, 4], "int32"), np.array([3, 0, 2], "int32"))),
        ):
            module = effir.check(effir.parse(source(name)))
            got = effir.compile(module, target="cuda")(*args)
            assert np.array_equal(got, effir.interpret(module, *args)), name
        return "divide, take"

    @item("recursion depth on cuda")
    def _() -> str:
        from effir.backends.tvm.relax import lower as relax_lower

        depth, relax_lower.MAX_DEPTH = relax_lower.MAX_DEPTH, 50
        try:
            module = effir.check(effir.parse(RECURSION, source_name="r.effir"))
            compiled = effir.compile(module, target="cuda")
            assert compiled(np.array(40, np.int32)) == np.float32(20.0)
            got = outcome(lambda: compiled(np.array(60, np.int32)))
        finally:
            relax_lower.MAX_DEPTH = depth
        assert "recursion deeper than 50" in got, got
        return got


def check_models() -> None:
    @item("gru (H=64, T=20, B=4) on cuda equals numpy, exported and loaded too")
    def _() -> float:
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((20, 4, 64), dtype=np.float32)
        h0 = rng.standard_normal((4, 64), dtype=np.float32)
        w, u, bias = weights(64, 64)
        compiled = effir.compile(effir.check(effir.parse(gru_text(64, 64))), target="cuda")
        outs, h = compiled(xs, h0, w, u, bias)
        want_outs, want_h = numpy_gru(xs, h0, w, u, bias)
        np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
        with tempfile.TemporaryDirectory() as tmp:  # exported, reloaded, run
            compiled.export(Path(tmp) / "gru")
            loaded_outs, loaded_h = effir.load(Path(tmp) / "gru")(xs, h0, w, u, bias)
        assert np.array_equal(loaded_h, h) and np.array_equal(loaded_outs, outs)
        return float(np.max(np.abs(h - want_h)))

    @item("value_and_grad of a foreach RNN on cuda equals the interpreter")
    def _() -> float:
        rng = np.random.default_rng(0)
        args = (
            rng.standard_normal((8, 2, 4), dtype=np.float32),
            rng.standard_normal((2, 4), dtype=np.float32),
            rng.standard_normal((4, 4), dtype=np.float32),
        )
        g = effir.value_and_grad(effir.check(effir.parse(RNN_LOSS)), wrt=["w"])
        want = effir.interpret(g, *args, entry="main_grad")
        got = effir.compile(g, target="cuda")(*args, entry="main_grad")
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-4, atol=1e-5)
        return float(np.max(np.abs(got[1][0] - want[1][0])))

    @item("gru_lm.effir (dropout, batch norm, print) on cuda equals the interpreter")
    def _() -> str:
        rs = np.random.default_rng(3)

        def normal(*shape: int, scale: float = 0.1) -> np.ndarray:
            return (rs.standard_normal(shape) * scale).astype(np.float32)

        args = (
            rs.integers(0, 1000, (6, 3)).astype(np.int32),
            normal(1000, 32), normal(192, 32), normal(192, 64), normal(192),
            1 + normal(64), normal(64), normal(1000, 64), normal(3, 64),
        )  # fmt: skip
        module = effir.check(effir.parse((ROOT / "examples" / "gru_lm.effir").read_text()))
        interpreted_state, compiled_state = effir.State(module), effir.State(module)
        want = effir.interpret(module, *args, state=interpreted_state)
        got = effir.compile(module, target="cuda")(*args, state=compiled_state)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert interpreted_state["rng"] == compiled_state["rng"]
        for a, b in zip(interpreted_state["bn"], compiled_state["bn"], strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
        return "result, key and statistics equal"


# ------------------------------------------------------------------ speed
def speed(repeats: int) -> None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = jnp = None
    try:
        import torch
    except ImportError:
        torch = None

    for inputs, hidden, length, batch in (
        (256, 256, 100, 1),
        (256, 256, 100, 32),
        (32, 32, 1000, 1),
    ):
        speed_case(inputs, hidden, length, batch, repeats, jax, jnp, torch)


def speed_case(
    inputs: int, hidden: int, length: int, batch: int, repeats: int, jax: Any, jnp: Any, torch: Any
) -> None:
    case = f"gru H={hidden} T={length} B={batch}"
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((length, batch, inputs), dtype=np.float32)
    h0 = rng.standard_normal((batch, hidden), dtype=np.float32)
    w, u, bias = weights(inputs, hidden)
    _, want_h = numpy_gru(xs, h0, w, u, bias)

    @item(f"{case}: effir cuda (numpy in/out) ms")
    def _() -> float:
        compiled = effir.compile(effir.check(effir.parse(gru_text(inputs, hidden))), target="cuda")
        _, h = compiled(xs, h0, w, u, bias)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
        return 1e3 * median_after_warmup(lambda: compiled(xs, h0, w, u, bias), repeats)

    if jax is not None:

        @item(f"{case}: jax jit(scan) gpu, weights pre-transposed, closed over ms")
        def _() -> dict[str, float]:
            gru_peers.jax, gru_peers.jnp = jax, jnp  # gru_peers' JAX at its best, on the GPU
            run = gru_peers.jax_best(w, u, bias, hoisted=False)
            dx, dh = jax.device_put(xs), jax.device_put(h0)
            h = np.asarray(run(dx, dh)[1])
            # JAX multiplies in TF32 on this GPU by default (its fast setting)
            np.testing.assert_allclose(h, want_h, rtol=1e-2, atol=2e-3)
            resident = median_after_warmup(lambda: jax.block_until_ready(run(dx, dh)), repeats)
            from_numpy = median_after_warmup(lambda: [np.asarray(a) for a in run(xs, h0)], repeats)
            return {"resident": 1e3 * resident, "numpy": 1e3 * from_numpy}

    if torch is not None and torch.cuda.is_available():

        @item(f"{case}: torch nn.GRU cuda (cuDNN) ms")
        def _() -> dict[str, float]:
            gru = torch.nn.GRU(inputs, hidden).cuda()

            # nn.GRU's gates are (r, z, n); effir's split is (z, r, n):
            # reorder the rows so both compute the same function.
            def rzn(a: np.ndarray) -> np.ndarray:
                z, r, n = np.split(a, 3, axis=0)
                return np.concatenate([r, z, n], axis=0)

            with torch.no_grad():
                gru.weight_ih_l0.copy_(torch.from_numpy(rzn(w)))
                gru.weight_hh_l0.copy_(torch.from_numpy(rzn(u)))
                gru.bias_ih_l0.copy_(torch.from_numpy(rzn(bias)))
                gru.bias_hh_l0.zero_()
                dx = torch.from_numpy(xs).cuda()
                dh = torch.from_numpy(h0).cuda()[None]

                def resident() -> None:
                    gru(dx, dh)
                    torch.cuda.synchronize()

                def from_numpy() -> None:
                    outs, h = gru(torch.from_numpy(xs).cuda(), torch.from_numpy(h0).cuda()[None])
                    outs.cpu().numpy(), h.cpu().numpy()

                return {
                    "resident": 1e3 * median_after_warmup(resident, repeats),
                    "numpy": 1e3 * median_after_warmup(from_numpy, repeats),
                }

        @item(f"{case}: torch eager hand loop cuda ms")
        def _() -> float:
            with torch.no_grad():
                gru_peers.torch = torch  # gru_peers' eager loop, on GPU tensors
                on_gpu = [torch.from_numpy(a).cuda() for a in (xs, h0, w, u, bias)]

                def loop() -> None:
                    gru_peers.torch_gru(*on_gpu)
                    torch.cuda.synchronize()

                return 1e3 * median_after_warmup(loop, repeats)


def show_raw_errors() -> None:
    """Print the text of each failure inside compiled code before effir
    turns it into its EvalError (what TVM and CUDA said, in full)."""
    from effir.backends.tvm.driver import compile as compile_module

    wrapped = compile_module.run_time_error

    def loud(err: BaseException, entry: str) -> Any:
        print(f"[raw error] {type(err).__name__}: {err!r}"[:4000], flush=True)
        return wrapped(err, entry)

    compile_module.run_time_error = loud


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--part", choices=("all", "checks", "speed"), default="all")
    parser.add_argument("--raw-errors", action="store_true", help="print TVM's own error texts")
    args = parser.parse_args()
    if args.raw_errors:
        show_raw_errors()
    import tvm

    RESULTS["device"] = {
        "cuda": bool(tvm.cuda(0).exist),
        "name": str(tvm.cuda(0).device_name) if tvm.cuda(0).exist else None,
    }
    print(RESULTS["device"], flush=True)
    if args.part in ("all", "checks"):
        check_cases()
        check_models()
    if args.part in ("all", "speed"):
        speed(args.repeats)
    if args.out is not None:
        args.out.write_text(json.dumps(RESULTS, indent=1, default=str))
    failed = [name for name, r in RESULTS.items() if isinstance(r, dict) and r.get("ok") is False]
    print(f"{len(failed)} failed: {failed}" if failed else "all ok", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
