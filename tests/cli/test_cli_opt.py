"""`effir opt FILE -p PIPELINE`, and `effir run` on its state-passing output."""

import numpy as np

import effir
from effir.cli import main

from .files import write

H = '#[version = "0.0.5"]\n'

EFFECTFUL = H + (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @count: Ref[int32] = ref(0);\n"
    "def @tick() { ref_write(@count, ref_read(@count) + 1) }\n"
    "def @main(%x: Tensor[(4), float32]) {\n"
    "  @tick();\n"
    '  debug.print(nn.dropout(%x, @rng, rate=0.5), label="dropped")\n'
    "}\n"
)


def test_opt_prints_the_state_passing_program(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    assert main(["opt", path, "-p", "explicate,state-passing"]) == 0
    out = capsys.readouterr().out
    a2 = effir.parse(out)
    assert a2["main"].attrs["state_in"] == ("rng", "count", "io")
    assert "ref_read" not in out and "io.print" in out


def test_opt_output_file_timing_and_print_after_all(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    out_path = tmp_path / "a2.effir"
    args = ["opt", path, "-p", "explicate,state-passing,split-keys", "-o", str(out_path)]
    assert main([*args, "--timing", "--print-after-all"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "// ----- after explicate -----" in captured.err
    assert "state-passing" in captured.err and "total" in captured.err
    effir.check(effir.parse(out_path.read_text()))


def test_run_gives_the_same_results_before_and_after_state_passing(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(4, dtype=np.float32))
    outputs = []
    for program in (path, str(tmp_path / "a2.effir")):
        if program != path:
            assert main(["opt", path, "-p", "state-passing", "-o", program]) == 0
        npz = str(tmp_path / f"out{len(outputs)}.npz")
        assert main(["run", program, "--arg", f"x={x}", "--seed", "3", "--output", npz]) == 0
        outputs.append((capsys.readouterr().out, dict(np.load(npz))))
    (text1, arrays1), (text2, arrays2) = outputs
    assert text1 == text2 and "dropped:" in text1
    assert arrays1.keys() == arrays2.keys() and "state.rng" in arrays1
    for name in arrays1:
        assert np.array_equal(arrays1[name], arrays2[name])


def test_opt_errors_are_one_message(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    assert main(["opt", path, "-p", "explicate,nonsense"]) == 1
    assert "unknown pass 'nonsense'" in capsys.readouterr().err
    assert main(["opt", path, "-p", "explicate,,dce"]) == 1
    assert "empty pass name" in capsys.readouterr().err
    bad = write(
        tmp_path,
        "bad.effir",
        H + "global @a: Ref[int32] = ref(0);\nglobal @b: Ref[int32] = ref(0);\n"
        "def @main(%c: bool) { let %r = if (%c) { @a } else { @b }; ref_read(%r) }\n",
    )
    assert main(["opt", bad, "-p", "state-passing"]) == 1
    err = capsys.readouterr().err
    assert "bad.effir:4:" in err and "may touch any of @a, @b" in err and "Traceback" not in err
    assert main(["opt", str(tmp_path / "missing.effir"), "-p", "explicate"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_opt_standard_pipeline_and_print_after_change(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    assert main(["opt", path, "-O2", "--print-after-change"]) == 0
    captured = capsys.readouterr()
    assert "io.print" in captured.out
    assert "// ----- after state-passing -----" in captured.err


def test_opt_needs_one_pipeline_and_checks_requirements(tmp_path, capsys):
    path = write(tmp_path, "m.effir", EFFECTFUL)
    assert main(["opt", path]) == 1
    assert "give a pipeline with -p" in capsys.readouterr().err
    assert main(["opt", path, "-p", "split-keys"]) == 1
    err = capsys.readouterr().err
    assert "pass split-keys requires a state-passing program (A2)" in err
    # grad requires A2 (its prelude makes it) and preserves it: not a maker of A2.
    assert "; run state-passing first" in err
