"""Scripted functions from source text: the source is registered with
``linecache`` under a unique name, as a file would be, so ``@effir.script``
reads it and errors point into it."""

import itertools
import linecache
import textwrap

import numpy as np

import effir

_COUNTER = itertools.count()


def define(source: str, **extra) -> dict:
    """Run ``source`` (a module's text) and return its namespace."""
    source = textwrap.dedent(source)
    filename = f"<effir-test-{next(_COUNTER)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"effir": effir, "np": np, "F32": "float32", **extra}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def marked_line(source: str, mark: str = "# <-") -> int:
    """The 1-based line of ``source`` (dedented) carrying ``mark``."""
    for number, line in enumerate(textwrap.dedent(source).splitlines(), 1):
        if mark in line:
            return number
    raise AssertionError(f"no {mark!r} in the source")
