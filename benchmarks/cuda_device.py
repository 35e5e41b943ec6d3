"""effir on a real GPU: the one prepared script that checks and times the
CUDA path, as far as a CPU machine cannot.

On a machine with an NVIDIA GPU (Python with numpy, JAX, PyTorch and CuPy;
TVM from the apache-tvm wheel, which the lent GPU machine gets in two
parts, /work/shared/device/README.md)::

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/cuda_device.py [--part PART ...]
        [--repeats 30] [--budget 450] [--out results.json]

Here, on a CPU, the same script checks itself before a GPU run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cuda_device.py --dry
        # builds every program for CUDA (nvcc: PTX and fatbin), runs nothing
    PYTHONPATH=$PWD .venv/bin/python benchmarks/cuda_device.py --target llvm --repeats 3
        # runs every part on the CPU: the checks' logic, the peers' setup

Parts (``--part``, repeatable; default all, in this order):

- ``checks``: the CUDA twins of the compiled-against-interpreter tests:
  every run-time check of tests/backends/tvm/test_run_time_checks.py (the
  interpreter's EvalError and message), recursion to its depth limit, the
  GRU (exported and reloaded too), the gradient of a loss over a
  recurrence, examples/gru_lm.effir (dropout, batch norm, a print) and
  examples/rnn_dropout_bn.effir (dropout inside the loop: a VM loop) with
  their keys and statistics, a while_loop.
- ``loops``: the rows of ``benchmarks/cuda_loop_checks.py`` when the file
  exists (the persistent-kernel loops' own checks): its function
  ``rows(target, dry)`` returns ``(name, "ok" | "FAIL", detail)`` rows.
- ``device``: calls that stay on the GPU: PyTorch, JAX and CuPy arrays in
  through DLPack without a copy, ``on_device`` results they take back
  without a copy, a consumer on another stream, the State kept on the GPU.
- ``precision``: TF32 and bfloat16 products on the tensor cores equal the
  CPU's emulation of them (precision.py [RULE COMPILE-PRECISION]).
- ``speed``: the GRU (benchmarks/gru_peers.py's cases) by effir against
  JAX ``jit(lax.scan)`` at its best layout (weights transposed once and
  closed over; the input projection per step and hoisted, the faster
  shown) and cuDNN through ``torch.nn.GRU``, all on arrays already on the
  GPU (effir: ``on_device`` with PyTorch tensors in), and again from numpy
  to numpy: the difference is the copies' cost, a column of its own. Each
  in float32 and in TF32 (JAX's default on this GPU, cuDNN's with
  ``allow_tf32``; effir's ``precision="tf32"``), labelled.
- ``matmul``: the tensor-core products of ``precision=`` against cuBLAS
  (``torch.matmul``) at the same precision: the measurement that says
  whether offloading products to cuBLAS would be faster.
- ``train``: one training step of the GRU language model (hidden 256,
  T=100, batch 32; ``effir.value_and_grad``, Adam) against JAX's
  ``jit(value_and_grad)`` on the same GPU, the parameters and optimiser
  state kept on the GPU between steps.
- ``cpp``: examples/cpp/run_model built, running the CUDA artifact of the
  GRU language model two steps as the interpreter does.
- ``fuzz``: the differential fuzzer's one-fragment programs compiled for
  the target against the interpreter (tests/backends/tvm/fuzz, a worker
  process per batch, so a crash is a row, not the end of the run), for
  what the budget leaves (150 s at most).

Every item runs on its own: a failure is a row with its traceback above
the table, and the script goes on. Times are medians of ``--repeats``
calls after warm-up, each call synchronised. Items not started within
``--budget`` seconds are skipped (a row says so): a lent machine runs the
whole script in under 8 minutes. The last lines are one table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

import gru_peers  # noqa: E402
from gru_loop import gru_text, numpy_gru  # noqa: E402
from gru_peers import weights  # noqa: E402
from timing import median_after_warmup  # noqa: E402

import effir  # noqa: E402

FUZZ_SECONDS = 150.0
"""The fuzz part's time at most (the last part: what the budget leaves)."""

PARTS = ("checks", "loops", "device", "precision", "speed", "matmul", "train", "cpp", "fuzz")

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

