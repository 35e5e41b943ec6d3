"""`effir.State`: a mapping of cells (read, checked write, iteration, save and
load), all-or-nothing calls, and calls from several threads (docs/semantics.md
§3.4)."""

import numpy as np
import pytest

import effir
from effir.backends.interpreter import interpret_a2
from effir.backends.state import StateError
from effir.runtime.values import PRNGKey
from tests.support.isolated import run_isolated

H = '#[version = "0.0.5"]\n'
CELLS = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @bn: Ref[(Tensor[(2), float32], Tensor[(2), float32])] = "
    "ref((zeros(shape=[2]), ones(shape=[2])));\n"
)
# Dropout and batch norm update both cells; then a reshape that can fail.
A1 = CELLS + (
    "def @main(%x: Tensor[(4, 2), float32], %s: Tensor[(2), int64]) {\n"
    "  let %d = nn.dropout(%x, @rng, rate=0.5);\n"
    "  let %b = nn.batch_norm(%d, ones(shape=[2]), zeros(shape=[2]), @bn, training=True);\n"
    "  dyn.reshape(%b, %s)\n"
    "}\n"
)
A2 = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    'def @main(%x: Tensor[(4), float32], %k: Key, state_in=["rng"], state_out=["rng"]) {\n'
    "  let %ks = random.split(%k);\n"
    "  (random.dropout(%x, %ks.1, rate=0.5), %ks.0)\n"
    "}\n"
)
X = np.arange(8, dtype=np.float32).reshape(4, 2)


def snapshot(state: effir.State) -> dict:
    return {n: repr(v) for n, v in state.values().items()}


def test_a_failed_interpret_leaves_the_state_as_it_was():
    module = effir.check(effir.parse(A1))
    state = effir.State(module)
    before = snapshot(state)
    with pytest.raises(effir.EvalError, match="dyn.reshape"):
        effir.interpret(module, X, np.array([3, 3]), state=state)
    assert snapshot(state) == before
    # The same call that succeeds does change both cells.
    effir.interpret(module, X, np.array([2, 4]), state=state)
    after = snapshot(state)
    assert after["rng"] != before["rng"] and after["bn"] != before["bn"]


def test_a_failed_interpret_a2_leaves_the_state_as_it_was():
    module = effir.parse(A2)
    state = effir.State(module)
    before = snapshot(state)
    with pytest.raises(effir.EvalError):
        interpret_a2(module, np.zeros(3, np.float32), state=state)
    assert snapshot(state) == before


def test_state_is_a_mapping_of_its_cells():
    state = effir.State(effir.parse(A1))
    assert list(state) == ["rng", "bn"]
    assert len(state) == 2 and "rng" in state and "@bn" in state and "nope" not in state
    assert dict(state).keys() == {"rng", "bn"}
    assert state.get("nope") is None
    with pytest.raises(StateError, match="no state cell 'nope' \\(cells: @rng, @bn\\)"):
        state["nope"]


def test_assigning_a_cell_checks_its_type():
    state = effir.State(effir.parse(A1))
    state["rng"] = np.array([7, 9], np.uint32)  # a key's two words
    assert state["rng"] == PRNGKey([7, 9])
    mean = np.full(2, 0.5, np.float32)
    state["@bn"] = (mean, np.ones(2, np.float32))
    mean[0] = 99  # the state holds its own copy
    assert state["bn"][0][0] == 0.5
    bad = [
        ("rng", np.zeros(3, np.float32), "state cell @rng holds a Key, got"),
        ("bn", np.zeros(2, np.float32), "holds (Tensor[(2), float32], Tensor[(2), float32])"),
        ("bn", (np.zeros(2, np.float64), np.zeros(2, np.float32)), "field 0 holds"),
        ("bn", (np.zeros(3, np.float32), np.zeros(2, np.float32)), "got Tensor[(3), float32]"),
    ]
    for name, value, message in bad:
        with pytest.raises(StateError) as info:
            state[name] = value
        assert message in str(info.value)
    assert state["bn"][0][0] == 0.5  # nothing changed


