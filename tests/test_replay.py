"""Conformance replay against dp-pause: verdicts, divergences with their explanations, unrecorded actions.

The pre-fix counterexample is written by ``lockstep check`` itself (a subprocess), so these tests
follow the checker's real output; the checked-in fixture must match it event for event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_trace_reader import FIXTURES, PRE_FIX, run

from lockstep.checkers import system_for
from lockstep.checkers.conformance.replay import ReplayOptions, replay
from lockstep.models import get_protocol
from lockstep.traces.merge import open_traces

POST_FIX_RESUMED = FIXTURES / "dp-pause-post-fix-resumed.jsonl"


def lines_of(path: Path) -> list[str]:
    return [line for line in path.read_text().split("\n") if line]


def write_events(path: Path, header: str, events: list[dict[str, object]]) -> Path:
    """Write ``events`` after ``header``, renumbering their indices 0, 1, 2, ..."""
    with open(path, "w") as out:
        out.write(header + "\n")
        for index, event in enumerate(events):
            out.write(json.dumps({**event, "index": index}) + "\n")
    return path


def replay_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code, out, err = run("replay", *argv, "--json", capsys=capsys)
    assert out, err
    return code, json.loads(out)


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``lockstep check dp-pause --variant pre-fix --trace-out F`` as a user runs it."""
    target = tmp_path_factory.mktemp("check") / "pre-fix.jsonl"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "check",
            "dp-pause",
            "--variant",
            "pre-fix",
            "--trace-out",
            str(target),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 1, completed.stderr
    return target


def test_the_fixture_is_what_the_checker_writes(counterexample: Path) -> None:
    assert lines_of(counterexample)[1:] == lines_of(PRE_FIX)[1:]


