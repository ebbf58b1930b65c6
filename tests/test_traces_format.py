"""Tests for lockstep.traces: records, the shipped JSON Schema, its stdlib mirror, the writer."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from lockstep.traces import (
    ACTOR_PATTERN,
    TRACE_FORMAT,
    TRACE_VERSION,
    TraceEvent,
    TraceFormatError,
    TraceHeader,
    TraceSource,
    TraceWriter,
    event_problems,
    header_problems,
    schema,
    write_trace,
)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


def make_header(**changes: Any) -> TraceHeader:
    fields: dict[str, Any] = {
        "protocol": "collective_matching",
        "variant": "buggy_skip",
        "instance": "ranks2_steps3",
        "parameters": {"ranks": 2, "steps": 3, "groups": ["tp", "dp"]},
        "source": TraceSource(kind="runtime", backend="gloo", device="cpu", torch="2.5.1", host="box"),
    }
    fields.update(changes)
    return TraceHeader(**fields)


def sample_events() -> list[TraceEvent]:
    return [
        TraceEvent(index=0, actor="rank:0", action="all_reduce", args={"group": "tp", "bytes": 4096}),
        TraceEvent(
            index=1,
            actor="coordinator",
            action="schedule",
            args={"requests": [1, 2, 3], "nested": {"ratio": 0.5, "ok": True, "none": None}},
            observed={"queue": ["r1", "r2"], "step": 7},
            clock={"tp": 3, "dp": 0},
        ),
        TraceEvent(index=2, actor="group:dp", action="barrier"),
        TraceEvent(index=3, actor="client", action="send", args={"text": 'héllo\u2028wörld\n"quoted"'}),
    ]


def read_lines(path: Path) -> list[str]:
    """Complete lines of a trace file, split on '\\n' only (U+2028 may appear raw in strings)."""
    pieces = path.read_bytes().decode("utf-8").split("\n")
    assert pieces[-1] == "", "file must end with a complete line"
    return pieces[:-1]


def def_validator(name: str) -> Any:
    """A Draft 2020-12 validator for one of the schema's $defs (header or event)."""
    jsonschema = pytest.importorskip("jsonschema")
    full = schema()
    wrapper = {"$schema": full["$schema"], "$defs": full["$defs"], "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(wrapper)


# --- records -------------------------------------------------------------------------------


def test_to_json_adds_format_and_version_and_omits_missing_optional_fields() -> None:
    header = make_header().to_json()
    assert list(header) == [
        "format",
        "version",
        "protocol",
        "variant",
        "instance",
        "parameters",
        "source",
    ]
    assert header["format"] == TRACE_FORMAT == "lockstep-trace"
    assert header["version"] == TRACE_VERSION == 1
    assert header["source"] == {
        "kind": "runtime",
        "backend": "gloo",
        "device": "cpu",
        "torch": "2.5.1",
        "cuda": None,
        "host": "box",
    }
    bare = TraceEvent(index=0, actor="rank:1", action="recv").to_json()
    assert bare == {"index": 0, "actor": "rank:1", "action": "recv", "args": {}}
    full = sample_events()[1].to_json()
    assert full["observed"] == {"queue": ["r1", "r2"], "step": 7}
    assert full["clock"] == {"tp": 3, "dp": 0}


def test_to_json_turns_tuples_and_mappings_into_plain_json() -> None:
    from types import MappingProxyType

    event = TraceEvent(index=0, actor="rank:0", action="send", args=MappingProxyType({"shape": (2, 3)}))
    assert event.to_json()["args"] == {"shape": [2, 3]}
    assert event_problems(event.to_json()) == []


# --- writing and re-reading ----------------------------------------------------------------


def test_header_and_events_round_trip_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "trace.jsonl"
    header = make_header()
    events = sample_events()
    with TraceWriter(path, header) as writer:
        assert writer.path == path
        assert read_lines(path) == [json.dumps(header.to_json(), separators=(",", ":"), ensure_ascii=False)]
        for event in events:
            writer.write(event)
        assert writer.events_written == len(events)
    lines = read_lines(path)
    assert len(lines) == 1 + len(events)
    assert json.loads(lines[0]) == header.to_json()
    for line, event in zip(lines[1:], events, strict=True):
        assert json.loads(line) == event.to_json()
        assert ", " not in line.replace('", "', "") and ": " not in line  # compact separators
    assert "héllo" in lines[4]  # ensure_ascii=False keeps text readable
    with open(path, encoding="utf-8", newline="") as file:  # text-mode iteration also sees 5 lines
        assert [json.loads(line)["index"] for line in list(file)[1:]] == [0, 1, 2, 3]


def test_append_assigns_consecutive_indices(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, make_header()) as writer:
        first = writer.append("rank:0", "send", {"to": 1})
        second = writer.append("rank:1", "recv", observed={"inbox": 1}, clock={"rank:0": 1})
        writer.write(TraceEvent(index=2, actor="rank:0", action="done"))
        third = writer.append("coordinator", "stop")
    assert (first.index, second.index, third.index) == (0, 1, 3)
    assert second.args == {}
    assert [json.loads(line) for line in read_lines(path)[1:]] == [
        first.to_json(),
        second.to_json(),
        {"index": 2, "actor": "rank:0", "action": "done", "args": {}},
        third.to_json(),
    ]


def test_write_trace_returns_path(tmp_path: Path) -> None:
    path = write_trace(str(tmp_path / "a" / "b.jsonl"), make_header(), sample_events())
    assert path == tmp_path / "a" / "b.jsonl"
    assert len(read_lines(path)) == 5


def test_fsync_option_writes_the_same_bytes(tmp_path: Path) -> None:
    plain = write_trace(tmp_path / "plain.jsonl", make_header(), sample_events())
    synced = write_trace(tmp_path / "synced.jsonl", make_header(), sample_events(), fsync=True)
    assert synced.read_bytes() == plain.read_bytes()


def test_every_written_line_validates_against_shipped_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    path = write_trace(tmp_path / "trace.jsonl", make_header(source=TraceSource(kind="model")), sample_events())
    lines = [json.loads(line) for line in read_lines(path)]
    def_validator("header").validate(lines[0])
    event_validator = def_validator("event")
    root_validator = jsonschema.Draft202012Validator(schema())
    for event in lines[1:]:
        event_validator.validate(event)
        assert not def_validator("header").is_valid(event)
    for line in lines:
        root_validator.validate(line)


def test_shipped_schema_is_a_valid_draft_2020_12_schema_that_matches_the_constants() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    full = schema()
    jsonschema.Draft202012Validator.check_schema(full)
    assert full["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    header, event = full["$defs"]["header"], full["$defs"]["event"]
    assert header["properties"]["format"] == {"enum": [TRACE_FORMAT]}
    assert header["properties"]["version"] == {"enum": [TRACE_VERSION]}
    assert event["properties"]["actor"]["pattern"] == ACTOR_PATTERN
    assert schema() is not schema()  # callers may mutate their copy


# --- the schema and its stdlib mirror ------------------------------------------------------

GOOD_HEADER: dict[str, Any] = make_header().to_json()
GOOD_EVENT: dict[str, Any] = {"index": 0, "actor": "rank:0", "action": "send", "args": {}}


def changed(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(base))
    for key, value in changes.items():
        if value is DROP:
            del result[key]
        else:
            result[key] = value
    return result


DROP = object()
SOURCE = GOOD_HEADER["source"]

HEADER_CASES: list[tuple[str, object, bool]] = [
    ("good", GOOD_HEADER, True),
    (
        "model source, all details null",
        changed(GOOD_HEADER, source=make_header(source=TraceSource("model")).to_json()["source"]),
        True,
    ),
    ("source with kind only", changed(GOOD_HEADER, source={"kind": "runtime"}), True),
    ("empty variant and instance", changed(GOOD_HEADER, variant="", instance=""), True),
    (
        "nested parameters",
        changed(GOOD_HEADER, parameters={"a": {"b": [1, 2.5, None, True, "x"]}}),
        True,
    ),
    ("wrong format name", changed(GOOD_HEADER, format="lockstep-trace2"), False),
    ("format missing", changed(GOOD_HEADER, format=DROP), False),
    ("version 2", changed(GOOD_HEADER, version=2), False),
    ("version as string", changed(GOOD_HEADER, version="1"), False),
    ("version true", changed(GOOD_HEADER, version=True), False),
    ("empty protocol", changed(GOOD_HEADER, protocol=""), False),
    ("protocol not a string", changed(GOOD_HEADER, protocol=5), False),
    ("variant null", changed(GOOD_HEADER, variant=None), False),
    ("instance missing", changed(GOOD_HEADER, instance=DROP), False),
    ("parameters a list", changed(GOOD_HEADER, parameters=[1, 2]), False),
    ("parameters missing", changed(GOOD_HEADER, parameters=DROP), False),
    ("source kind unknown", changed(GOOD_HEADER, source={**SOURCE, "kind": "simulation"}), False),
    ("source kind missing", changed(GOOD_HEADER, source={"backend": "nccl"}), False),
    ("source extra field", changed(GOOD_HEADER, source={**SOURCE, "gpu": "h100"}), False),
    ("source backend a number", changed(GOOD_HEADER, source={**SOURCE, "backend": 3}), False),
    ("source a string", changed(GOOD_HEADER, source="runtime"), False),
    ("extra top-level field", changed(GOOD_HEADER, comment="hi"), False),
    ("not an object", [GOOD_HEADER], False),
    ("an event instead", GOOD_EVENT, False),
]

EVENT_CASES: list[tuple[str, object, bool]] = [
    ("good", GOOD_EVENT, True),
    ("coordinator", changed(GOOD_EVENT, actor="coordinator"), True),
    ("client", changed(GOOD_EVENT, actor="client"), True),
    ("group name", changed(GOOD_EVENT, actor="group:dp"), True),
    ("engine id", changed(GOOD_EVENT, actor="engine:12"), True),
    ("other kind word, dotted id", changed(GOOD_EVENT, actor="worker:node-1.gpu_3"), True),
    ("large index", changed(GOOD_EVENT, index=10**12), True),
    (
        "observed and clock",
        changed(GOOD_EVENT, observed={"a": [1, {"b": None}]}, clock={"tp": 0, "rank:1": 4}),
        True,
    ),
    ("empty clock", changed(GOOD_EVENT, clock={}), True),
    ("missing actor", changed(GOOD_EVENT, actor=DROP), False),
    ("actor with space", changed(GOOD_EVENT, actor="rank 1"), False),
    ("actor with empty id", changed(GOOD_EVENT, actor="rank:"), False),
    ("actor without kind", changed(GOOD_EVENT, actor=":1"), False),
    ("actor capitalised", changed(GOOD_EVENT, actor="Rank:1"), False),
    ("actor with two ids", changed(GOOD_EVENT, actor="rank:1:2"), False),
    ("actor with trailing newline", changed(GOOD_EVENT, actor="rank:1\n"), False),
    ("actor empty", changed(GOOD_EVENT, actor=""), False),
    ("actor a number", changed(GOOD_EVENT, actor=3), False),
    ("negative index", changed(GOOD_EVENT, index=-1), False),
    ("index as string", changed(GOOD_EVENT, index="0"), False),
    ("index true", changed(GOOD_EVENT, index=True), False),
    ("index null", changed(GOOD_EVENT, index=None), False),
    ("index missing", changed(GOOD_EVENT, index=DROP), False),
    ("empty action", changed(GOOD_EVENT, action=""), False),
    ("action missing", changed(GOOD_EVENT, action=DROP), False),
    ("args missing", changed(GOOD_EVENT, args=DROP), False),
    ("args null", changed(GOOD_EVENT, args=None), False),
    ("observed null", changed(GOOD_EVENT, observed=None), False),
    ("observed a list", changed(GOOD_EVENT, observed=[1]), False),
    ("clock negative", changed(GOOD_EVENT, clock={"tp": -1}), False),
    ("clock fractional", changed(GOOD_EVENT, clock={"tp": 1.5}), False),
    ("clock as string", changed(GOOD_EVENT, clock={"tp": "3"}), False),
    ("clock empty key", changed(GOOD_EVENT, clock={"": 1}), False),
    ("clock a list", changed(GOOD_EVENT, clock=[1, 2]), False),
    ("extra field", changed(GOOD_EVENT, time=1.0), False),
    ("not an object", "rank:0 send", False),
    ("a header instead", GOOD_HEADER, False),
]


@pytest.mark.parametrize(("name", "obj", "valid"), HEADER_CASES, ids=[case[0] for case in HEADER_CASES])
def test_header_problems_agree_with_schema(name: str, obj: object, valid: bool) -> None:
    assert def_validator("header").is_valid(obj) is valid
    assert (header_problems(obj) == []) is valid, header_problems(obj)


@pytest.mark.parametrize(("name", "obj", "valid"), EVENT_CASES, ids=[case[0] for case in EVENT_CASES])
def test_event_problems_agree_with_schema(name: str, obj: object, valid: bool) -> None:
    assert def_validator("event").is_valid(obj) is valid
    assert (event_problems(obj) == []) is valid, event_problems(obj)


@pytest.mark.parametrize(
    ("kind", "obj", "field"),
    [
        ("header", changed(GOOD_HEADER, format="other-trace"), "format"),
        ("header", changed(GOOD_HEADER, version=2), "version"),
        ("event", changed(GOOD_EVENT, actor=DROP), "actor"),
        ("event", changed(GOOD_EVENT, actor="rank one"), "actor"),
        ("event", changed(GOOD_EVENT, index=-1), "index"),
    ],
)
def test_schema_and_problems_reject_and_name_the_field(kind: str, obj: dict[str, Any], field: str) -> None:
    errors = list(def_validator(kind).iter_errors(obj))
    assert errors, "schema accepted a bad line"
    problems = (header_problems if kind == "header" else event_problems)(obj)
    assert len(problems) == 1 and f"'{field}'" in problems[0], problems


def test_problem_messages_are_readable() -> None:
    assert event_problems(changed(GOOD_EVENT, actor=3)) == [
        (
            "field 'actor' must be a string like 'rank:1', 'coordinator' or 'd-worker'"
            " (a kind word, optionally ':' and an id), got 3"
        )
    ]
    assert header_problems(changed(GOOD_HEADER, version=2)) == ["field 'version' must be 1, got 2"]
    assert event_problems(changed(GOOD_EVENT, action=DROP, extra=1)) == [
        "missing field 'action'",
        "unexpected field 'extra'",
    ]
    assert header_problems(changed(GOOD_HEADER, source={"kind": "sim"})) == [
        "field 'source.kind' must be 'model' or 'runtime', got 'sim'"
    ]
    assert header_problems(changed(GOOD_HEADER, source={"kind": "model", "gpu": "h100"})) == [
        "unexpected field 'source.gpu'"
    ]
    assert header_problems(None) == ["header must be a JSON object, got None"]


def test_problems_refuse_values_json_cannot_hold() -> None:
    assert event_problems({**GOOD_EVENT, "args": {"loss": math.nan}}) == [
        "field 'args.loss' must be a finite number, got nan"
    ]
    assert event_problems({**GOOD_EVENT, "observed": {"a": [1, math.inf]}}) == [
        "field 'observed.a[1]' must be a finite number, got inf"
    ]
    assert event_problems({**GOOD_EVENT, "args": {1: "x"}}) == ["field 'args' must have string keys, got 1"]
    assert "must be a JSON value" in event_problems({**GOOD_EVENT, "args": {"s": {1, 2}}})[0]


def test_known_difference_integral_float_index() -> None:
    """JSON Schema counts 1.0 as an integer; the stdlib checks insist on an integer literal."""
    assert def_validator("event").is_valid(changed(GOOD_EVENT, index=1.0))
    assert event_problems(changed(GOOD_EVENT, index=1.0)) != []


# --- the writer refuses bad input ------------------------------------------------------------


def test_out_of_order_indices_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, make_header()) as writer:
        with pytest.raises(TraceFormatError, match="index 1 is out of order: expected 0"):
            writer.write(TraceEvent(index=1, actor="rank:0", action="send"))
        assert len(read_lines(path)) == 1 and writer.events_written == 0
        writer.write(TraceEvent(index=0, actor="rank:0", action="send"))
        with pytest.raises(TraceFormatError, match="expected 1"):
            writer.write(TraceEvent(index=0, actor="rank:0", action="send"))  # repeated
        with pytest.raises(TraceFormatError, match="expected 1"):
            writer.write(TraceEvent(index=2, actor="rank:0", action="send"))  # gap
        writer.write(TraceEvent(index=1, actor="rank:1", action="recv"))
    assert [json.loads(line)["index"] for line in read_lines(path)[1:]] == [0, 1]


def test_nan_and_infinity_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, make_header()) as writer:
        with pytest.raises(TraceFormatError, match="args.loss"):
            writer.write(TraceEvent(index=0, actor="rank:0", action="step", args={"loss": float("nan")}))
        with pytest.raises(TraceFormatError, match="observed.x"):
            writer.append("rank:0", "step", observed={"x": float("-inf")})
        assert writer.events_written == 0
        writer.append("rank:0", "step", {"loss": 0.25})
    assert len(read_lines(path)) == 2
    bad_header_path = tmp_path / "never.jsonl"
    with pytest.raises(TraceFormatError, match="parameters.scale"):
        TraceWriter(bad_header_path, make_header(parameters={"scale": float("nan")}))
    assert not bad_header_path.exists()


