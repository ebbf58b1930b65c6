"""The reliability suite (issue 38's cases): every test in this folder carries the ``reliability``
marker, so ``pytest -m reliability`` runs the suite alone and counts its cases."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "reliability" in item.path.parts:
            item.add_marker(pytest.mark.reliability)
