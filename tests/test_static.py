"""Static checks as tests: ruff check and ruff format on the project, mypy --strict on the whole lockstep package."""

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
    completed = subprocess.run(
        [*_tool("ruff"), "check", "lockstep", "tests", "bench", "tools"], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_ruff_format_is_applied() -> None:
    """Every file is as ``ruff format`` writes it; lines are at most 120 characters (ruff check's E501)."""
    completed = subprocess.run(
        [*_tool("ruff"), "format", "--check", "lockstep", "tests", "bench", "tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_mypy_strict_on_the_whole_package() -> None:
    completed = subprocess.run(
        [*_tool("mypy"), "--strict", "lockstep"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_the_documented_example_model_passes_mypy_strict(tmp_path: Path) -> None:
    import re

    source = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "adding-a-protocol.md").read_text(), re.S)[0]
    (tmp_path / "early_stop.py").write_text(source)
    completed = subprocess.run(
        [*_tool("mypy"), "--strict", str(tmp_path / "early_stop.py")], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
