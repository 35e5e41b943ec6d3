"""User errors exit 1 with a located message, never 3: sizes over
the limit (EFFIR_MAX_TENSOR_BYTES), numbers out of range, bad input files,
malformed state attributes, a pass given an ill-typed program."""

import resource
import subprocess
import sys

import numpy as np
import pytest

from effir.cli import main
from tests.support.isolated import ROOT

from .files import write

H = '#[version = "0.0.5"]\n'
KEYED = H + (
    "global @rng: Ref[Key] = ref(random.key(1));\n"
    "def @main() { random.uniform(ref_read(@rng), shape=[2]) }\n"
)


def _effir(*args: str, memory: int = 3 << 30, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command in a process of its own, under an address-space cap."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "effir", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=cap,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'zeros(shape=[100000, 100000, 100000], dtype="float32")',
            "zeros: its result would take 3.55 PiB, more than the limit of 4 GiB "
            "(set EFFIR_MAX_TENSOR_BYTES to allow more)",
        ),
        (
            "random.uniform(random.key(0), shape=99999999999999999999)",
            "random.uniform: its result would take",
        ),
    ],
)
def test_run_refuses_a_size_over_the_limit(tmp_path, capsys, body, message):
    path = write(tmp_path, "big.effir", H + f"def @main() {{ {body} }}\n")
    assert main(["run", path]) == 1
    err = capsys.readouterr().err
    assert message in err and "big.effir:2:15: runtime error" in err


def test_the_limit_is_overridable(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "k.effir", H + 'def @main() { zeros(shape=[1000], dtype="float32") }\n')
    monkeypatch.setenv("EFFIR_MAX_TENSOR_BYTES", "1K")
    assert main(["run", path]) == 1
    assert "would take 3.91 KiB, more than the limit of 1 KiB" in capsys.readouterr().err
    monkeypatch.setenv("EFFIR_MAX_TENSOR_BYTES", "4000")
    assert main(["run", path]) == 0
    monkeypatch.setenv("EFFIR_MAX_TENSOR_BYTES", "lots")
    assert main(["run", path]) == 1
    assert "EFFIR_MAX_TENSOR_BYTES='lots' is not a size" in capsys.readouterr().err


def test_check_refuses_a_split_into_more_keys_than_memory_holds(tmp_path):
    """The type of random.split lists one Key per new key: 10^8 of them grew
    `check` to 2.8 GB before it failed with exit 3. Run under a 1.5 GB
    address-space cap, in a process of its own."""
    path = write(
        tmp_path, "split.effir", H + "def @main() { random.split(random.key(0), num=100000000) }\n"
    )

    done = _effir("check", path, memory=1536 << 20)
    assert done.returncode == 1, done.stderr
    assert "random.split: the new keys (100000000 values) would take" in done.stderr
    assert "split.effir:2:15: type error" in done.stderr


def test_run_refuses_a_seed_out_of_range(tmp_path, capsys):
    path = write(tmp_path, "keyed.effir", KEYED)
    assert main(["run", path, "--seed", "99999999999999999999999999"]) == 1
    err = capsys.readouterr().err
    assert "the seed must be an integer that fits in int64" in err


def test_run_refuses_bad_array_files(tmp_path, capsys):
    path = write(tmp_path, "x.effir", H + "def @main(%x: Tensor[(2), float32]) { %x }\n")
    assert main(["run", path, "--arg", "x=/dev/null"]) == 1
    assert "/dev/null: not a .npy array file" in capsys.readouterr().err
    # A header that claims 1e11 elements: refused from the header, unread.
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000,), }"
    header += b" " * (117 - len(header)) + b"\n"
    huge = tmp_path / "huge.npy"
    huge.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
    assert main(["run", path, "--arg", f"x={huge}"]) == 1
    err = capsys.readouterr().err
    assert "huge.npy: the array of shape (100000000000) and dtype float32 would take 373 GiB" in err
    fine = tmp_path / "fine.npy"
    np.save(fine, np.ones(2, np.float32))
    assert main(["run", path, "--arg", f"x={fine}"]) == 0


def test_malformed_state_attributes_are_a_check_error(tmp_path, capsys):
    """`def @main(state_in=False)`: `check` said ok, `run` exited 3."""
    path = write(tmp_path, "st.effir", H + "def @main(state_in=False) { 1f }\n")
    for command in ("check", "run"):
        assert main([command, path]) == 1
        err = capsys.readouterr().err
        assert "st.effir:2:1: well-formedness error: state_in of @main must be a list" in err


def test_opt_reports_the_inputs_type_error(tmp_path, capsys):
    """Not "pass dce produced an invalid program": the input was invalid."""
    path = write(
        tmp_path, "ill.effir", H + "def @main(%x: Tensor[(2), float32]) { add(%x, 1i64) }\n"
    )
    for pipeline in (["-p", "dce"], ["-O2"]):
        assert main(["opt", path, *pipeline]) == 1
        err = capsys.readouterr().err
        assert "ill.effir:2:39: type error: add: the arguments must have the same dtype" in err
        assert "produced an invalid program" not in err


def test_compile_refuses_dims_over_the_limit(tmp_path):
    """`--dims t=100000000000` grew to 5.7 GB over a minute: the binding is
    refused before any code is built, at the parameter it makes too large."""
    done = _effir(
        "compile",
        str(ROOT / "examples" / "gru_lm.effir"),
        "--dims",
        "t=100000000000,b=4",
        "-o",
        str(tmp_path / "gru"),
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "gru_lm.effir:26:11: backend error: %tokens would take 1.46 TiB" in done.stderr
    assert not (tmp_path / "gru").exists()


def test_compile_refuses_an_intermediate_over_the_limit(tmp_path):
    """A compiled `sum(zeros(...huge...))` ran for minutes in C."""
    path = write(
        tmp_path,
        "sz.effir",
        H + 'def @main() { sum(zeros(shape=[100000, 100000, 100000], dtype="float32")) }\n',
    )
    done = _effir("compile", path, "-o", str(tmp_path / "out"), timeout=60)
    assert done.returncode == 1, done.stderr
    assert "sz.effir:2:19: backend error:" in done.stderr
    assert "would take 3.55 PiB, more than the limit of 4 GiB" in done.stderr
