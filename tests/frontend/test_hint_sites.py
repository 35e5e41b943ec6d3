"""Every hint the frontend gives is applied by a test: the sites found in the
source (tests/support/hint_sites.py) are exactly the keys the hint test
modules register in their ``HINTS_APPLIED`` (site key -> the test that
triggers the error, writes what the hint says and runs it)."""

import textwrap
from collections.abc import Callable

from tests.frontend import test_hints, test_hints_api, test_hints_script
from tests.support.hint_sites import site_keys, sources

MODULES = (test_hints, test_hints_api, test_hints_script)


def _registered() -> dict[str, Callable]:
    found: dict[str, Callable] = {}
    for module in MODULES:
        for key, test in module.HINTS_APPLIED.items():
            assert key not in found, f"{key} is registered twice"
            assert getattr(module, test.__name__, None) is test, f"{key}: {test} is not a test"
            assert test.__name__.startswith("test_"), f"{key}: {test.__name__} is not collected"
            found[key] = test
    return found


def test_every_hint_is_applied_by_a_test() -> None:
    sites = site_keys(sources())
    registered = _registered()
    missing = [f"{s[0].file}:{s[0].line}: {k}" for k, s in sites.items() if k not in registered]
    assert not missing, "hints that no test applies:\n" + "\n".join(missing)
    stale = sorted(set(registered) - set(sites))
    assert not stale, "registered hints the frontend no longer gives:\n" + "\n".join(stale)


SOURCE = """
from effir.ir import FrontendError

class ShapeError(FrontendError):
    pass

TABLE = {"a": ("an a", "write b"), "c": ("a c", "write d")}

def refuse(kind):
    hint = "write e" if kind else None
    raise ShapeError("no", hint=hint)

class C:
    def go(self, node, kind, n):
        refused = TABLE.get(kind)
        if refused:
            raise self.error(node, f"{refused[0]} is not supported", refused[1])
        try:
            refuse(kind)
        except FrontendError as err:
            raise self.error(node, err.message, err.hint) from None
        raise self.error(node, f"{n} items", f"write {n} items [a]")
        raise self.error(node, "other", f"write {n} items [a]")
"""


def test_sites_are_found_through_names_tables_and_subclasses() -> None:
    """The collector sees a hint given by a subclass, read from a name or a
    table, and keeps apart one text given for two messages; a forwarded
    ``err.hint`` is not a site of its own."""
    keys = site_keys({"m.py": textwrap.dedent(SOURCE)})
    assert sorted(keys) == [
        "m.py: write b",
        "m.py: write d",
        "m.py: write e",
        "m.py: write {} items [a] [other]",
        "m.py: write {} items [a] [{} items]",
    ]
    assert [s.line for s in keys["m.py: write e"]] == [11]