def test_malformed_events_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, make_header()) as writer:
        with pytest.raises(TraceFormatError, match="field 'actor' must be a string like 'rank:1'"):
            writer.write(TraceEvent(index=0, actor=3, action="send"))  # type: ignore[arg-type]
        with pytest.raises(TraceFormatError, match="field 'action'"):
            writer.append("rank:0", "")
        with pytest.raises(TraceFormatError, match="clock.tp"):
            writer.append("rank:0", "send", clock={"tp": -2})
        assert writer.events_written == 0
    assert len(read_lines(path)) == 1
    with pytest.raises(TraceFormatError, match="field 'protocol'"):
        TraceWriter(tmp_path / "other.jsonl", make_header(protocol=""))


def test_closed_writer_refuses_writes_and_keeps_prefix(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with pytest.raises(RuntimeError, match="boom"), TraceWriter(path, make_header()) as writer:
        writer.append("rank:0", "send")
        raise RuntimeError("boom")
    assert writer.closed
    with pytest.raises(ValueError, match="closed"):
        writer.append("rank:0", "send")
    writer.close()  # closing twice is harmless
    assert [json.loads(line)["index"] for line in read_lines(path)[1:]] == [0]


def test_threads_appending_get_distinct_consecutive_indices(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, make_header()) as writer:

        def record(rank: int) -> None:
            for step in range(200):
                writer.append(f"rank:{rank}", "step", {"step": step, "pad": "x" * 100})

        threads = [threading.Thread(target=record, args=(rank,)) for rank in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    events = [json.loads(line) for line in read_lines(path)[1:]]
    assert [event["index"] for event in events] == list(range(1600))
    for rank in range(8):
        assert [event["args"]["step"] for event in events if event["actor"] == f"rank:{rank}"] == list(range(200))


# --- a killed writer leaves a readable prefix ------------------------------------------------

CHILD_PRELUDE = """
import os, signal, sys
from lockstep.traces import TraceSource, TraceHeader, TraceWriter
header = TraceHeader("demo", "base", "small", {"n": 1}, TraceSource(kind="runtime", host="child"))
writer = TraceWriter(sys.argv[1], header)
"""


def run_child(body: str, path: Path, **popen_options: Any) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    script = CHILD_PRELUDE + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", script, str(path)], env=environment, **popen_options)


def check_prefix(path: Path) -> list[dict[str, Any]]:
    """Every complete line parses and is valid; returns the events. A torn last piece is allowed."""
    *complete, torn = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if torn:  # killed inside a write: only an unfinished line may lack its newline
        with pytest.raises(json.JSONDecodeError):
            json.loads(torn)
    assert complete, "not even the header line is in the file"
    parsed: list[dict[str, Any]] = [json.loads(line) for line in complete]
    header, *events = parsed
    assert header_problems(header) == []
    for event in events:
        assert event_problems(event) == []
    assert [event["index"] for event in events] == list(range(len(events)))
    return events


@pytest.mark.parametrize("how", ["sigkill", "os_exit"])
def test_process_that_dies_after_writing_leaves_every_line(tmp_path: Path, how: str) -> None:
    path = tmp_path / "trace.jsonl"
    die = "os.kill(os.getpid(), signal.SIGKILL)" if how == "sigkill" else "os._exit(3)"
    child = run_child(
        f"""
        for step in range(25):
            writer.append("rank:0", "step", {{"step": step}})
        {die}
        """,
        path,
    )
    returncode = child.wait(timeout=60)
    assert returncode == (-signal.SIGKILL if how == "sigkill" else 3)
    assert path.read_bytes().endswith(b"\n")
    assert len(check_prefix(path)) == 25


def test_process_killed_mid_run_leaves_parseable_prefix(tmp_path: Path) -> None:
    """The parent kills the child while it writes; every event it reported is on disk."""
    path = tmp_path / "trace.jsonl"
    child = run_child(
        """
        step = 0
        while True:
            payload = "y" * (step % 3000)
            writer.append(f"rank:{step % 4}", "step", {"step": step, "payload": payload})
            os.write(1, b"%d\\n" % step)  # reported only after append returned
            step += 1
        """,
        path,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    reported = -1
    try:
        while reported < 500:
            line = child.stdout.readline()
            assert line, "child stopped before writing 500 events"
            reported = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        remaining = child.communicate(timeout=60)[0]
    reported = max([reported, *(int(line) for line in remaining.split())])
    assert child.returncode == -signal.SIGKILL
    events = check_prefix(path)
    assert len(events) >= reported + 1
