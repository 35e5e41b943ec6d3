"""The ``nightly`` marker: long property runs, skipped unless EFFIR_NIGHTLY=1."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "nightly: a long property run; runs only when EFFIR_NIGHTLY=1 is set"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("EFFIR_NIGHTLY") == "1":
        return
    skip = pytest.mark.skip(reason="nightly property run; set EFFIR_NIGHTLY=1 to run it")
    for item in items:
        if "nightly" in item.keywords:
            item.add_marker(skip)