WHILE = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  let %r = cf.while_loop(fn (%s: (Tensor[(4), float32], int32)) { less(%s.1, 10) },
    fn (%s: (Tensor[(4), float32], int32)) {
      let %n = (%s.0 * 2f, add(%s.1, 1));
      (%n.0, %n)
    }, (%x, 0));
  %r
}
"""

PASS_THROUGH = """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 64), float32], %w: Tensor[(64, 64), float32])
    -> (Tensor[(64, 64), float32], Tensor[(64, 64), float32]) {
  (%x, tanh(nn.dense(%x, %w)))
}
"""


# ------------------------------------------------------------------ rows
class Dry(Exception):
    """Raised by an item in ``--dry`` mode once its programs are built."""


class Skip(Exception):
    """Raised by an item that cannot run here (a peer not installed)."""


@dataclass
class Row:
    part: str
    name: str
    status: str  # ok, FAIL, built (--dry), skip
    seconds: float = 0.0
    detail: str = ""
    times: dict[str, float] = field(default_factory=dict)  # ms: resident, numpy, copies


@dataclass
class Run:
    target: str
    dry: bool
    repeats: int
    budget: float
    began: float = field(default_factory=time.monotonic)
    rows: list[Row] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.target != "llvm"

    def built(self, what: str) -> None:
        """An item's programs are built: stop here in ``--dry`` mode."""
        if self.dry:
            raise Dry(what)

    def item(self, part: str, name: str) -> Callable[[Callable[[], Any]], None]:
        """Run the decorated check now and record its row."""

        def run(fn: Callable[[], Any]) -> None:
            if time.monotonic() - self.began > self.budget:
                self.rows.append(Row(part, name, "skip", 0.0, "over the time budget"))
                print(f"[skip] {part}: {name}: over the time budget", flush=True)
                return
            start = time.perf_counter()
            try:
                value = fn()
                row = Row(part, name, "ok")
                if isinstance(value, dict):
                    row.times = {k: v for k, v in value.items() if isinstance(v, float)}
                    row.detail = str(value.get("detail", ""))
                else:
                    row.detail = "" if value is None else str(value)
            except Dry as done:
                row = Row(part, name, "built", detail=str(done))
            except Skip as why:
                row = Row(part, name, "skip", detail=str(why))
            except Exception as err:  # the traceback above the table, the run goes on
                print(f"[FAIL] {part}: {name}\n{traceback.format_exc()}", flush=True)
                row = Row(part, name, "FAIL", detail=f"{type(err).__name__}: {err}"[:300])
            row.seconds = time.perf_counter() - start
            self.rows.append(row)
            print(f"[{row.status}] {part}: {name}: {row.detail} {row.times or ''}", flush=True)

        return run

    def compile(self, text_or_module: Any, **options: Any) -> Any:
        module = text_or_module
        if isinstance(module, str):
            module = effir.check(effir.parse(module))
        return effir.compile(module, target=self.target, **options)


def outcome(action: Callable[[], Any]) -> str:
    try:
        action()
    except Exception as err:  # the message is what is compared
        return f"{type(err).__name__}: {err}"
    return "no error"


def rng_arrays(seed: int, *shapes: tuple[int, ...], scale: float = 1.0) -> list[np.ndarray]:
    rs = np.random.default_rng(seed)
    return [(scale * rs.standard_normal(s)).astype(np.float32) for s in shapes]


def module_of(path: Path) -> Any:
    return effir.check(effir.parse(path.read_text(), source_name=path.name))


def gru_lm_args(t: int, b: int, seed: int = 3) -> tuple[Any, list[np.ndarray]]:
    """examples/gru_lm.effir and arguments for ``t`` steps of ``b`` tokens."""
    module = module_of(ROOT / "examples" / "gru_lm.effir")
    rs = np.random.default_rng(seed)
    args = []
    for param in module["main"].params:
        ty = param.type_annotation
        shape = tuple({"t": t, "b": b}.get(d, d) for d in ty.shape)
        if ty.dtype == "int32":
            args.append(rs.integers(0, 1000, shape).astype(np.int32))
        else:
            args.append((0.1 * rs.standard_normal(shape)).astype(np.float32))
    return module, args


def same_state(a: effir.State, b: effir.State) -> None:
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, tuple):
            for p, q in zip(x, y, strict=True):
                np.testing.assert_allclose(np.asarray(p), np.asarray(q), rtol=1e-4, atol=1e-5)
        else:
            assert x == y, (name, x, y)


def quiet(label: str, value: Any) -> None:
    """A sink that drops what programs print."""


