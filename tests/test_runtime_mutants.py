"""Runtime mutation testing: ``lockstep test-runtime`` kills every non-equivalent one-line mutant
of the reference runtime (``tests/runtime_mutants.py``): a run's trace diverges from the model,
violates a property, or the run hangs. The full matrix is slow (a mutant run costs the model's
goal search and up to every goal path's real run); the default tier kills one mutant cheaply and
checks that a mutant whose original line is gone fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_mutants import MUTANTS, Mutant, MutantError, mutated_package, run_test_runtime

KILLABLE = [mutant for mutant in MUTANTS if not mutant.equivalent]


def test_every_protocol_has_six_non_equivalent_mutants_that_apply(tmp_path: Path) -> None:
    from lockstep.impl.protocols import RUNTIME_PROTOCOLS

    assert {mutant.protocol for mutant in MUTANTS} == set(RUNTIME_PROTOCOLS)
    for protocol in RUNTIME_PROTOCOLS:
        assert sum(mutant.protocol == protocol for mutant in KILLABLE) >= 6, protocol
    for number, mutant in enumerate(MUTANTS):
        folder = mutated_package(mutant, tmp_path / str(number))
        assert mutant.replacement in (folder / "lockstep" / mutant.file).read_text(encoding="utf-8")


def test_a_mutant_whose_line_is_gone_fails_loudly(tmp_path: Path) -> None:
    gone = Mutant("dp-pause", "gone", "impl/dp_pause/engine.py", "if no_such_line:", "if True:", "nothing")
    with pytest.raises(MutantError, match="0 times"):
        mutated_package(gone, tmp_path)


def test_the_fix_core_removed_from_computed_tokens_is_killed_on_the_first_path(tmp_path: Path) -> None:
    mutant = next(mutant for mutant in MUTANTS if mutant.name == "no-refresh")
    code, result, stderr = run_test_runtime(mutant, tmp_path, "--max-paths", "1")
    assert code == 1, stderr
    assert result["runs"][0]["verdict"] in ("divergence", "violation")


def test_the_unmutated_runtime_is_not_killed(tmp_path: Path) -> None:
    """The control: the harness itself (the package copy first on PYTHONPATH) kills nothing."""
    original = next(mutant for mutant in MUTANTS if mutant.name == "no-refresh")
    control = Mutant(original.protocol, "control", original.file, original.original, original.original, "nothing")
    code, result, stderr = run_test_runtime(control, tmp_path, hang_timeout=60)
    assert code == 0 and result["verdict"] == "consistent", stderr


@pytest.mark.slow
@pytest.mark.parametrize("mutant", KILLABLE, ids=[f"{mutant.protocol}:{mutant.name}" for mutant in KILLABLE])
def test_test_runtime_kills_the_mutant(tmp_path: Path, mutant: Mutant) -> None:
    code, result, stderr = run_test_runtime(mutant, tmp_path)
    assert code == 1, f"{mutant.name} ({mutant.weakens}) survived: {stderr[-2000:]}"
    assert any(run["verdict"] in ("divergence", "violation") for run in result["runs"])
