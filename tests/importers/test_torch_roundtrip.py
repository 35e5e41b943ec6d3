"""A module imported from torch.export is a program like a hand-written
one: it prints and parses back equal, passes the effect pipeline,
differentiates, compiles to what the interpreter computes; importing is
linear in the program's size; ``import effir`` needs no torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import effir  # noqa: E402
from effir.importers.torch import parameter_values  # noqa: E402
from effir.passes.analyses.verify_linear import linearity_errors  # noqa: E402
from effir.transform import pipeline  # noqa: E402
from tests.deep_programs import work  # noqa: E402
from tests.support.isolated import run_isolated  # noqa: E402

from .torch_models import Recurrent, batch_dim, exported  # noqa: E402

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)


def _recurrent():
    torch.manual_seed(0)
    model = Recurrent("gru").train()
    x = torch.randn(2, 5, 3)
    return model, exported(model, (x,), {"x": {0: batch_dim()}}), x


def test_prints_parses_back_and_passes_the_effect_pipeline():
    _, ep, x = _recurrent()
    module = effir.from_torch(ep)
    text = effir.astext(module)
    again = effir.parse(text)
    effir.assert_structural_equal(again, module)
    a2 = pipeline("to-anf,explicate,state-passing")(module)
    assert not linearity_errors(a2)


def test_differentiates_with_respect_to_the_parameters():
    """effir.grad of the summed output w.r.t. a weight, against a central
    difference (float64, the dropout's key fixed by the seed)."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    model = model.double()
    x = torch.randn(5, 3, dtype=torch.float64)
    ep = exported(model, (x,))
    module = effir.from_torch(ep)
    weights = parameter_values(ep)
    grads = effir.grad(module, wrt=["v_0_weight"])
    from effir.backends.interpreter import interpret_a2

    ones = np.ones((5, 1))  # the output's cotangent: the gradient of its sum
    got = interpret_a2(grads, x.numpy(), *weights.values(), ones, entry="main_grad")
    grad = got[0] if isinstance(got, tuple) else got
    direction = np.random.default_rng(1).standard_normal(grad.shape)

    def loss(w):
        values = dict(weights, **{"v_0_weight": w})
        return float(np.sum(effir.interpret(module, x.numpy(), *values.values())))

    eps = 1e-6
    w = weights["v_0_weight"]
    numeric = (loss(w + eps * direction) - loss(w - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(np.sum(grad * direction), numeric, rtol=1e-5)


def test_compiles_exports_and_reloads(tmp_path):
    """Compiled (llvm), two calls on one State from the same seed as the
    interpreter's: dropout's key and batch norm's statistics move on
    identically; two batch sizes of the symbolic ``batch``; exported,
    reloaded and run. And cond, while_loop, scan and map compiled against
    PyTorch."""
    code = f"""
import numpy as np, torch, effir
from tests.importers.test_torch_roundtrip import _recurrent
from tests.importers.torch_models import Branchy, Loops, exported
from effir.importers.torch import parameter_values
model, ep, x = _recurrent()
module = effir.from_torch(ep)
weights = list(parameter_values(ep).values())
compiled = effir.compile(module)
state, reference = effir.State(module, seed=4), effir.State(module, seed=4)
for batch in (2, 3):
    x = np.random.default_rng(batch).standard_normal((batch, 5, 3)).astype(np.float32)
    got = compiled(x, *weights, state=state)
    want = effir.interpret(module, x, *weights, state=reference)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(state["bn_running_var"], reference["bn_running_var"], rtol=1e-5)
loaded = effir.load(compiled.export({str(tmp_path / "artifact")!r}))
again = loaded(x, *weights, state=loaded.new_state())
assert again.shape == (3, 5, 5)
for made, args in ((Branchy(), (torch.full((4,), 0.9),)), (Loops(), (torch.randn(3, 4), torch.tensor(4)))):
    run = effir.compile(effir.from_torch(exported(made, args)))
    got = run(*[a.numpy() for a in args])
    got = got if isinstance(got, tuple) else (got,)
    want = made(*args)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)
print("ok", int(state["bn_num_batches_tracked"]))
"""
    run = run_isolated(code, timeout=600).check()
    assert "ok 2" in run.stdout


class _Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k in range(self.n):
            x = torch.tanh(x) * 0.5 if k % 2 else x + 1
        return x


def test_importing_is_linear_in_the_program_s_size():
    """Twice the nodes, at most about twice the lines of Python executed."""
    small = exported(_Chain(200), (torch.randn(4),))
    large = exported(_Chain(400), (torch.randn(4),))
    effir.from_torch(exported(_Chain(20), (torch.randn(4),)))  # warm
    w_small = work(lambda: effir.from_torch(small))
    w_large = work(lambda: effir.from_torch(large))
    assert w_large <= 2.2 * w_small, (w_small, w_large)


def test_import_effir_needs_no_torch():
    code = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError(f"no {name} here")
sys.meta_path.insert(0, Refuse())
import effir
assert "torch" not in sys.modules
try:
    effir.from_torch(object())
except effir.ModelImportError as err:
    print(err)
"""
    run = run_isolated(code, env={"EFFIR_ISOLATED_FORK": "0"}).check()
    assert "reading torch.export programs needs the torch package" in run.stdout