# ---------------------------------------------------------------- checks
def part_checks(run: Run) -> None:
    from tests.backends.tvm.test_run_time_checks import CASES, RECURSION, source

    for name, (_, _, args_text, message) in CASES.items():

        @run.item("checks", f"run-time check {name}")
        def _(name: str = name, args_text: str = args_text, message: str = message) -> str:
            module = effir.check(effir.parse(source(name), source_name="checks.effir"))
            compiled = run.compile(module)
            run.built("built")
            args = eval(f"({args_text})", {"np": np})
            want = outcome(lambda: effir.interpret(module, *args))
            got = outcome(lambda: compiled(*args))
            assert got == want, (got, want)
            assert message in got, got
            return message

    @run.item("checks", "passing checks give the interpreter's values")
    def _() -> str:
        cases = (
            ("divide", (np.array([7, -7, 9, 5], "int32"), np.array([2, 2, -3, 1], "int32"))),
            ("take", (np.array([1, 2, 3, 4], "int32"), np.array([3, 0, 2], "int32"))),
        )
        built = [(run.compile(source(name)), name, args) for name, args in cases]
        run.built("divide, take")
        for compiled, name, args in built:
            module = effir.check(effir.parse(source(name)))
            assert np.array_equal(compiled(*args), effir.interpret(module, *args)), name
        return "divide, take"

    @run.item("checks", "recursion stops at its depth limit")
    def _() -> str:
        from effir.backends.tvm.relax import lower as relax_lower

        depth, relax_lower.MAX_DEPTH = relax_lower.MAX_DEPTH, 50
        try:
            compiled = run.compile(effir.check(effir.parse(RECURSION, source_name="r.effir")))
            run.built("built")
            assert compiled(np.array(40, np.int32)) == np.float32(20.0)
            got = outcome(lambda: compiled(np.array(60, np.int32)))
        finally:
            relax_lower.MAX_DEPTH = depth
        assert "recursion deeper than 50" in got, got
        return got.split(": ", 1)[-1][:80]

    @run.item("checks", "GRU H=64 T=20 B=4 equals numpy, exported and reloaded")
    def _() -> str:
        xs, h0 = rng_arrays(0, (20, 4, 64), (4, 64))
        w, u, bias = weights(64, 64)
        compiled = run.compile(gru_text(64, 64), dims={"t": 20, "b": 4})
        run.built("built")
        outs, h = compiled(xs, h0, w, u, bias)
        want_outs, want_h = numpy_gru(xs, h0, w, u, bias)
        np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
        with tempfile.TemporaryDirectory() as tmp:
            compiled.export(Path(tmp) / "gru")
            loaded_outs, loaded_h = effir.load(Path(tmp) / "gru")(xs, h0, w, u, bias)
        assert np.array_equal(loaded_h, h) and np.array_equal(loaded_outs, outs)
        return f"max |h - numpy| {float(np.max(np.abs(h - want_h))):.1e}"

    @run.item("checks", "value_and_grad of a foreach RNN equals the interpreter")
    def _() -> str:
        args = rng_arrays(0, (8, 2, 4), (2, 4), (4, 4))
        g = effir.value_and_grad(effir.check(effir.parse(RNN_LOSS)), wrt=["w"])
        compiled = run.compile(g)
        run.built("built")
        want = effir.interpret(g, *args, entry="main_grad")
        got = compiled(*args, entry="main_grad")
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-4, atol=1e-5)
        return f"max |dw - interpreter| {float(np.max(np.abs(got[1][0] - want[1][0]))):.1e}"

    @run.item("checks", "gru_lm.effir (dropout, batch norm, print) equals the interpreter")
    def _() -> str:
        module, args = gru_lm_args(6, 3)
        compiled = run.compile(module, dims={"t": 6, "b": 3})
        run.built("built")
        states = effir.State(module), effir.State(module)
        for _ in range(2):  # two calls: the key and statistics carried over
            want = effir.interpret(module, *args, state=states[0], sink=quiet)
            got = compiled(*args, state=states[1], sink=quiet)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        same_state(states[0], states[1])
        return "result, key and statistics equal after two calls"

    @run.item("checks", "rnn_dropout_bn.effir (dropout in the loop) equals the interpreter")
    def _() -> str:
        module = module_of(ROOT / "examples" / "rnn_dropout_bn.effir")
        shapes = [(7, 2, 8), (2, 16), (16, 8), (16, 16), (16,), (16,), (16,)]
        args = rng_arrays(1, *shapes, scale=0.25)
        compiled = run.compile(module, dims={"t": 7, "b": 2})
        run.built("built")
        states = effir.State(module), effir.State(module)
        for _ in range(2):
            want = effir.interpret(module, *args, state=states[0])
            got = compiled(*args, state=states[1])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        same_state(states[0], states[1])
        return "result, key and statistics equal after two calls"

    @run.item("checks", "a while_loop with per-step outputs equals the interpreter")
    def _() -> str:
        module = effir.check(effir.parse(WHILE))
        compiled = run.compile(module)
        run.built("built")
        x = np.arange(4, dtype=np.float32)
        got, want = compiled(x), effir.interpret(module, x)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1][0], want[1][0])
        return "10 steps"


