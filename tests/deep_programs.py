"""Deep programs as text, one generator per construct, each a function of a
size ``n`` (nesting depth, or length of a flat chain).

Shared by `benchmarks/deep.py` (the 5k/10k/20k table) and the tests that
show each command's work grows linearly with ``n``. Every program is well
typed; ``nested ref(`` is one that state passing rejects (the references
escape), so ``effir opt`` on it times the error path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import effir
from effir.passes.analyses.infer_effects import check_effects
from effir.passes.analyses.verify_linear import linearity_errors
from effir.passes.infra.pipeline import pipeline
from effir.passes.infra.transform import PassContext

H = '#[version = "0.0.5"]\n'


def _main(params: str, body: str) -> str:
    return H + f"def @main({params}) {{\n  {body}\n}}\n"


def nested_tuples(n: int) -> str:
    """``((((%x, %x), %x), %x) ...)``: a tuple type ``n`` deep."""
    return _main("%x: float32", "(" * n + "%x" + ", %x)" * n)


def nested_tuples_of_unknown(n: int) -> str:
    """``nested tuples`` in a closure whose parameter's type inference
    learns only at the call, after typing the body: the tuple types hold an
    unknown all along."""
    tuples = "(" * n + "%y" + ", %y)" * n
    return _main("%x: float32", f"let %f = fn (%y) {{ {tuples} }};\n  %f(%x)")


def nested_fns(n: int) -> str:
    """``fn () { fn () { ... %x } }``: closures ``n`` deep, a function type
    ``n`` deep."""
    return _main("%x: float32", "fn () { " * n + "%x" + " }" * n)


def nested_refs(n: int) -> str:
    """``ref(ref(... %x))``: a reference type ``n`` deep."""
    return _main("%x: float32", "ref(" * n + "%x" + ")" * n)


def nested_ref_reads(n: int) -> str:
    """``ref_read(ref(ref_read(ref(... %x))))``: local references that
    state passing turns into plain values."""
    return _main("%x: float32", "ref_read(ref(" * n + "%x" + "))" * n)


def nested_ifs(n: int) -> str:
    """``if (%c) { if (%c) { ... } else { %x } } else { %x }``."""
    return _main("%c: bool, %x: float32", "if (%c) { " * n + "%x" + " } else { %x }" * n)


def nested_lets(n: int) -> str:
    """``let %v = { let %v = { ... }; %v }; %v``: lets in value position."""
    return _main("%x: float32", "let %v = { " * n + "%x" + " }; %v" * n)


def nested_calls(n: int) -> str:
    """``negative(negative(... %x))``."""
    return _main("%x: float32", "negative(" * n + "%x" + ")" * n)


def nested_global_calls(n: int) -> str:
    """``@f(@f(... %x))``: calls of a global function."""
    body = "@f(" * n + "%x" + ")" * n
    return _main("%x: float32", body).replace(
        "def @main", "def @f(%y: float32) -> float32 { %y }\ndef @main"
    )


def infix_chain(n: int) -> str:
    """``%x + %x + ... + %x``: ``n`` infix operators, left-nested calls."""
    return _main("%x: float32", "%x" + " + %x" * n)


def let_chain(n: int) -> str:
    """``let %v1 = %v0 + 1f; let %v2 = %v1 + 1f; ...``: ``n`` flat bindings."""
    lets = "".join(f"let %v{i} = %v{i - 1} + 1f;\n  " for i in range(1, n))
    return H + f"def @main(%v0: float32) {{\n  {lets}%v{n - 1}\n}}\n"


DEEP_PROGRAMS: dict[str, Callable[[int], str]] = {
    "nested tuples": nested_tuples,
    "tuples of an unknown": nested_tuples_of_unknown,
    "nested fn": nested_fns,
    "nested ref(": nested_refs,
    "nested ref_read(ref(": nested_ref_reads,
    "nested if": nested_ifs,
    "nested let": nested_lets,
    "nested op calls": nested_calls,
    "nested @f calls": nested_global_calls,
    "infix chain": infix_chain,
    "flat let chain": let_chain,
}
"""Each construct's generator, by the name the benchmark table shows."""

STAGES = ("parse", "print", "check", "opt -O2")
"""What the commands do to a program: `effir fmt` parses and prints it,
`effir check` parses and checks it (types and effects), `effir opt -O2`
parses it and runs the -O2 passes with each output verified. (Also
``check --linear``: what `effir check --linear` adds, the linearity check
of keys and the world token.)"""


def stage_action(stage: str, text: str) -> Callable[[], object]:
    """``stage`` of a command on the program ``text``, ready to run: the
    parse itself, or the stage on a module parsed beforehand (afresh: a
    module once checked is not checked again)."""
    if stage == "parse":
        return lambda: effir.parse(text)
    module = effir.parse(text)
    if stage == "print":
        return lambda: effir.astext(module)
    if stage == "check":
        return lambda: (effir.check(module), check_effects(module))
    if stage == "opt -O2":
        return lambda: pipeline("O2")(module, PassContext(verify=True))
    if stage == "check --linear":  # the linearity check, on a checked module
        effir.check(module)
        return lambda: linearity_errors(module)
    raise ValueError(f"unknown stage {stage!r}")


def work(action: Callable[[], object]) -> int:
    """The lines of Python that ``action()`` executes (calls and returns
    included): a measure of its time that does not depend on the machine or
    its load, so a test can show that work grows linearly with a program's
    size without timing anything. (Loops inside C, such as copying a long
    string, are not counted.)"""
    count = 0

    def trace(frame: object, event: str, arg: object) -> Callable:
        nonlocal count
        count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        action()
    finally:
        sys.settrace(previous)
    return count
