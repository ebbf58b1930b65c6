"""lockstep.record: traces written from any process are read and replayed like lockstep's own.

The dp-pause pre-fix counterexample re-recorded through ``TraceRecorder`` replays with the same
verdict; ``collective`` writes the enter/complete pair with per-communicator numbers (and no
``complete`` when the op raised); message clocks count per channel; ``parameters`` fills the
model's bounds; ``from_environment`` follows ``LOCKSTEP_TRACE_DIR``; ``instrument`` records after
a wrapped method and can be undone; importing the module loads no torch, z3, numpy or rich.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lockstep import record
from lockstep.testing import replay_traces
from lockstep.traces.reader import TraceReader

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
PRE_FIX = FIXTURES / "dp-pause-pre-fix-seed.jsonl"


def test_a_re_recorded_counterexample_replays_with_the_same_verdict(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in PRE_FIX.read_text().splitlines()]
    header, events = lines[0], lines[1:]
    parameters = record.parameters(
        "dp-pause", **{name: value for name, value in header["parameters"].items() if name != "property"}
    )
    with record.open_trace(tmp_path, "client", "dp-pause", "pre-fix", parameters, instance="seed") as recorder:
        for event in events:
            recorder.event(
                event["action"], event["args"], event.get("observed"), event.get("clock"), actor=event["actor"]
            )
    assert recorder.path == tmp_path / "client.jsonl" and recorder.events == len(events)
    original, again = replay_traces(PRE_FIX), replay_traces(recorder.path)
    assert again["verdict"] == original["verdict"] == "violated"
    assert again["property"] == original["property"] == "quiescent_during_rpc"
    assert again["event"] == original["event"]


def test_collective_writes_enter_then_complete_with_sequence_numbers(tmp_path: Path) -> None:
    parameters = record.parameters("dp-pause", ranks=2)
    with record.open_trace(tmp_path, "rank:1", "dp-pause", "post-fix", parameters) as recorder:
        with recorder.collective("worker_dp", "forward") as first:
            assert first == 1
        with recorder.collective("engine_dp", "sync_sum") as other:
            assert other == 1
        with pytest.raises(RuntimeError), recorder.collective("worker_dp", "forward"):
            raise RuntimeError("the op failed")  # no complete: it never completed
    events = [record_.event for record_ in TraceReader(tmp_path / "rank-1.jsonl").events()]
    assert [(event["action"], event["args"]["communicator"], event["clock"]) for event in events] == [
        ("enter", "worker_dp", {"worker_dp": 1}),
        ("complete", "worker_dp", {"worker_dp": 1}),
        ("enter", "engine_dp", {"engine_dp": 1}),
        ("complete", "engine_dp", {"engine_dp": 1}),
        ("enter", "worker_dp", {"worker_dp": 2}),
    ]
    assert all(event["actor"] == "rank:1" for event in events)


def test_message_clocks_count_per_channel(tmp_path: Path) -> None:
    with record.open_trace(tmp_path, "client", "dp-pause", "post-fix", record.parameters("dp-pause")) as recorder:
        assert recorder.send("client>rank:0") == {"send:client>rank:0": 1}
        assert recorder.send("client>rank:0") == {"send:client>rank:0": 2}
        assert recorder.send("client>rank:1") == {"send:client>rank:1": 1}
        assert recorder.receive("rank:0>client") == {"recv:rank:0>client": 1}


def test_parameters_fill_the_model_bounds_and_reject_unknown_protocols() -> None:
    values = record.parameters("dp-pause", ranks=3)
    assert values["ranks"] == 3 and values["sync_interval"] >= 1 and "max_wave" in values
    with pytest.raises(ValueError, match="unknown protocol 'nope'"):
        record.parameters("nope")


def test_bad_events_are_refused_with_the_problem_named(tmp_path: Path) -> None:
    with record.open_trace(tmp_path, "rank:0", "dp-pause", "post-fix", record.parameters("dp-pause")) as recorder:
        with pytest.raises(ValueError, match="actor"):
            recorder.event("step", {"rank": 0}, actor="not an actor!")
        recorder.event("step", {"rank": 0})
    assert recorder.events == 1


def test_from_environment_follows_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(record.TRACE_DIRECTORY_ENVIRONMENT, raising=False)
    assert not record.recording_enabled()
    assert record.from_environment("rank:0", "dp-pause", "post-fix", {}) is None
    monkeypatch.setenv(record.TRACE_DIRECTORY_ENVIRONMENT, str(tmp_path / "runs"))
    recorder = record.from_environment("rank:0", "dp-pause", "post-fix", record.parameters("dp-pause"))
    assert recorder is not None and recorder.path == tmp_path / "runs" / "rank-0.jsonl"
    recorder.close()


class Engine:
    def __init__(self) -> None:
        self.paused = False
        self.recorder: record.TraceRecorder | None = None

    def pause(self, mode: str) -> str:
        self.paused = True
        return mode


def test_instrument_records_after_the_call_and_can_be_undone(tmp_path: Path) -> None:
    engine = Engine()
    engine.recorder = record.open_trace(tmp_path, "rank:0", "dp-pause", "post-fix", record.parameters("dp-pause"))
    undo = record.instrument(
        Engine,
        "pause",
        lambda self: self.recorder,
        lambda self, mode: (
            "handle_pause",
            {"rank": 0},
            {"pause_state[0]": "PAUSED_ALL" if self.paused else "UNPAUSED"},
        ),
    )
    try:
        assert engine.pause("keep") == "keep"
    finally:
        undo()
    engine.pause("keep")  # no longer recorded
    engine.recorder.close()
    events = [record_.event for record_ in TraceReader(tmp_path / "rank-0.jsonl").events()]
    assert [(event["action"], event["observed"]) for event in events] == [
        ("handle_pause", {"pause_state[0]": "PAUSED_ALL"})
    ]


def test_importing_the_recorder_loads_nothing_heavy() -> None:
    heavy = "('torch', 'z3', 'numpy', 'rich', 'hypothesis')"
    code = f"import sys, lockstep.record; print(sorted(m for m in {heavy} if m in sys.modules))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_a_killed_recording_process_leaves_a_replayable_prefix(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, sys
        from lockstep import record
        recorder = record.open_trace({str(tmp_path)!r}, "rank:0", "dp-pause", "post-fix", record.parameters("dp-pause"))
        for number in range(1000000):
            with recorder.collective("worker_dp", "forward"):
                pass
            if number == 50:
                print("ready", flush=True)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    data = (tmp_path / "rank-0.jsonl").read_bytes()
    complete = data[: data.rfind(b"\n") + 1].decode().splitlines()
    assert len(complete) > 100
    for line in complete:
        json.loads(line)
