"""The reference runtime on computed-tokens: the scheduler and the V2 runners' CPU mirror in real rank processes.

Post-fix runs complete and their traces follow the post-fix model; the pre-fix seed run (with
every draft rejected) follows the pre-fix model and breaks U3_bounded_slack at the event where
the model's counterexample breaks it, with the drift visible in the recorded bound and seq_lens,
and diverges from the post-fix model at the first postprocess (where the variants differ); the
pipeline scenario runs two real rank processes; every line fits the JSON Schema; a run's recorded
acceptances fed back through ``--choices`` give the same trace, and forced rejections show as the
``sample_tokens`` arguments; the torch-free scheduler finishes every model instance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import header_of, validate_lines

from lockstep.impl.computed_tokens.scheduler import DONE, SCHEDULE, Bounds, Scheduler
from lockstep.models.computed_tokens.model import PROTOCOL
from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent


def run(folder: Path, *arguments: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "computed-tokens",
            "--hang-timeout",
            "10",
            "--json",
            "--trace-dir",
            str(folder),
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(completed.stdout), time.monotonic() - started


# the model's action names over its variants and instances, and the collective events
ACTIONS = {
    action.name
    for instance in PROTOCOL.instances
    for variant in PROTOCOL.variants
    for action in PROTOCOL.instance(variant.name, instance.name).machine().actions
} | {"enter", "complete"}


def events_of(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every line of every trace file, checked against the JSON Schema; the events by file name."""
    found = {}
    for path in sorted(folder.glob("*.jsonl")):
        assert {parameter.name for parameter in PROTOCOL.parameters} <= set(header_of(path)["parameters"])
        events = validate_lines(path)
        assert all(event["action"] in ACTIONS for event in events)  # the model's, as the vocabulary checked
        found[path.name] = events
    return found


@pytest.mark.parametrize(
    "scenario, ranks", [("chunked-prefill", 1), pytest.param("context-limit", 1, marks=pytest.mark.slow)]
)
def test_post_fix_run_completes_and_conforms(tmp_path: Path, scenario: str, ranks: int) -> None:
    code, payload, seconds = run(
        tmp_path / "traces", "--variant", "post-fix", "--scenario", scenario, "--seed", "2", "--ranks", str(ranks)
    )
    assert code == 0, payload
    assert payload["outcome"] == "completed" and payload["replay"]["verdict"] == "conforms", payload
    events = events_of(tmp_path / "traces")["rank-0.jsonl"]
    assert {event["actor"] for event in events} == {"scheduler", "rank:0"}
    assert payload["replay"]["longest_conforming_prefix"] == len(events)
    assert events[-1]["action"] == "update_from_output"
    assert events[-1]["observed"]["scheduler.status"] == ["FINISHED"]
    assert seconds < 30


def test_pipeline_runs_two_rank_processes_and_conforms(tmp_path: Path) -> None:
    code, payload, _ = run(
        tmp_path / "traces", "--variant", "post-fix", "--scenario", "pipeline", "--ranks", "2", "--seed", "2"
    )
    assert code == 0 and payload["replay"]["verdict"] == "conforms", payload
    files = events_of(tmp_path / "traces")
    assert sorted(files) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert {event["action"] for event in files["rank-0.jsonl"] if event["actor"] == "rank:0"} == {
        "execute_model",
        "pp_receive",
    }
    assert {event["action"] for event in files["rank-1.jsonl"]} == {"execute_model", "sample_tokens"}
    received = [event for event in files["rank-1.jsonl"] if event["action"] == "execute_model"]
    assert all("recv:hidden:0>1" in event["clock"] for event in received)  # the hidden states over torch.distributed
    mirrors = [
        event["observed"]["runner.num_computed_tokens_np[0]"]
        for event in files["rank-0.jsonl"]
        if event["action"] == "pp_receive"
    ]
    assert len(mirrors) == len([event for event in files["rank-1.jsonl"] if event["action"] == "sample_tokens"])


def all_rejected(folder: Path, steps: int = 12, actor: str = "rank:0") -> Path:
    """A choices script: the last rank accepts no draft, ``steps`` times."""
    script = folder / "rejected.jsonl"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "".join(
            json.dumps({"actor": actor, "point": "accepted", "options": ["0"], "chosen": "0"}) + "\n"
            for _ in range(steps)
        )
    )
    return script


