"""The reference runtime on async-placeholders: the last PP rank's runner in a real rank process.

Post-fix runs of every scenario but history-toggle complete and their traces follow the post-fix
model; a pre-fix run's trace follows the pre-fix model and breaks ``scan_cost_bounded`` (and,
replayed against the post-fix model, diverges at the repair where the scans read different
amounts); the history-toggle finding shows up in a real post-fix run; every trace line fits the
JSON Schema; the runtime's scans agree with the model's folds on every small list; and both
variants' lists are equal after every engine turn of random workloads.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import validate_lines

from lockstep.impl.async_placeholders.pipeline import Pipeline, lists_equal
from lockstep.impl.async_placeholders.scans import backward_first_placeholder, forward_first_placeholder, repair_row
from lockstep.impl.async_placeholders.scheduler import ScenarioBounds
from lockstep.impl.choices import SeededChoices
from lockstep.models.async_placeholders.model import PROTOCOL as MODEL
from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, first_placeholder, scan_cost
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.testing import replay_traces

# the model's action names over its variants and instances, and the collective events
ACTIONS = {
    action.name
    for instance in MODEL.instances
    for variant in MODEL.variants
    for action in MODEL.instance(variant.name, instance.name).machine().actions
} | {"enter", "complete"}

ROOT = Path(__file__).resolve().parent.parent
POST_FIX_SCENARIOS = ("seed", "spec-decode", "kv-load-failure", "preemption", "all-operations")


def run(folder: Path, *arguments: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "async-placeholders",
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


def events_of(folder: Path) -> list[dict[str, Any]]:
    """Every line of the run's one trace file, checked against the JSON Schema."""
    paths = list(folder.glob("*.jsonl"))
    assert [path.name for path in paths] == ["rank-0.jsonl"]
    events = validate_lines(paths[0])
    assert all(event["action"] in ACTIONS for event in events)  # the model's, as the vocabulary checked
    return events


@pytest.mark.parametrize("scenario", POST_FIX_SCENARIOS)
def test_post_fix_run_completes_and_conforms(tmp_path: Path, scenario: str) -> None:
    code, payload, seconds = run(tmp_path / "traces", "--variant", "post-fix", "--scenario", scenario, "--seed", "1")
    assert code == 0, payload
    assert payload["outcome"] == "completed" and payload["replay"]["verdict"] == "conforms", payload
    events = events_of(tmp_path / "traces")
    header = json.loads((tmp_path / "traces" / "rank-0.jsonl").read_text().split("\n")[0])
    for name in (
        "max_tokens",
        "num_spec_tokens",
        "history_toggles",
        "preemptions",
        "chunked_prefill",
        "kv_load_failures",
    ):
        assert name in header["parameters"], name
    assert {event["actor"] for event in events} == {"scheduler", "runner"}
    assert payload["replay"]["longest_conforming_prefix"] == len(events)
    repairs = [event for event in events if event["action"] == "sample" and event["observed"]["repair.done"]]
    assert repairs, "no repair happened"
    assert all(
        event["observed"]["repair.scan_steps"] <= 1 + event["observed"]["repair.run_length"] for event in repairs
    )
    assert seconds < 30