# ----------------------------------------------------------------- loops
def part_loops(run: Run) -> None:
    """The persistent-kernel loops' own checks (benchmarks/cuda_loop_checks.py)."""
    path = ROOT / "benchmarks" / "cuda_loop_checks.py"
    if not path.exists():

        @run.item("loops", "benchmarks/cuda_loop_checks.py")
        def _() -> None:
            raise Skip("not in this tree")

        return
    found: list[tuple[str, str, str]] = []

    @run.item("loops", "benchmarks/cuda_loop_checks.py rows")
    def _() -> str:
        checks = importlib.import_module("cuda_loop_checks")
        rows = checks.rows(target=run.target, dry=run.dry)
        found.extend((str(n), str(s), str(d)) for n, s, d in rows)
        return f"{len(found)} rows"

    for name, status, detail in found:
        kind = "ok" if status == "ok" else "built" if status == "built" else "FAIL"
        run.rows.append(Row("loops", name, kind, 0.0, detail))


# ----------------------------------------------------------------- device
def part_device(run: Run) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    device = "cuda" if run.gpu else "cpu"

    def tensors(*arrays: np.ndarray) -> list[Any]:
        if torch is None:
            raise Skip("PyTorch is not installed")
        return [torch.from_numpy(a).to(device) for a in arrays]

    @run.item("device", "PyTorch tensors in and out through DLPack, without a copy")
    def _() -> str:
        compiled = run.compile(PASS_THROUGH)
        run.built("built")
        x, w = tensors(*rng_arrays(0, (64, 64), (64, 64)))
        same, product = compiled.on_device(x, w)
        assert isinstance(same, effir.DeviceArray) and isinstance(product, effir.DeviceArray)
        assert torch.from_dlpack(same).data_ptr() == x.data_ptr()  # in and out: x's memory
        want = np.tanh(x.cpu().numpy() @ w.cpu().numpy().T)
        np.testing.assert_allclose(torch.from_dlpack(product).cpu().numpy(), want, rtol=1e-5)
        again, _ = compiled.on_device(same, w)  # a DeviceArray is an argument as it is
        assert torch.from_dlpack(again).data_ptr() == x.data_ptr()
        return f"on {same.device}"

    @run.item("device", "a consumer on another stream gets the finished result")
    def _() -> str:
        if torch is None or not run.gpu:
            raise Skip("needs PyTorch on a GPU")
        compiled = run.compile(PASS_THROUGH)
        run.built("built")
        x, w = tensors(*rng_arrays(1, (64, 64), (64, 64)))
        side = torch.cuda.Stream()
        for _ in range(20):
            _, product = compiled.on_device(x, w)
            with torch.cuda.stream(side):
                got = torch.from_dlpack(product) * 1.0
            side.synchronize()
        want = np.tanh(x.cpu().numpy() @ w.cpu().numpy().T)
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5)
        return "20 calls, each read at once on a side stream"

    @run.item("device", "JAX and CuPy arrays in through DLPack, results back")
    def _() -> str:
        compiled = run.compile(PASS_THROUGH)
        run.built("built")
        x, w = rng_arrays(2, (64, 64), (64, 64))
        want = np.tanh(x @ w.T)
        done = []
        try:
            import jax
            import jax.numpy as jnp

            jx, jw = jax.device_put(x), jax.device_put(w)
            _, product = compiled.on_device(jx, jw)
            np.testing.assert_allclose(np.asarray(jnp.from_dlpack(product)), want, rtol=1e-5)
            done.append("JAX")
        except ImportError:
            pass
        if run.gpu:
            try:
                import cupy

                cx, cw = cupy.asarray(x), cupy.asarray(w)
                same, product = compiled.on_device(cx, cw)
                assert cupy.from_dlpack(same).data.ptr == cx.data.ptr
                np.testing.assert_allclose(cupy.from_dlpack(product).get(), want, rtol=1e-5)
                done.append("CuPy")
            except ImportError:
                pass
        if not done:
            raise Skip("neither JAX nor CuPy is installed")
        return ", ".join(done)

    @run.item("device", "the State stays on the GPU between calls")
    def _() -> str:
        module, args = gru_lm_args(6, 3)
        compiled = run.compile(module, dims={"t": 6, "b": 3})
        run.built("built")
        state, reference = effir.State(module), effir.State(module)
        on_device = tensors(*[a for a in args]) if torch is not None else args
        for _ in range(3):
            compiled.on_device(*on_device, state=state, sink=quiet)
            effir.interpret(module, *args, state=reference, sink=quiet)
        kept = sorted(state._on_device)  # before any host read
        if run.gpu:
            assert kept == ["bn", "rng"], kept
        same_state(state, reference)  # the host read copies them back, once
        assert state._on_device == {}
        return f"kept on the device: {', '.join(kept) or 'none (the CPU)'}"