def test_save_and_load_restore_every_cell_exactly(tmp_path):
    module = effir.check(effir.parse(A1))
    state = effir.State(module, seed=12345)
    effir.interpret(module, X, np.array([2, 4]), state=state)
    path = tmp_path / "state.npz"
    state.save(path)
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == ["bn.0", "bn.1", "rng"]
    fresh = effir.State(module)
    assert fresh.load(path) is fresh
    assert fresh["rng"] == state["rng"]
    for got, want in zip(fresh["bn"], state["bn"], strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    # The two states now run identically.
    a = effir.interpret(module, X, np.array([2, 4]), state=state)
    b = effir.interpret(module, X, np.array([2, 4]), state=fresh)
    assert np.array_equal(a, b)


def test_load_refuses_a_file_that_does_not_fit(tmp_path):
    state = effir.State(effir.parse(A1))
    before = snapshot(state)
    cases = [
        ({"rng": np.zeros(2, np.uint32)}, "no value for 'bn.0'"),
        (
            {"rng": np.zeros(2, np.uint32), "bn.0": np.zeros(2, np.float32), "bn.1": np.zeros(3)},
            "state cell @bn, field 1 holds Tensor[(2), float32], got Tensor[(3), float64]",
        ),
        (
            {
                "rng": np.zeros(2, np.uint32),
                "bn.0": np.zeros(2, np.float32),
                "bn.1": np.zeros(2, np.float32),
                "extra": np.zeros(1),
            },
            "holds 'extra', which is no cell of this program",
        ),
    ]
    for arrays, message in cases:
        path = tmp_path / "s.npz"
        np.savez(path, **arrays)
        with pytest.raises(StateError) as info:
            state.load(path)
        assert message in str(info.value)
        assert snapshot(state) == before
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(StateError, match="not a .npz file of saved state"):
        state.load(tmp_path / "junk.npz")
    with pytest.raises(StateError, match="no such file"):
        state.load(tmp_path / "missing.npz")
    np.save(tmp_path / "one.npy", np.zeros(2, np.float32))  # one array, not a .npz of them
    with pytest.raises(StateError, match="one.npy: not a .npz file of saved state"):
        state.load(tmp_path / "one.npy")
    assert snapshot(state) == before


@pytest.mark.tvm
def test_threads_sharing_a_state_advance_it_once_per_call():
    """Eight threads, four calls each, one State: the key advances 32 times,
    as 32 sequential calls do (it advanced 24 times: calls read the same key).
    In a process of its own, with a tiny switch interval to provoke races."""
    run_isolated(
        f"""
        import sys, threading
        import numpy as np
        import effir
        from effir.backends.interpreter import interpret_a2

        sys.setswitchinterval(1e-6)
        module = effir.parse({A2!r})
        x = np.ones(4, np.float32)
        sequential = effir.State(module)
        for _ in range(32):
            interpret_a2(module, x, state=sequential)
        shared = effir.State(module)
        barrier = threading.Barrier(8)
        errors = []

        def worker():
            try:
                barrier.wait()
                for _ in range(4):
                    interpret_a2(module, x, state=shared)
            except Exception as err:
                errors.append(err)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert shared["rng"] == sequential["rng"], (shared["rng"], sequential["rng"])
        print("ok")
        """
    ).check()


class _OnGPU:
    """A value as a GPU program leaves it in a cell: opaque to the host,
    copied back (counted) by the function the program gives with it."""

    def __init__(self, host: object) -> None:
        self.host = host


def _keep(state: effir.State, name: str, host: object, copies: list[str]) -> _OnGPU:
    value = _OnGPU(host)

    def to_host(v: _OnGPU) -> object:
        copies.append(name)
        return v.host

    state.keep_on_device(name, value, to_host)
    return value


def test_a_value_left_on_a_device_is_copied_back_once_when_the_host_reads_it():
    module = effir.check(effir.parse(A1))
    state = effir.State(module)
    copies: list[str] = []
    key = PRNGKey([1, 2])
    kept = _keep(state, "rng", key, copies)
    # Compiled code reads it where it is, without a copy.
    with state.transaction(on_device=True):
        assert state.device_value("rng") is kept
    assert copies == []
    assert state["rng"] == key and copies == ["rng"]
    assert state["rng"] == key and copies == ["rng"]  # back on the host: not copied again
    assert state.device_value("rng") == key


def test_every_host_reader_sees_the_values_a_device_left():
    module = effir.check(effir.parse(A1))
    bn = (np.full(2, 3, np.float32), np.full(2, 4, np.float32))
    for read in (
        lambda s: s.values()["bn"],
        lambda s: s.cells["bn"].value,
        lambda s: repr(s),
        lambda s: dict(s.items())["bn"],
    ):
        state = effir.State(module)
        copies: list[str] = []
        _keep(state, "bn", bn, copies)
        read(state)
        assert copies == ["bn"] and state.cells["bn"].value is bn


def test_the_interpreter_and_save_read_a_device_value_on_the_host(tmp_path):
    module = effir.check(effir.parse(A1))
    state, reference = effir.State(module), effir.State(module)
    copies: list[str] = []
    _keep(state, "rng", reference["rng"], copies)
    state.save(tmp_path / "s.npz")
    assert copies == ["rng"]
    _keep(state, "rng", reference["rng"], copies)
    got = effir.interpret(module, X, np.array([2, 4]), state=state)
    want = effir.interpret(module, X, np.array([2, 4]), state=reference)
    assert np.array_equal(got, want) and state["rng"] == reference["rng"]
    assert copies == ["rng", "rng"]


def test_a_write_on_the_host_replaces_a_device_value_without_copying_it():
    module = effir.check(effir.parse(A1))
    state = effir.State(module)
    copies: list[str] = []
    _keep(state, "rng", PRNGKey([1, 2]), copies)
    state["rng"] = PRNGKey([5, 6])
    assert state.device_value("rng") == PRNGKey([5, 6]) and copies == []


def test_a_failed_compiled_call_puts_back_the_values_it_found_on_the_device():
    module = effir.check(effir.parse(A1))
    state = effir.State(module)
    copies: list[str] = []
    kept = _keep(state, "rng", PRNGKey([1, 2]), copies)
    with pytest.raises(RuntimeError), state.transaction(on_device=True):
        _keep(state, "rng", PRNGKey([3, 4]), copies)
        state.set_value("bn", (np.zeros(2, np.float32), np.zeros(2, np.float32)))
        raise RuntimeError("inside compiled code")
    assert state.device_value("rng") is kept and copies == []
    assert np.array_equal(state["bn"][1], np.ones(2, np.float32))


# A program whose cell @rng holds a pair of tensors, not a key.
OTHER = H + (
    "global @rng: Ref[(Tensor[(2), float32], Tensor[(2), float32])] = "
    "ref((zeros(shape=[2]), ones(shape=[2])));\n"
    "def @main(%x: Tensor[(4, 2), float32]) { %x }\n"
)
# A program with a key cell of that name, which the other program's State
# does not fit.
KEYED = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "def @main(%x: Tensor[(4), float32]) {\n"
    "  nn.dropout(%x, @rng, rate=0.5)\n"
    "}\n"
)


