"""Static checks as tests: ruff on the project, mypy --strict on spec, traces, checkers and cli."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> list[str]:
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return [found]


def test_ruff_is_clean() -> None:
    completed = subprocess.run([*_tool("ruff"), "check", "lockstep", "tests", "bench"], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_mypy_strict_on_spec_traces_checkers_and_cli() -> None:
    completed = subprocess.run(
        [*_tool("mypy"), "--strict", "lockstep/spec", "lockstep/traces", "lockstep/checkers", "lockstep/cli"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
