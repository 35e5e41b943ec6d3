"""The converters' registry: every version a converter lists is one of
its operator's schemas, and at every opset from 13 to 21 each converted
operator is read at a version its converter lists (no gap in the
supported range)."""

from __future__ import annotations

import onnx
import pytest

from effir.importers.onnx import ops  # noqa: F401  (importing the converters registers them)
from effir.importers.onnx.model import SUPPORTED_OPSETS
from effir.importers.onnx.registry import CONVERTERS, schema


def _since_versions(op_type: str) -> set[int]:
    return {
        s.since_version
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and s.domain == ""
    }


@pytest.mark.parametrize("op_type", sorted(CONVERTERS))
def test_listed_versions_are_the_operator_s(op_type):
    listed = set(CONVERTERS[op_type].versions)
    assert listed <= _since_versions(op_type), sorted(listed - _since_versions(op_type))


@pytest.mark.parametrize("opset", list(SUPPORTED_OPSETS))
def test_every_converted_operator_is_read_at_every_supported_opset(opset):
    gaps = []
    for op_type, converter in CONVERTERS.items():
        found = schema(op_type, opset)
        if found is not None and found.since_version not in converter.versions:
            gaps.append(f"{op_type}-{found.since_version}")
    assert not gaps, gaps
