"""An install without the ``[proofs]`` extra (no ``pyosys``, so no ``yosys-abc``): ``--engine pdr``
runs with Houdini and Spacer alone and says so with an install hint that survives the terminal's
markup; ``check --all --proofs``, which re-proves pins measured with ABC, is a usage error (exit 2)
before any check runs; ``lockstep list`` does not present the pinned ABC proofs as this install's.

Each command runs the real CLI in a subprocess whose interpreter cannot import ``pyosys`` (its
``sys.modules`` entry is None, as ``import`` treats a package that is not there) and whose ``PATH``
holds no ``yosys-abc``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_proof_honesty import LCG_MODEL

from lockstep.checkers.symbolic import abc

HINT = "pip install 'lockstep[proofs]'"
WITHOUT_PYOSYS = "import sys; sys.modules['pyosys'] = None; from lockstep.cli import main; sys.exit(main())"


def path_without_abc() -> str:
    """``PATH`` less every folder holding a ``yosys-abc``."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(folder for folder in folders if not (Path(folder) / "yosys-abc").exists())


def lockstep_without_abc(*words: str, hidden: bool = True) -> subprocess.CompletedProcess[str]:
    """The CLI with ``words``; ``hidden``: in an interpreter where ABC cannot be found."""
    environment = dict(os.environ, COLUMNS="200")
    program = WITHOUT_PYOSYS
    if hidden:
        environment["PATH"] = path_without_abc()
    else:
        program = program.replace("sys.modules['pyosys'] = None; ", "")
    return subprocess.run(
        [sys.executable, "-c", program, *words], capture_output=True, text=True, timeout=600, env=environment
    )


def test_the_interpreter_of_these_tests_cannot_find_abc() -> None:
    program = (
        "import sys; sys.modules['pyosys'] = None\nfrom lockstep.checkers.symbolic import abc; print(abc.binary())"
    )
    found = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PATH=path_without_abc()),
    )
    assert found.stdout.strip() == "None", found.stdout + found.stderr


def test_pdr_without_abc_runs_spacer_alone_and_says_how_to_install_abc(tmp_path: Path) -> None:
    model = tmp_path / "lcg.py"
    model.write_text(LCG_MODEL)
    finished = lockstep_without_abc("check", "--model-file", str(model), "--engine", "pdr", "--solver-timeout", "1")
    output = finished.stdout + finished.stderr
    assert finished.returncode == 3, output  # inconclusive, as with ABC: the property is violated 2,000 steps deep
    assert f"ABC's pdr is not installed ({HINT} brings yosys-abc)" in output, output
    assert "Houdini and Spacer alone" in output, output
    # an inconclusive check contradicts no pin
    assert "DIFFERS" not in output and "expected violated: not settled by this check (inconclusive)" in output, output
    assert "Traceback" not in output


def test_check_all_proofs_without_abc_is_a_usage_error_with_the_hint() -> None:
    finished = lockstep_without_abc("check", "--all", "--proofs", "computed-tokens")
    assert finished.returncode == 2, finished.stdout + finished.stderr
    assert HINT in finished.stderr and "--proofs" in finished.stderr, finished.stderr
    assert "Traceback" not in finished.stderr
    assert finished.stdout == ""  # refused before any check ran


def test_list_without_abc_does_not_claim_the_pinned_proofs_as_this_installs() -> None:
    finished = lockstep_without_abc("list", "computed-tokens")
    assert finished.returncode == 0, finished.stderr
    assert "proved for all depths (pdr)" not in finished.stdout
    assert "proved for all depths by pdr with ABC (not here)" in finished.stdout
    assert HINT in finished.stdout and "Houdini and Spacer alone" in finished.stdout


@pytest.mark.skipif(abc.binary() is None, reason=f"yosys-abc ({HINT}) is not installed")
def test_list_with_abc_shows_the_pinned_proofs_as_this_installs() -> None:
    finished = lockstep_without_abc("list", "computed-tokens", hidden=False)
    assert finished.returncode == 0, finished.stderr
    assert "proved for all depths (pdr)" in finished.stdout and "not here" not in finished.stdout
