"""The one replay path (``lockstep.checkers.conformance.judgement``): every entry point gives one trace one
verdict, the trace cannot widen its own check, and conforming needs evidence."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lockstep.checkers.conformance.judgement import HeaderMismatch, replay_traces
from lockstep.cli import main
from lockstep.cli.runtime import replay_run
from lockstep.harness.runtime_fuzzing import replay_example
from lockstep.harness.runtime_replay import runtime_expectations, runtime_replay
from lockstep.impl.runtime import RunConfig
from lockstep.testing import assert_conforms
from lockstep.testing import replay_traces as library_replay
from lockstep.traces.merge import merge_to_file

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
RUNTIME = FIXTURES / "runtime" / "dp-pause-post-fix"  # a real run: 89 events of two ranks, client, coordinator
PRE_FIX_RUNTIME = FIXTURES / "runtime" / "dp-pause-pre-fix"
VERDICT_KEYS = ("verdict", "event", "property", "longest_conforming_prefix", "events", "model", "exempt", "coverage")


def cli_json(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, dict[str, Any]]:
    code = main(["replay", *arguments, "--json"])
    captured = capsys.readouterr()
    assert captured.out, captured.err
    return code, json.loads(captured.out)


def run_config(folder: Path, variant: str) -> RunConfig:
    """The config of the run that recorded a dp-pause fixture (its header says so)."""
    parameters = json.loads((folder / "rank-0.jsonl").read_text().split("\n")[0])["parameters"]
    return RunConfig(
        protocol="dp-pause",
        variant=variant,
        scenario=parameters["scenario"],
        ranks=parameters["ranks"],
        seed=0,
        timeout=10.0,
        extra={"requests": parameters["requests"], "sync_interval": parameters["sync_interval"]},
    )


def with_header(folder: Path, target: Path, change: Any) -> Path:
    """A copy of a per-actor trace folder, each header changed by ``change``."""
    target.mkdir()
    for file in sorted(folder.glob("*.jsonl")):
        lines = file.read_text().split("\n")
        header = json.loads(lines[0])
        change(header)
        (target / file.name).write_text("\n".join([json.dumps(header), *lines[1:]]))
    return target


CASES = [(RUNTIME, "post-fix"), (PRE_FIX_RUNTIME, "post-fix"), (PRE_FIX_RUNTIME, "pre-fix")]


@pytest.mark.parametrize(("folder", "variant"), CASES)
def test_every_entry_point_gives_one_trace_one_verdict(
    folder: Path, variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lockstep replay``, ``lockstep.testing``, the checkers' function, ``lockstep run``'s replay
    step and ``fuzz --impl``'s replay of an example agree on the verdict, the evidence and the
    exemptions (the pytest plugin: ``test_the_pytest_plugin_gives_the_same_verdict``)."""
    code, cli = cli_json(capsys, str(folder), "--variant", variant, "--profile", "runtime")
    library = library_replay(folder, variant=variant, profile="runtime")
    checker = replay_traces(folder, variant=variant, profile="runtime").to_json()
    config = replace(run_config(folder, variant), trace_dir=str(folder))
    said = io.StringIO()
    runtime = replay_run(config, Console(file=said, width=200))  # lockstep run, after its ranks stop
    assert runtime is not None and f"replay against the model: {cli['verdict']}" in said.getvalue()
    fuzzed = replay_example(folder, runtime_expectations(config))  # fuzz --impl, after each example
    for key in VERDICT_KEYS:
        assert cli[key] == library[key] == checker[key] == runtime[key] == fuzzed[key], key
    assert runtime_replay(config, folder).to_json()["verdict"] == cli["verdict"]
    assert code == {"conforms": 0, "violated": 1, "diverges": 1, "inconclusive": 3}[cli["verdict"]]
    if cli["verdict"] == "conforms":
        assert assert_conforms(folder, variant=variant, profile="runtime")["verdict"] == "conforms"
    else:
        with pytest.raises(AssertionError):
            assert_conforms(folder, variant=variant, profile="runtime")


