"""One error class per kind of error, whichever way the program runs: the
interpreter, the compiled module and the exported, reloaded artifact give
the same exception (class and text) for the same bad input. A run-time
failure of the program is an ``EvalError`` everywhere, also where compiled
code finds it while building a specialisation (a batch norm over one
value; a reshape that the call's sizes make impossible) rather than while
running; an entry the program lacks is the same ``ArgumentError``
everywhere. Compiled runs go through ``tests/support/isolated.py``."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from tests.support.isolated import run_isolated

HEADER = '#[version = "0.0.5"]\n'


class Case(NamedTuple):
    params: str
    body: str
    args: str
    error: str  # how the error starts: class, location, kind, message
    loaded: bool | str = True
    """Whether a loaded artifact serves the call (it holds the shapes it
    was built for, and a binding under which the program cannot run is
    never built), or the arguments of a call that builds its shape."""
    located: bool = True
    """Whether the three locate the error alike: an argument's error is
    located at the parameter by the interpreter only (compiled code has
    no source), so there the class and message are compared."""


CASES = {
    "batch_norm_static": Case(
        "%x: Tensor[(1, 2), float32], %g: Tensor[(2), float32]",
        "nn.batch_norm_train(%x, %g, %g, %g, %g).0",
        "np.ones((1, 2), 'float32'), np.ones(2, 'float32')",
        "EvalError: m.effir:3:3: runtime error: nn.batch_norm_train: expected more than 1 "
        "value per channel when training, got input of shape (1, 2)",
    ),
    "batch_norm_symbolic": Case(
        "%x: Tensor[(n, 2), float32], %g: Tensor[(2), float32]",
        "nn.batch_norm_train(%x, %g, %g, %g, %g).0",
        "np.ones((1, 2), 'float32'), np.ones(2, 'float32')",
        "EvalError: m.effir:3:3: runtime error: nn.batch_norm_train: expected more than 1 "
        "value per channel when training, got input of shape (1, 2)",
    ),
    "batch_norm_not_reached": Case(
        "%x: Tensor[(1, 2), float32], %g: Tensor[(2), float32], %c: bool",
        "if (%c) { nn.batch_norm_train(%x, %g, %g, %g, %g).0 } else { %x }",
        "np.ones((1, 2), 'float32'), np.ones(2, 'float32'), np.bool_(False)",
        "no error",
    ),
    "reshape_under_binding": Case(
        "%x: Tensor[(n, 3), float32]",
        "sum(reshape(%x, newshape=[-1, 5]))",
        "np.ones((2, 3), 'float32'),",
        "EvalError: m.effir:3:7: runtime error: reshape: cannot reshape 6 elements into "
        "shape (-1, 5)",
        loaded=False,
    ),
    "argument": Case(
        "%x: Tensor[(n, 3), float32]",
        "sum(%x)",
        "np.ones((2, 3), 'int32'),",
        "ArgumentError: parameter %x of @main expects Tensor[(n, 3), float32], got",
        loaded="np.ones((2, 3), 'float32'),",
        located=False,
    ),
}


def source(name: str) -> str:
    params, body = CASES[name].params, CASES[name].body
    return f"{HEADER}def @main({params}) {{\n  {body}\n}}\n"


def test_the_same_bad_input_raises_the_same_error_in_every_mode(tmp_path: Path) -> None:
    lines = [
        "import numpy as np, effir",
        "def outcome(f, located=True):",
        "    try:",
        "        f()",
        "        return 'no error'",
        "    except Exception as e:",
        "        return f'{type(e).__name__}: {e if located else e.message}'",
    ]
    for k, (name, case) in enumerate(CASES.items()):
        args, loadable, located = case.args, case.loaded, case.located
        art = str(tmp_path / f"art{k}")
        lines += [
            f"m = effir.parse({source(name)!r}, source_name='m.effir')",
            "c = effir.compile(m)",  # compiles: nothing is wrong before a call
            f"args = ({args})",
            f"got = [outcome(lambda: effir.interpret(m, *args), {located}),",
            f"       outcome(lambda: c(*args), {located})]",
        ]
        if loadable:
            if isinstance(loadable, str):
                lines.append(f"c(*({loadable}))")
            lines += [
                f"c.export({art!r})",
                f"got.append(outcome(lambda: effir.load({art!r})(*args), {located}))",
            ]
        lines += [
            f"assert len(set(got)) == 1, ({name!r}, got)",
            f"assert got[0].startswith({case.error!r}), ({name!r}, got[0])",
        ]
    # an entry the program lacks: one ArgumentError from all three
    art = str(tmp_path / "entry")
    lines += [
        f"m = effir.parse({source('argument')!r})",
        "c = effir.compile(m)",
        "x = np.ones((2, 3), 'float32')",
        f"c(x); c.export({art!r}); loaded = effir.load({art!r})",
        "got = [outcome(lambda: effir.interpret(m, x, entry='nope')),",
        "       outcome(lambda: c(x, entry='nope')), outcome(lambda: loaded(x, entry='nope'))]",
        "assert len(set(got)) == 1, got",
        "assert got[0] == 'ArgumentError: runtime error: the program has no function @nope "
        "(its functions: @main); entry= names the function to run', got",
        "print('ok')",
    ]
    run_isolated("\n".join(lines)).check()
