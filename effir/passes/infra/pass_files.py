"""Loading a user's Python file of passes (``effir opt --load my_passes.py``).

The file's passes are registered when it runs, as an MLIR plugin
registers its passes when it is loaded: those made by the decorators
(``@effir.transform.module_pass`` and friends) register themselves, and
every pass class the file defines with a ``name`` (a frozen dataclass
subclassing ``effir.transform.ModulePass`` or ``FunctionPass``) is
registered once the file has run. Pipeline text then names them like
built-in ones. Whatever goes
wrong in the file (a syntax error, an exception while it runs, a pass
registered twice) is one ``PassFileError`` located at the file's line, not
a traceback; the passes it registered before failing are removed again, so
a failed load leaves the registry as it was.

The file is run as a module of its own, named after its resolved path, so
loading one file twice replaces its passes (the registry's rule for one
definition) and two files with the same name do not collide.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import traceback
import types
from pathlib import Path

from effir.ir.diagnostics import Error, PassError, Source
from effir.passes.infra.transform import (
    Pass,
    line_span,
    register_pass,
    registered_passes,
    unregister_pass,
)


class PassFileError(PassError):
    """A Python file of passes that cannot be loaded, located at its line."""


def load_pass_file(path: str | Path) -> tuple[str, ...]:
    """Run the Python file ``path`` and return the names of the passes it
    registered (in the order of the registry)."""
    path = Path(path)
    text = _read(path)
    source = Source(str(path), text)
    try:
        code = compile(text, str(path), "exec", dont_inherit=True)
    except SyntaxError as err:
        raise PassFileError(
            f"invalid Python: {err.msg}", line_span(source, err.lineno or 1)
        ) from None
    name = _module_name(path)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    before = {n: p.defined_at for n, p in registered_passes().items()}
    sys.modules[name] = module  # dataclasses and typing look their module up
    try:
        exec(code, module.__dict__)
        for cls in _pass_classes(module):
            _register_class(cls, source)
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        for pass_name in _registered_by(name, before):
            unregister_pass(pass_name)
        if isinstance(err, PassFileError):
            raise err from None
        raise _located(err, source) from None
    return tuple(_registered_by(name, before, include_replaced=True))


def _pass_classes(module: types.ModuleType) -> list[type[Pass]]:
    """The pass classes ``module`` defines itself, with a name (not those a
    decorator made of a function: they registered themselves)."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Pass)
        and value.__module__ == module.__name__
        and value.definition is value
        and value.name
    ]


def _register_class(cls: type[Pass], source: Source) -> None:
    """Register ``cls``; a refused declaration is located at the class."""
    try:
        register_pass(cls)
    except Error as err:
        try:
            line = inspect.getsourcelines(cls)[1]
        except (OSError, TypeError):
            line = None
        span = line_span(source, line) if line is not None else None
        raise PassFileError(f"loading passes failed: {err.message}", span) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PassFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise PassFileError(f"{path}: is a directory") from None
    except PermissionError:
        raise PassFileError(f"{path}: permission denied") from None
    except UnicodeDecodeError as err:
        raise PassFileError(f"{path}: not UTF-8 text ({err.reason})") from None
    except OSError as err:
        raise PassFileError(f"{path}: {err.strerror or err}") from None


def _module_name(path: Path) -> str:
    """A module name that is the same for the same file, and only for it."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"effir_pass_file_{stem}_{digest}"


def _registered_by(
    module_name: str, before: dict[str, str], include_replaced: bool = False
) -> list[str]:
    """The passes defined in ``module_name``: new ones, or (with
    ``include_replaced``) also those that replaced its own earlier definitions."""
    prefix = module_name + "."
    return [
        n
        for n, p in registered_passes().items()
        if p.defined_at.startswith(prefix) and (include_replaced or n not in before)
    ]


def _located(err: BaseException, source: Source) -> PassFileError:
    """The error ``err`` raised while the file ran, at the file's innermost
    line in its traceback (the line of the file that led to it)."""
    line = None
    for frame in traceback.extract_tb(err.__traceback__):
        if frame.filename == source.name:
            line = frame.lineno
    span = line_span(source, line) if line is not None else None
    if isinstance(err, Error):
        message = err.message
    elif isinstance(err, SystemExit):
        message = f"the file called exit({err.code!r}) while it was loaded"
    else:
        message = f"{type(err).__name__}: {err}"
    return PassFileError(f"loading passes failed: {message}", span)


__all__ = ["PassFileError", "load_pass_file"]
