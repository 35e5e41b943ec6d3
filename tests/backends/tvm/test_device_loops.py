"""Loops the VM drives on a GPU wait for the GPU only where the program
needs a value from it (relax/loops.py [RULE LOOP-HOSTCOUNT]).

A condition the Relax VM reads from a tensor in a GPU's memory is copied to
the host, which waits for every kernel launched before it. With the step
count as a tensor, every step of a VM loop built for CUDA waited for the
GPU (``count < limit``, and in a ``while_loop`` whether its output buffer
was full); the levels now keep the count and its limit in the VM's shape
arithmetic, on the host. These tests read the executable TVM
built for CUDA (no GPU needed): in a ``foreach``'s levels no condition
comes from a tensor, in a ``while_loop``'s only its own condition does. A
whole loop of symbolic length (the GRU's: one persistent kernel per chunk
of steps, relax/loops.py [RULE LOOP-CHUNK]) chooses its call and each chunk's
length on the host too.
Running them on a GPU is benchmarks/cuda_device.py's ``--part checks``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import effir

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gru_loop import gru_text  # noqa: E402

H = '#[version = "0.0.5"]\n'
WHILE = H + (
    "def @main(%x: Tensor[(4), float32]) {\n"
    "  let %r = cf.while_loop(fn (%s: (Tensor[(4), float32], int32)) { less(%s.1, 10) },\n"
    "    fn (%s: (Tensor[(4), float32], int32)) {\n"
    "      let %n = (%s.0 * 2f, add(%s.1, 1));\n"
    "      (%n.0, %n)\n"
    "    }, (%x, 0));\n"
    "  %r.1.0\n"
    "}\n"
)


def conditions(executable_text: str, function: str) -> tuple[int, int]:
    """How many of ``function``'s branch conditions the VM computes on the
    host (its shape arithmetic) and how many it reads from tensors."""
    start = executable_text.index(f"@{function}:")
    body = executable_text[start : executable_text.index("\n\n", start)]
    defined: dict[str, str] = {}
    host = device = 0
    for line in body.splitlines():
        call = re.match(r"\s*call\s+(\S+)\s+in:\s*(.*?)\s+dst:\s*(%\d+)", line)
        if call is None:
            continue
        callee, inputs, dst = call.groups()
        defined[dst] = callee
        if callee == "vm.builtin.read_if_cond":
            source = defined.get(inputs.split(",")[0].strip(), "")
            if source.startswith("compute_symbolic_expr"):
                host += 1
            else:
                device += 1
    return host, device


def levels(executable_text: str) -> list[str]:
    return re.findall(r"^@(\w+_level\d+):", executable_text, re.M)


@pytest.fixture(scope="module")
def gru_on_cuda() -> str:
    module = effir.check(effir.parse(gru_text(16, 16)))
    spec = effir.compile(module, target="cuda").specialisation("main", {"b": 4, "t": 6})
    return str(spec.executable.as_text())


def test_a_foreach_on_a_gpu_reads_no_condition_from_the_gpu(gru_on_cuda: str) -> None:
    names = levels(gru_on_cuda)
    assert len(names) == 6  # level 0 and five levels above it [RULE LOOP-LEVELS]
    assert all(name.startswith("chunks") for name in names)  # the chunks' loop
    for name in names:
        host, device = conditions(gru_on_cuda, name)
        # level 0: whether to go on, and whether the chunk has steps for
        # the prologue; the levels above: whether to go on
        expected = (2, 0) if name.endswith("level0") else (1, 0)
        assert (host, device) == expected, (name, host, device)
    # which of the bounded calls or the chunks' loop runs: on the host too
    host, device = conditions(gru_on_cuda, "main")
    assert host >= 2 and device == 0, (host, device)


def test_a_while_loop_on_a_gpu_reads_only_its_condition_from_the_gpu() -> None:
    module = effir.check(effir.parse(WHILE))
    spec = next(iter(effir.compile(module, target="cuda").specialisations.values()))
    text = str(spec.executable.as_text())
    names = levels(text)
    assert names
    for name in names:
        host, device = conditions(text, name)
        # level 0: whether to go on and whether its output buffer is full on
        # the host, the loop's own condition on the GPU
        expected = (2, 1) if name.endswith("level0") else (1, 0)
        assert (host, device) == expected, (name, host, device)


NESTED = H + (
    "def @main(%x: Tensor[(4), float32], %xs: Tensor[(t, 4), float32], %k: int32) {\n"
    "  let %r = cf.while_loop(fn (%s: (Tensor[(4), float32], int32)) { less(%s.1, %k) },\n"
    "    fn (%s: (Tensor[(4), float32], int32)) {\n"
    "      let %inner = cf.foreach(fn (%row: Tensor[(4), float32], %h: Tensor[(4), float32]) {\n"
    "        let %n = tanh(%row + %h);\n"
    "        (%n, %n)\n"
    "      }, %xs, %s.0);\n"
    "      (%inner.1, (%inner.1, add(%s.1, 1)))\n"
    "    }, (%x, 0));\n"
    "  %r\n"
    "}\n"
)


def test_a_loop_in_a_while_loops_body_leaves_it_the_hosts_count() -> None:
    module = effir.check(effir.parse(NESTED))
    spec = effir.compile(module, target="cuda").specialisation("main", {"t": 3})
    text = str(spec.executable.as_text())
    assert any(n.startswith("chunks") for n in levels(text))  # a loop over chunks inside
    # the outer loop's output buffer is asked after the inner loop is
    # lowered, the inner loop's call chosen on the host: only the outer
    # loop's own condition is read from the GPU
    (outer,) = [n for n in levels(text) if n.startswith("while") and n.endswith("level0")]
    assert conditions(text, outer)[1] == 1
    for name in levels(text):
        if name.startswith("chunks"):
            assert conditions(text, name)[1] == 0, name


def test_a_loop_in_a_while_loops_body_equals_the_interpreter() -> None:
    import numpy as np

    module = effir.check(effir.parse(NESTED))
    x = np.linspace(-1, 1, 4).astype(np.float32)
    xs = np.linspace(-2, 2, 12).astype(np.float32).reshape(3, 4)
    k = np.int32(5)
    got, want = effir.compile(module)(x, xs, k), effir.interpret(module, x, xs, k)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-5, atol=1e-6)
    assert got[1][1] == want[1][1] == 5


BRANCHING = H + (  # control flow in the body: a VM loop, not a whole one
    "def @main(%xs: Tensor[(t, 4), float32], %h0: Tensor[(4), float32]) {\n"
    "  cf.foreach(fn (%row: Tensor[(4), float32], %h: Tensor[(4), float32]) {\n"
    "    let %n = if (less(sum(%row), 0f)) { tanh(%row + %h) } else { %row * %h };\n"
    "    (%n, %n)\n"
    "  }, %xs, %h0)\n"
    "}\n"
)


def test_relax_cuda_graphs_would_share_a_loops_storage_across_its_steps() -> None:
    """Why effir does not run Relax's RewriteCUDAGraph (relax/pipeline.py
    [RULE PIPELINE-NOGRAPH]): on a VM loop it lifts the step's storage, the new state
    passed to the next step included, into one allocation for the VM's life
    inside the level function that calls itself. When TVM's pass stops
    doing that, this test fails and the reason is gone."""
    import tvm
    from tvm.relax import transform

    from effir.backends.tvm.relax.pipeline import relax_pipeline
    from effir.backends.tvm.target import building

    module = effir.check(effir.parse(BRANCHING))
    compiled = effir.compile(module, target="cuda")
    spec = compiled.specialisation("main", {"t": 6})
    assert "cuda_graph" not in str(spec.executable.as_text())  # effir's build: none
    planned = spec.program.module
    with building(compiled.target):
        config = {**tvm.transform.PassContext.current().config}
        config["relax.backend.use_cuda_graph"] = True
        with tvm.transform.PassContext(opt_level=3, config=config):
            for p in relax_pipeline(compiled.target).passes:
                planned = p(planned)
                if p.info.name == "StaticPlanBlockMemory":
                    break
            graphed = transform.RewriteCUDAGraph()(planned)
    level0 = graphed["foreach_0_level0"].script()
    assert "vm.builtin.cuda_graph.get_cached_alloc" in level0
    assert re.search(r"= foreach_0_level0\(", level0)  # ... in a function that calls itself
