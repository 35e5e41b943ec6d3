"""Small torch modules the torch importer's tests export (torch.export)."""

from __future__ import annotations

import torch
from torch._higher_order_ops.map import map as torch_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim, export


class Mlp(torch.nn.Module):
    """linear, relu, layer norm, softmax, arithmetic, reshape, cat, slicing."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.b = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.a(x)))
        h = torch.cat([h, h * 2 - 1], dim=1)[:, 2:10]
        y = self.b(h).reshape(x.shape[0], 2, 2).permute(0, 2, 1)
        z = torch.where(y > 0, torch.tanh(y), torch.sigmoid(y))
        return torch.softmax(z.sum(dim=2) + z.mean(dim=(1, 2), keepdim=False).unsqueeze(1), -1)


class Branchy(torch.nn.Module):
    """torch.cond, nested in a branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def inner_true(x: torch.Tensor) -> torch.Tensor:
            return x.sin()

        def inner_false(x: torch.Tensor) -> torch.Tensor:
            return x.cos() + 1

        def true_fn(x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.mean() > 0.5, inner_true, inner_false, (x,)) * 2

        def false_fn(x: torch.Tensor) -> torch.Tensor:
            return x - 3

        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


class Loops(torch.nn.Module):
    """while_loop, scan and map."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def cond_fn(i: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return i < n

        def body_fn(i: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, y * 0.5 + 1

        _, y = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))

        def combine(carry: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            new = carry * 0.9 + row
            return new, new.tanh()

        carry, ys = scan(combine, torch.zeros(x.shape[1]), x)
        z = torch_map(lambda row, w: (row * w).sum() + carry.sum(), x, y[0])
        return y, ys, z


class Recurrent(torch.nn.Module):
    """A GRU (two layers, dropout between them), batch norm, dropout."""

    def __init__(self, kind: str = "gru", bidirectional: bool = False, batch_first: bool = True):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4)
        layer = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "rnn": torch.nn.RNN}[kind]
        self.rnn = layer(
            4, 5, num_layers=2, dropout=0.5, batch_first=batch_first, bidirectional=bidirectional
        )
        self.batch_first = batch_first
        self.drop = torch.nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h = self.bn(h.transpose(1, 2)).transpose(1, 2)
        if not self.batch_first:
            h = h.transpose(0, 1)
        y = self.rnn(h)[0]
        return self.drop(y)


def exported(module: torch.nn.Module, args: tuple, dynamic: dict | None = None):
    return export(module, args, dynamic_shapes=dynamic)


def batch_dim(name: str = "batch") -> Dim:
    return Dim(name)
