"""The torch reference runtime on dp-pause: real processes and real gloo collectives at 2 ranks.

Post-fix completes and its traces follow the model; pre-fix hangs on every seed and the launcher
names what each rank waits in; traces validate against the JSON Schema; a run killed with SIGKILL
leaves valid prefixes; recorded choices fed back reproduce the run's choices; bad CLI input exits 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import validate_lines

from lockstep.cli import main
from lockstep.impl.choices import Choice, ChoiceDivergence, ScriptedChoices, SeededChoices
from lockstep.impl.runtime import read_statuses
from lockstep.traces.output import safe_name

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 3.0
EXPECTED_FILES = {"client.jsonl", "coordinator.jsonl", "rank-0.jsonl", "rank-1.jsonl"}


def run(*arguments: str, timeout: float = 60) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "run", "dp-pause", "--hang-timeout", str(TIMEOUT), "--json", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    assert "Traceback" not in completed.stderr, completed.stderr
    payload = json.loads(completed.stdout) if completed.stdout.strip() else {}
    return completed.returncode, payload, seconds


def replay_verdict(folder: Path) -> str:
    """Conformance of the run's traces with the dp-pause model the header instantiates."""
    from lockstep.checkers import system_for
    from lockstep.checkers.conformance.replay import ReplayOptions, default_unrecorded, replay
    from lockstep.models.dp_pause import PROTOCOL
    from lockstep.traces.merge import open_traces

    trace = open_traces([folder])
    declared = {parameter.name for parameter in PROTOCOL.parameters}
    overrides = {name: value for name, value in trace.header["parameters"].items() if name in declared}
    system = system_for(PROTOCOL.instance(trace.header["variant"], None, overrides).machine())
    result = replay(system, trace.records(), ReplayOptions(unrecorded=default_unrecorded(system, "runtime")))
    assert result.verdict != "diverges", result.explanation
    return result.verdict


def assert_gone(pids: dict[str, int]) -> None:
    for actor, pid in pids.items():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        status = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "?"
        assert status == "Z", f"{actor} (pid {pid}) still runs"


@pytest.fixture(scope="module")
def post_fix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("post-fix") / "traces"
    code, payload, _ = run("--variant", "post-fix", "--seed", "7", "--trace-dir", str(folder))
    return code, payload, folder


def test_post_fix_completes_with_one_valid_trace_per_process(post_fix_run: tuple[int, dict[str, Any], Path]) -> None:
    code, payload, folder = post_fix_run
    assert code == 0, payload
    assert payload["outcome"] == "completed" and payload["steps"] > 0
    assert {path.name for path in folder.iterdir()} == EXPECTED_FILES
    total = 0
    for path in folder.iterdir():
        events = validate_lines(path)
        total += len(events)
        header = json.loads(path.read_text().split("\n")[0])
        assert header["protocol"] == "dp-pause" and header["variant"] == "post-fix"
        assert header["source"]["kind"] == "runtime" and header["source"]["backend"] == "gloo"
        for bound in ("ranks", "requests", "sync_interval", "max_wave", "waves", "capacities"):
            assert bound in header["parameters"], bound
        assert header["parameters"]["ranks"] == 2 and header["parameters"]["sync_interval"] == 32
        actor = path.stem.replace("-", ":") if path.stem.startswith("rank") else path.stem
        assert {event["actor"] for event in events} == {actor} and safe_name(actor) == path.stem
    assert total == payload["events"]
    assert_gone(payload["pids"])


