"""Fixtures shared by the whole suite."""

import os
import sys

import pytest
from hypothesis import settings

# The tiers' hooks (markers tvm, slow, nightly, notebook).
pytest_plugins = ["tests.support.tiers"]

# Property tests draw the same examples on every run, so that the suite is
# deterministic: a failure in CI is a failure on every machine. Set
# EFFIR_HYPOTHESIS_RANDOM=1 to draw new examples (a search for new bugs).
settings.register_profile("deterministic", derandomize=True, deadline=None)
settings.register_profile("random", deadline=None)
settings.load_profile(
    "random" if os.environ.get("EFFIR_HYPOTHESIS_RANDOM") == "1" else "deterministic"
)

# The build cache (effir/backends/tvm/driver/build_cache.py) never touches the
# user's: the suite runs with it off, so that every test builds what it
# compiles (the reports and progress lines tests read say "TVM build"), and
# the tests of the cache point it at a directory of their own
# (``effir_cache_dir``). Processes the tests start inherit the setting.
os.environ["EFFIR_CACHE_DIR"] = "off"

# effir.compile verifies the program after every pass only when asked
# (driver/verification.py [RULE COMPILE-VERIFY]); the suite asks, so that a
# pass that breaks a program is named by whichever test compiles it. The
# default (the program checked before and after the pipeline) is tested
# with the variable removed (tests/backends/tvm/test_compile_verification.py).
os.environ["EFFIR_VERIFY_PASSES"] = "1"


@pytest.fixture
def effir_cache_dir(tmp_path, monkeypatch):
    """A fresh, empty build cache for this test (and the processes it starts)."""
    path = tmp_path / "effir-cache"
    monkeypatch.setenv("EFFIR_CACHE_DIR", str(path))
    return path


@pytest.fixture
def default_recursion_limit():
    """CPython's default recursion limit, whatever the runner set: deep
    programs must work without Python recursion proportional to their size."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(previous)
