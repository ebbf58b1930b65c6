"""The published JSON Schemas (lockstep/schemas/, shipped in the wheel) describe what the commands print.

Every ``--json`` output has a schema (check, list, replay, prove-lemmas, run, fuzz with and
without ``--impl``, reproduce, and the error object of a command that ends without a result) and
a test here validates real outputs of the command against it, with the real runtime where the
command runs one; the schemas refuse fields they do not describe, and every object names its
``schema_version``. The trace format's schema is docs/schemas/trace.schema.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from lockstep.cli import main
from lockstep.schemas import NAMES, schema
from lockstep.traces.format import schema as trace_schema

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "lockstep" / "schemas"
DOCUMENTED = ROOT / "docs" / "schemas"
FIXTURES = ROOT / "tests" / "fixtures" / "traces"


def validator(name: str) -> jsonschema.protocols.Validator:
    document = json.loads(((DOCUMENTED if name == "trace.schema.json" else SCHEMAS) / name).read_text())
    cls = jsonschema.validators.validator_for(document)
    cls.check_schema(document)
    return cls(document)


def output(capsys: pytest.CaptureFixture[str], *arguments: str) -> object:
    main(list(arguments))
    return json.loads(capsys.readouterr().out)


def test_the_published_trace_schema_is_the_shipped_one() -> None:
    assert json.loads((DOCUMENTED / "trace.schema.json").read_text()) == trace_schema()


def test_check_outputs_follow_the_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    check = validator("check.schema.json")
    for arguments in (
        ["check", "dp-pause", "--variant", "pre-fix", "--json"],
        ["check", "dp-pause", "--json", "--max-depth", "5"],
        ["check", "dp-pause", "--variant", "pre-fix", "--engine", "bmc", "--depth", "3", "--json"],
        ["check", "dp-pause", "--engine", "induction", "--k", "1", "--property", "in_bounds", "--json"],
        ["check", "dp-pause", "--variant", "pre-fix", "--engine", "swarm", "--seed", "1", "--json"],
        ["check", "dp-pause", "--engine", "swarm", "--walks", "20", "--depth", "10", "--seed", "1", "--json"],
    ):
        check.validate(output(capsys, *arguments))
    with pytest.raises(jsonschema.ValidationError):
        check.validate({"protocol": "dp-pause"})


def test_replay_and_lemma_outputs_follow_their_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    replay = validator("replay.schema.json")
    for arguments in (
        ["replay", str(FIXTURES / "dp-pause-pre-fix-seed.jsonl"), "--json"],
        ["replay", str(FIXTURES / "dp-pause-pre-fix-seed.jsonl"), "--variant", "post-fix", "--json"],
        ["replay", str(FIXTURES / "collectives-only-pre-fix"), "--trust-header", "--json"],
        ["replay", str(FIXTURES / "runtime" / "dp-pause-post-fix"), "--profile", "runtime", "--json"],
        [
            "replay",
            str(FIXTURES / "runtime" / "dp-pause-pre-fix"),
            "--variant",
            "post-fix",
            "--profile",
            "runtime",
            "--json",
        ],
    ):
        replay.validate(output(capsys, *arguments))
    validator("prove-lemmas.schema.json").validate(output(capsys, "prove-lemmas", "--json"))


def test_traces_the_tool_writes_follow_the_trace_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = validator("trace.schema.json")
    target = tmp_path / "counterexample.jsonl"
    main(["check", "dp-pause", "--variant", "pre-fix", "--trace-out", str(target)])
    capsys.readouterr()
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    for line in lines:
        trace.validate(line)


def test_every_json_command_has_a_schema() -> None:
    published = {path.name for path in SCHEMAS.glob("*.schema.json")}
    assert published == {
        f"{name}.schema.json"
        for name in (
            "check",
            "replay",
            "prove-lemmas",
            "run",
            "fuzz",
            "reproduce",
            "test-runtime",
            "vllm-check",  # validated against a real vLLM's output in tests/test_real_vllm.py
            "list",
            "error",
        )
    }
    assert {f"{name}.schema.json" for name in NAMES} == published
    assert {path.name for path in DOCUMENTED.glob("*.schema.json")} == {"trace.schema.json"}  # one copy of each
    for name in NAMES:
        document = schema(name)
        assert document == json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        assert "schema_version" in json.dumps(document), name  # every object names the version of its schema


def test_list_output_follows_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    validator("list.schema.json").validate(output(capsys, "list", "--json"))


def test_run_outputs_follow_the_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = validator("run.schema.json")
    without_traces = output(capsys, "run", "async-placeholders", "--json")
    run.validate(without_traces)
    assert isinstance(without_traces, dict) and without_traces["replay"] is None and without_traces["choices"]
    with_traces = output(
        capsys, "run", "async-placeholders", "--variant", "pre-fix", "--trace-dir", str(tmp_path / "traces"), "--json"
    )
    run.validate(with_traces)
    assert isinstance(with_traces, dict) and with_traces["replay"]["verdict"] == "violated"
    with pytest.raises(jsonschema.ValidationError):
        run.validate({**with_traces, "outcome": "finished"})
    with pytest.raises(jsonschema.ValidationError):
        run.validate({**with_traces, "unpublished": 1})


def test_fuzz_outputs_follow_the_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the counterexample goes to lockstep-out/
    fuzz = validator("fuzz.schema.json")
    found = output(capsys, "fuzz", "computed-tokens", "--variant", "pre-fix", "--examples", "20", "--json")
    fuzz.validate(found)
    assert isinstance(found, dict) and found["engine"] == "fuzz" and found["counterexample"]["length"] > 0
    clean = output(capsys, "fuzz", "computed-tokens", "--examples", "5", "--json")
    fuzz.validate(clean)
    assert isinstance(clean, dict) and clean["counterexample"] is None
    runtime = output(capsys, "fuzz", "dp-pause", "--impl", "--examples", "1", "--json")
    fuzz.validate(runtime)
    assert isinstance(runtime, dict) and runtime["engine"] == "fuzz-runtime" and runtime["stats"]["runs"] == 1
    with pytest.raises(jsonschema.ValidationError):
        fuzz.validate({**runtime, "engine": "fuzz"})  # a runtime session is not a model session


def test_reproduce_output_follows_the_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    reproduce = validator("reproduce.schema.json")
    result = output(
        capsys,
        "reproduce",
        str(FIXTURES / "dp-pause-pre-fix-seed.jsonl"),
        "--hang-timeout",
        "3",
        "--trace-dir",
        str(tmp_path / "traces"),
        "--json",
    )
    reproduce.validate(result)
    assert isinstance(result, dict) and result["verdict"] == "reproduced" and result["outcome"] == "hang diagnosed"
    with pytest.raises(jsonschema.ValidationError):
        reproduce.validate({**result, "verdict": "maybe"})


def test_test_runtime_output_follows_the_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    test_runtime = validator("test-runtime.schema.json")
    arguments = ["computed-tokens", "--max-paths", "1", "--hang-timeout", "60", "--trace-dir", str(tmp_path / "runs")]
    result = output(capsys, "test-runtime", *arguments, "--json")
    test_runtime.validate(result)
    assert isinstance(result, dict) and result["verdict"] == "consistent" and len(result["runs"]) == 1
    with pytest.raises(jsonschema.ValidationError):
        test_runtime.validate({**result, "verdict": "maybe"})


def test_outputs_name_their_schema_version(capsys: pytest.CaptureFixture[str]) -> None:
    for name, arguments in (
        ("list", ["list", "--json"]),
        ("prove-lemmas", ["prove-lemmas", "--json"]),
        ("replay", ["replay", str(FIXTURES / "dp-pause-pre-fix-seed.jsonl"), "--json"]),
    ):
        result = output(capsys, *arguments)
        version = schema(name)["properties"]["schema_version"]["const"]
        assert isinstance(result, dict) and result["schema_version"] == version


@pytest.mark.parametrize(
    ("arguments", "kind", "code"),
    [
        (["check", "dp-pause", "--max-states", "0", "--json"], "usage", 2),  # does not parse
        (["check", "dp-pause", "--max-st", "5", "--json"], "usage", 2),
        (["check", "no-such-protocol", "--json"], "usage", 2),  # parses; the command refuses it
        (["fuzz", "dp-pause", "--scenario", "random", "--json"], "usage", 2),
        (["replay", "no-such-file.jsonl", "--json"], "usage", 2),
        (["run", "no-such-protocol", "--json"], "usage", 2),
        (["test-runtime", "no-such-protocol", "--json"], "usage", 2),
        (["reproduce", "no-such-file.jsonl", "--json"], "usage", 2),
        (["list", "--model-file", "no-such-model.py", "--json"], "usage", 2),
    ],
)
def test_errors_under_json_are_one_object_following_the_schema(
    capsys: pytest.CaptureFixture[str], arguments: list[str], kind: str, code: int
) -> None:
    try:
        returned = main(arguments)
    except SystemExit as stopped:  # a command line that does not parse
        returned = int(str(stopped.code))
    captured = capsys.readouterr()
    assert returned == code and captured.out.count("\n") == 1, captured
    error = json.loads(captured.out)
    validator("error.schema.json").validate(error)
    assert error["kind"] == kind and error["exit_code"] == code and error["schema_version"] == 1
    assert error["error"] in " ".join(captured.err.split()) or error["error"].split(":")[0] in captured.err
    assert "Traceback" not in captured.err
