"""The ``effir`` command line.

Every user error is printed as one located diagnostic on stderr with exit
status 1; usage errors exit 2 (argparse's convention); a bug inside effir
exits 3 with a one-paragraph report, never a Python traceback (set
``EFFIR_TRACEBACK=1`` to see it).
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from collections.abc import Callable, Sequence
from typing import BinaryIO

import numpy as np

from effir.passes.analyses.infer_effects import check_effects, effect_text
from effir.passes.analyses.infer_type import check
from effir.passes.analyses.verify_linear import linearity_errors

from . import __version__
from .backends.interpreter import State, interpret_a2, state_cells
from .backends.tvm.runtime.importing import import_tvm
from .graph import visualize
from .importers import from_onnx
from .io_safety import output_directory, read_for_rewrite, rewrite, write_program
from .ir import EffectError, Error, IRModule, TypeCheckError, astext, parse
from .runtime.limits import LimitSettingError, tensor_too_large
from .runtime.values import PRNGKey, describe_value
from .transform import (
    STANDARD_PIPELINES,
    PassContext,
    PrintIR,
    Timing,
    load_pass_file,
    pipeline,
    registered_passes,
)

EXIT_OK, EXIT_USER_ERROR, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class CommandError(Error):
    """A command-line problem that is not about program text (a missing file...)."""

    kind = "error"


def read_input(path: str) -> tuple[bytes, str]:
    """The bytes of ``path`` (``-``: standard input) and the name for diagnostics."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        with open(path, "rb") as handle:
            return handle.read(), path
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CommandError(f"{path}: is a directory") from None
    except PermissionError:
        raise CommandError(f"{path}: permission denied") from None
    except OSError as err:
        raise CommandError(f"{path}: {err.strerror or err}") from None


def load_module(path: str) -> tuple[IRModule, str, str]:
    data, name = read_input(path)
    module = parse(data, source_name=name)
    return module, data.decode("utf-8"), name


def cmd_fmt(args: argparse.Namespace) -> int:
    if args.in_place and args.check:
        raise CommandError("fmt: choose one of -i and --check")
    if args.in_place and "-" in args.files:
        raise CommandError("fmt -i: cannot rewrite standard input in place")
    if not args.in_place and not args.check and len(args.files) > 1:
        raise CommandError("fmt: give one file, or use -i or --check for several")
    status = EXIT_OK
    for path in args.files:
        if args.in_place:  # io_safety.py: what may be rewritten, and how
            file = read_for_rewrite(path)
            module = parse(file.data, source_name=path)
            canonical = astext(module)
            if canonical.encode("utf-8") != file.data:
                rewrite(file, canonical)
            continue
        module, original, name = load_module(path)
        canonical = astext(module)
        if args.check:
            if canonical != original:
                print(f"would reformat {name}", file=sys.stderr)
                status = EXIT_USER_ERROR
        else:
            sys.stdout.write(canonical)
    return status


