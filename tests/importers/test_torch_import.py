"""effir.from_torch against PyTorch's own eager outputs (through the
interpreter): operators, cond, while_loop, scan, map, recurrent layers,
symbolic dimensions, parameters; batch norm's running statistics after a
training-mode call; randomness by property; located errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import effir  # noqa: E402
from effir.importers.torch import parameter_values  # noqa: E402

from .torch_models import Branchy, Loops, Mlp, Recurrent, batch_dim, exported  # noqa: E402


def _run(module, ep, *args, state=None):
    values = [a.numpy() for a in args]
    out = effir.interpret(module, *values, *parameter_values(ep).values(), state=state)
    return out if isinstance(out, tuple) else (out,)


def _close(got, want, atol=1e-5):
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w.detach().numpy(), rtol=1e-4, atol=atol)


def test_operators_and_a_named_symbolic_batch():
    torch.manual_seed(0)
    model = Mlp().eval()
    ep = exported(model, (torch.randn(3, 6),), {"x": {0: batch_dim("rows")}})
    module = effir.from_torch(ep)
    params = module["main"].params
    assert str(params[0].type_annotation) == "Tensor[(rows, 6), float32]"
    assert [p.name_hint for p in params[1:3]] == ["a_weight", "a_bias"]
    for rows in (3, 5):
        x = torch.randn(rows, 6)
        _close(_run(module, ep, x), model(x))


def test_parameters_as_constants():
    model = Mlp().eval()
    ep = exported(model, (torch.randn(2, 6),))
    module = effir.from_torch(ep, parameters="constants")
    assert len(module["main"].params) == 1
    x = torch.randn(2, 6)
    _close((effir.interpret(module, x.numpy()),), model(x))


def test_nested_cond_takes_each_branch():
    model = Branchy()
    ep = exported(model, (torch.randn(4),))
    module = effir.from_torch(ep)
    assert effir.astext(module).count("if (") == 2
    for x in (torch.full((4,), 0.9), torch.full((4,), 0.1), torch.full((4,), -1.0)):
        _close(_run(module, ep, x), model(x))


def test_while_loop_scan_and_map():
    model = Loops()
    ep = exported(model, (torch.randn(3, 4), torch.tensor(3)))
    module = effir.from_torch(ep)
    text = effir.astext(module)
    assert "cf.while_loop" in text and text.count("cf.foreach") == 2
    for n in (0, 5):
        x = torch.randn(3, 4)
        _close(_run(module, ep, x, torch.tensor(n)), model(x, torch.tensor(n)))


@pytest.mark.parametrize(
    ("kind", "bidirectional", "batch_first"),
    [("gru", False, True), ("lstm", True, False), ("rnn", True, True)],
)
def test_recurrent_layers_are_loops_over_a_symbolic_length(kind, bidirectional, batch_first):
    torch.manual_seed(1)
    model = Recurrent(kind, bidirectional, batch_first).eval()
    x = torch.randn(2, 5, 3)
    ep = exported(model, (x,), {"x": {0: batch_dim()}})
    module = effir.from_torch(ep)
    text = effir.astext(module)
    assert text.count("cf.foreach") == 2 * (2 if bidirectional else 1)  # never unrolled
    for batch in (2, 3):
        x = torch.randn(batch, 5, 3)
        _close(_run(module, ep, x), model(x))


def test_batch_norm_running_statistics_follow_pytorch_in_training():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4, momentum=0.3))
    model.train()
    x = torch.randn(6, 3)
    ep = exported(model, (x,))
    module = effir.from_torch(ep)
    state = effir.State(module)
    assert set(state) == {"b_1_running_mean", "b_1_running_var", "b_1_num_batches_tracked"}
    for _ in range(2):  # the cells move on from call to call, as the buffers do
        x = torch.randn(6, 3)
        _close(_run(module, ep, x, state=state), model(x))
    np.testing.assert_allclose(state["b_1_running_mean"], model[1].running_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(state["b_1_running_var"], model[1].running_var.numpy(), rtol=1e-5)
    assert int(state["b_1_num_batches_tracked"]) == int(model[1].num_batches_tracked) == 2


def test_gru_dropout_between_layers_is_kept_in_training():
    """torch's run_decompositions() drops it; the importer reads aten.gru
    before any decomposition: a dropout of the first layer's outputs at
    the layer's rate, fresh per call, the same from the same key."""
    model = Recurrent("gru").train()
    model.drop.p = 0.0
    x = torch.randn(2, 5, 3)
    module = effir.from_torch(exported(model, (x,)))
    text = effir.astext(module)
    # of the first layer's outputs (%ys), at rate 0.5 (the default, not printed)
    assert text.count("random.dropout") == 1 and "random.dropout(%ys, %sub_key);" in text
    ep = exported(model, (x,))
    first = _run(module, ep, x, state=effir.State(module, seed=3))[0]
    again = _run(module, ep, x, state=effir.State(module, seed=3))[0]
    other = _run(module, ep, x, state=effir.State(module, seed=4))[0]
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)
    model.eval()  # without the dropout, PyTorch's and effir's agree
    _close(_run(effir.from_torch(exported(model, (x,))), ep, x), model(x))


