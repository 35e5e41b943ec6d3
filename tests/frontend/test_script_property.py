"""Random Python functions in @effir.script's subset (arithmetic, if/else,
for over a tensor with carried state and per-step outputs, while with a
counter, nested functions, early returns in branches, sums started as Python
numbers, aliases plain and annotated): the scripted module, interpreted, equals the
Python run eagerly, and round-trips through text."""

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from tests.frontend.helpers import define

F32 = "float32"
EXAMPLES = int(os.environ.get("EFFIR_FRONTEND_EXAMPLES", "40"))


class Gen:
    """Builds a function body line by line from hypothesis' draws."""

    def __init__(self, draw):
        self.draw = draw
        self.lines: list[str] = []
        self.vars = ["x", "y"]
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def var(self) -> str:
        return self.draw(st.sampled_from(self.vars))

    def atom(self) -> str:
        choice = self.draw(st.integers(0, len(self.vars)))
        if choice == len(self.vars):
            return repr(self.draw(st.sampled_from([0.5, 1.0, -0.25, 2.0])))
        return self.vars[choice]

    def expr(self, depth: int = 0) -> str:
        kind = self.draw(st.integers(0, 4 if depth < 2 else 0))
        if kind == 0:
            return self.atom()
        if kind == 1:
            return f"np.tanh({self.expr(depth + 1)})"
        if kind == 2:
            return f"-{self.atom()}"
        op = self.draw(st.sampled_from(["+", "-", "*"]))
        return f"({self.expr(depth + 1)} {op} {self.expr(depth + 1)})"

    def emit(self, line: str, indent: int) -> None:
        self.lines.append("    " * indent + line)

    def statement(self, indent: int, depth: int) -> None:
        kind = self.draw(st.integers(0, 6 if depth < 2 else 0))
        if kind == 0:
            name = self.draw(st.sampled_from([*self.vars[2:], None])) or self.fresh()
            self.emit(f"{name} = np.tanh({self.var()} + {self.expr()})", indent)
            if name not in self.vars:
                self.vars.append(name)
        elif kind == 1:  # if/else assigning in both branches (or only in one, a defined name)
            target = self.draw(st.sampled_from(self.vars))
            self.emit(f"if np.sum({self.atom()}) > np.sum({self.atom()}):", indent)
            self.emit(f"{target} = np.tanh({self.var()} * {self.expr()})", indent + 1)
            self.emit("else:", indent)
            if self.draw(st.booleans()):
                self.emit(f"{target} = ({self.var()} + {self.expr()}) * 0.5", indent + 1)
            else:
                self.emit("pass", indent + 1)
        elif kind == 2:  # for over a tensor: carried state and per-step outputs
            carried = self.draw(st.sampled_from(self.vars))
            outs = self.fresh()
            self.emit(f"{outs} = []", indent)
            self.emit("for r in xs:", indent)
            self.emit(f"{carried} = np.tanh({carried} * 0.5 + r * {self.atom()})", indent + 1)
            self.emit(f"{outs}.append({carried} * 2.0)", indent + 1)
            total = self.fresh()
            self.emit(f"{total} = np.sum(np.stack({outs}), axis=0)", indent)
            self.vars.append(total)
        elif kind == 3:  # while with a counter
            carried = self.draw(st.sampled_from(self.vars))
            counter = self.fresh()
            self.emit(f"{counter} = 0", indent)
            self.emit(f"while {counter} < {self.draw(st.integers(0, 3))}:", indent)
            self.emit(f"{carried} = np.tanh({carried} + {self.atom()})", indent + 1)
            self.emit(f"{counter} = {counter} + 1", indent + 1)
        elif kind == 4:  # a nested function (a closure over the current names)
            fn = f"g{self.fresh()}"
            self.emit(f"def {fn}(a):", indent)
            self.emit(f"    return np.tanh(a * {self.atom()})", indent)
            name = self.fresh()
            self.emit(f"{name} = {fn}({self.var()})", indent)
            self.vars.append(name)
        elif kind == 6:  # an alias of the newest name, plain or annotated, then both used
            name, source = self.fresh(), self.vars[-1]
            annotation = self.draw(st.sampled_from(["", ": effir.Tensor[(4,), F32]"]))
            self.emit(f"{name}{annotation} = {source}", indent)
            self.emit(f"{name} = {name} * {source}", indent)
            self.vars.append(name)
        else:  # a loop body that itself branches
            carried = self.draw(st.sampled_from(self.vars))
            self.emit("for r in xs:", indent)
            self.emit("if np.sum(r) > 0.0:", indent + 1)
            self.emit(f"{carried} = np.tanh({carried} + r)", indent + 2)
            self.emit("else:", indent + 1)
            self.emit(f"{carried} = {carried} * 0.5", indent + 2)


@st.composite
def programs(draw):
    gen = Gen(draw)
    for _ in range(draw(st.integers(1, 6))):
        gen.statement(1, 0)
    results = draw(st.lists(st.sampled_from(gen.vars), min_size=1, max_size=3))
    if draw(st.booleans()):  # an early return in a branch, of the same structure
        early = [draw(st.sampled_from(gen.vars)) for _ in results]
        gen.emit(f"if np.sum({gen.var()}) > np.sum({gen.var()}):", 1)
        gen.emit(f"return ({', '.join(early)},)", 2)
    if draw(st.booleans()):  # a sum started as a Python number
        gen.emit("total = 0", 1)
        gen.emit("for r in xs:", 1)
        gen.emit(f"total = total + np.sum(r * {gen.var()})", 2)
        gen.emit(f"{results[0]} = {results[0]} + total", 1)
    body = "\n".join(gen.lines)
    return (
        "@effir.script\n"
        "def f(x: effir.Tensor[(4,), F32], y: effir.Tensor[(4,), F32],"
        " xs: effir.Tensor[('t', 4), F32]):\n"
        f"{body}\n    return ({', '.join(results)},)\n"
    )


ARGS = [
    np.array([0.5, -1.0, 0.25, 2.0], F32),
    np.array([-0.5, 1.5, 0.75, -2.0], F32),
    np.linspace(-1, 1, 12, dtype=F32).reshape(3, 4),
]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_scripted_equals_eager(source):
    f = define(source)["f"]
    module = f.module
    effir.check(module)
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    got = f.interpret(*ARGS)
    want = f(*ARGS)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=source)