# -------------------------------------------------------------- precision
def part_precision(run: Run) -> None:
    from effir.backends.tvm.precision import numpy_operand

    for precision in ("tf32", "bfloat16"):

        @run.item("precision", f"{precision}: products equal the CPU's emulation")
        def _(precision: str = precision) -> str:
            text = """#[version = "0.0.5"]
def @main(%x: Tensor[(128, 256), float32], %w: Tensor[(768, 256), float32],
          %b: Tensor[(768), float32]) { tanh(nn.dense(%x, %w) + %b) }
"""
            compiled = run.compile(text, precision=precision)
            spec = next(iter(compiled.specialisations.values()))
            on_tensor_cores = (not run.gpu) or "effir_mma" in spec.source("cuda")
            assert on_tensor_cores, "the product is not on the tensor cores"
            run.built("built, on the tensor cores")
            x, w, b = rng_arrays(4, (128, 256), (768, 256), (768,), scale=0.5)
            xr, wr = (numpy_operand(a, precision).astype(np.float64) for a in (x, w))
            want = np.tanh(xr @ wr.T + b)
            got = compiled(x, w, b)
            # float32 sums of 256 products: their order is the only difference
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)
            full = np.tanh(x.astype(np.float64) @ w.T.astype(np.float64) + b)
            emulated, rounded = np.max(np.abs(got - want)), np.max(np.abs(got - full))
            assert emulated < rounded / 20, (emulated, rounded)  # the rounding is there
            return f"max |got - emulation| {emulated:.1e}, |got - float32| {rounded:.1e}"

    @run.item("precision", "tf32 GRU on the tensor cores equals the CPU's tf32 GRU")
    def _() -> str:
        xs, h0 = rng_arrays(5, (20, 32, 64), (32, 64))
        w, u, bias = weights(64, 64)
        compiled = run.compile(gru_text(64, 64), precision="tf32", dims={"t": 20, "b": 32})
        run.built("built")
        on_cpu = effir.compile(effir.check(effir.parse(gru_text(64, 64))), precision="tf32")
        outs, h = compiled(xs, h0, w, u, bias)
        want_outs, want_h = on_cpu(xs, h0, w, u, bias)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5)
        return f"max |h - cpu| {float(np.max(np.abs(h - want_h))):.1e}"


# ------------------------------------------------------------------- fuzz
def part_fuzz(run: Run) -> None:
    @run.item("fuzz", "one-fragment programs against the interpreter")
    def _() -> str:
        if run.dry:
            raise Dry("not built in --dry mode (the fuzzer compiles as it runs)")
        left = max(30.0, min(FUZZ_SECONDS, run.budget - (time.monotonic() - run.began)))
        features = "base,int,keys_if,foreach_forms,foreach_symbolic,foreach_unknown,while_forms,adt,dynamic,errors"
        command = [
            sys.executable, "-m", "tests.backends.tvm.fuzz.harness", "--one-fragment", "1",
            "--features", features, "--target", run.target, "--timeout", "60", "--show", "1",
            "--batch", "10",
        ]  # fmt: skip
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        try:
            done = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=left
            )
        except subprocess.TimeoutExpired as late:  # the budget, not a failure: what ran
            out = late.stdout or b""
            text = out.decode(errors="replace") if isinstance(out, bytes) else out
            progress = re.findall(r"^\[\d+/\d+ in \d+ s\].*$", text, re.M)
            raise Skip(
                f"stopped at the budget ({left:.0f} s): {progress[-1:] or 'no batch'}"
            ) from None
        print(done.stdout[-6000:], done.stderr[-2000:], flush=True)
        table = re.search(r"^\s+(ok.*)\nall\s+(.*)$", done.stdout, re.M)
        summary = f"{table.group(1).split()} {table.group(2).split()}" if table else "no table"
        assert done.returncode == 0, summary
        return summary


# ------------------------------------------------------------------ speed
def part_speed(run: Run) -> None:
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
        speed_case(run, inputs, hidden, length, batch, jax, jnp, torch)


def synchronise(torch: Any, gpu: bool) -> None:
    if torch is not None and gpu:
        torch.cuda.synchronize()


