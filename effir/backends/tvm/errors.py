"""The TVM backend's user-facing error."""

from __future__ import annotations

from ...ir.diagnostics import Error


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
