"""Parse and print speed of the text format on large programs.

Prints a table: program, size, and the median of several runs of parse,
print, structural equality, structural hash and the well-formedness check.
Run with `make bench` (or `.venv/bin/python benchmarks/parse_print.py`).
"""

from __future__ import annotations

from timing import median_seconds

import effir
from effir.ir import Call, Function, If, IRModule, Let, TensorType, Var, get_op


def let_chain(n: int) -> IRModule:
    x = Var("x", TensorType((4,), "float32"))
    add = get_op("add")
    bindings, previous = [], x
    for i in range(n):
        var = Var(f"v{i}")
        bindings.append((var, Call(add, (previous, previous))))
        previous = var
    body = previous
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return IRModule({"main": Function((x,), body)})


def nested_ifs(n: int) -> IRModule:
    x = Var("x", TensorType((4,), "float32"))
    c = Var("c", TensorType((), "bool"))
    body = x
    for _ in range(n):
        body = If(c, body, x)
    return IRModule({"main": Function((x, c), body)})


def main() -> None:
    programs = [
        ("let chain, 10,000 bindings", let_chain(10_000)),
        ("let chain, 100,000 bindings", let_chain(100_000)),
        ("nested ifs, 10,000 deep", nested_ifs(10_000)),
    ]
    header = f"| {'program':30} | {'text KiB':>8} | {'parse s':>7} | {'print s':>7} | {'equal s':>7} | {'hash s':>7} | {'check s':>7} |"
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for name, module in programs:
        text = effir.astext(module)
        parsed = effir.parse(text)
        t_parse = median_seconds(lambda text=text: effir.parse(text))
        t_print = median_seconds(lambda m=module: effir.astext(m))
        t_equal = median_seconds(lambda a=module, b=parsed: effir.structural_equal(a, b))
        t_hash = median_seconds(lambda m=module: effir.structural_hash(m))
        t_check = median_seconds(lambda m=parsed: effir.check_well_formed(m))
        print(
            f"| {name:30} | {len(text) / 1024:8.0f} | {t_parse:7.2f} | {t_print:7.2f} | "
            f"{t_equal:7.2f} | {t_hash:7.2f} | {t_check:7.2f} |"
        )


if __name__ == "__main__":
    main()
