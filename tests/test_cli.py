"""The `lockstep` command: exit codes, JSON output, traces, and clean errors on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.cli import main
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_names_protocol_variants_and_releases(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""  # a listing is a result: on stdout, so `lockstep list | grep` works
    assert "dp-pause" in out and "v0.20.0" in out and "v0.21.0" in out and "seed*" in out
    flat = " ".join(out.split())
    assert "pre-fix: violated, post-fix: holds" in flat and "#36608/#38009" in flat
    code, out, _ = run(capsys, "list", "--json")
    listing = {protocol["name"]: protocol for protocol in json.loads(out)["protocols"]}
    assert code == 0 and set(listing) == {
        "pp-broadcast",
        "dp-pause",
        "async-placeholders",
        "computed-tokens",
        "cudagraph-pp",
        "dp-step-coordination",
        "pd-kv-transfer",
    }
    seed = next(instance for instance in listing["dp-pause"]["instances"] if instance["name"] == "seed")
    assert (seed["expected"]["pre-fix"], seed["expected"]["post-fix"]) == ("violated", "holds") and listing["dp-pause"][
        "default_variant"
    ] == "post-fix"


def test_pre_fix_json_reports_the_hang_and_writes_a_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "out" / "ce.jsonl"
    code, out, _ = run(capsys, "check", "dp-pause", "--variant", "pre-fix", "--json", "--trace-out", str(trace))
    assert code == 1 and json.loads(out)["engine"] == "bfs-vec"  # the default: the reference's very counterexample
    payload = json.loads(out)  # exactly one JSON object
    assert out.count("\n") == 1
    assert payload["verdict"] == "violated" and payload["expected"] == "violated"
    steps = payload["counterexample"].pop("steps")
    sentence = get_protocol("dp-pause").instance("pre-fix").machine().property_named("quiescent_during_rpc").description
    assert sentence and payload["counterexample"] == {
        "property": "quiescent_during_rpc",
        "description": sentence,
        "length": 17,
        "loop_start": None,
        "trace_file": str(trace),
    }
    assert {item["name"]: item["description"] for item in payload["properties"]}["quiescent_during_rpc"] == sentence
    assert len(steps) == 17 and steps[0]["index"] == 1 and steps[-1]["actor"] == "rank:1"
    assert steps[-1]["action"] == "handle_collective_rpc" and steps[-1]["arguments"] == {"rank": 1}
    assert payload["schema_version"] == 2 and payload["versions"]["z3-solver"] and payload["versions"]["torch"]
    assert "DPEngineCoreProc._handle_client_request(START_DP_WAVE)" in [step["mirrors"] for step in steps]
    verdicts = {item["name"]: item["verdict"] for item in payload["properties"]}
    assert verdicts["no_hang"] == "violated" and verdicts["no_deadlock"] == "violated"
    assert verdicts["in_bounds"] == "holds" and verdicts["no_collective_mismatch"] == "holds"
    assert set(payload["stats"]) >= {"states", "transitions", "depth", "seconds"}
    lines = trace.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    assert header["format"] == "lockstep-trace" and header["protocol"] == "dp-pause" and header["variant"] == "pre-fix"
    assert header["parameters"]["property"] == "quiescent_during_rpc"
    events = [json.loads(line) for line in lines[1:] if line]
    assert len(events) == 17 and events[-1]["action"] == "handle_collective_rpc"


def test_human_report_shows_swimlanes_and_blocked_collectives(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "check", "dp-pause", "--variant", "pre-fix", "--trace-out", str(tmp_path / "t.jsonl"))
    assert code == 1 and out == ""
    assert "counterexample: quiescent_during_rpc (17 steps)" in err and "mirrors (source)" in err
    assert "rank 0 in forward(worker_dp)#1; rank 1 in rpc(worker_world)#1" in err
    assert "expected violated: as pinned" in err
    sentence = get_protocol("dp-pause").instance("pre-fix").machine().property_named("quiescent_during_rpc").description
    assert f"quiescent_during_rpc is violated: {' '.join(sentence.split())}" in " ".join(err.split())  # its sentence


def test_post_fix_holds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "dp-pause", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["verdict"] == "holds" and payload["counterexample"] is None and payload["stats"]["states"] == 48918


def test_check_all_is_as_pinned_and_generates_the_readme_tables(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `check --all --json --markdown`: every pinned instance as pinned, and the protocol × variant ×
    verdict and Findings tables of docs/protocols.md are its markdown."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "check", "--all", "--json", "--markdown")
    assert code == 0
    payload = json.loads(out)
    assert payload["as_pinned"] is True
    checked = [(item["protocol"], item["variant"], item["instance"]) for item in payload["checks"]]
    pinned = [(instance.protocol.name, instance.variant, instance.name) for instance in pinned_instances()]
    assert checked == pinned and ("dp-pause", "post-fix", "stale-wave-after-resume") in checked
    assert all(item["verdict"] == item["expected"] for item in payload["checks"])
    assert (tmp_path / "lockstep-out" / "dp-pause-pre-fix-seed.jsonl").exists()
    page = (Path(__file__).resolve().parent.parent / "docs" / "protocols.md").read_text()
    begin = page.index("<!-- lockstep:tables begin")
    block = page[page.index("\n", begin) + 1 : page.index("<!-- lockstep:tables end -->")]
    assert block == payload["markdown"], "docs/protocols.md's tables are stale: run python tools/readme_tables.py"
    assert "| `dp-pause stale-wave-after-resume`:" in payload["markdown"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["check", "no-such-protocol"], "unknown protocol 'no-such-protocol'; known protocols:"),
        (["check", "dp-pause", "--variant", "mid-fix"], "has no variant 'mid-fix'; variants: pre-fix, post-fix"),
        (["check", "dp-pause", "--instance", "nope"], "has no instance 'nope'"),
        (["check", "dp-pause", "--set", "colour=3"], "has no parameter 'colour'"),
        (["check", "dp-pause", "--set", "ranks"], "--set expects NAME=VALUE"),
        (["check", "dp-pause", "--set", "ranks=two"], "'two' is not an integer"),
        (["check", "dp-pause", "--ranks", "9"], "parameter ranks of dp-pause must be at least 2 and at most 8, got 9"),
        (["check", "dp-pause", "--symmetry"], "declares no symmetric sort"),
        (["check", "--all", "--variant", "pre-fix"], "--all checks every built-in instance"),
        (["check"], "name a protocol"),
    ],
)
def test_usage_errors_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    code, out, err = run(capsys, *arguments)
    assert code == 2
    assert message in " ".join(err.split())
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    "arguments",
    [["check", "dp-pause", "--max-states", "0"], ["frobnicate"]],
)
def test_argument_errors_exit_2(capsys: pytest.CaptureFixture[str], arguments: list[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    assert "lockstep: error:" in capsys.readouterr().err


def test_an_unknown_engine_exits_2_naming_the_registry_s_engines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "dp-pause", "--engine", "astar"]) == 2
    err = capsys.readouterr().err
    assert "lockstep: error: unknown --engine 'astar'; engines: auto, bfs, dfs, bfs-vec, bfs-gpu, bmc" in err


def test_limits_give_inconclusive_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "dp-pause", "--max-states", "2000", "--json")
    assert code == 3
    payload = json.loads(out)
    assert payload["verdict"] == "inconclusive" and payload["stopped"] == "max-states"
    assert all(item["verdict"] in ("inconclusive", "holds") for item in payload["properties"])


def test_a_violation_wins_over_a_limit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(
        capsys,
        "check",
        "dp-pause",
        "--variant",
        "pre-fix",
        "--max-states",
        "20000",
        "--json",
        "--trace-out",
        str(tmp_path / "t.jsonl"),
    )
    payload = json.loads(out)
    assert payload["stopped"] == "max-states" and code == 1 and payload["verdict"] == "violated"


def test_max_depth_alone_bounds_always_properties(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "dp-pause", "--max-depth", "12", "--json")
    payload = json.loads(out)
    verdicts = {item["name"]: item["verdict"] for item in payload["properties"]}
    assert verdicts["no_hang"] == "holds-within-bound" and verdicts["resumed"] == "inconclusive"
    assert code == 3 and payload["stats"]["depth"] == 12


def test_dfs_finds_the_pre_fix_violation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(
        capsys,
        "check",
        "dp-pause",
        "--variant",
        "pre-fix",
        "--engine",
        "dfs",
        "--json",
        "--trace-out",
        str(tmp_path / "t.jsonl"),
    )
    payload = json.loads(out)
    assert code == 1 and payload["engine"] == "dfs" and payload["counterexample"]["length"] >= 17


def test_console_script_runs_without_traceback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "check", "dp-pause", "--set", "max_wave=0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert completed.returncode == 2
    assert "max_wave of dp-pause must be at least 1" in " ".join(completed.stderr.split())
    assert "Traceback" not in completed.stderr


@pytest.mark.parametrize(
    "arguments",
    [
        ["--ranks", "3", "--engine", "bfs"],  # ~80 s to the end
        ["--ranks", "4"],  # bfs-vec: 3 ranks end within 4 s, 4 ranks take minutes
    ],
    ids=["bfs", "auto"],
)
def test_ctrl_c_stops_cleanly_with_a_partial_result(tmp_path: Path, arguments: list[str]) -> None:
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "lockstep", "check", "dp-pause", *arguments, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    # Ctrl-C once the command has spent 3 s of CPU (imports and the model's build take ~1.5 s): in
    # its search whatever the machine's load, which a fixed sleep is not
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()
        if (int(fields[11]) + int(fields[12])) / ticks >= 3.0:  # utime + stime
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    payload = json.loads(out)
    assert payload["stopped"] == "interrupted" and payload["verdict"] == "inconclusive"
    assert payload["stats"]["states"] > 0 and "Traceback" not in err


def test_max_memory_stops_with_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "dp-pause", "--max-memory", "0.001", "--json")
    payload = json.loads(out)
    assert code == 3 and payload["stopped"] == "max-memory" and payload["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["check", "dp-pause", "--depth", "5"], "--depth applies to --engine bmc, pdr and swarm, not to auto"),
        (["check", "dp-pause", "--solver-timeout", "5"], "--solver-timeout applies to --engine bmc"),
        (["check", "dp-pause", "--engine", "bmc"], "--engine bmc needs --depth K"),
        (
            ["check", "dp-pause", "--engine", "bmc", "--depth", "3", "--max-depth", "4"],
            "--max-depth applies to the explicit engines",
        ),
        (
            ["check", "dp-pause", "--engine", "bmc", "--depth", "3", "--symmetry"],
            "--symmetry applies to --engine auto, bfs, dfs, bfs-vec and bfs-gpu, not to bmc",
        ),
    ],
)
def test_engine_options_of_the_other_family_are_errors(
    capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    code, _, err = run(capsys, *arguments)
    assert code == 2 and message in " ".join(err.split())


def test_bmc_within_a_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "dp-pause", "--variant", "pre-fix", "--engine", "bmc", "--depth", "4", "--json")
    payload = json.loads(out)
    verdicts = {item["name"]: item["verdict"] for item in payload["properties"]}
    assert payload["engine"] == "bmc" and payload["stats"]["states"] is None and payload["stats"]["transitions"] is None
    assert payload["stats"]["depth"] == 4
    assert verdicts["no_hang"] == "holds-within-bound" and verdicts["resumed"] == "inconclusive"
    assert code == 3  # a sometimes property without a witness within the bound is inconclusive


def test_a_failed_induction_step_is_shown_with_its_first_state(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "dp-pause", "--engine", "induction", "--k", "1", "--solver-timeout", "60")
    assert code == 3 and out == ""
    flat = " ".join(err.split())
    assert "the failed induction step starts in" in flat and "the induction step fails at k=1" in flat


def test_property_selection(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(
        capsys,
        "check",
        "dp-pause",
        "--variant",
        "pre-fix",
        "--property",
        "no_hang",
        "--json",
        "--trace-out",
        str(tmp_path / "t.jsonl"),
    )
    payload = json.loads(out)
    assert code == 1 and [item["name"] for item in payload["properties"]] == ["no_hang"]
    assert payload["counterexample"]["property"] == "no_hang" and payload["counterexample"]["length"] == 20
    code, _, err = run(capsys, "check", "dp-pause", "--property", "liveness")
    assert code == 2 and "has no property 'liveness'; properties: in_bounds" in " ".join(err.split())
    code, _, err = run(capsys, "check", "--all", "--property", "no_hang")
    assert code == 2 and "--property" in err


def test_an_unwritable_trace_file_is_reported_and_the_result_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a folder no file can be made in, which shows only when the file is written (what can be seen
    # before the check, a directory or a file in the way, is refused before it: test_cli_outputs.py)
    unwritable = Path("/proc") / f"lockstep-{tmp_path.name}.jsonl"
    code, out, err = run(capsys, "check", "dp-pause", "--variant", "pre-fix", "--json", "--trace-out", str(unwritable))
    assert code == 1  # the verdict of the check, not lost
    payload = json.loads(out)
    assert payload["verdict"] == "violated" and payload["counterexample"]["trace_file"] is None
    assert "cannot write the trace" in err and "Traceback" not in err
