"""The TVM backend's user-facing errors: BackendError at compile time, and
the EvalError a failure inside compiled code is turned into.

``import effir`` imports this module for its error classes, so it imports
no TVM: the packed function compiled code reports its checks through is
registered by ``register_check_function``, which every module that builds
or runs code calls when it is imported (target.py, thread_vms.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from ....ir.diagnostics import Error, EvalError, Source, Span


class BackendError(Error):
    """A program the TVM backend cannot compile as asked: an operator without
    a ``te`` rule, a shape that is not static where a kernel needs one, an
    argument of the wrong type at a kernel's call. Points at the source
    location of the construct when it has one."""

    kind = "backend error"


class CompileError(BackendError):
    """A construct ``effir.compile`` cannot compile, refused when the program
    is compiled (never at a later call), at the construct's location. A
    BackendError, so code that catches those keeps working."""

    kind = "compile error"


class StateNotExportedWarning(UserWarning):
    """``compiled.export(path)`` without ``state=`` of a program whose
    calls changed a State: the artifact holds the cells' declared initial
    values, not that State's (a trained model's running statistics, say)."""


class BuildDefect(CompileError):
    """TVM (or effir's lowering) failed while building a program: a defect
    of the backend, never of the program (the interpreter runs it). A user
    meets a located CompileError; the differential fuzzer counts it as a
    failure, not as a refusal (tests/backends/tvm/fuzz/harness.py)."""


# [RULE RUNTIME-CHECK] One mechanism for every run-time check of compiled code
# (an operator's check in a kernel, kernel/checks.py; a shape checked by the VM,
# relax/dynamic.py; the depth of recursion, runtime/stack.py), on every target:
#
# - One message format (``site_message``): the interpreter's error as it
#   renders, then SITE_MARK, the site as JSON (operator, message, source,
#   line, columns, source line) and ``]``. Self-contained: an exported
#   artifact and the C++ runner report the same text without the source.
#   A VALUE_MARK stands where the message shows a run-time value.
# - One carrier: the packed function ``effir.check(ok, message, *values)``,
#   which raises the message, its value marks filled in, when ``ok`` is 0.
#   It is called on the host only: by a CPU kernel itself, when one of its
#   checks fails (nothing is called while they pass); by the VM, on shape
#   values, or on the error code a GPU kernel computed (a GPU kernel cannot
#   stop the host). effir registers it for Python (here), the C++ runner
#   registers its own (examples/cpp/run_model.cc), which prints the
#   rendered part.
# - One decoder (``run_time_error``): any exception out of compiled code
#   becomes an ``EvalError``, located at the check's site when its text
#   carries one. No TVM exception type reaches a user.

SITE_MARK = "[effir-site "
"""Where the site's JSON starts in a check's message (see [RULE RUNTIME-CHECK])."""

VALUE_MARK = "<effir-value>"
"""Where a check's message shows a run-time value (filled in when it fails)."""

CHECK_FUNCTION = "effir.check"
"""The packed function every run-time check calls: ``(ok, message,
*values)``, raising ``message`` with its values when ``ok`` is 0."""


def site_message(op: str, message: str, span: Span | None) -> str:
    """The message of a check of ``op`` at ``span`` (see [RULE RUNTIME-CHECK])."""
    info: dict[str, Any] = {"op": op, "message": message}
    if span is not None:
        line, column = span.source.line_col(span.start)
        end_line, end = span.source.line_col(max(span.start, span.end - 1))
        info.update(
            source=span.source.name,
            line=line,
            column=column,
            end=end + 1 if end_line == line else column + 1,
            text=span.source.line_text(line),
        )
    rendered = EvalError(f"{op}: {message}", span)
    return f"{rendered}\n{SITE_MARK}{json.dumps(info, ensure_ascii=True)}]"


def check_failure(message: str, *values: Any) -> EvalError:
    """The EvalError of a failed check whose ``message`` (``site_message``)
    shows ``values``."""
    return run_time_error(RuntimeError(_filled(message, values)), "")


def run_time_error(err: BaseException, entry: str) -> EvalError:
    """The ``effir.EvalError`` a failure inside compiled code (a TVM error,
    or an exception of a packed function the code called) is reported as:
    the operator and source location of the check that failed when the
    error carries a site (SITE_MARK), else the error's own last line with
    the entry's name. No TVM exception type reaches a user."""
    if isinstance(err, Error):
        return EvalError(err.message, err.span, err.notes)
    text = str(err)
    site = _site(text) or _rendered(text)
    if site is not None:
        return site
    return EvalError(f"@{entry}: compiled code failed: {_summary(err)}")


def build_failure(
    err: BaseException, entry: str, sites: dict[str, Span | None], span: Span | None
) -> CompileError:
    """The ``CompileError`` a failure of TVM (or of effir's lowering) while
    building ``@entry`` is reported as: located at the binding whose Relax
    variable the error names (``sites``: the lowering's variable names and
    the source of the values bound to them), else at the entry (``span``).
    Such a failure is a defect of the backend, not of the program: the
    interpreter runs it. No TVM exception type reaches a user."""
    if isinstance(err, Error):  # already effir's, located
        return CompileError(err.message, err.span, err.notes)
    summary = _summary(err)
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", summary):
        if sites.get(word) is not None:
            span = sites[word]
            break
    return BuildDefect(
        f"@{entry}: TVM failed to build the compiled program ({summary}); this is a "
        "defect of effir's TVM backend: the interpreter runs the program",
        span,
    )


def _summary(err: BaseException) -> str:
    """The last line of ``err``'s text that says something, without TVM's
    prefixes: a CUDA failure's text can end in a line of stray bytes (a
    NUL), which once left the message empty."""
    lines = [line.strip() for line in str(err).splitlines() if any(c.isalnum() for c in line)]
    summary = "".join(c for c in lines[-1] if c.isprintable()) if lines else type(err).__name__
    for prefix in ("tvm.error.", "InternalError: ", "RuntimeError: "):
        summary = summary.removeprefix(prefix)
    return summary


def _site(text: str) -> EvalError | None:
    start = text.find(SITE_MARK)
    if start < 0:
        return None
    body = text[start + len(SITE_MARK) :]
    try:
        info, _ = json.JSONDecoder().raw_decode(body)
        message = f"{info['op']}: {info['message']}"
    except (ValueError, KeyError, TypeError):
        return None
    return EvalError(message, located_span(info))


_RENDERED = re.compile(
    r"^(?P<source>.+?):(?P<line>\d+):(?P<column>\d+): [a-z -]+: (?P<message>.+)$"
)


def _rendered(text: str) -> EvalError | None:
    """An effir error raised inside a packed function the compiled code
    called (``effir.print``, say), which TVM hands back as its
    rendered text: ``file:line:col: kind: message``, the source line and
    the caret line."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        found = _RENDERED.match(line.strip())
        if found is None:
            continue
        source = lines[k + 1][2:] if k + 1 < len(lines) else ""
        caret = lines[k + 2][2:] if k + 2 < len(lines) else ""
        column = int(found["column"])
        width = len(caret.strip()) if caret.strip().startswith("^") else 1
        info = {
            "source": found["source"],
            "line": found["line"],
            "column": column,
            "end": column + max(width, 1),
            "text": source,
        }
        return EvalError(found["message"], located_span(info))
    return None


def located_span(info: dict[str, Any]) -> Span | None:
    """A span rebuilt from a site's line, columns and source line (the
    only line the message shows), so that the error renders as the
    interpreter's does."""
    try:
        line, column, end = int(info["line"]), int(info["column"]), int(info["end"])
        source = Source(str(info["source"]), "\n" * (line - 1) + str(info["text"]))
    except (KeyError, TypeError, ValueError):
        return None
    offset = line - 1 + column - 1
    return Span(source, offset, max(offset + 1, line - 1 + end - 1))


def _filled(message: str, values: tuple[Any, ...]) -> str:
    """``message`` with each VALUE_MARK replaced by the next value, in the
    rendered text and in the site's JSON alike."""
    parts = str(message).split(SITE_MARK)
    for k, part in enumerate(parts):
        for value in values:
            part = part.replace(VALUE_MARK, str(int(value)), 1)
        parts[k] = part
    return SITE_MARK.join(parts)


def _check(ok: Any, message: str, *values: Any) -> None:
    if not int(ok):
        raise RuntimeError(_filled(message, values))


def register_check_function() -> None:
    """Register ``CHECK_FUNCTION`` for compiled code in this process (again
    is harmless: the same function replaces itself)."""
    import tvm_ffi  # lazy: `import effir` imports this module and no TVM

    tvm_ffi.register_global_func(CHECK_FUNCTION, _check, override=True)
