"""The worked example of docs/recording-vllm.md: the dp-pause instrumentation written for vLLM
v0.21.0 (``lockstep.instrumentation.vllm_dp_pause``), applied to lockstep's own runtime.

The runtime runs without ``--trace-dir`` (its own recording off), so every trace line comes from
the patch, installed in each process through ``LOCKSTEP_INSTRUMENT``. Post-fix ``issue-36594`` and
the fuzz scenario (``random``) conform to the post-fix model; pre-fix ``issue-36594`` hangs and
its recorded prefix breaks ``quiescent_during_rpc``, as the model predicts. A patch that leaves
``handle_start_wave`` out, or misreports ``current_wave``, is caught as a divergence. A recorder
that fails inside an engine (an observed value beyond the header's bounds) writes its error file
and stops while the engines run the scenario to its end. The patch module imports no torch, z3 or
numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import validate_lines

from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent
HOOK = "lockstep.instrumentation.vllm_dp_pause:install_runtime"


def run_patched(
    folder: Path,
    *arguments: str,
    variant: str = "post-fix",
    requests: int = 1,
    hook: str = HOOK,
    mutant: str | None = None,
    bounds: dict[str, int] | None = None,
    hang_timeout: float = 30.0,
) -> dict[str, Any]:
    """``lockstep run dp-pause`` (no --trace-dir) with the patch recording into ``folder`` (the header's
    model bounds: ``bounds``, default the run's). The hang timeout is generous: on a loaded machine a
    collective of a run that completes may wait seconds, and a short timeout would call it a hang."""
    environment = dict(
        os.environ,
        LOCKSTEP_TRACE_DIR=str(folder),
        LOCKSTEP_INSTRUMENT=hook,
        LOCKSTEP_TRACE_VARIANT=variant,
        LOCKSTEP_TRACE_PARAMETERS=json.dumps(bounds or {"requests": requests, "max_wave": requests + 3}),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
    )
    if mutant is not None:
        environment["LOCKSTEP_MUTANT"] = mutant
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "dp-pause",
            "--variant",
            variant,
            "--hang-timeout",
            str(hang_timeout),
            "--requests",
            str(requests),
            "--json",
            *arguments,
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    payload: dict[str, Any] = json.loads(completed.stdout)
    return payload


def test_post_fix_issue_36594_recorded_by_the_patch_conforms(tmp_path: Path) -> None:
    payload = run_patched(tmp_path, "--scenario", "issue-36594", "--seed", "7")
    assert payload["outcome"] == "completed" and payload["trace_dir"] is None  # the runtime recorded nothing itself
    assert {path.name for path in tmp_path.iterdir()} == {"client.jsonl", "rank-0.jsonl", "rank-1.jsonl"}
    actions: set[str] = set()
    for path in tmp_path.iterdir():
        header = json.loads(path.read_text().split("\n")[0])
        assert header["variant"] == "post-fix" and header["parameters"]["sync_interval"] == 32
        assert header["parameters"]["unrecorded"] == ["coordinator", "client_read_publication"]
        actions.update(event["action"] for event in validate_lines(path))
    assert {
        "arrive_from_client",
        "arrive_from_coordinator",
        "handle_add",
        "handle_pause",
        "handle_start_wave",
        "notify_idle",
        "step",
        "finish_forward",
        "finish_sync",
        "handle_collective_rpc",
        "finish_collective_rpc",
        "handle_resume",
        "finish_resume",
        "client_add_request",
        "client_pause_returned",
        "enter",
        "complete",
    } <= actions
    result = replay_traces(tmp_path, profile="vllm-dp-pause")
    assert result["verdict"] == "conforms", result.get("explanation")


@pytest.mark.parametrize(("seed", "requests"), [(3, 1), (11, 2)])
def test_the_fuzz_scenario_recorded_by_the_patch_conforms(tmp_path: Path, seed: int, requests: int) -> None:
    payload = run_patched(tmp_path, "--scenario", "random", "--seed", str(seed), requests=requests)
    assert payload["outcome"] == "completed"
    result = replay_traces(tmp_path, profile="vllm-dp-pause")
    assert result["verdict"] == "conforms", result.get("explanation")


def test_pre_fix_issue_36594_hangs_and_the_recorded_prefix_shows_the_models_violation(tmp_path: Path) -> None:
    payload = run_patched(tmp_path, "--scenario", "issue-36594", variant="pre-fix", hang_timeout=10.0)
    assert payload["outcome"] == "hang diagnosed"
    assert {payload["waits"]["rank:0"], payload["waits"]["rank:1"]} == {
        "all_reduce(worker_dp)#1",
        "all_reduce(worker_world)#1",
    }
    result = replay_traces(tmp_path, profile="vllm-dp-pause")
    assert result["verdict"] == "violated" and result["property"] == "quiescent_during_rpc", result


@pytest.mark.parametrize(("mutant", "action"), [("skip-start-wave", None), ("wrong-wave", "handle_add")])
def test_a_patch_that_leaves_out_or_misreports_an_event_diverges(
    tmp_path: Path, mutant: str, action: str | None
) -> None:
    payload = run_patched(
        tmp_path, "--scenario", "issue-36594", "--seed", "7", hook="instrumentation_mutants:install", mutant=mutant
    )
    assert payload["outcome"] == "completed"
    result = replay_traces(tmp_path, profile="vllm-dp-pause")
    assert result["verdict"] == "diverges", result
    if action is not None:
        assert result["explanation"]["event"]["action"] == action


def test_a_recorder_failure_stops_the_recording_and_the_engines_run_on(tmp_path: Path) -> None:
    # the header says no request will come: the engine that takes the run's request observes a count beyond
    # the model's bounds, its recorder fails inside the engine, writes why beside the trace and stops
    payload = run_patched(tmp_path, "--scenario", "issue-36594", "--seed", "7", bounds={"requests": 0, "max_wave": 3})
    assert payload["outcome"] == "completed", payload  # the engines ran the whole scenario
    failures = sorted(tmp_path.glob("*.error.json"))
    assert failures, sorted(path.name for path in tmp_path.iterdir())
    failure = json.loads(failures[0].read_text())
    assert failure["actor"].startswith("rank:") and "is beyond its bounds" in failure["error"], failure
    assert "TraceFormatError" in failure["traceback"]


def test_the_patch_module_imports_no_torch_z3_or_numpy() -> None:
    code = (
        "import sys, lockstep.instrumentation.vllm_dp_pause; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'z3', 'numpy')))"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "[]", completed.stderr