def test_a_state_made_for_another_program_is_refused_by_the_interpreter():
    """Found: the interpreter said "random.split expects a PRNG key, got
    tuple" (and compiled code crashed in TVM). The State is checked
    against the program's cell types at the call, located at the cell."""
    keyed = effir.check(effir.parse(KEYED, source_name="keyed.effir"))
    other = effir.State(effir.check(effir.parse(OTHER)))
    before = snapshot(other)
    with pytest.raises(StateError) as caught:
        effir.interpret(keyed, np.ones(4, np.float32), state=other)
    assert "state cell @rng is declared Key, but the State holds" in caught.value.message
    assert "(Tensor[(2), float32] [0., 0.], Tensor[(2), float32] [1., 1.])" in caught.value.message
    assert caught.value.source_name == "keyed.effir" and caught.value.line == 2
    assert snapshot(other) == before
    fine = effir.State(keyed)
    effir.interpret(keyed, np.ones(4, np.float32), state=fine)


def test_a_state_whose_tensor_cell_has_another_shape_is_refused():
    """The same rule for a tensor cell of another shape or dtype, and for
    interpret_a2."""
    program = H + (
        "global @c: Ref[Tensor[(3), float32]] = ref(zeros(shape=[3]));\n"
        "def @main(%x: Tensor[(3), float32]) { add(%x, ref_read(@c)) }\n"
    )
    module = effir.check(effir.parse(program))
    for declared in ("Tensor[(2), float32]", "Tensor[(3), int32]", "Key"):
        init = {"Key": "random.key(0)"}.get(declared, 'zeros(shape=[3], dtype="int32")')
        if "(2)" in declared:
            init = "zeros(shape=[2])"
        other = effir.State(
            effir.check(effir.parse(f"{H}global @c: Ref[{declared}] = ref({init});\n"))
        )
        with pytest.raises(StateError, match=r"state cell @c is declared Tensor\[\(3\), float32\]"):
            effir.interpret(module, np.ones(3, np.float32), state=other)
    a2 = effir.check(effir.parse(A2))
    with pytest.raises(StateError, match="state cell @rng is declared Key, but the State holds"):
        interpret_a2(a2, np.ones(4, np.float32), state=effir.State(effir.check(effir.parse(OTHER))))


