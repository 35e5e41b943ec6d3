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


# Sites no test applies yet, each with why; the lead's list to empty. A key
# here that a test registers, or that the frontend no longer gives, fails.
NOT_YET_APPLIED = {
    "effir/frontend/adts.py: write {}": "reached only through a string annotation",
    "effir/frontend/adts.py: name a type defined at module level, or the type itself in "
    "quotes": "raised when the type is first used, not declared: test not written",
    "effir/frontend/adts.py: declare the type with @effir.adt and build the value with its "
    "classes": "needs a value of a type declared in text: test not written",
    "effir/frontend/builder.py: call builder.ret(value)": "test not written",
    "effir/frontend/numpy_spellings.py: write {}, or effir.op.{} with keyword attributes": (
        "test not written"
    ),
    "effir/frontend/numpy_spellings.py: write it with the effir.op functions "
    "(help(effir.op) lists them)": "test not written",
    "effir/frontend/numpy_spellings.py: effir.op.transpose": "test not written",
    "effir/frontend/operators.py: index from the front": "test not written",
    "effir/frontend/operators.py: x[a:b]": "test not written",
    "effir/frontend/operators.py: index it: t[0], t[1]": "test not written",
    "effir/frontend/operators.py: keep it an effir value (effir.op.cast for dtypes)": (
        "test not written"
    ),
    "effir/frontend/operators.py: write the reduction with effir.op (effir.op.sum, "
    "effir.op.max...)": "test not written",
    "effir/frontend/operators.py: keep it an effir value: numpy functions on it become "
    'effir.op calls; for a cast write effir.op.cast(x, dtype="float32") (np.float32(x) is '
    "one only in @effir.script)": "test not written",
    'effir/frontend/promotion.py: cast the tensor: effir.op.cast(x, dtype="float32") '
    "(np.float32(x) in @effir.script), or write an int ({})": "test not written",
    'effir/frontend/promotion.py: cast the tensor: effir.op.cast(x, dtype="int32")': (
        "test not written"
    ),
    "effir/frontend/script.py: give one another name with @effir.script(name=...)": (
        "test not written"
    ),
    "effir/frontend/script_convert.py: define the function in a file (or register its "
    "source in linecache)": "test not written",
    "effir/frontend/script_exprs.py: pass the length as an argument": "test not written",
    "effir/frontend/trace.py: return the result": "test not written",
    'effir/frontend/trace.py: pass the types: effir.trace(f, effir.Tensor[(n, 8), "float32"], '
    "...)": "test not written",
    "effir/frontend/values.py: one of {}": "test not written",
    'effir/frontend/values.py: write effir.Tensor[(n, 8), "float32"], effir.Key, '
    "effir.Ref[T], a tuple of types or an @effir.adt type": "test not written",
    "effir/frontend/values.py: use numbers, numpy arrays, tuples, keys or effir values": (
        "test not written"
    ),
    "effir/frontend/values.py: declare the cell with effir.random.key(seed)": ("test not written"),
}


def test_every_hint_is_applied_by_a_test() -> None:
    sites = site_keys(sources())
    registered = _registered()
    both = sorted(set(registered) & set(NOT_YET_APPLIED))
    assert not both, "applied, still listed as not yet:\n" + "\n".join(both)
    gone = sorted(set(NOT_YET_APPLIED) - set(sites))
    assert not gone, "listed as not yet, no longer a hint:\n" + "\n".join(gone)
    registered = {**registered, **dict.fromkeys(NOT_YET_APPLIED, None)}
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