def test_pre_fix_run_violates_scan_cost_and_diverges_from_post_fix(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    code, payload, _ = run(folder, "--variant", "pre-fix", "--scenario", "seed", "--seed", "1")
    assert payload["outcome"] == "completed"
    assert code == 1 and payload["replay"]["verdict"] == "violated", payload
    assert payload["replay"]["property"] == "scan_cost_bounded"
    events = events_of(folder)
    first = payload["replay"]["event"]
    assert events[first]["action"] == "sample"
    observed = events[first]["observed"]
    assert observed["repair.scan_steps"] > 1 + observed["repair.run_length"]  # the forward scan read the history
    against_post_fix = replay_traces(folder, variant="post-fix", profile="runtime")
    assert against_post_fix["verdict"] == "diverges"
    assert against_post_fix["event"] == first  # the first repair whose scans read different amounts


def test_history_toggle_finding_shows_in_a_post_fix_run(tmp_path: Path) -> None:
    """The model's finding: a skipped repair leaves two steps' -1 and the next writes one row over both."""
    code, payload, _ = run(
        tmp_path / "traces",
        "--variant",
        "post-fix",
        "--scenario",
        "history-toggle",
        "--seed",
        "1",
        "--set",
        "max_tokens=5",
    )
    assert code == 1 and payload["replay"]["verdict"] == "violated", payload
    assert payload["replay"]["property"] == "tokens_aligned"
    event = events_of(tmp_path / "traces")[payload["replay"]["event"]]
    tokens = event["observed"]["runner.output_token_ids"][: event["observed"]["runner.length"]]
    assert any(token not in (-1, position) for position, token in enumerate(tokens))  # a token off its position


def test_runtime_scans_match_the_model_folds_on_every_small_list() -> None:
    for length in range(1, 7):
        for elements in itertools.product((-1, 0, 1), repeat=length):
            if elements[-1] != -1:
                continue
            for runtime_scan, model_scan in (
                (forward_first_placeholder, FORWARD),
                (backward_first_placeholder, BACKWARD),
            ):
                found, reads = runtime_scan(list(elements))
                environment = Environment({})
                assert found == evaluate(first_placeholder(model_scan, elements, length).expression, environment)
                assert reads == evaluate(scan_cost(model_scan, elements, length).expression, environment)
    broken = [-1, 0, -1]  # outside real* (-1)+ the scans differ: v0.21.0 would drop the real token
    forward, backward = list(broken), list(broken)
    repair_row(forward, [7], forward_first_placeholder)
    repair_row(backward, [7], backward_first_placeholder)
    assert forward == [7] and backward == [-1, 0, 7]


@pytest.mark.parametrize(
    "spec, preemptions, chunks, failures",
    [(0, False, False, 0), (2, False, False, 0), (1, False, False, 2), (2, True, True, 2)],
)
def test_both_variants_lists_equal_after_every_turn(spec: int, preemptions: bool, chunks: bool, failures: int) -> None:
    turns = repairs = 0
    for seed in range(25):
        bounds = ScenarioBounds(
            max_tokens=8,
            num_spec_tokens=spec,
            history_toggles=False,
            preemptions=preemptions,
            chunked_prefill=chunks,
            kv_load_failures=failures,
            interruptions=4,
        )
        before = Pipeline("pre-fix", bounds, 3, SeededChoices(seed))
        after = Pipeline("post-fix", bounds, 3, SeededChoices(seed))
        while True:
            done = before.turn()
            assert after.turn() == done
            if done is None:
                break
            turns += 1
            repairs += after.runner.repaired_rows if done == "schedule" else 0
            assert lists_equal(before, after), (seed, turns)
        assert before.scheduler.tracked.output_token_ids == list(range(8))  # every token at its position
    assert turns > 100 and repairs > 100


def test_recorded_choices_fed_back_reproduce_the_run(tmp_path: Path) -> None:
    code, payload, _ = run(tmp_path / "first", "--variant", "post-fix", "--scenario", "all-operations", "--seed", "3")
    assert code == 0, payload
    points = {choice["point"] for choice in payload["choices"]}
    assert {"next", "kind", "accepted", "copy_lands"} <= points
    script = tmp_path / "choices.jsonl"
    script.write_text("".join(json.dumps(choice) + "\n" for choice in payload["choices"]))
    code, again, _ = run(
        tmp_path / "second",
        "--variant",
        "post-fix",
        "--scenario",
        "all-operations",
        "--seed",
        "99",
        "--choices",
        str(script),
    )
    assert code == 0, again

    def per_actor(folder: Path) -> dict[str, list[tuple[str, str, str]]]:
        found: dict[str, list[tuple[str, str, str]]] = {}
        for event in events_of(folder):  # the threads' lines may interleave differently; each actor's may not
            found.setdefault(event["actor"], []).append(
                (event["action"], json.dumps(event["args"]), json.dumps(event["observed"]))
            )
        return found

    assert per_actor(tmp_path / "first") == per_actor(tmp_path / "second")
