"""Property: any chain of the importer's elementwise, shape and reduction
operators, exported with torch.export and imported, computes what
PyTorch's eager module computes (through the interpreter), for inputs of
any batch size of its symbolic ``batch``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import effir  # noqa: E402

from .torch_models import batch_dim, exported  # noqa: E402

STEPS = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "affine": lambda x: x * 1.5 - 0.25,
    "square": lambda x: x * x,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.75),
    "where": lambda x: torch.where(x > 0, x, x.exp()),
    "flip": lambda x: x.transpose(1, 2).contiguous().transpose(1, 2),
    "view": lambda x: x.reshape(x.shape[0], -1).view(x.shape[0], 4, 3),
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "norm": lambda x: x - x.mean(dim=-1, keepdim=True),
    "cat": lambda x: torch.cat([x[:, :2], x[:, 2:] * 2], dim=1),
    "cumsum": lambda x: torch.cumsum(x, dim=2) * 0.5,
    "max": lambda x: x - x.amax(dim=1, keepdim=True),
}


class _Chain(torch.nn.Module):
    def __init__(self, steps: list[str]) -> None:
        super().__init__()
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.steps:
            x = STEPS[name](x)
        return x.sum(dim=(1, 2))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
    rows=st.integers(2, 5),
    seed=st.integers(0, 2**16),
)
def test_an_imported_chain_computes_what_pytorch_computes(steps, rows, seed):
    model = _Chain(steps)
    ep = exported(model, (torch.randn(3, 4, 3),), {"x": {0: batch_dim()}})
    module = effir.from_torch(ep)
    assert str(module["main"].params[0].type_annotation) == "Tensor[(batch, 4, 3), float32]"
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((rows, 4, 3)).astype("f4"))
    got = effir.interpret(module, x.numpy())
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-5)
