"""The one recorder core (lockstep.traces.recorder): both trace producers write through it, every
line it writes is a valid event, and a bad event is refused without a gap in the indices."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lockstep.impl.runtime import Recorder, RunConfig
from lockstep.record import TraceRecorder
from lockstep.traces import TraceFormatError, TraceHeader, TraceSource, event_problems, header_problems
from lockstep.traces.recorder import EventRecorder, RawObject, trace_file_name


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_both_producers_are_the_one_core(tmp_path: Path) -> None:
    runtime = Recorder(
        RunConfig(protocol="dp-pause", trace_dir=str(tmp_path / "run")), "rank:0", {"ranks": 2}, TraceSource("runtime")
    )
    instrumented = TraceRecorder(tmp_path / "vllm", "rank:1", "dp-pause", "post-fix", {"ranks": 2})
    for recorder in (runtime, instrumented):
        assert isinstance(recorder, EventRecorder)
        recorder.close()
    assert runtime.path == tmp_path / "run" / "rank-0.jsonl" and instrumented.path == tmp_path / "vllm" / "rank-1.jsonl"
    assert trace_file_name("rank:0") == "rank-0.jsonl" and trace_file_name("../../x") == "-.-..-x.jsonl"


def test_events_collectives_and_deferred_lines_are_valid_and_numbered(tmp_path: Path) -> None:
    header = TraceHeader("dp-pause", "post-fix", "seed", {"ranks": 2}, TraceSource("runtime"))
    with EventRecorder("rank:0", tmp_path / "rank-0.jsonl", header) as recorder:
        recorder.record("step", {"rank": 0}, observed={"mode[0]": "IDLE"}, clock=recorder.send("coordinator"))
        with recorder.collective("worker_dp", "forward") as number:
            assert number == 1
        number = recorder.enter("worker_dp", "forward")
        recorder.complete("worker_dp", "forward", number, flush=False)  # goes out with the next line
        recorder.record("finish_forward", {"rank": 0}, observed=RawObject('{"mode[0]":"IDLE"}'))
    header_line, *events = _lines(tmp_path / "rank-0.jsonl")
    assert header_problems(header_line) == []
    assert all(event_problems(event) == [] for event in events)
    assert [event["index"] for event in events] == list(range(6))
    assert [(event["action"], event.get("clock")) for event in events[1:5]] == [
        ("enter", {"worker_dp": 1}),
        ("complete", {"worker_dp": 1}),
        ("enter", {"worker_dp": 2}),
        ("complete", {"worker_dp": 2}),
    ]
    assert events[0]["clock"] == {"send:coordinator": 1}


@pytest.mark.parametrize("check_every_event", [False, True])
def test_a_bad_event_is_refused_and_leaves_no_gap(tmp_path: Path, check_every_event: bool) -> None:
    header = TraceHeader("dp-pause", "post-fix", "seed", {}, TraceSource("runtime"))
    recorder = EventRecorder("rank:0", tmp_path / "t.jsonl", header, check_every_event=check_every_event)
    with pytest.raises(TraceFormatError, match="bad trace event 0"):
        recorder.record("step", {"rank": math.nan})  # JSON cannot carry NaN, in either mode
    with pytest.raises(TraceFormatError, match="bad trace event 0"):
        recorder.record("step", actor="Bad Actor")  # checked at the action's first use
    recorder.record("step", {"rank": 0})
    if check_every_event:  # instrumented code: every event is checked, not only each action's first
        with pytest.raises(TraceFormatError, match="bad trace event 1"):
            recorder.record("step", {"rank": 0}, actor="Bad Actor")
    recorder.record("step", {"rank": 1})
    recorder.close()
    assert [event["index"] for event in _lines(tmp_path / "t.jsonl")[1:]] == [0, 1]


def test_without_a_file_it_only_counts() -> None:
    recorder = Recorder(RunConfig(protocol="dp-pause", trace_dir=None), "client", {}, TraceSource("runtime"))
    recorder.record("client_pause")
    assert recorder.enter("worker_dp", "forward") == 1
    assert recorder.events == 2 and recorder.path is None
