"""The process's kernels (effir/backends/tvm/relax/apart.py): a kernel is
built once per process, whichever build needs it again (the same program
compiled twice, another entry, another shape); the kernels of a build are
compiled in groups on several threads, with the same results as on one; a
failed group build is a located error, and a later build tries again; a
new build is written to the build cache on a thread of its own, and an
export right after it copies what was written, without TVM's warnings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.backends.tvm.relax import apart
from tests.support.isolated import run_isolated

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 8), float32]) { tanh(nn.dense(%x, %w)) * 2f }
def @other(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 8), float32]) {
  (tanh(nn.dense(%x, %w)) * 2f, sum(%w))
}
"""


def arguments() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 8), np.float32)


def test_a_kernel_is_built_once_per_process() -> None:
    module = effir.check(effir.parse(PROGRAM))
    first = effir.compile(module)
    first(*arguments(), entry="other")  # @other's dense kernel is @main's
    again = effir.compile(module)  # the same program compiled again
    (main, other), (repeat,) = first.report.builds, again.report.builds
    assert main.kernels == 1 and main.shared == 0
    assert other.kernels == 2 and other.shared == 1
    assert repeat.kernels == 1 and repeat.shared == 1
    assert "(1 built before)" in again.report.table()
    np.testing.assert_array_equal(again(*arguments()), first(*arguments()))
    np.testing.assert_allclose(
        first(*arguments()), effir.interpret(module, *arguments()), rtol=1e-5, atol=1e-6
    )


def test_a_failed_build_is_located_and_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\ndef @main(%x: Tensor[(3, 5), float32]) { exp(tanh(%x)) * 7f }\n',
            source_name="failing.effir",
        )
    )
    compile_kernels = apart.tvm.compile

    def failing(*args, **kwargs):
        raise RuntimeError("LLVM ran out of registers")

    monkeypatch.setattr(apart.tvm, "compile", failing)
    with pytest.raises(effir.CompileError, match=r"TVM failed to build .*out of registers") as err:
        effir.compile(module)
    assert err.value.span is not None and "failing.effir" in str(err.value)
    monkeypatch.setattr(apart.tvm, "compile", compile_kernels)
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    np.testing.assert_allclose(effir.compile(module)(x), np.exp(np.tanh(x)) * 7, rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.sampled_from([1, 1, 1, apart.LOOP_WEIGHT]), min_size=1, max_size=40),
    count=st.integers(1, 9),
)
def test_groups_hold_every_kernel_once_in_balanced_work(weights: list[int], count: int) -> None:
    kernels = [apart._Kernel(None, f"k{i}", w, None) for i, w in enumerate(weights)]
    groups = apart._groups(kernels, count)
    assert 1 <= len(groups) <= count and all(groups)
    assert sorted(k.symbol for g in groups for k in g) == sorted(k.symbol for k in kernels)
    loads = [sum(k.weight for k in g) for g in groups]
    # the greedy deal is within the heaviest kernel of the ideal
    assert max(loads) <= sum(weights) / len(groups) + max(weights)


PARALLEL = """
import json, sys
import numpy as np
import effir
sys.path.insert(0, "examples")
import gru_lm_training as model
cfg = model.Config(vocab=12, embed=4, hidden=8, seq_len=16, batch=2)
step = effir.train_step(model.loss_module(cfg), effir.optim.Adam(lr=0.01), entry="loss",
                        wrt=list(model.PARAM_NAMES))
run = step.init(dict(zip(model.PARAM_NAMES, model.init_params(cfg))))
tokens = np.arange(32, dtype=np.int32).reshape(16, 2) % 12
losses = [float(step(run, tokens, tokens[::-1].copy())) for _ in range(2)]
build = step.program.report.builds[0]
print(json.dumps({"losses": losses, "params": [p.tobytes().hex() for p in run.params.values()],
                  "kernels": build.kernels, "loops": build.loops}))
"""


def test_kernels_built_on_several_threads_give_the_results_of_one() -> None:
    """A training step (tens of kernels and whole loops) built on one worker
    and on three: the same kernels, the same bits."""
    runs = [
        json.loads(
            run_isolated(PARALLEL, env={"EFFIR_BUILD_THREADS": threads})
            .check()
            .stdout.splitlines()[-1]
        )
        for threads in ("1", "3")
    ]
    assert runs[0] == runs[1]
    assert runs[0]["kernels"] >= 10 and runs[0]["loops"] >= 1


BACKGROUND = """
import sys, threading
import numpy as np
import effir
module = effir.check(effir.parse('''#[version = "0.0.5"]
global @bn: Ref[(Tensor[(8), float32], Tensor[(8), float32])] = ref((zeros(shape=[8]), ones(shape=[8])));
def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 8), float32]) {
  nn.batch_norm(tanh(nn.dense(%x, %w)), ones(shape=[8]), zeros(shape=[8]), @bn, training=True)
}'''))
rng = np.random.default_rng(0)
x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 8), np.float32)
compiled = effir.compile(module)
state = compiled.new_state()
want = compiled(x, w, state=state)
outs = []
threads = [threading.Thread(target=lambda: outs.append(compiled(x, w))) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
assert all(np.array_equal(o, outs[0]) for o in outs)
compiled.export(sys.argv[1], state=state)  # waits for the writer, copies its library
loaded = effir.load(sys.argv[1])
np.testing.assert_array_equal(loaded.new_state()["bn"][0], state["bn"][0])
print("cached" if compiled.report.builds[0].cached else "built")
"""


def test_a_cold_build_is_written_in_the_background_without_warnings(effir_cache_dir, tmp_path):
    code = f"import sys; sys.argv = ['x', {str(tmp_path / 'model')!r}]\n" + BACKGROUND
    cold = run_isolated(code, env={"EFFIR_CACHE_DIR": str(effir_cache_dir)}).check()
    assert cold.stdout.split()[-1] == "built"
    assert "Warning" not in cold.stderr, cold.stderr
    assert len(list(effir_cache_dir.glob("*.so"))) == 1  # written before the process ended
    assert not list(effir_cache_dir.glob(".tmp-*"))
    (library,) = (tmp_path / "model" / "lib").iterdir()
    assert library.read_bytes() == next(effir_cache_dir.glob("*.so")).read_bytes()
    warm = run_isolated(code, env={"EFFIR_CACHE_DIR": str(effir_cache_dir)}).check()
    assert warm.stdout.split()[-1] == "cached" and "Warning" not in warm.stderr