def speed_case(
    run: Run, inputs: int, hidden: int, length: int, batch: int, jax: Any, jnp: Any, torch: Any
) -> None:
    case = f"GRU H={hidden} T={length} B={batch}"
    xs, h0 = rng_arrays(1, (length, batch, inputs), (batch, hidden))
    w, u, bias = weights(inputs, hidden)
    _, want_h = numpy_gru(xs, h0, w, u, bias)
    device = "cuda" if run.gpu else "cpu"
    repeats = run.repeats

    for precision, tolerance in (("float32", 1e-4), ("tf32", 2e-2)):

        @run.item("speed", f"{case}: effir {precision}")
        def _(precision: str = precision, tolerance: float = tolerance) -> dict[str, Any]:
            compiled = run.compile(
                gru_text(inputs, hidden), dims={"t": length, "b": batch}, precision=precision
            )
            run.built("built")
            _, h = compiled(xs, h0, w, u, bias)
            np.testing.assert_allclose(h, want_h, rtol=tolerance, atol=tolerance / 10)
            numpy_ms = 1e3 * median_after_warmup(lambda: compiled(xs, h0, w, u, bias), repeats)
            if torch is None:
                return {"numpy": numpy_ms}
            resident = [torch.from_numpy(a).to(device) for a in (xs, h0, w, u, bias)]

            def on_device() -> None:
                compiled.on_device(*resident)
                synchronise(torch, run.gpu)

            resident_ms = 1e3 * median_after_warmup(on_device, repeats)
            return {"resident": resident_ms, "numpy": numpy_ms, "copies": numpy_ms - resident_ms}

    if jax is not None:
        for highest in (False, True):
            label = "float32 (precision highest)" if highest else "default (TF32 on a GPU)"

            @run.item("speed", f"{case}: JAX jit(lax.scan), {label}")
            def _(highest: bool = highest) -> dict[str, Any]:
                if run.dry:
                    raise Skip("a peer: not run in --dry mode")
                gru_peers.jax, gru_peers.jnp = jax, jnp
                precision = (
                    jax.default_matmul_precision("highest") if highest else contextlib.nullcontext()
                )
                with precision:
                    variants = {k: gru_peers.jax_best(w, u, bias, hoisted=k) for k in (False, True)}
                    dx, dh = jax.device_put(xs), jax.device_put(h0)
                    times = {}
                    for hoisted, fn in variants.items():
                        h = np.asarray(fn(dx, dh)[1])
                        np.testing.assert_allclose(h, want_h, rtol=2e-2, atol=2e-3)
                        times[hoisted] = median_after_warmup(
                            lambda fn=fn: jax.block_until_ready(fn(dx, dh)), repeats
                        )
                    hoisted = min(times, key=times.get)
                    best = variants[hoisted]
                    numpy_ms = 1e3 * median_after_warmup(
                        lambda: [np.asarray(a) for a in best(xs, h0)], repeats
                    )
                resident_ms = 1e3 * times[hoisted]
                return {
                    "resident": resident_ms,
                    "numpy": numpy_ms,
                    "copies": numpy_ms - resident_ms,
                    "detail": "input projection " + ("hoisted" if hoisted else "per step"),
                }

    if torch is not None:
        for tf32 in (False, True):

            @run.item("speed", f"{case}: torch.nn.GRU (cuDNN on a GPU), tf32={tf32}")
            def _(tf32: bool = tf32) -> dict[str, Any]:
                if run.dry:
                    raise Skip("a peer: not run in --dry mode")
                allowed = torch.backends.cudnn.allow_tf32
                torch.backends.cudnn.allow_tf32 = tf32
                try:
                    return torch_gru_times(torch, device, xs, h0, w, u, bias, want_h, repeats, run)
                finally:
                    torch.backends.cudnn.allow_tf32 = allowed


def torch_gru_times(
    torch: Any, device: str, xs: Any, h0: Any, w: Any, u: Any, bias: Any, want_h: Any,
    repeats: int, run: Run,
) -> dict[str, Any]:  # fmt: skip
    gru = torch.nn.GRU(xs.shape[2], h0.shape[1]).to(device)

    def rzn(a: np.ndarray) -> np.ndarray:  # nn.GRU's gates are (r, z, n), effir's (z, r, n)
        z, r, n = np.split(a, 3, axis=0)
        return np.concatenate([r, z, n], axis=0)

    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.from_numpy(rzn(w)))
        gru.weight_hh_l0.copy_(torch.from_numpy(rzn(u)))
        gru.bias_ih_l0.copy_(torch.from_numpy(rzn(bias)))
        gru.bias_hh_l0.zero_()
        dx, dh = torch.from_numpy(xs).to(device), torch.from_numpy(h0).to(device)[None]
        h = gru(dx, dh)[1][0].cpu().numpy()
        np.testing.assert_allclose(h, want_h, rtol=2e-2, atol=2e-3)

        def resident() -> None:
            gru(dx, dh)
            synchronise(torch, run.gpu)

        def from_numpy() -> None:
            outs, h = gru(torch.from_numpy(xs).to(device), torch.from_numpy(h0).to(device)[None])
            outs.cpu().numpy(), h.cpu().numpy()

        resident_ms = 1e3 * median_after_warmup(resident, repeats)
        numpy_ms = 1e3 * median_after_warmup(from_numpy, repeats)
    return {"resident": resident_ms, "numpy": numpy_ms, "copies": numpy_ms - resident_ms}


# ----------------------------------------------------------------- matmul
def part_matmul(run: Run) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    for m, n, k in ((3200, 768, 256), (32, 768, 256), (2048, 2048, 2048)):
        for precision in ("float32", "tf32", "bfloat16"):
            matmul_case(run, torch, (m, n, k), precision)


def matmul_case(run: Run, torch: Any, shape: tuple[int, int, int], precision: str) -> None:
    """``x @ w.T`` of ``shape`` (m, n, k) by effir at ``precision`` and by
    cuBLAS (``torch.matmul``) at the same precision, on device arrays."""
    m, n, k = shape
    device = "cuda" if run.gpu else "cpu"
    flops = 2.0 * m * n * k
    text = (
        '#[version = "0.0.5"]\n'
        f"def @main(%x: Tensor[({m}, {k}), float32], %w: Tensor[({n}, {k}), float32]) "
        "{ nn.dense(%x, %w) }\n"
    )
    x, w = rng_arrays(6, (m, k), (n, k))
    name = f"({m} x {k}) (x) ({n} x {k})^T"

    @run.item("matmul", f"{name}: effir {precision}")
    def _() -> dict[str, Any]:
        compiled = run.compile(text, precision=precision)
        run.built("built")
        if torch is None:
            raise Skip("PyTorch is not installed (the arrays on the device)")
        dx, dw = (torch.from_numpy(a).to(device) for a in (x, w))

        def call() -> None:
            compiled.on_device(dx, dw)
            synchronise(torch, run.gpu)

        ms = 1e3 * median_after_warmup(call, run.repeats)
        return {"resident": ms, "detail": f"{flops / ms / 1e9:.2f} TFLOP/s"}

    @run.item("matmul", f"{name}: cuBLAS {precision}")
    def _() -> dict[str, Any]:
        if run.dry:
            raise Skip("a peer: not run in --dry mode")
        if torch is None:
            raise Skip("PyTorch is not installed")
        dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
        dx, dw = (torch.from_numpy(a).to(device).to(dtype) for a in (x, w))
        allowed = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        try:

            def call() -> None:
                dx @ dw.T
                synchronise(torch, run.gpu)

            ms = 1e3 * median_after_warmup(call, run.repeats)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed
        return {"resident": ms, "detail": f"{flops / ms / 1e9:.2f} TFLOP/s"}


