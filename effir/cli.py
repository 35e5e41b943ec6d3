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
import tempfile
from collections.abc import Callable, Sequence

from . import __version__
from .ir import Error, IRModule, astext, check_well_formed, parse

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


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file,
    never a half-written one, and keep the file's permissions."""
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777
    fd, temp = tempfile.mkstemp(prefix=".effir-fmt-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


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
        module, original, name = load_module(path)
        canonical = astext(module)
        if args.check:
            if canonical != original:
                print(f"would reformat {name}", file=sys.stderr)
                status = EXIT_USER_ERROR
        elif args.in_place:
            if canonical != original:
                write_atomically(path, canonical)
        else:
            sys.stdout.write(canonical)
    return status


def cmd_check(args: argparse.Namespace) -> int:
    for path in args.files:
        module, _, name = load_module(path)
        check_well_formed(module)
        if not args.quiet:
            counts = (
                f"{len(module.functions)} function(s), {len(module.type_defs)} type(s), "
                f"{len(module.cells)} state cell(s)"
            )
            print(f"{name}: ok ({counts})")
    return EXIT_OK


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
    check.set_defaults(run=cmd_check)
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