def test_post_fix_collectives_are_enter_then_complete_per_member(
    post_fix_run: tuple[int, dict[str, Any], Path],
) -> None:
    _, _, folder = post_fix_run
    counts: dict[str, list[int]] = {}
    for rank in (0, 1):
        events = validate_lines(folder / f"rank-{rank}.jsonl")
        open_op: tuple[str, int] | None = None
        for event in events:
            if event["action"] == "enter":
                assert open_op is None, "entered a collective while blocked in another"
                communicator = event["args"]["communicator"]
                open_op = (communicator, event["clock"][communicator])
            elif event["action"] == "complete":
                communicator = event["args"]["communicator"]
                assert open_op == (communicator, event["clock"][communicator])
                open_op = None
                counts.setdefault(communicator, []).append(event["clock"][communicator])
        assert open_op is None
    # both ranks completed the same ops: forwards, the SUM syncs, the rpc and the resume barrier
    for communicator in ("worker_dp", "engine_dp", "worker_world"):
        numbers = counts[communicator]
        assert sorted(numbers) == sorted(list(range(1, len(numbers) // 2 + 1)) * 2), communicator


def test_post_fix_traces_follow_the_model(post_fix_run: tuple[int, dict[str, Any], Path]) -> None:
    _, _, folder = post_fix_run
    assert replay_verdict(folder) == "conforms"


@pytest.mark.parametrize("seed", [0, 3])
def test_pre_fix_hangs_and_the_waits_are_named(seed: int, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    code, payload, _ = run("--variant", "pre-fix", "--seed", str(seed), "--trace-dir", str(folder))
    assert code == 1, payload
    # the hang detector named it (a rank blocked for --hang-timeout), not the whole run's deadline
    # (that outcome is "inconclusive": "no outcome within N s"); behaviour, not wall time, under load
    assert payload["outcome"] == "hang diagnosed" and "no outcome within" not in payload["message"]
    waits = payload["waits"]
    # the rank that got the request runs the collective_rpc body; the other woke into a dummy forward
    assert sorted([waits["rank:0"], waits["rank:1"]]) == ["all_reduce(worker_dp)#1", "all_reduce(worker_world)#1"]
    assert f"rank 0 in {waits['rank:0']}; rank 1 in {waits['rank:1']}" in payload["message"]
    assert_gone(payload["pids"])
    assert {path.name for path in folder.iterdir()} == EXPECTED_FILES
    for rank in (0, 1):  # the enter of the op it hangs in is on file
        events = validate_lines(folder / f"rank-{rank}.jsonl")
        entered = [event for event in events if event["action"] == "enter"]
        communicator = waits[f"rank:{rank}"].split("(")[1].split(")")[0]
        assert entered[-1]["args"]["communicator"] == communicator and entered[-1]["clock"][communicator] == 1
    assert replay_verdict(folder) == "violated"  # the model's property fails on the recorded run


def test_sigkill_mid_run_leaves_valid_prefixes(tmp_path: Path) -> None:
    folder, runs = tmp_path / "traces", tmp_path / "runs"
    runs.mkdir()
    environment = dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs), LOCKSTEP_KEEP_RUN_DIR="1")
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "dp-pause",
            "--variant",
            "post-fix",
            "--hang-timeout",
            "30",
            "--sync-interval",
            "32",
            "--trace-dir",
            str(folder),
        ],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    target = folder / "rank-1.jsonl"
    while time.monotonic() < deadline:
        if target.exists() and target.read_bytes().count(b"\n") > 12:
            break
        time.sleep(0.002)
    statuses: dict[str, dict[str, Any]] = {}
    for run_dir in runs.iterdir():
        statuses = read_statuses(run_dir)
    os.kill(launcher.pid, signal.SIGKILL)
    for status in statuses.values():
        try:
            os.kill(int(status["pid"]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.wait()
    assert {"rank:0", "rank:1"} <= set(statuses)
    files = list(folder.glob("*.jsonl"))
    assert files
    for path in files:
        validate_lines(path, allow_cut_last_line=True)
    assert replay_verdict(folder) == "conforms"  # the prefix follows the model


def test_recorded_choices_fed_back_reproduce_the_choices(
    post_fix_run: tuple[int, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, payload, _ = post_fix_run
    script = tmp_path / "choices.jsonl"
    script.write_text("".join(json.dumps(choice) + "\n" for choice in payload["choices"]))
    code, again, _ = run("--variant", "post-fix", "--seed", "12345", "--choices", str(script))
    assert code == 0, again

    def by_actor(choices: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
        found: dict[str, list[tuple[str, str]]] = {}
        for choice in choices:
            found.setdefault(choice["actor"], []).append((choice["point"], choice["chosen"]))
        return found

    assert by_actor(again["choices"]) == by_actor(payload["choices"])


def test_choice_sources() -> None:
    first, second = SeededChoices(5), SeededChoices(5)
    picks = [first.choose("rank:0", "delay", ["0", "1", "2"]) for _ in range(20)]
    assert picks == [second.choose("rank:0", "delay", ["0", "1", "2"]) for _ in range(20)]
    assert len(set(picks)) > 1
    scripted = ScriptedChoices(
        [Choice("rank:0", "arrival", ("client", "coordinator"), "coordinator")], fallback=SeededChoices(1)
    )
    assert scripted.peek("rank:0", "arrival") == "coordinator"
    assert scripted.choose("rank:0", "arrival", ["client", "coordinator"]) == "coordinator"
    assert scripted.peek("rank:0", "arrival") is None
    assert scripted.choose("rank:0", "delay", ["0", "1"]) in ("0", "1")  # beyond the script: the fallback
    strict = ScriptedChoices([Choice("client", "placement", ("0", "1"), "1")])
    with pytest.raises(ChoiceDivergence):
        strict.choose("client", "placement", ["0"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["no-such-protocol"], "runtime has no protocol 'no-such-protocol'"),
        (["dp-pause", "--variant", "ignore-wave-while-paused"], "no runtime variant"),
        (["dp-pause", "--scenario", "nope"], "unknown scenario"),
        (["dp-pause", "--requests", "2"], "needs a rank without requests"),
        (["dp-pause", "--ranks", "1"], "dp-pause runs 2 to 8 ranks, got --ranks 1"),
        (["dp-pause", "--set", "chunks=2"], "dp-pause has no setting 'chunks'"),
        (["dp-pause", "--set", "requests=2"], "needs a rank without requests"),  # --requests 2, spelled out
        (["dp-pause", "--sync-interval", "33"], "sync_interval=33: must be between 1 and 32"),
        (["pp-broadcast", "--sync-interval", "2"], "--sync-interval: pp-broadcast has no setting 'sync_interval'"),
        (["dp-pause", "--set", "requests"], "expected NAME=VALUE"),
        (["dp-pause", "--backend", "nccl"], "--backend nccl needs 2 CUDA devices"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if "nccl" in arguments:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
            pytest.skip("this machine has the GPUs")
    assert main(["run", *arguments]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments",
    [
        ["dp-pause", "--ranks", "0"],
        ["dp-pause", "--hang-timeout", "x"],
        ["dp-pause", "--timeout", "x"],
        ["dp-pause", "--backend", "mpi"],
        [],
    ],
)
def test_argument_errors_exit_2(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["run", *arguments])
    assert stopped.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_trace_dir_with_traces_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old.jsonl").write_text("{}\n")
    assert main(["run", "dp-pause", "--trace-dir", str(tmp_path)]) == 2
    assert "already holds *.jsonl" in capsys.readouterr().err


def test_random_scenario_traces_merge_causally_and_follow_the_model(tmp_path: Path) -> None:
    """No holds: the seed decides every arrival; every send is on file before its message can be received."""
    folder = tmp_path / "traces"
    code, payload, _ = run("--variant", "pre-fix", "--scenario", "random", "--seed", "1", "--trace-dir", str(folder))
    assert code in (0, 1), payload
    assert replay_verdict(folder) in ("conforms", "violated")


def test_a_client_that_reads_publications_between_requests_conforms(tmp_path: Path) -> None:
    """The client's read of the coordinator's publication carries the publication's receive clock,
    so the merge puts it after the coordinator event that made the value (without it, every such
    trace diverged at the read: the client's file merged first)."""
    from lockstep.impl.launcher import launch
    from lockstep.impl.runtime import RunConfig

    program = [
        {"action": "client_add_request", "args": {"rank": 0}},
        {"action": "client_read_publication", "args": {}},
        {"action": "client_add_request", "args": {"rank": 1}},
    ]
    schedule = {f"rank:{rank}": {"before_arrival": [], "before_event": []} for rank in range(2)}
    for seed in (0, 1):
        folder = tmp_path / f"seed-{seed}"
        folder.mkdir()
        config = RunConfig(
            protocol="dp-pause",
            variant="post-fix",
            scenario="counterexample",
            ranks=2,
            seed=seed,
            timeout=60,
            trace_dir=str(folder),
            extra={"schedule": schedule, "client_program": program, "requests": 2, "sync_interval": 2},
        )
        assert launch(config, deadline=60).outcome == "completed"
        assert '"client_read_publication"' in (folder / "client.jsonl").read_text()
        assert replay_verdict(folder) == "conforms"
