"""How long ``effir.from_torch`` takes, by program size: a chain of
elementwise nodes (1,000 to 5,000 FX nodes) and a stack of linear layers
with layer norm (a few thousand nodes). Importing is linear in the
program's size (tests/importers/test_torch_roundtrip.py counts the work);
exporting with torch.export is not timed (it is torch's).

Prints a table: program, FX nodes, median seconds to import
(type-checked), microseconds per node.

    .venv/bin/python benchmarks/torch_import.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from timing import median_seconds

import effir
from tests.importers.test_torch_roundtrip import _Chain
from tests.importers.torch_models import exported


class _Layers(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(self.norm(layer(x))) + x
        return x


def main() -> None:
    rows = [("chain", n, exported(_Chain(n), (torch.randn(4),))) for n in (1_000, 5_000)]
    rows += [("linear layers", n, exported(_Layers(n), (torch.randn(2, 8),))) for n in (250, 1000)]
    print(f"{'program':16} {'size':>7} {'FX nodes':>9} {'seconds':>9} {'us/node':>9}")
    for name, size, program in rows:
        nodes = len(program.graph.nodes)
        seconds = median_seconds(lambda p=program: effir.from_torch(p), repeats=3)
        print(f"{name:16} {size:>7} {nodes:>9} {seconds:>9.3f} {1e6 * seconds / nodes:>9.1f}")


if __name__ == "__main__":
    main()