@pytest.mark.tvm
def test_a_state_made_for_another_program_is_refused_by_compiled_code(tmp_path):
    """Found: TVM's "Check failed: (ptr->ndim == ndim)". A compiled module
    and a loaded artifact refuse the State as the interpreter does."""
    run_isolated(
        f"""
        import numpy as np, pytest, effir
        from effir.backends.state import StateError
        keyed = effir.check(effir.parse({KEYED!r}, source_name="keyed.effir"))
        other = effir.State(effir.check(effir.parse({OTHER!r})))
        x = np.ones(4, np.float32)
        compiled = effir.compile(keyed)
        with pytest.raises(StateError) as caught:
            compiled(x, state=other)
        assert "state cell @rng is declared Key, but the State holds" in caught.value.message
        assert caught.value.source_name == "keyed.effir", caught.value
        compiled.export({str(tmp_path / "m")!r})
        loaded = effir.load({str(tmp_path / "m")!r})
        with pytest.raises(StateError, match="state cell @rng is declared Key, but the State"):
            loaded(x, state=other)
        fine = effir.State(keyed)
        assert np.array_equal(compiled(x, state=fine), effir.interpret(keyed, x, state=effir.State(keyed)))
        print("ok")
        """
    ).check()


def test_a_state_runs_its_initialisers_with_the_registered_evaluator(monkeypatch):
    """The interpreter registers itself as the evaluator of cell
    initialisers (state.py sits below it); without one, a State says so
    instead of failing on an empty table."""
    from effir.backends import state as state_module

    module = effir.parse(CELLS + "def @main() { 0f }\n")
    assert state_module._INITIALISERS, "the interpreter registers itself on import"
    seen = []
    registered = state_module._INITIALISERS[0]

    def counting(mod, st):
        seen.append(mod)
        return registered(mod, st)

    monkeypatch.setattr(state_module, "_INITIALISERS", [counting])
    assert list(effir.State(module)) == ["rng", "bn"] and seen == [module]
    monkeypatch.setattr(state_module, "_INITIALISERS", [])
    with pytest.raises(StateError, match="no evaluator of cell initialisers is registered"):
        effir.State(module)
