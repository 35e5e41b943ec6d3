"""Checkpoints of a training run (effir/train/checkpoint.py): parameters,
optimiser state, the program's cells and the step count in one ``.npz``;
N steps, a save, a restore and M more equal N+M straight, bit for bit,
interpreted and compiled; a checkpoint that is not this step's is a clear
``CheckpointError``, and a failed save leaves the previous file whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import effir
from effir.optim import SGD, Adam
from effir.train import CheckpointError, metadata_of, read_checkpoint
from tests.support.train_step_model import WRT, batch, initial_params, loss


def train(step, run, first: int, count: int) -> None:
    for i in range(first, first + count):
        step(run, *batch(7, i))


def assert_same_run(a, b) -> None:
    assert a.step == b.step
    for n in WRT:
        np.testing.assert_array_equal(a.params[n], b.params[n], err_msg=n)
    assert len(a.opt_state) == len(b.opt_state)
    for x, y in zip(a.opt_state, b.opt_state, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    for name, array in a.state.arrays().items():
        np.testing.assert_array_equal(array, b.state.arrays()[name], err_msg=name)


@pytest.mark.tvm
@pytest.mark.parametrize("target", [None, "llvm"])
def test_resuming_equals_training_straight_through(target, tmp_path: Path) -> None:
    step = effir.train_step(loss, Adam(lr=0.02), wrt=WRT, target=target)
    straight = step.init(initial_params(7), seed=7)
    train(step, straight, 0, 5)

    half = step.init(initial_params(7), seed=7)
    train(step, half, 0, 3)
    half.save(tmp_path / "half.npz", metadata={"seed": 7, "note": "three steps"})
    resumed = step.restore(tmp_path / "half.npz")
    assert resumed.step == 3
    train(step, resumed, 3, 2)
    assert_same_run(resumed, straight)
    # and the run moved: weights, optimiser state, key and statistics
    start = step.init(initial_params(7), seed=7)
    assert not np.array_equal(straight.params["w"], start.params["w"])
    assert not np.array_equal(straight.state["rng"].data, start.state["rng"].data)
    assert not np.array_equal(straight.state["bn"][0], start.state["bn"][0])
    assert metadata_of(tmp_path / "half.npz")["note"] == "three steps"


def test_a_checkpoint_is_plain_named_arrays(tmp_path: Path) -> None:
    step = effir.train_step(loss, SGD(), wrt=WRT, target=None)
    run = step.init(initial_params(0), seed=0)
    train(step, run, 0, 1)
    run.save(tmp_path / "ckpt")  # the name given, no suffix added
    with np.load(tmp_path / "ckpt", allow_pickle=False) as f:
        names = set(f.files)
    assert names == {
        "effir.format",
        "effir.version",
        "step",
        "optimizer",
        *(f"param.{n}" for n in WRT),
        *(f"opt.{i}" for i in range(len(WRT))),
        "state.bn.0",
        "state.bn.1",
        "state.rng",
    }
    saved = read_checkpoint(tmp_path / "ckpt")
    assert saved.step == 1 and saved.optimizer == "sgd"


def saved_run(tmp_path: Path, optimizer=None) -> Path:
    step = effir.train_step(loss, optimizer or Adam(), wrt=WRT, target=None)
    step.init(initial_params(0), seed=0).save(tmp_path / "run.npz")
    return tmp_path / "run.npz"


def rewrite(path: Path, **changes) -> Path:
    with np.load(path, allow_pickle=False) as f:
        arrays = dict(f)
    for name, value in changes.items():
        name = name.replace("__", ".")
        if value is None:
            del arrays[name]
        else:
            arrays[name] = value
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"param__w": np.zeros((2, 2), "f4")}, r"parameter w is a float32 array of shape \(2, 2\)"),
        ({"param__v": None}, r"the parameters are w, gamma, beta, v; missing v"),
        ({"param__u": np.zeros(2, "f4")}, r"no parameter 'u'"),
        ({"opt__3": np.zeros(3, "f4")}, r"the optimiser's state is not adam's for these"),
        ({"state__bn__0": np.zeros(5, "f4")}, r"state cell @bn"),
        ({"state__other": np.zeros(1, "f4")}, r"holds 'other', which is no cell of this program"),
        ({"optimizer": np.asarray("sgd")}, r"holds the state of the optimiser 'sgd'"),
        ({"effir__version": np.asarray(2)}, r"checkpoint format version 2; this effir reads 1"),
        ({"effir__format": None}, r"not an effir checkpoint \(no effir.format\)"),
        ({"extra": np.zeros(1)}, r"holds 'extra', which no checkpoint holds"),
    ],
)
def test_a_checkpoint_that_is_not_this_steps_is_refused(tmp_path: Path, change, message) -> None:
    path = rewrite(saved_run(tmp_path), **change)
    step = effir.train_step(loss, Adam(), wrt=WRT, target=None)
    with pytest.raises(CheckpointError, match=message):
        step.restore(path)


def test_a_file_that_is_no_checkpoint_is_refused(tmp_path: Path) -> None:
    step = effir.train_step(loss, Adam(), wrt=WRT, target=None)
    with pytest.raises(CheckpointError, match=r"missing.npz: no such file"):
        step.restore(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(CheckpointError, match=r"text.npz: not an effir checkpoint"):
        step.restore(tmp_path / "text.npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(
        CheckpointError, match=r"one.npy: not an effir checkpoint \(one array, not a .npz"
    ):
        step.restore(tmp_path / "one.npy")


def test_metadata_that_is_no_array_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = saved_run(tmp_path)
    before = path.read_bytes()
    step = effir.train_step(loss, Adam(), wrt=WRT, target=None)
    run = step.init(initial_params(1), seed=1)
    with pytest.raises(CheckpointError, match=r"metadata 'config': dict is not an array"):
        run.save(path, metadata={"config": {"hidden": 4}})
    assert path.read_bytes() == before
    with pytest.raises(CheckpointError, match=r"cannot write"):
        run.save(tmp_path / "no" / "such" / "dir.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]