# ------------------------------------------------------------------ train
def part_train(run: Run) -> None:
    import train_step
    from gru_lm_training import Config, build, init_params

    from effir.optim import Adam

    cfg = Config(vocab=60, embed=256, hidden=256, seq_len=100, batch=32, rate=0.1)
    tokens_per_step = cfg.seq_len * cfg.batch

    @run.item("train", "GRU LM step (hidden 256, T=100, B=32): effir value_and_grad")
    def _() -> dict[str, Any]:
        optimizer = Adam(lr=train_step.LR, b1=train_step.B1, b2=train_step.B2, eps=train_step.EPS)
        module = build(cfg, optimizer, grad="effir")
        start = time.perf_counter()
        program = run.compile(module)
        tokens, targets = train_step.batch(cfg)
        params = init_params(cfg)
        opt = optimizer.init(params)
        state = effir.State(module)
        if run.dry:
            program.specialisation("train_step", {})
            run.built(f"built in {time.perf_counter() - start:.0f} s")
        loss, params, opt = program.on_device(
            tokens, targets, *params, *opt, entry="train_step", state=state
        )
        first = float(np.asarray(loss))
        carry = [params, opt]

        def step() -> None:
            loss, p, o = program.on_device(
                tokens, targets, *carry[0], *carry[1], entry="train_step", state=state
            )
            np.asarray(loss)  # the host reads the loss each step, as a training loop does
            carry[:] = [p, o]

        ms = 1e3 * median_after_warmup(step, max(5, run.repeats // 3), warmup=2)
        return {
            "resident": ms,
            "detail": f"first loss {first:.5f}, {tokens_per_step / ms * 1e3:,.0f} tokens/s",
        }

    @run.item("train", "GRU LM step (hidden 256, T=100, B=32): JAX jit(value_and_grad)")
    def _() -> dict[str, Any]:
        if run.dry:
            raise Skip("a peer: not run in --dry mode")
        made = train_step.jax_step(cfg)
        if made is None:
            raise Skip("JAX is not installed")
        step, first, _ = made
        ms = 1e3 * median_after_warmup(step, max(5, run.repeats // 3), warmup=2)
        return {
            "resident": ms,
            "detail": f"first loss {first:.5f}, {tokens_per_step / ms * 1e3:,.0f} tokens/s "
            "(default matmul precision)",
        }


# -------------------------------------------------------------------- cpp
def part_cpp(run: Run) -> None:
    @run.item("cpp", "examples/cpp/run_model runs the GRU LM artifact as the interpreter")
    def _() -> str:
        if shutil.which("g++") is None and shutil.which("c++") is None:
            raise Skip("no C++ compiler")
        module, args = gru_lm_args(4, 2)
        compiled = run.compile(module, dims={"t": 4, "b": 2})
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            build = root / "cpp"
            build.mkdir()
            for name in ("run_model.cc", "Makefile"):
                shutil.copy(ROOT / "examples" / "cpp" / name, build)
            made = subprocess.run(
                ["make", "-s", f"PYTHON={sys.executable}"],
                cwd=build,
                capture_output=True,
                text=True,
            )
            assert made.returncode == 0, made.stderr[-2000:]
            compiled.export(root / "model")
            inputs = []
            for i, a in enumerate(args):
                np.save(root / f"in{i}.npy", a)
                inputs.append(str(root / f"in{i}.npy"))
            out = root / "out"
            out.mkdir()
            command = [str(build / "run_model"), str(root / "model"), *inputs, "--steps", "2"]
            done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
            if run.dry:
                assert "built for cuda, and" in done.stderr, done.stderr
                raise Dry(f"runner built, artifact exported; here: {done.stderr.strip()[:90]}")
            assert done.returncode == 0, done.stderr[-2000:]
            state = effir.State(module)
            for _ in range(2):
                want = effir.interpret(module, *args, state=state, sink=quiet)
            np.testing.assert_allclose(np.load(out / "result_0.npy"), want, rtol=1e-4, atol=1e-4)
            assert np.array_equal(np.load(out / "state_rng_0.npy"), state["rng"].data)
        return "two steps: result and key equal"


# ------------------------------------------------------------------ table
def table(rows: list[Row]) -> str:
    header = ["part", "item", "result", "s", "resident ms", "numpy ms", "copies ms", "detail"]
    body = []
    for r in rows:
        ms = [f"{r.times[k]:.3f}" if k in r.times else "" for k in ("resident", "numpy", "copies")]
        body.append([r.part, r.name, r.status, f"{r.seconds:.1f}", *ms, r.detail[:110]])
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for b in body:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) + " |")
    return "\n".join(lines)


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
    parser.add_argument("--part", action="append", choices=("all", *PARTS), default=[])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--budget", type=float, default=450.0, help="seconds; later items skip")
    parser.add_argument("--target", default="cuda", choices=("cuda", "llvm"))
    parser.add_argument("--dry", action="store_true", help="build for CUDA, run nothing")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--raw-errors", action="store_true", help="print TVM's own error texts")
    args = parser.parse_args()
    if args.dry and args.target != "cuda":
        parser.error("--dry builds for cuda: leave --target out")
    if args.raw_errors:
        show_raw_errors()
    import tvm

    gpu = bool(tvm.cuda(0).exist)
    name = str(tvm.cuda(0).device_name) if gpu else None
    print(f"target {args.target}; GPU: {name or 'none'}; dry: {args.dry}", flush=True)
    if args.target == "cuda" and not gpu and not args.dry:
        parser.error("no GPU here: run with --dry (build only) or --target llvm")
    run = Run(args.target, args.dry, args.repeats, args.budget)
    parts = [p for p in PARTS if not args.part or "all" in args.part or p in args.part]
    for part in parts:
        globals()[f"part_{part}"](run)
    print()
    print(table(run.rows), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps([r.__dict__ for r in run.rows], indent=1, default=str))
    failed = [f"{r.part}: {r.name}" for r in run.rows if r.status == "FAIL"]
    print(f"{len(failed)} failed: {failed}" if failed else "all ok", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