def cmd_check(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        try:
            module, _, name = load_module(path)
            check(module)  # well-formedness first, then types
            info = check_effects(module)
        except EffectError as err:
            print(str(err), file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        except TypeCheckError as err:  # every type error, each located
            print(str(err), file=sys.stderr)
            count = len(err.errors)
            print(f"{count} error{'s' if count != 1 else ''} found", file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        if args.linear and (errors := linearity_errors(module)):
            print("\n".join(str(e) for e in errors), file=sys.stderr)
            print(f"{len(errors)} error{'s' if len(errors) != 1 else ''} found", file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        if not args.quiet:
            counts = (
                f"{len(module.functions)} function(s), {len(module.type_defs)} type(s), "
                f"{len(module.cells)} state cell(s)"
            )
            print(f"{name}: ok ({counts})")
        if args.effects:
            for fn_name, effects in info.functions.items():
                print(f"@{fn_name}: {effect_text(effects)}")
    return status


def parse_arg_option(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    name = name.removeprefix("%")
    if not sep or not name or not path:
        raise CommandError(f"--arg {text!r}: expected NAME=FILE.npy")
    return name, path


def check_array_header(handle: BinaryIO, where: str) -> None:
    """Read the ``.npy`` header at the start of ``handle`` and refuse a size
    over the limit (runtime/limits.py) before the array itself is read."""
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
    message = tensor_too_large(shape, dtype, "the array")
    if message is not None:
        raise CommandError(f"{where}: {message}")


def load_array(path: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path``, its size checked first."""
    try:
        with open(path, "rb") as handle:
            check_array_header(handle, path)
            handle.seek(0)
            return np.load(handle, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CommandError(f"{path}: is a directory") from None
    except PermissionError:
        raise CommandError(f"{path}: permission denied") from None
    except (OSError, ValueError, EOFError, MemoryError, OverflowError) as err:
        raise CommandError(f"{path}: not a .npy array file ({err or type(err).__name__})") from None


def load_arrays(path: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive ``path`` by name, each one's size
    checked before it is read."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                name = member.removesuffix(".npy")
                with archive.open(member) as handle:
                    check_array_header(handle, f"{path}: {name}")
                with archive.open(member) as handle:
                    arrays[name] = np.lib.format.read_array(handle, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CommandError(f"{path}: is a directory") from None
    except PermissionError:
        raise CommandError(f"{path}: permission denied") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, MemoryError) as err:
        raise CommandError(f"{path}: not a .npz archive of arrays ({err})") from None
    return arrays


def run_arguments(
    entry: str, names: list[str], given: dict[str, str], archive: str | None
) -> list[np.ndarray]:
    """The entry's argument values, by parameter: from ``--arg NAME=FILE.npy``
    and from the ``--args`` archive, whose arrays are named after parameters
    or by position (``arg0``, ``arg1``...). A name that is no parameter, a
    parameter given twice or not at all is an error that lists them."""
    listed = ", ".join("%" + n for n in names) or "none"
    values: dict[str, np.ndarray] = {}
    stored = load_arrays(archive) if archive is not None else {}
    for key, array in stored.items():
        if key in names:
            name = key
        elif key.startswith("arg") and key[3:].isdigit() and int(key[3:]) < len(names):
            name = names[int(key[3:])]
        else:
            raise CommandError(
                f"{archive}: @{entry} has no parameter named {key!r} (parameters: {listed}; "
                f"or arg0..arg{len(names) - 1} by position)"
                if names
                else f"{archive}: @{entry} takes no arguments, but the archive has {key!r}"
            )
        if name in values:
            raise CommandError(f"{archive}: the parameter %{name} is given twice")
        values[name] = array
    for name in given:
        if name not in names:
            raise CommandError(f"@{entry} has no parameter %{name} (parameters: {listed})")
        if name in values:
            raise CommandError(f"the parameter %{name} is given by --arg and by --args")
    missing = [n for n in names if n not in values and n not in given]
    if missing:
        raise CommandError(
            f"@{entry} needs --arg {missing[0]}=FILE.npy (or {missing[0]} in --args FILE.npz)"
            + (f" (missing: {', '.join('%' + n for n in missing)})" if len(missing) > 1 else "")
        )
    return [values[n] if n in values else load_array(given[n]) for n in names]


def result_leaves(value: object, prefix: str) -> list[tuple[str, object]]:
    """(name, value) for each tensor or other leaf of a result; tuples are
    numbered ``result.0``, ``result.1.0``..."""
    leaves: list[tuple[str, object]] = []
    stack = [(prefix, value)]
    while stack:
        name, v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(reversed([(f"{name}.{i}", f) for i, f in enumerate(v)]))
        else:
            leaves.append((name, v))
    return leaves


def cmd_run(args: argparse.Namespace) -> int:
    module, _, name = load_module(args.file)
    check(module)
    entry = args.entry.removeprefix("@")
    if entry not in module.functions:
        known = ", ".join("@" + n for n in module.functions) or "none"
        raise CommandError(f"{name}: no function @{entry} (functions: {known})")
    fn = module.functions[entry]
    # A state-passing entry takes its state from the cells' declarations, as
    # the effectful program it came from did (docs/passes.md).
    state_params = len(state_cells(fn, "state_in", entry))
    params = fn.params[: len(fn.params) - state_params]
    given = dict(parse_arg_option(text) for text in args.arg)
    names = [p.name_hint for p in params]
    values = run_arguments(entry, names, given, args.args)
    state = State(module, seed=args.seed)
    result = interpret_a2(module, *values, entry=entry, state=state)
    leaves = result_leaves(result, "result")
    for leaf_name, value in leaves:
        print(f"{leaf_name}: {describe_value(value, limit=10_000)}")
    if args.output:
        arrays = {}
        state_leaves = []
        for cell, value in state.values().items():
            state_leaves += result_leaves(value, f"state.{cell}")
        for leaf_name, value in leaves + state_leaves:
            if isinstance(value, np.ndarray):
                arrays[leaf_name] = value
            elif isinstance(value, PRNGKey):
                arrays[leaf_name] = np.array(value.data)
        try:
            np.savez(args.output, **arrays)
        except OSError as err:
            raise CommandError(f"{args.output}: {err.strerror or err}") from None
    return EXIT_OK


def list_passes() -> str:
    """Every registered pass: its name and one-line description, what it
    requires and establishes, its options; then the standard pipelines."""
    lines = []
    for p in registered_passes().values():
        lines.append(p.describe())
    lines.append("")
    lines.append("standard pipelines (-O LEVEL, opt_level=LEVEL):")
    for name, text in STANDARD_PIPELINES.items():
        lines.append(f"  {name}: {text or '(no pass)'}")
    return "\n".join(lines) + "\n"


def load_pass_files(paths: Sequence[str]) -> None:
    """Run the users' pass files (``--load``) before any pipeline is parsed."""
    for path in paths:
        load_pass_file(path)


def cmd_opt(args: argparse.Namespace) -> int:
    load_pass_files(args.load)
    if args.list_passes:
        sys.stdout.write(list_passes())
        return EXIT_OK
    if args.file is None:
        raise CommandError("opt: give a FILE (or --list-passes)")
    if (args.pipeline is None) == (args.level is None):
        raise CommandError("opt: give a pipeline with -p, or a standard one with -O1/-O2")
    passes = pipeline(args.pipeline if args.pipeline is not None else args.level)
    module, _, name = load_module(args.file)  # a bad pipeline fails before any reading
    instruments: list = []
    timing = Timing()
    if args.timing:
        instruments.append(timing)
    if args.print_after_all:
        instruments.append(PrintIR("after"))
    elif args.print_after_change:
        instruments.append(PrintIR("after-change"))
    level = int(args.level[1:]) if args.level is not None else PassContext().opt_level
    context = PassContext(opt_level=level, instruments=instruments, verify=not args.no_verify)
    module = passes(module, context)
    text = astext(module)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            raise CommandError(f"{args.output}: {err.strerror or err}") from None
    else:
        sys.stdout.write(text)
    if args.timing:
        print(timing.table(), file=sys.stderr)
    return EXIT_OK


def parse_dim(text: str) -> tuple[str, int]:
    name, sep, size = text.partition("=")
    if not sep or not name or not size.isdigit():
        raise CommandError(f"--dims {text!r}: expected NAME=SIZE, such as t=100")
    return name, int(size)


def cmd_compile(args: argparse.Namespace) -> int:
    """Compile a program for a target and export it (docs/backend.md)."""
    load_pass_files(args.load)
    module, _, name = load_module(args.file)
    check(module)
    import_tvm()  # without the PyTorch import TVM's FFI makes (runtime/importing.py)
    from .backends.tvm.driver.compile import compile as compile_module  # lazy: imports TVM
    from .backends.tvm.runtime.artifact import MANIFEST  # lazy: imports TVM

    output_directory(args.output, MANIFEST)  # refused before compiling (io_safety.py)
    compiled = compile_module(
        module,
        args.target,
        args.pipeline,
        opt_level=None if args.pipeline is not None else args.level,
        verbose=not args.quiet,  # progress on standard error
        precision=args.precision,
    )
    entry = args.entry.removeprefix("@")
    if entry not in compiled.module.functions:
        known = ", ".join("@" + n for n in compiled.module.functions) or "none"
        raise CommandError(f"{name}: no function @{entry} (functions: {known})")
    signature = compiled.signature(entry)
    needed = sorted(
        {
            d
            for _, spec in signature.params
            for leaf in _tensor_specs(spec)
            for d in leaf.shape
            if isinstance(d, str) and d != "?"
        }
    )
    bindings = [dict(parse_dim(text) for text in group.split(",")) for group in args.dims]
    if needed and not bindings:
        raise CommandError(
            f"@{entry} has the symbolic dimensions {', '.join(needed)}: give their sizes with "
            f"--dims {','.join(d + '=SIZE' for d in needed)} (repeat --dims for more shapes)"
        )
    for dims in bindings or [{}]:
        missing = [d for d in needed if d not in dims]
        unknown = [d for d in dims if d not in needed]
        if missing or unknown:
            wrong = f"no size for {', '.join(missing)}" if missing else f"no dimension {unknown[0]}"
            raise CommandError(f"--dims {dims}: {wrong} (@{entry} has: {', '.join(needed)})")
        compiled.specialisation(entry, dims)
    path = compiled.export(args.output)
    print(compiled.report.table())
    print(f"exported to {path}")
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    """A dataflow picture of a program's functions, as SVG (effir/graph.py)."""
    module, _, name = load_module(args.file)
    names = [n.removeprefix("@") for n in args.function] or None
    for fn_name in names or ():
        if fn_name not in module.functions:
            known = ", ".join("@" + n for n in module.functions) or "none"
            raise CommandError(f"{name}: no function @{fn_name} (functions: {known})")
    svg = visualize(module, names).svg
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(svg)
        except OSError as err:
            raise CommandError(f"{args.output}: {err.strerror or err}") from None
    else:
        sys.stdout.write(svg + "\n")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    """An ONNX model as an effir program (docs/importers.md)."""
    data, _ = read_input(args.model)  # a missing or unreadable file: a CommandError
    model = data if args.model == "-" else args.model
    module = from_onnx(model, opset=args.opset, initializers=args.initializers)
    text = astext(module)
    if args.output:
        write_program(args.output, text, source=None if args.model == "-" else args.model)
        if not args.quiet:
            counts = (
                f"{len(module.functions)} function(s), {len(module.type_defs)} type(s), "
                f"{len(module.cells)} state cell(s)"
            )
            print(f"{args.output}: {counts}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _tensor_specs(spec: object) -> list:
    from .backends.tvm.runtime.signature import TensorSpec, TupleSpec  # lazy: imports TVM

    if isinstance(spec, TupleSpec):
        return [leaf for field in spec.fields for leaf in _tensor_specs(field)]
    return [spec] if isinstance(spec, TensorSpec) else []


def add_load_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="PASSES.py",
        help="run this Python file first: the passes it registers can be named in the "
        "pipeline (repeat for more files)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="effir",
        description="effir: an IR for effectful, dynamic machine-learning programs",
    )
    parser.add_argument("--version", action="version", version=f"effir {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    fmt = commands.add_parser("fmt", help="print a program in canonical form")
    fmt.add_argument("files", nargs="+", metavar="FILE", help="a file, or - for standard input")
    fmt.add_argument("-i", dest="in_place", action="store_true", help="rewrite files in place")
    fmt.add_argument(
        "--check", action="store_true", help="exit 1 if a file is not in canonical form"
    )
    fmt.set_defaults(run=cmd_fmt)

    check = commands.add_parser("check", help="parse and verify a program")
    check.add_argument("files", nargs="+", metavar="FILE", help="a file, or - for standard input")
    check.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    check.add_argument(
        "--effects", action="store_true", help="print each global function's effects"
    )
    check.add_argument(
        "--linear",
        action="store_true",
        help="also verify that keys and the world token are used once and new state is kept",
    )
    check.set_defaults(run=cmd_check)

    opt = commands.add_parser("opt", help="run passes and print the result")
    opt.add_argument("file", nargs="?", metavar="FILE", help="a file, or - for standard input")
    opt.add_argument(
        "-p",
        "--passes",
        dest="pipeline",
        metavar="PIPELINE",
        help="comma-separated pass names with options in braces, e.g. "
        "explicate,state-passing,fuse{max-fused-ops=32} (--list-passes shows them)",
    )
    opt.add_argument(
        "--list-passes",
        action="store_true",
        help="print every pass with its description and options, and exit",
    )
    opt.add_argument(
        "-O",
        dest="level",
        choices=sorted(STANDARD_PIPELINES),
        type=lambda level: "O" + level,
        metavar="LEVEL",
        help="a standard pipeline: -O1 (the effect passes), -O2 (and optimisation)",
    )
    opt.add_argument("-o", "--output", metavar="OUT", help="write the result to OUT")
    add_load_option(opt)
    prints = opt.add_mutually_exclusive_group()
    prints.add_argument(
        "--print-after-all", action="store_true", help="print the program after each pass"
    )
    prints.add_argument(
        "--print-after-change",
        action="store_true",
        help="print the program after each pass that changed it",
    )
    opt.add_argument("--timing", action="store_true", help="print each pass's time")
    opt.add_argument(
        "--no-verify",
        action="store_true",
        help="do not type-check (and check linearity) after each pass",
    )
    opt.set_defaults(run=cmd_opt)

    run_cmd = commands.add_parser("run", help="run a program with the reference interpreter")
    run_cmd.add_argument("file", metavar="FILE", help="a file, or - for standard input")
    run_cmd.add_argument("--entry", default="main", help="the function to run (default: main)")
    run_cmd.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="the value of parameter %%NAME, from a .npy file (repeat for each parameter)",
    )
    run_cmd.add_argument(
        "--args",
        metavar="INPUTS.npz",
        help="the parameters' values from one .npz archive, each array named after its "
        "parameter or by position (arg0, arg1...)",
    )
    run_cmd.add_argument(
        "--seed", type=int, default=None, help="seed the PRNG state cells (default: as declared)"
    )
    run_cmd.add_argument("--output", metavar="OUT.npz", help="also write the results to OUT.npz")
    run_cmd.set_defaults(run=cmd_run)

    compile_cmd = commands.add_parser(
        "compile", help="compile a program with TVM and export it (docs/backend.md)"
    )
    compile_cmd.add_argument("file", metavar="FILE", help="a file, or - for standard input")
    compile_cmd.add_argument(
        "--target",
        default="llvm",
        help='llvm (this CPU), cuda, or a TVM target such as "llvm -mcpu=skylake-avx512" '
        'or "cuda -arch=sm_90"',
    )
    passes = compile_cmd.add_mutually_exclusive_group()
    passes.add_argument(
        "-O",
        dest="level",
        type=int,
        choices=[0, 1, 2],
        default=None,
        metavar="LEVEL",
        help="the optimisation level: 0, 1 or 2 (default 2)",
    )
    passes.add_argument(
        "-p", "--passes", dest="pipeline", metavar="PIPELINE", help="the passes to run instead"
    )
    compile_cmd.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "tf32", "bfloat16"],
        help="how float32 matrix products multiply: float32 (default), or operands rounded "
        "to tf32 or bfloat16 (tensor cores on cuda; docs/backend.md)",
    )
    compile_cmd.add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines on standard error"
    )
    add_load_option(compile_cmd)
    compile_cmd.add_argument("-o", "--output", required=True, metavar="DIR", help="the artifact")
    compile_cmd.add_argument("--entry", default="main", help="the entry (default: main)")
    compile_cmd.add_argument(
        "--dims",
        action="append",
        default=[],
        metavar="NAME=SIZE,...",
        help="sizes of the entry's symbolic dimensions to build for (repeat for more shapes)",
    )
    compile_cmd.set_defaults(run=cmd_compile)

    import_cmd = commands.add_parser(
        "import", help="an ONNX model as an effir program (docs/importers.md)"
    )
    import_cmd.add_argument("model", metavar="MODEL", help="an .onnx file, or - for standard input")
    import_cmd.add_argument(
        "-o", "--output", metavar="OUT", help="write the program to OUT (default: standard output)"
    )
    import_cmd.add_argument(
        "--opset", type=int, default=None, help="read the model at this opset (default: its own)"
    )
    import_cmd.add_argument(
        "--initializers",
        choices=("constants", "parameters"),
        default="constants",
        help="weights as constants of the program (default) or as parameters of @main",
    )
    import_cmd.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    import_cmd.set_defaults(run=cmd_import)

    graph = commands.add_parser("graph", help="draw a program's dataflow as SVG")
    graph.add_argument("file", metavar="FILE", help="a file, or - for standard input")
    graph.add_argument("-o", "--output", metavar="OUT.svg", help="write the picture to OUT.svg")
    graph.add_argument(
        "--function",
        action="append",
        default=[],
        metavar="NAME",
        help="draw only this function (repeat for more; default: all)",
    )
    graph.set_defaults(run=cmd_graph)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    runner: Callable[[argparse.Namespace], int] = args.run
    try:
        return runner(args)
    except Error as err:
        print(str(err), file=sys.stderr)
        return EXIT_USER_ERROR
    except LimitSettingError as err:
        print(f"effir: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("effir: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as err:  # a bug in effir: report it without a traceback
        if os.environ.get("EFFIR_TRACEBACK"):
            raise
        print(
            f"effir: internal error: {type(err).__name__}: {err}\n"
            "This is a bug in effir; please report it with the input that caused it "
            "(run with EFFIR_TRACEBACK=1 to see the traceback).",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