def test_the_pytest_plugin_gives_the_same_verdict(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The plugin's ``lockstep_assert_conforms`` passes where ``lockstep replay`` says conforms, and
    fails naming the same verdict and event where it does not."""
    found = tmp_path / "found"
    found.mkdir()
    cases = [(str(folder), variant, str(found / f"{number}.json")) for number, (folder, variant) in enumerate(CASES)]
    pytester.makepyfile(
        f"""
        import json
        import pytest

        @pytest.mark.parametrize(("folder", "variant", "out"), {cases!r})
        def test_runtime(lockstep_assert_conforms, folder, variant, out):
            try:
                result = lockstep_assert_conforms(folder, variant=variant, profile="runtime")
                seen = {{key: result[key] for key in ("verdict", "event", "model", "events")}}
            except AssertionError as error:
                seen = {{"failure": str(error).splitlines()[0]}}
            with open(out, "w") as file:
                json.dump(seen, file)
            assert "failure" not in seen
        """
    )
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    capsys.readouterr()
    expected_failures = 0
    for number, (folder, variant) in enumerate(CASES):
        _, cli = cli_json(capsys, str(folder), "--variant", variant, "--profile", "runtime")
        seen = json.loads((found / f"{number}.json").read_text())
        if cli["verdict"] == "conforms":
            assert seen == {key: cli[key] for key in ("verdict", "event", "model", "events")}
        else:
            expected_failures += 1
            assert seen["failure"] == (
                f"trace does not conform to {cli['model']}: {cli['verdict']} at event {cli['event']}"
            )
    assert expected_failures and expected_failures < len(CASES)  # both kinds of verdict are compared
    outcome.assert_outcomes(passed=len(CASES) - expected_failures, failed=expected_failures)


def without_rank_1(target: Path, unrecorded: list[str] | None) -> Path:
    """The real run merged, rank 1's events deleted, no collective or clock left to give it away."""
    merged = target.with_suffix(".merged")
    merge_to_file([str(RUNTIME)], str(merged))
    lines = merged.read_text().splitlines()
    header = json.loads(lines[0])
    if unrecorded is not None:
        header["parameters"]["unrecorded"] = unrecorded
    events = [json.loads(line) for line in lines[1:]]
    kept = [event for event in events if event["actor"] != "rank:1" and event["action"] not in ("enter", "complete")]
    for index, event in enumerate(kept):
        event["index"] = index
        event.pop("clock", None)
    target.write_text("\n".join(json.dumps(item) for item in [header, *kept]) + "\n")
    return target


def test_a_header_that_exempts_a_deleted_rank_does_not_conform(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1's events deleted, and the header exempts every rank, the client and the coordinator
    (a trace that conformed before): the trace may not widen its own check (exit 2, naming the
    field) unless the caller trusts it, and even trusted, a silent rank is no evidence."""
    trace = without_rank_1(tmp_path / "widened.jsonl", ["rank:*", "client", "coordinator"])
    code, result = cli_json(capsys, str(trace), "--profile", "runtime")
    assert code == 2 and "parameters.unrecorded" in result["error"] and "'rank:*'" in result["error"]
    with pytest.raises(HeaderMismatch, match="parameters.unrecorded"):
        replay_traces(trace, profile="runtime")
    with pytest.raises(HeaderMismatch):
        library_replay(trace, profile="runtime")
    with pytest.raises(HeaderMismatch):
        runtime_replay(run_config(RUNTIME, "post-fix"), trace)
    code, trusted = cli_json(capsys, str(trace), "--profile", "runtime", "--trust-header")
    assert code == 3 and trusted["verdict"] == "inconclusive" and "no events from rank:1" in trusted["missing_evidence"]
    origins = {item["name"]: item["origin"] for item in trusted["exempt"]}
    assert origins["rank:*"] == "header (trusted)" and origins["client"] == "header (trusted)"
    code, exempted = cli_json(
        capsys,
        str(trace),
        "--profile",
        "runtime",
        "--unrecorded",
        "rank:*",
        "--unrecorded",
        "client",
        "--unrecorded",
        "coordinator",
    )
    assert code == 0 and exempted["verdict"] == "conforms"  # the caller's own exemption: its choice, listed
    assert {"name": "rank:*", "origin": "caller"} in exempted["exempt"]


def test_a_deleted_rank_without_a_widening_header_is_not_conforming(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = cli_json(capsys, str(without_rank_1(tmp_path / "silent.jsonl", None)), "--profile", "runtime")
    assert code != 0 and result["verdict"] != "conforms"


@pytest.mark.parametrize(("name", "value"), [("hang_bound", 30), ("settle_before_resume", 1), ("max_wave", 9)])
def test_a_header_parameter_that_differs_from_the_callers_is_bad_input(
    name: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(header: dict[str, Any]) -> None:
        header["parameters"][name] = value

    folder = with_header(RUNTIME, tmp_path / name, change)
    code, result = cli_json(capsys, str(folder), "--profile", "runtime")
    assert code == 2 and f"parameters.{name} is {value}" in result["error"]
    code, result = cli_json(capsys, str(folder), "--profile", "runtime", "--trust-header")
    assert result["parameters"][name] == value and result["parameter_origins"][name] == "header (trusted)"


def test_a_header_only_trace_is_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = (RUNTIME / "rank-0.jsonl").read_text().split("\n")[0]
    trace = tmp_path / "header-only.jsonl"
    trace.write_text(header + "\n")
    code, result = cli_json(capsys, str(trace), "--profile", "runtime")
    assert code == 3 and result["verdict"] == "inconclusive"
    assert "no events" in result["explanation"]["detail"] and result["missing_evidence"]
    with pytest.raises(AssertionError, match="inconclusive"):
        assert_conforms(trace, profile="runtime")


def test_a_prefix_is_not_a_complete_conformance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first 20 of the run's 89 events follow the model, but stop before a final state: with
    completion required they are inconclusive; the whole run is complete."""
    merged = tmp_path / "merged.jsonl"
    merge_to_file([str(RUNTIME)], str(merged))
    lines = merged.read_text().splitlines()
    assert len(lines) == 90
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("\n".join(lines[:21]) + "\n")
    code, result = cli_json(capsys, str(prefix), "--profile", "runtime")
    assert code == 0 and result["coverage"]["complete"] is None  # completion not asked for
    code, result = cli_json(capsys, str(prefix), "--profile", "runtime", "--require-complete")
    assert code == 3 and result["verdict"] == "inconclusive" and result["coverage"]["complete"] is False
    assert "before a final state" in result["explanation"]["detail"]
    with pytest.raises(AssertionError, match="before a final state"):
        assert_conforms(prefix, profile="runtime", require_complete=True)
    whole = assert_conforms(merged, profile="runtime", require_complete=True)
    assert whole["coverage"]["complete"] is True and whole["events"] == 89


def test_the_verdict_reports_coverage_and_exemptions() -> None:
    result = replay_traces(RUNTIME, profile="runtime", unrecorded=["client_read_publication"]).to_json()
    coverage = result["coverage"]
    assert sum(coverage["events_per_actor"].values()) == 89 == sum(coverage["actions"].values())
    assert set(coverage["events_per_actor"]) == {"client", "coordinator", "rank:0", "rank:1"}
    assert coverage["expected_actors"] == ["rank:0", "rank:1"] and "resumed" in coverage["witnesses_reached"]
    origins = {item["name"]: item["origin"] for item in result["exempt"]}
    assert origins["client_read_publication"] == "caller"
    assert origins["worker_dp.complete"].startswith("collective completion")
    assert result["parameter_origins"]["settle_before_resume"] == "profile runtime"


def test_assert_conforms_takes_what_it_requires() -> None:
    with pytest.raises(AssertionError, match="no events from rank:7"):
        assert_conforms(RUNTIME, profile="runtime", actors=["rank:0", "rank:7"])
    with pytest.raises(AssertionError, match="required actions not taken: no_such_action"):
        assert_conforms(RUNTIME, profile="runtime", actions=["no_such_action"])
    with pytest.raises(AssertionError, match="required witnesses not reached: never"):
        assert_conforms(RUNTIME, profile="runtime", witnesses=["never"])
    assert assert_conforms(RUNTIME, profile="runtime", actors=["rank:0", "client"], witnesses=["resumed"])


def test_a_recorder_profile_in_code_exempts_what_the_recorder_cannot_see(tmp_path: Path) -> None:
    """The vLLM instrumentation's profile names its unrecorded actions; a header listing the same
    ones is then no widening. (The profile also turns on the free client, whose state has no script
    phase; this runtime recording records the scripted client's phase, so it keeps that client.)"""

    def as_instrumented(header: dict[str, Any]) -> None:
        header["parameters"]["unrecorded"] = ["coordinator", "client_read_publication"]

    folder = with_header(RUNTIME, tmp_path / "instrumented", as_instrumented)
    with pytest.raises(HeaderMismatch):
        replay_traces(folder, profile="runtime")
    bounds = {"max_wave": 4, "response_bound": 25, "free_client": 0}
    result = replay_traces(folder, profile="vllm-dp-pause", parameters=bounds)
    origins = {item.name: item.origin for item in result.exemptions}
    assert origins["coordinator"] == "profile vllm-dp-pause" and result.verdict == "conforms"


def test_guard_coverage_counts_conjuncts_seen_true_and_false(capsys: pytest.CaptureFixture[str]) -> None:
    from jsonschema import Draft202012Validator

    code, result = cli_json(capsys, str(RUNTIME), "--profile", "runtime", "--guard-coverage")
    schema = json.loads(
        (Path(__file__).resolve().parents[1] / "lockstep" / "schemas" / "replay.schema.json").read_text()
    )
    Draft202012Validator(schema).validate(result)
    guards = result["coverage"]["guards"]
    assert code == 0 and guards["conjuncts"] and not guards["never_true"]
    assert any(counts["true"] and counts["false"] for counts in guards["conjuncts"].values())
    assert replay_traces(RUNTIME, profile="runtime").coverage.guards is None  # opt-in
