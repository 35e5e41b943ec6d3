"""`effir opt --load PASSES.py`: a Python file of user passes is run
before the pipeline is parsed; its errors, and a loaded pass that breaks
what it declares, are located effir errors, never a traceback."""

from __future__ import annotations

import textwrap

import pytest

from effir.cli import main
from effir.transform import registered_passes, unregister_pass

from .files import write

H = '#[version = "0.0.5"]\n'
PROGRAM = H + "def @main(%x: Tensor[(4), float32]) { tanh(add(%x, 1f)) }\n"

PASSES = '''\
import effir
from effir.ir.expr import Call, Op


@effir.transform.function_pass(name="tanh-to-sigmoid", requires={"anf"}, preserves={"anf"})
def tanh_to_sigmoid(fn, module, context):
    """every tanh becomes a sigmoid"""
    class Swap(effir.ir.Mutator):
        @effir.ir.on(Call)
        def call(self, new, old):
            if isinstance(new.callee, Op) and new.callee.name == "tanh":
                return Call(Op("sigmoid"), new.args, new.attrs)
            return new

    return Swap().mutate(fn)


@effir.transform.module_pass(name="flatten-claim", establishes={"anf"})
def flatten_claim(module):
    """claims A-normal form and returns a nested program"""
    return effir.parse(
        '#[version = "0.0.5"]\\n'
        "def @main(%x: Tensor[(4), float32]) { sigmoid(add(%x, 1f)) }\\n"
    )
'''


@pytest.fixture(autouse=True)
def _forget_user_passes():
    known = set(registered_passes())
    yield
    for name in set(registered_passes()) - known:
        unregister_pass(name)


def opt(tmp_path, capsys, passes: str, *args: str) -> tuple[int, str, str]:
    program = write(tmp_path, "m.effir", PROGRAM)
    loaded = write(tmp_path, "my_passes.py", textwrap.dedent(passes))
    code = main(["opt", program, "--load", loaded, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_loaded_passes_run_in_the_pipeline_and_are_listed(tmp_path, capsys):
    code, out, err = opt(tmp_path, capsys, PASSES, "-p", "to-anf,tanh-to-sigmoid")
    assert (code, err) == (0, "")
    assert "sigmoid(" in out and "tanh" not in out
    loaded = write(tmp_path, "my_passes.py", PASSES)
    assert main(["opt", "--list-passes", "--load", loaded]) == 0
    listing = capsys.readouterr().out
    assert "tanh-to-sigmoid: every tanh becomes a sigmoid\n    requires anf" in listing


def test_loading_the_same_file_twice_replaces_its_passes(tmp_path, capsys):
    assert opt(tmp_path, capsys, PASSES, "-p", "to-anf,tanh-to-sigmoid")[0] == 0
    assert opt(tmp_path, capsys, PASSES, "-p", "to-anf,tanh-to-sigmoid")[0] == 0


def test_a_loaded_pass_that_breaks_its_declaration_is_named(tmp_path, capsys):
    code, out, err = opt(tmp_path, capsys, PASSES, "-p", "to-anf,flatten-claim")
    assert code == 1 and out == ""
    assert "my_passes.py:18:1: pass error: pass flatten-claim broke A-normal form, which it " in err
    assert "declares to establish: @main has a call with a compound argument" in err
    assert '@effir.transform.module_pass(name="flatten-claim", establishes={"anf"})' in err
    assert "Traceback" not in err


def test_a_pass_that_breaks_what_it_preserves_is_named(tmp_path, capsys):
    breaking = PASSES.replace('establishes={"anf"}', 'preserves={"anf"}')
    code, _, err = opt(tmp_path, capsys, breaking, "-p", "to-anf,flatten-claim")
    assert code == 1
    assert "pass flatten-claim broke A-normal form, which it declares to preserve" in err


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\ndef f(:\n", "my_passes.py:2:1: pass error: invalid Python: "),
        (
            "import effir\n\nvalue = 1 / 0\n",
            "my_passes.py:3:1: pass error: loading passes failed: "
            "ZeroDivisionError: division by zero",
        ),
        (
            "import effir\n\n@effir.transform.module_pass(name='dce')\ndef mine(m):\n    return m\n",
            "my_passes.py:3:1: pass error: loading passes failed: pass dce is already registered",
        ),
        (
            "import effir\n@effir.transform.module_pass(name='p', requires={'sorted'})\n"
            "def p(m):\n    return m\n",
            "my_passes.py:2:1: pass error: loading passes failed: pass p: unknown invariant "
            "'sorted'",
        ),
        ("import sys\nsys.exit(4)\n", "the file called exit(4) while it was loaded"),
    ],
    ids=["syntax", "exception", "duplicate", "invariant", "exit"],
)
def test_errors_in_the_file_are_located(tmp_path, capsys, source, message):
    code, out, err = opt(tmp_path, capsys, source, "-O1")
    assert code == 1 and out == ""
    assert message in err and "Traceback" not in err


def test_a_failed_load_registers_nothing(tmp_path, capsys):
    source = PASSES + "\nraise RuntimeError('late')\n"
    code, _, err = opt(tmp_path, capsys, source, "-O1")
    assert code == 1 and "RuntimeError: late" in err
    assert "tanh-to-sigmoid" not in registered_passes()


def test_a_missing_pass_file(tmp_path, capsys):
    program = write(tmp_path, "m.effir", PROGRAM)
    assert main(["opt", program, "-O1", "--load", str(tmp_path / "nope.py")]) == 1
    assert "nope.py: no such file" in capsys.readouterr().err


CLASS_PASSES = '''\
from dataclasses import dataclass

import effir
from effir.ir import Mutator, on
from effir.ir.expr import Call, Op
from effir.transform import FunctionPass, option


@dataclass(frozen=True)
class Rename(FunctionPass):
    """one operator becomes another"""

    name = "rename-op"
    requires = {"anf"}
    preserves = {"anf"}

    old: str = option("tanh", "the operator replaced")
    new: str = "sigmoid"

    def transform_function(self, fn, module, context):
        old, new = self.old, self.new

        class Swap(Mutator):
            @on(Call)
            def call(self, done, original):
                if isinstance(done.callee, Op) and done.callee.name == old:
                    return Call(Op(new), done.args, done.attrs)
                return done

        return Swap().mutate(fn)
'''


def test_a_pass_class_in_the_file_is_registered_with_its_options(tmp_path, capsys):
    code, out, err = opt(tmp_path, capsys, CLASS_PASSES, "-p", "to-anf,rename-op{new=exp}")
    assert (code, err) == (0, "")
    assert "exp(" in out and "tanh" not in out
    loaded = write(tmp_path, "my_passes.py", CLASS_PASSES)
    assert main(["opt", "--list-passes", "--load", loaded]) == 0
    listing = capsys.readouterr().out
    assert "rename-op: one operator becomes another\n    requires anf" in listing
    assert "option old=tanh (str): the operator replaced" in listing


def test_a_pass_class_with_a_wrong_declaration_is_located(tmp_path, capsys):
    wrong = CLASS_PASSES.replace('preserves = {"anf"}', 'establishes = {"anf"}')
    code, out, err = opt(tmp_path, capsys, wrong, "-O1")
    assert code == 1 and out == ""
    assert "my_passes.py:9:1: pass error: loading passes failed: pass rename-op" in err
    assert "both requires and establishes anf" in err and "Traceback" not in err
    assert "rename-op" not in registered_passes()