class _Random(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dropped = torch.nn.functional.dropout(x, 0.3, training=True)
        return dropped, torch.rand_like(x), torch.randn(400, 50), torch.bernoulli(x * 0 + 0.2)


def test_dropout_and_draws_by_property():
    x = torch.ones(400, 50)
    ep = exported(_Random(), (x,))
    module = effir.from_torch(ep)
    state = effir.State(module, seed=5)
    dropped, uniform, normal, coin = _run(module, ep, x, state=state)
    assert dropped.shape == uniform.shape == normal.shape == coin.shape == (400, 50)
    assert abs(np.mean(dropped == 0) - 0.3) < 0.02
    np.testing.assert_allclose(dropped[dropped != 0], 1 / 0.7, rtol=1e-6)
    assert uniform.min() >= 0 and uniform.max() < 1 and abs(uniform.mean() - 0.5) < 0.01
    assert abs(normal.mean()) < 0.02 and abs(normal.std() - 1) < 0.02
    assert set(np.unique(coin)) == {0.0, 1.0} and abs(coin.mean() - 0.2) < 0.02
    second = _run(module, ep, x, state=state)[1]
    assert not np.array_equal(second, uniform)  # fresh values each call
    replay = _run(module, ep, x, state=effir.State(module, seed=5))[1]
    np.testing.assert_array_equal(replay, uniform)  # the same from the same key


class _Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.erfcx(x + 1)


def test_an_unsupported_operator_is_a_located_error():
    ep = exported(_Unsupported(), (torch.randn(3),))
    with pytest.raises(effir.ModelImportError) as caught:
        effir.from_torch(ep)
    message = str(caught.value)
    assert "node 2 'special_erfcx' (aten.special_erfcx.default): the operator" in message
    assert "is not supported by effir's importer" in message
    assert "test_torch_import.py:" in message and "torch.special.erfcx(x + 1)" in message
    assert "exported_program:" in message  # located in the program's listing


def test_a_written_user_input_and_bad_arguments_are_refused():
    class Writes(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x * 2

    with pytest.raises(effir.ModelImportError, match="writes the input 'x' in place"):
        effir.from_torch(exported(Writes(), (torch.randn(2),)))
    with pytest.raises(effir.ModelImportError, match="reads a torch.export.ExportedProgram"):
        effir.from_torch(Mlp())
    ep = exported(Mlp(), (torch.randn(2, 6),))
    with pytest.raises(effir.ModelImportError, match="parameters must be one of"):
        effir.from_torch(ep, parameters="weights")


class _Prints(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.aten._print("before")
        y = x + 1
        torch.ops.aten._print("after")
        return y


def test_an_effect_token_orders_prints_as_the_world_token():
    """run_decompositions() threads aten._print through with_effects and a
    token input and output; effir prints in that order (state passing
    threads its world token through debug.print)."""
    ep = exported(_Prints(), (torch.randn(2),)).run_decompositions({})
    kinds = [s.kind.name for s in ep.graph_signature.input_specs]
    assert kinds == ["TOKEN", "USER_INPUT"]
    module = effir.from_torch(ep)
    assert [p.name_hint for p in module["main"].params] == ["x"]
    printed = []
    y = effir.interpret(
        module, np.ones(2, np.float32), sink=lambda label, value: printed.append(label)
    )
    assert printed == ["before", "after"]
    np.testing.assert_array_equal(y, [2.0, 2.0])
    a2 = effir.transform.pipeline("to-anf,explicate,state-passing")(module)
    assert "io.print" in effir.astext(a2)


def test_a_decomposed_training_batch_norm_writes_its_buffers():
    """After run_decompositions() batch norm is functional and its running
    statistics are outputs the signature lists as buffer mutations: the
    same cells, the same values as PyTorch's."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).train()
    x = torch.randn(6, 3)
    ep = exported(model, (x,)).run_decompositions()
    module = effir.from_torch(ep)
    state = effir.State(module)
    _close(_run(module, ep, x, state=state), model(x))
    np.testing.assert_allclose(state["b_1_running_mean"], model[1].running_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(state["b_1_running_var"], model[1].running_var.numpy(), rtol=1e-5)
    assert int(state["b_1_num_batches_tracked"]) == 1