def test_pre_fix_counterexample_is_violated_against_pre_fix(
    counterexample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = replay_json(capsys, str(counterexample))
    assert code == 1
    assert result["verdict"] == "violated"
    assert result["property"] == "quiescent_during_rpc"
    assert result["event"] == 16  # the last step: rank 1 enters the rpc while rank 0 is in a dummy forward
    assert result["longest_conforming_prefix"] == 17
    assert result["candidate_states_max"] == 1


def test_pre_fix_counterexample_diverges_from_post_fix_where_the_variants_differ(
    counterexample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = replay_json(capsys, str(counterexample), "--variant", "post-fix")
    assert code == 1
    assert result["verdict"] == "diverges"
    assert result["event"] == 7  # handle_pause: pre-fix replies at once, post-fix defers the reply
    explanation = result["explanation"]
    assert isinstance(explanation, dict)
    assert explanation["event"]["action"] == "handle_pause" and explanation["line"] == 9
    assert "client.replies = 0, but 1 was observed" in json.dumps(explanation["candidates"])
    assert result["longest_conforming_prefix"] == 7


def test_post_fix_resumed_witness_conforms(capsys: pytest.CaptureFixture[str]) -> None:
    code, result = replay_json(capsys, str(POST_FIX_RESUMED))
    assert code == 0
    assert result["verdict"] == "conforms" and result["event"] is None and result["property"] is None
    assert result["longest_conforming_prefix"] == len(lines_of(POST_FIX_RESUMED)) - 1
    assert result["witnessed"] == {"resumed": result["longest_conforming_prefix"] - 1}


def events_of(path: Path) -> tuple[str, list[dict[str, object]]]:
    lines = lines_of(path)
    return lines[0], [json.loads(line) for line in lines[1:]]


def test_a_dropped_event_diverges_with_the_false_guard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    assert events[1]["action"] == "arrive_from_client"
    mutated = write_events(tmp_path / "dropped.jsonl", header, events[:1] + events[2:])
    code, result = replay_json(capsys, str(mutated))
    assert code == 1 and result["verdict"] == "diverges" and result["event"] == 1
    explanation = result["explanation"]
    assert isinstance(explanation, dict)
    assert explanation["reason"] == "no candidate state enables handle_add for rank:0"
    why = explanation["candidates"][0]["why"]
    assert any(
        "handle_add(rank=0) is not enabled" in text and "is false" in text and "input_queue = [<>, <>]" in text
        for text in why
    ), why
    assert result["longest_conforming_prefix"] == 1


def test_two_causally_ordered_events_swapped_diverge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    assert (events[4]["action"], events[5]["action"]) == ("client_pause", "arrive_from_client")
    swapped = events[:4] + [events[5], events[4]] + events[6:]
    code, result = replay_json(capsys, str(write_events(tmp_path / "swapped.jsonl", header, swapped)))
    assert code == 1 and result["verdict"] == "diverges" and result["event"] == 4
    why = json.dumps(result["explanation"])
    assert "arrive_from_client(rank=0) is not enabled" in why and "channel.client = [<>, <>]" in why


def test_independent_events_swapped_still_conform(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    assert (events[2]["action"], events[3]["action"]) == ("handle_add", "coordinator_first_request")
    swapped = events[:2] + [events[3], events[2]] + events[4:]
    code, result = replay_json(capsys, str(write_events(tmp_path / "independent.jsonl", header, swapped)))
    assert code == 1 and result["verdict"] == "violated" and result["event"] == 16


def test_a_wrong_observed_value_diverges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    events[2]["observed"] = {**events[2]["observed"], "requests": [0, 1]}  # type: ignore[dict-item]
    code, result = replay_json(capsys, str(write_events(tmp_path / "observed.jsonl", header, events)))
    assert code == 1 and result["verdict"] == "diverges" and result["event"] == 2
    explanation = result["explanation"]
    assert isinstance(explanation, dict)
    assert "observed values contradict every successor" in explanation["reason"]
    assert "requests = [1, 0], but [0, 1] was observed" in json.dumps(explanation["candidates"])


def test_one_map_entry_can_be_observed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    events[2]["observed"] = {"requests[0]": 1, "pause_state[1]": "UNPAUSED"}
    code, result = replay_json(capsys, str(write_events(tmp_path / "entry.jsonl", header, events)))
    assert result["verdict"] == "violated"
    events[2]["observed"] = {"requests[1]": 1}
    code, result = replay_json(capsys, str(write_events(tmp_path / "entry.jsonl", header, events)))
    assert result["verdict"] == "diverges" and "requests[1] = 0, but 1 was observed" in json.dumps(
        result["explanation"]
    )


def test_unrecorded_actions_are_closed_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the coordinator's events the trace still replays when the coordinator is unrecorded."""
    header, events = events_of(PRE_FIX)
    without = [event for event in events if event["actor"] != "coordinator"]
    trace = write_events(tmp_path / "no-coordinator.jsonl", header, without)
    code, result = replay_json(capsys, str(trace))
    assert code == 1 and result["verdict"] == "diverges"  # recorded as complete: the START_WAVE never arrives
    code, result = replay_json(capsys, str(trace), "--unrecorded", "coordinator")
    assert code == 1 and result["verdict"] == "violated" and result["property"] == "quiescent_during_rpc"
    assert result["unrecorded_actions"] == ["coordinator_first_request", "coordinator_report"]


def test_too_many_candidates_is_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    bare = [
        {key: value for key, value in event.items() if key != "observed"}
        for event in events
        if event["actor"] != "client"
    ]
    trace = write_events(tmp_path / "bare.jsonl", header, bare)
    code, result = replay_json(capsys, str(trace), "--unrecorded", "client", "--max-candidates", "3")
    assert code == 3 and result["verdict"] == "inconclusive"


def test_a_recording_of_collectives_only(capsys: pytest.CaptureFixture[str]) -> None:
    """Per-rank files with only enter/complete events (hand-made; the header names every actor
    unrecorded, and so must the caller): the candidate sets are closed over every model action, and
    the merged order conforms to pre-fix. Real runtime recordings are replayed in test_replay_runtime.py."""
    code, result = replay_json(capsys, str(FIXTURES / "collectives-only-pre-fix"))
    assert code == 2 and "parameters.unrecorded" in result["error"]  # the header may not widen the check
    code, result = replay_json(
        capsys,
        str(FIXTURES / "collectives-only-pre-fix"),
        "--unrecorded",
        "rank:*",
        "--unrecorded",
        "client",
        "--unrecorded",
        "coordinator",
    )
    assert code == 0 and result["verdict"] == "conforms" and result["events"] == 8
    assert isinstance(result["candidate_states_max"], int) and result["candidate_states_max"] > 1


def test_an_enter_the_model_cannot_have_diverges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, events = events_of(PRE_FIX)
    enter = {
        "actor": "rank:1",
        "action": "enter",
        "args": {"communicator": "worker_dp", "op": "forward"},
        "clock": {"worker_dp": 1},
    }
    code, result = replay_json(
        capsys, str(write_events(tmp_path / "enter.jsonl", header, events[:10] + [enter] + events[10:]))
    )
    assert result["verdict"] == "diverges" and result["event"] == 10
    assert "member 1 has not entered forward on worker_dp" in json.dumps(result["explanation"])
    enter["actor"] = "rank:0"
    code, result = replay_json(
        capsys, str(write_events(tmp_path / "enter.jsonl", header, events[:10] + [enter] + events[10:]))
    )
    assert result["verdict"] == "violated" and result["event"] == 17


def test_the_engine_replays_records_directly() -> None:
    instance = get_protocol("dp-pause").instance("pre-fix")
    trace = open_traces([PRE_FIX])
    result = replay(system_for(instance.machine(), compiled=False), trace.records(), ReplayOptions())
    assert result.verdict == "violated" and result.failed_property == "quiescent_during_rpc" and result.exit_code == 1


def test_human_output_explains_a_divergence(counterexample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("replay", str(counterexample), "--variant", "post-fix", capsys=capsys)
    assert code == 1 and out == ""
    assert f"diverges at event 7 ({counterexample}:9)" in err
    assert "candidate 1 of 1" in err and "longest conforming prefix: 7 events" in err
