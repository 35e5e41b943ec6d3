"""The ONNX backend node tests of every construct the importer reads
(tests/importers/node_tests.py), generated from the installed ``onnx``:
every supported one through the interpreter (deterministic ones equal to
the expected outputs, random ones by their properties and bit-identical
from the same key), a sample through ``effir.compile`` in one subprocess,
and the ones effir refuses by design refused with an error that says why.
"""

from __future__ import annotations

import json

import pytest

import effir
from tests.support.isolated import run_isolated

from . import node_tests as nt


def _ids(cases: list[nt.Case]) -> list[str]:
    return [c.name for c in cases]


SUPPORTED = nt.supported()


def test_the_cases_cover_every_construct_group():
    groups = {c.group for c in SUPPORTED}
    assert groups == {g for g, _ in nt.GROUPS}
    assert len(SUPPORTED) >= 130
    assert sum(c.random for c in SUPPORTED) >= 8


@pytest.mark.parametrize("case", SUPPORTED, ids=_ids(SUPPORTED))
def test_node_test_through_the_interpreter(case: nt.Case):
    nt.run_interpreted(case)


@pytest.mark.parametrize("name", sorted(nt.UNSUPPORTED))
def test_unsupported_cases_are_refused_with_the_reason(name: str):
    case = nt.case(name)
    with pytest.raises(effir.ModelImportError, match=nt.UNSUPPORTED[name]):
        nt.import_case(case)


@pytest.mark.tvm
def test_node_tests_compiled_equal_the_expectations():
    """A few cases of every group through effir.compile (llvm), in one
    subprocess: deterministic ones against the expected outputs, random
    ones by their properties and equal to the interpreter's draws."""
    names = list(nt.COMPILED_SAMPLE)
    code = f"""
import json
from tests.importers import node_tests as nt
results = {{name: nt.outcome(nt.run_compiled, nt.case(name)) for name in {names!r}}}
print(json.dumps(results))
"""
    run = run_isolated(code, timeout=600).check()
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert {nt.case(n).group for n in results} == {g for g, _ in nt.GROUPS}
    for name, symptom in nt.KNOWN_BACKEND_DEFECTS.items():
        status, why = results.pop(name)
        assert status == "fail" and symptom in why, (
            f"{name} compiles now: remove it from KNOWN_BACKEND_DEFECTS"
        )
    failed = {name: why for name, (status, why) in results.items() if status != "pass"}
    assert not failed, failed
