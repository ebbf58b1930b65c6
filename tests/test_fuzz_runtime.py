"""Runtime-against-model fuzzing: Hypothesis draws real runs' schedules; the model judges each trace.

Every runtime protocol's post-fix runs conform on a handful of drawn schedules (a pool of rank
processes reused across runs); dp-pause pre-fix runs of issue-36594 hang for real, conform (the
model predicts the hang) and restart the pool; a runtime that does not do what the model says is
caught (its trace diverges, shown with the model's candidate states); the CLI reports both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lockstep.harness.runtime_fuzzing import fuzz_runtime
from lockstep.impl.launcher import launch
from lockstep.impl.protocols import RUNTIME_PROTOCOLS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 6  # per protocol in CI (the issue allows up to 20)


@pytest.mark.parametrize("protocol", sorted(RUNTIME_PROTOCOLS))
def test_post_fix_runs_conform_to_the_model(protocol: str) -> None:
    # no hang is expected: a generous timeout, whatever the load
    result = fuzz_runtime(protocol, "post-fix", examples=EXAMPLES, seed=11, hang_timeout=60)
    assert [run.failure for run in result.runs] == [None] * EXAMPLES, result.failing and result.failing.to_json()
    assert result.outcome == "nothing-found" and result.exit_code == 0
    assert all(run.replay is not None and run.replay["verdict"] == "conforms" for run in result.runs)
    assert len({json.dumps(run.choices) for run in result.runs}) > 1  # Hypothesis drew different schedules
    assert result.pool_starts == 1  # every run reused the same rank processes


def test_pre_fix_hangs_are_what_the_model_predicts_and_restart_the_pool() -> None:
    result = fuzz_runtime("dp-pause", "pre-fix", scenario="issue-36594", examples=2, seed=5, hang_timeout=10)
    assert result.outcome == "nothing-found" and len(result.runs) == 2
    assert all(run.outcome == "hang diagnosed" and run.observed_violation is not None for run in result.runs)
    assert result.pool_starts == 2  # a hung run leaves ranks in a collective: the pool starts afresh


def mislabelled_runner(config: Any) -> Any:
    """Run the pre-fix runtime but label its traces post-fix: a runtime that does not do what its model says."""
    config.variant = "pre-fix"
    outcome = launch(config, deadline=60)
    for path in Path(config.trace_dir).glob("*.jsonl"):
        lines = path.read_text().split("\n")
        header = json.loads(lines[0])
        header["variant"] = "post-fix"
        path.write_text("\n".join([json.dumps(header), *lines[1:]]))
    return outcome


def test_a_runtime_that_departs_from_its_model_is_caught_with_both_states() -> None:
    result = fuzz_runtime(
        "dp-pause", "post-fix", scenario="issue-36594", examples=3, seed=2, hang_timeout=2, runner=mislabelled_runner
    )
    assert result.outcome == "violated" and result.exit_code == 1 and result.failing is not None
    failing = result.failing.to_json()
    assert "diverges from the model" in failing["failure"]
    explanation = failing["replay"]["explanation"]
    assert explanation["candidates"] and explanation["candidates"][0]["state"]  # the model's side
    assert explanation["event"]["observed"]  # the runtime's side


def test_cli_impl_json_and_usage_errors(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "lockstep",
        "fuzz",
        "dp-pause",
        "--impl",
        "--examples",
        "2",
        "--seed",
        "1",
        "--json",
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    assert (
        payload["engine"] == "fuzz-runtime" and payload["outcome"] == "nothing-found" and payload["stats"]["runs"] == 2
    )
    for extra, message in [
        (["--instance", "seed"], "--instance does not apply to --impl"),
        (["--scenario", "nope"], "no scenario 'nope'"),
        (["--set", "x=1"], "no setting 'x'"),
    ]:
        bad = subprocess.run([*command[:-1], *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr
