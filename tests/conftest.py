"""Fixtures shared by the whole suite."""

import sys

import pytest


@pytest.fixture
def default_recursion_limit():
    """CPython's default recursion limit, whatever the runner set: deep
    programs must work without Python recursion proportional to their size."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(previous)
