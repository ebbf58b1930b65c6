"""One definition of the trace format: the line types decode, generate the JSON Schema and word the problems.

The shipped and the published schema files are the generation, byte for byte; the decoder (strict and
fast), the problem messages and a JSON Schema validator agree on every header and event case of
``test_traces_format``; and what the types cannot say (nesting, surrogates, finite numbers) is
refused by the reader with the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from lockstep.traces import event_problems, header_problems, schema
from lockstep.traces.reader import TraceInputError, TraceReader
from lockstep.traces.schema import ACTOR_PATTERN, EventLine, HeaderLine, fast_event_type, json_schema, schema_text
from lockstep.traces.schema_files import main as schema_files_main
from lockstep.traces.schema_files import schema_files, stale_files
from tests.test_traces_format import EVENT_CASES, GOOD_EVENT, GOOD_HEADER, HEADER_CASES

ROOT = Path(__file__).resolve().parent.parent


def test_both_schema_files_are_the_generation_from_the_types() -> None:
    shipped, published = schema_files(ROOT)
    assert shipped.name == "trace-schema.json" and published == ROOT / "docs" / "schemas" / "trace.schema.json"
    assert stale_files(ROOT) == [], "run: python -m lockstep.traces.schema_files"
    assert shipped.read_text() == published.read_text() == schema_text()
    assert schema() == json_schema()
    assert max(len(line) for line in schema_text().splitlines()) <= 120  # readable in a review
    assert schema_files_main(["--check", "--root", str(ROOT)]) == 0


def test_the_schema_command_finds_and_rewrites_a_stale_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs" / "schemas").mkdir(parents=True)
    published = tmp_path / "docs" / "schemas" / "trace.schema.json"
    published.write_text("{}\n")
    shipped = tmp_path / "trace-schema.json"
    shipped.write_text(schema_text())
    monkeypatch.setattr(
        "lockstep.traces.schema_files.schema_files",
        lambda root: [shipped, root / "docs" / "schemas" / "trace.schema.json"],
    )
    assert schema_files_main(["--check", "--root", str(tmp_path)]) == 1 and "stale" in capsys.readouterr().err
    assert published.read_text() == "{}\n"
    assert schema_files_main(["--root", str(tmp_path)]) == 0
    assert published.read_text() == schema_text()


def test_every_field_of_the_types_is_in_the_schema() -> None:
    definitions = json_schema()["$defs"]
    for name, line_type in (("header", HeaderLine), ("event", EventLine)):
        fields = [field.encode_name for field in msgspec.structs.fields(line_type)]
        assert list(definitions[name]["properties"]) == fields
        assert definitions[name]["additionalProperties"] is False
    assert definitions["event"]["properties"]["actor"]["pattern"] == ACTOR_PATTERN
    assert definitions["event"]["required"] == ["index", "actor", "action", "args"]


def _decodes(line_type: type[msgspec.Struct], value: object) -> bool:
    try:
        msgspec.json.decode(json.dumps(value).encode(), type=line_type)
    except msgspec.ValidationError:
        return False
    return True


def _validator(name: str) -> jsonschema.Draft202012Validator:
    full = json_schema()
    wrapper = {"$schema": full["$schema"], "$defs": full["$defs"], "$ref": f"#/$defs/{name}"}
    return jsonschema.Draft202012Validator(wrapper)


@pytest.mark.parametrize(("name", "obj", "valid"), HEADER_CASES, ids=[case[0] for case in HEADER_CASES])
def test_header_decoder_problems_and_schema_agree(name: str, obj: object, valid: bool) -> None:
    assert _decodes(HeaderLine, obj) is valid
    assert (header_problems(obj) == []) is valid
    assert _validator("header").is_valid(obj) is valid


@pytest.mark.parametrize(("name", "obj", "valid"), EVENT_CASES, ids=[case[0] for case in EVENT_CASES])
def test_event_decoders_problems_and_schema_agree(name: str, obj: object, valid: bool) -> None:
    assert _decodes(EventLine, obj) is valid
    assert (event_problems(obj) == []) is valid
    assert _validator("event").is_valid(obj) is valid
    bad_actor = (
        isinstance(obj, dict) and isinstance(obj.get("actor"), str) and not event_problems({**obj, "actor": "rank:0"})
    )
    assert _decodes(fast_event_type(), obj) is (valid or bad_actor)  # the fast type leaves the pattern to the reader


def test_integral_floats_are_refused_where_the_schema_would_allow_them() -> None:
    line = {**GOOD_EVENT, "index": 1.0}
    assert _validator("event").is_valid(line)
    assert not _decodes(EventLine, line) and event_problems(line)
    header = {**GOOD_HEADER, "version": 1.0}
    assert not _decodes(HeaderLine, header) and header_problems(header)


def _trace(tmp_path: Path, *event_lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(GOOD_HEADER) + "\n" + "".join(line + "\n" for line in event_lines))
    return path


def _error(path: Path) -> TraceInputError:
    with pytest.raises(TraceInputError) as raised, TraceReader(path) as reader:
        list(reader.events())
    return raised.value


GOOD = '{"index":0,"actor":"rank:0","action":"x","args":{}}'


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            '{"index":0,"actor":"rank:0","action":"x","args":{"a":1e400}}',
            "bad event: field 'args.a' must be a finite number, got inf",
        ),
        ('{"index":0,"actor":"rank:0","action":"x","args":{"a":NaN}}', "malformed JSON: NaN is not a JSON value"),
        ('{"index":0,"actor":"rank:0","action":"x","args":{"a":-Infinity}}', "-Infinity is not a JSON value"),
        (
            '{"index":0,"actor":"rank:0","action":"x","args":{},"clock":null}',
            "field 'clock' must be a JSON object, got None",
        ),
        (
            '{"index":0,"actor":"rank:0","action":"x","args":{},"observed":null}',
            "field 'observed' must be a JSON object",
        ),
        (
            '{"index":0,"actor":"rank:0","action":"x","args":{},"clock":{"tp":1.0}}',
            "field 'clock.tp' must be a non-negative",
        ),
        ('{"index":0,"actor":"rank 0","action":"x","args":{}}', "field 'actor' must be a string like 'rank:1'"),
        ('{"index":0,"actor":"rank:0","action":"x","args":{"\\ud800":1}}', "lone UTF-16 surrogate escape"),
        ('{"index":0,"actor":"rank:0","action":"x","args":{"a":"\\udc00"}}', "lone UTF-16 surrogate escape"),
        (
            '{"index":0,"actor":"rank:0","action":"x","args":{"a":' + "[" * 65 + "]" * 65 + "}}",
            "JSON nested too deeply",
        ),
        ('{"index":0,"actor":"rank:0","action":"x","args":{},"time":1}', "bad event: unexpected field 'time'"),
        ("[" + GOOD + "]", "bad event: event must be a JSON object"),
        ("", "malformed JSON at column 1: Expecting value"),
        (GOOD + " x", "malformed JSON at column 53: Extra data"),
    ],
)
def test_the_reader_names_what_the_decoder_refuses(tmp_path: Path, line: str, problem: str) -> None:
    error = _error(_trace(tmp_path, line))
    assert error.line == 2 and problem in error.problem, error


def test_what_the_reader_accepts(tmp_path: Path) -> None:
    lines = [
        '{"args":{"a":[1,2.5,null,true,"\\ud83d\\ude00"]},"action":"x","actor":"rank:0","index":0}',  # any key order
        '{"index":1,"actor":"rank:0","action":"x","args":{"deep":' + "[" * 60 + "]" * 60 + '},"clock":{}}',
        '{"index":2,"actor":"group:dp","action":"x","args":{},"observed":{"wide":[' + ",".join(["[]"] * 100) + "]}}  ",
        '{"index":3,"actor":"rank:0","action":"x","args":{"big":123456789012345678901234567890,"nul":"\\u0000"}}',
    ]
    path = _trace(tmp_path, *lines)
    with TraceReader(path) as reader:
        events = [record.event for record in reader.events()]
    assert [event["index"] for event in events] == [0, 1, 2, 3]
    assert events[0] == {"index": 0, "actor": "rank:0", "action": "x", "args": {"a": [1, 2.5, None, True, "😀"]}}
    assert events[1]["clock"] == {} and "observed" not in events[1] and len(events[2]["observed"]["wide"]) == 100
    assert events[3]["args"] == {"big": 123456789012345678901234567890, "nul": "\x00"}


def test_a_final_line_cut_inside_a_bad_field_is_still_only_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(GOOD_HEADER) + "\n" + GOOD + "\n" + '{"index":"one","act')
    with TraceReader(path) as reader:
        assert len(list(reader.events())) == 1
        assert len(reader.warnings) == 1 and "cut short" in reader.warnings[0]


def test_the_writer_checks_with_the_decoder_and_explains_with_the_problems(tmp_path: Path) -> None:
    from lockstep.traces import TraceFormatError, TraceHeader, TraceSource, TraceWriter

    header = TraceHeader("demo", "base", "small", {}, TraceSource(kind="model"))
    with TraceWriter(tmp_path / "trace.jsonl", header) as writer:
        for arguments, problem in (
            ({"actor": "Rank"}, "field 'actor' must be a string like"),
            ({"args": {"x": float("inf")}}, "field 'args.x' must be a finite number, got inf"),
            ({"args": {"x": "\ud800"}}, "line cannot be written as JSON"),
        ):
            options: dict[str, Any] = {"actor": "rank:0", "action": "x", **arguments}
            with pytest.raises(TraceFormatError, match=problem):
                writer.append(**options)
        assert writer.events_written == 0
