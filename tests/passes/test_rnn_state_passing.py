"""The acceptance test of effect handling: an RNN with dropout inside a
cf.foreach body and batch norm after it, written in effectful style (A1),
becomes a pure state-passing program (A2) whose interpretation equals the
A1 program's bit for bit, final PRNG key and running statistics included,
also when 8 threads run it at once with separate states."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.visitor import pre_order
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.transforms.state_passing import state_passing

from .equivalence import assert_same_run, assert_same_value

EXAMPLE = Path(__file__).parents[2] / "examples" / "rnn_dropout_bn.effir"


def arguments(seed: int, t: int = 5, b: int = 3):
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return (
        normal(t, b, 8),
        normal(b, 16),
        normal(16, 8, scale=0.3),
        normal(16, 16, scale=0.3),
        normal(16, scale=0.1),
        1 + normal(16, scale=0.1),
        normal(16, scale=0.1),
    )


@pytest.fixture(scope="module")
def programs():
    a1 = effir.parse(EXAMPLE.read_text(), source_name=str(EXAMPLE))
    return a1, state_passing(a1)


def test_the_a2_program_is_pure_and_linear(programs):
    _, a2 = programs
    main = a2["main"]
    assert main.attrs["state_in"] == ("rng", "bn")
    assert main.attrs["state_out"] == ("rng", "bn")
    names = [p.name_hint for p in main.params]
    assert names[-2:] == ["rng", "bn"]
    for node in pre_order(main):
        assert not isinstance(node, effir.ir.RefRead | effir.ir.RefWrite)
    verify_linear(a2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a2_equals_a1_bit_for_bit(programs, seed):
    a1, a2 = programs
    assert_same_run(a1, a2, arguments(seed), seed=seed)


def test_two_steps_from_one_state_match(programs):
    """The state A2 returns is the state A1 leaves behind: a second step from
    it still agrees (the key moved on, the statistics were updated twice)."""
    a1, a2 = programs
    s1, s2 = effir.State(a1, seed=7), effir.State(a2, seed=7)
    for seed in (3, 4):
        r1 = effir.interpret(a1, *arguments(seed), state=s1)
        r2 = interpret_a2(a2, *arguments(seed), state=s2)
        assert_same_value(r1, r2)
    assert_same_value(s1["rng"], s2["rng"])
    assert_same_value(s1["bn"], s2["bn"])
    assert not np.array_equal(s1["bn"][0], np.zeros(16, np.float32))


def test_eight_threads_give_the_results_of_eight_sequential_calls(programs):
    """An A2 program has no global state: calls with separate states may run
    at once (docs/semantics.md §4), and give exactly the sequential results."""
    _, a2 = programs
    main = a2["main"]
    calls = [(arguments(10 + i), effir.State(a2, seed=i)) for i in range(8)]

    def call(index: int):
        args, state = calls[index]
        values = tuple(state[name] for name in main.attrs["state_in"])
        return effir.interpret(a2, *args, *values)

    sequential = [call(i) for i in range(8)]
    results: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        try:
            barrier.wait()
            for _ in range(3):  # several rounds, so that the calls overlap
                results[index] = call(index)
        except Exception as err:  # reported below, with the thread's index
            errors.append((index, err))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i in range(8):
        assert_same_value(sequential[i], results[i], f"thread {i}")
    # Different states give different results: the test can tell them apart.
    assert not np.array_equal(sequential[0][0][0], sequential[1][0][0])