def test_pre_fix_seed_violates_bounded_slack_and_diverges_from_post_fix(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    code, payload, _ = run(
        folder, "--variant", "pre-fix", "--scenario", "seed", "--choices", str(all_rejected(tmp_path))
    )
    assert payload["outcome"] == "completed"
    assert code == 1 and payload["replay"]["verdict"] == "violated", payload
    assert payload["replay"]["property"] == "U3_bounded_slack"
    events = events_of(folder)["rank-0.jsonl"]
    first = payload["replay"]["event"]

    def slack(event: dict[str, Any]) -> int:
        observed = event["observed"]
        return int(observed["metadata.seq_lens_cpu_upper_bound[0]"][0] - observed["metadata.seq_lens[0]"][0])

    # replay names the first batch built with more slack than the step in flight allows (the
    # scheduler's and the runner's threads share the file, so its index varies by a line or so)
    assert first == min(
        index for index, event in enumerate(events) if event["action"] == "execute_model" and slack(event) > 1
    )
    assert first in (12, 13, 14)  # the model's shortest counterexample breaks U3 at its event 13
    event = events[first]
    assert event["action"] == "execute_model"
    observed = event["observed"]
    bound, truth = observed["metadata.seq_lens_cpu_upper_bound[0]"][0], observed["metadata.seq_lens[0]"][0]
    assert bound - truth == 2  # two rejected drafts in the mirror; at most one (the step in flight) is allowed
    assert observed["runner.num_computed_tokens_np[0]"][0] > observed["runner.num_computed_tokens[0]"][0]
    against_post_fix = replay_traces(folder, variant="post-fix", profile="runtime")
    assert against_post_fix["verdict"] == "diverges"
    diverged = events[against_post_fix["event"]]
    assert diverged["action"] == "sample_tokens"  # the first postprocess: v0.21.0 advances the mirror there
    assert against_post_fix["event"] == min(
        index for index, event in enumerate(events) if event["action"] == "sample_tokens"
    )


def test_post_fix_bound_stays_within_the_drafts_in_flight(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    code, payload, _ = run(
        folder, "--variant", "post-fix", "--scenario", "seed", "--choices", str(all_rejected(tmp_path))
    )
    assert code == 0 and payload["replay"]["verdict"] == "conforms", payload
    built = [event["observed"] for event in events_of(folder)["rank-0.jsonl"] if event["action"] == "execute_model"]
    slack = [
        observed["metadata.seq_lens_cpu_upper_bound[0]"][0] - observed["metadata.seq_lens[0]"][0] for observed in built
    ]
    assert max(slack) == 1 and min(slack) == 0  # the draft of the step in flight, never more


def test_recorded_acceptances_fed_back_give_the_same_trace(tmp_path: Path) -> None:
    code, payload, _ = run(tmp_path / "first", "--variant", "post-fix", "--scenario", "chunked-prefill", "--seed", "5")
    assert code == 0, payload
    choices = payload["choices"]
    assert {choice["point"] for choice in choices} == {"accepted"} and {choice["actor"] for choice in choices} == {
        "rank:0"
    }
    assert all(choice["options"] == [str(count) for count in range(len(choice["options"]))] for choice in choices)
    assert {choice["chosen"] for choice in choices} == {"0", "1"}  # both outcomes occur in this run
    script = tmp_path / "choices.jsonl"
    script.write_text("".join(json.dumps(choice) + "\n" for choice in choices))
    code, again, _ = run(
        tmp_path / "second",
        "--variant",
        "post-fix",
        "--scenario",
        "chunked-prefill",
        "--seed",
        "99",
        "--choices",
        str(script),
    )
    assert code == 0, again

    def per_actor(folder: Path) -> dict[str, list[tuple[str, str, str]]]:
        found: dict[str, list[tuple[str, str, str]]] = {}
        for event in events_of(folder)[
            "rank-0.jsonl"
        ]:  # the threads' lines may interleave differently; each actor's may not
            found.setdefault(event["actor"], []).append(
                (event["action"], json.dumps(event["args"]), json.dumps(event["observed"]))
            )
        return found

    first, second = per_actor(tmp_path / "first"), per_actor(tmp_path / "second")
    assert first == second
    accepted = [json.loads(args)["accepted"] for action, args, _ in second["rank:0"] if action == "sample_tokens"]
    assert accepted == [int(choice["chosen"]) for choice in choices]


def test_forced_rejections_appear_as_the_sample_arguments(tmp_path: Path) -> None:
    code, payload, _ = run(
        tmp_path / "traces",
        "--variant",
        "post-fix",
        "--scenario",
        "sync-scheduling",
        "--choices",
        str(all_rejected(tmp_path)),
    )
    assert code == 0 and payload["replay"]["verdict"] == "conforms", payload
    events = events_of(tmp_path / "traces")["rank-0.jsonl"]
    samples = [event for event in events if event["action"] == "sample_tokens"]
    assert samples and all(event["args"] == {"accepted": 0} for event in samples)
    assert len(payload["choices"]) == len(samples)
    built = [event["observed"] for event in events if event["action"] == "execute_model"]
    assert all(
        observed["metadata.seq_lens_cpu_upper_bound[0]"] == observed["metadata.seq_lens[0]"] for observed in built
    )


@pytest.mark.slow
def test_pre_fix_pipeline_drifts_on_both_ranks(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    code, payload, _ = run(
        folder,
        "--variant",
        "pre-fix",
        "--scenario",
        "pipeline",
        "--ranks",
        "2",
        "--choices",
        str(all_rejected(tmp_path, actor="rank:1")),
    )
    assert code == 1 and payload["replay"]["verdict"] == "violated", payload
    assert payload["replay"]["property"] == "U3_bounded_slack"
    files = events_of(folder)
    for rank, name in ((0, "rank-0.jsonl"), (1, "rank-1.jsonl")):
        last = [event["observed"] for event in files[name] if event["action"] == "execute_model"][-1]
        assert last[f"runner.num_computed_tokens_np[{rank}]"][0] > last[f"runner.num_computed_tokens[{rank}]"][0]


@pytest.mark.slow
def test_sync_pipeline_early_drafts_finding_shows_in_a_post_fix_run(tmp_path: Path) -> None:
    """The model's finding: with PP and sync scheduling the bound is not exact in v0.22.0 either."""
    code, payload, _ = run(
        tmp_path / "traces",
        "--variant",
        "post-fix",
        "--scenario",
        "sync-pipeline-early-drafts",
        "--ranks",
        "2",
        "--seed",
        "1",
    )
    assert code == 1 and payload["replay"]["verdict"] == "violated", payload
    assert payload["replay"]["property"] == "U2_exact"


def test_model_counterexample_reproduces_for_real(tmp_path: Path) -> None:
    """``lockstep reproduce``: the pre-fix seed counterexample's acceptances, run in real processes."""
    counterexample = tmp_path / "counterexample.jsonl"
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "check",
            "computed-tokens",
            "--variant",
            "pre-fix",
            "--instance",
            "seed",
            "--trace-out",
            str(counterexample),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 1, checked.stderr
    model_events = [json.loads(line) for line in counterexample.read_text().splitlines()[1:]]
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "reproduce",
            str(counterexample),
            "--json",
            "--trace-dir",
            str(tmp_path / "traces"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    payload = json.loads(completed.stdout)
    assert completed.returncode == 1 and payload["verdict"] == "reproduced", payload
    assert payload["replay"]["property"] == "U3_bounded_slack" == payload["property"]
    runtime_events = events_of(tmp_path / "traces")["rank-0.jsonl"]

    def per_actor(events: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for event in events:
            found.setdefault(event["actor"], []).append((event["action"], json.dumps(event["args"])))
        return found

    model, runtime = per_actor(model_events), per_actor(runtime_events)
    for actor, steps in model.items():  # each actor's steps of the counterexample, in its order, for real
        assert runtime[actor][: len(steps)] == steps, actor
    last, violated = model_events[-1], runtime_events[payload["replay"]["event"]]
    assert violated["actor"] == last["actor"] and violated["action"] == last["action"]  # the counterexample's last step
    position = [event for event in runtime_events if event["actor"] == last["actor"]].index(violated)
    assert position == len(model[last["actor"]]) - 1


def scheduler_finishes(bounds: Bounds, accepted: list[int]) -> int:
    """Drive the torch-free scheduler alone (outputs made up from ``accepted``); the steps it took."""
    scheduler = Scheduler(bounds)
    moves = 0
    while (move := scheduler.next_move()) != DONE:
        if move == SCHEDULE:
            scheduler.schedule()
        else:
            step = scheduler.unprocessed[0]
            sampled = []
            for row in step.rows:
                chunk = row.computed + row.scheduled < bounds.prefill_len
                sampled.append(
                    0 if row.scheduled == 0 or chunk else 1 + min(row.drafts, accepted[moves % len(accepted)])
                )
            scheduler.update_from_output(sampled)
        moves += 1
        assert moves < 100
    assert scheduler.finished()
    assert all(
        request.num_output_tokens == min(bounds.max_tokens, bounds.max_model_len - bounds.prefill_len)
        for request in scheduler.requests
    )
    return scheduler.steps


@pytest.mark.parametrize("instance", [instance.name for instance in PROTOCOL.instances])
def test_scheduler_finishes_every_instance(instance: str) -> None:
    values = PROTOCOL.instance("post-fix", instance).parameters
    bounds = Bounds(
        requests=values["requests"],
        prefill_len=values["prefill_len"],
        budget=values["budget"],
        drafts=values["drafts"],
        max_tokens=values["max_tokens"],
        max_model_len=values["max_model_len"],
        asynchronous=values["async_scheduling"] == 1,
        padded_rows=values["padded_rows"],
        ranks=values["ranks"],
    )
    every_accepted, none_accepted = scheduler_finishes(bounds, [1]), scheduler_finishes(bounds, [0])
    assert every_accepted <= none_accepted
