"""explicate, state-passing, split-keys and the linearity verifier on large
effectful programs, and the cost of the A2 program in the interpreter
against the A1 program it came from.

Prints a table: program, then the median of several runs of each pass (the
input of each is the previous one's output), of `verify_linear` on the A2
program, and of one interpretation of A1 and of A2. Run with `make bench`
(or `.venv/bin/python benchmarks/effect_passes.py`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from timing import median_seconds

import effir
from effir.backends.interpreter import interpret_a2
from effir.passes.analyses.verify_linear import verify_linear
from effir.passes.transforms.explicate import explicate
from effir.passes.transforms.split_keys import split_keys
from effir.passes.transforms.state_passing import state_passing

H = '#[version = "0.0.5"]\n'
EXAMPLES = Path(__file__).parents[1] / "examples"
CELLS = (
    "global @rng: Ref[Key] = ref(random.key(0));\n"
    "global @acc: Ref[Tensor[(64), float32]] = ref(zeros(shape=[64]));\n"
)


def dropout_chain(n: int) -> tuple[str, tuple]:
    """n dropouts in a row, each also accumulated into a cell."""
    lets = "".join(
        f"let %v{i} = nn.dropout(%v{i - 1}, @rng, rate=0.1f);\n"
        f"ref_write(@acc, add(ref_read(@acc), %v{i}));\n"
        for i in range(1, n)
    )
    text = H + CELLS + f"def @main(%v0: Tensor[(64), float32]) {{\n{lets}%v{n - 1}\n}}"
    return text, (np.ones(64, np.float32),)


def many_functions(n: int) -> tuple[str, tuple]:
    """A chain of n global functions, each doing a dropout and calling the next."""
    defs = "".join(
        f"def @f{i}(%x: Tensor[(64), float32]) -> Tensor[(64), float32] {{\n"
        f"  @f{i + 1}(nn.dropout(%x, @rng, rate=0.1f))\n}}\n"
        for i in range(n)
    )
    defs += f"def @f{n}(%x: Tensor[(64), float32]) -> Tensor[(64), float32] {{ %x }}\n"
    text = H + CELLS + defs + "def @main(%x: Tensor[(64), float32]) { @f0(%x) }\n"
    return text, (np.ones(64, np.float32),)


def rnn(t: int, b: int) -> tuple[str, tuple]:
    text = (EXAMPLES / "rnn_dropout_bn.effir").read_text()
    rng = np.random.default_rng(0)
    args = (
        rng.standard_normal((t, b, 8)).astype(np.float32),
        rng.standard_normal((b, 16)).astype(np.float32),
        (0.3 * rng.standard_normal((16, 8))).astype(np.float32),
        (0.3 * rng.standard_normal((16, 16))).astype(np.float32),
        np.zeros(16, np.float32),
        np.ones(16, np.float32),
        np.zeros(16, np.float32),
    )
    return text, args


def main() -> None:
    cases = [
        ("dropout chain, 1,000 dropouts", dropout_chain(1_000)),
        ("500 functions calling each other", many_functions(500)),
        ("RNN example, t=200, b=32", rnn(200, 32)),
    ]
    print(
        "| program                          | explicate s | state-passing s | split-keys s "
        "| verify s | run A1 s | run A2 s |"
    )
    print(
        "|----------------------------------|-------------|-----------------|--------------"
        "|----------|----------|----------|"
    )
    for name, (text, args) in cases:
        module = effir.parse(text)
        a1 = explicate(module)
        explicate_s = median_seconds(lambda m=module: explicate(m))
        a2 = state_passing(a1)
        state_s = median_seconds(lambda m=a1: state_passing(m))
        split_s = median_seconds(lambda m=a2: split_keys(m))
        verify_s = median_seconds(lambda m=a2: verify_linear(m))
        effir.check(module)
        run1 = median_seconds(lambda m=module, a=args: effir.interpret(m, *a))
        run2 = median_seconds(lambda m=a2, a=args: interpret_a2(m, *a))
        print(
            f"| {name:<32} | {explicate_s:11.3f} | {state_s:15.3f} | {split_s:12.3f} "
            f"| {verify_s:8.3f} | {run1:8.3f} | {run2:8.3f} |"
        )


if __name__ == "__main__":
    main()
