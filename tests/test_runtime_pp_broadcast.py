"""The torch reference runtime on pp-broadcast: real stage processes, real gloo p2p and broadcast.

Post-fix completes, its traces are schema-valid and conform to the post-fix model, and no
collective separates an all-chunked step N from rank 0's forward of N+1 (causal order, not
timings). Pre-fix completes, but its trace shows bcast(N)@last before fwd(N+1)@0 on every
all-chunked step, replays as ``no_false_dependency`` violated, and diverges from the post-fix
model at rank 0's broadcast. The ``skip-disagree`` mutant really hangs and the launcher names the
waits. Recorded choices fed back give the same run. The status counters give the ranks' steps
and their step times (the tracing benchmark's figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import validate_lines

from lockstep.impl.pp_broadcast.causality import chunked_steps
from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 3.0
SMALL = ("--set", "hidden=64", "--set", "chunk_tokens=8", "--set", "layers=2")


def run(*arguments: str, timeout: float = 90) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "pp-broadcast",
            "--hang-timeout",
            str(TIMEOUT),
            "--json",
            *SMALL,
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    assert "Traceback" not in completed.stderr, completed.stderr
    payload = json.loads(completed.stdout) if completed.stdout.strip() else {}
    return completed.returncode, payload, seconds


@pytest.fixture(scope="module")
def post_fix(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("post-fix") / "traces"
    code, payload, _ = run(
        "--variant", "post-fix", "--scenario", "chunks-then-decode", "--seed", "5", "--trace-dir", str(folder)
    )
    return code, payload, folder


@pytest.fixture(scope="module")
def pre_fix(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("pre-fix") / "traces"
    code, payload, _ = run(
        "--variant", "pre-fix", "--scenario", "chunks-then-decode", "--seed", "5", "--trace-dir", str(folder)
    )
    return code, payload, folder


def test_post_fix_completes_conforms_and_writes_valid_lines(post_fix: tuple[int, dict[str, Any], Path]) -> None:
    code, payload, folder = post_fix
    assert code == 0, payload
    assert payload["outcome"] == "completed"
    assert payload["replay"]["verdict"] == "conforms", payload["replay"]
    assert {path.name for path in folder.iterdir()} == {"engine.jsonl", "rank-0.jsonl", "rank-1.jsonl"}
    total = 0
    for path in folder.iterdir():
        events = validate_lines(path)
        total += len(events)
        header = json.loads(path.read_text().split("\n")[0])
        assert header["protocol"] == "pp-broadcast" and header["variant"] == "post-fix"
        assert {"ranks": 2, "chunks": 3, "decodes": 1, "requests": 1, "gaps": 0}.items() <= header["parameters"].items()
    assert total == payload["events"]
    result = replay_traces(folder, profile="runtime")
    assert result["verdict"] == "conforms" and result["property"] is None
    assert "L2_pipelined_prefill" in result["witnessed"]  # rank 0 ran forward(N+1) before the last rank sampled N


def test_post_fix_counts_each_ranks_steps_and_their_times(post_fix: tuple[int, dict[str, Any], Path]) -> None:
    """The status counters the tracing benchmark reads: ``steps`` are the ranks' (the engine's own
    count is ``scheduled``), ``step_ns`` their exec and sample work, so a step takes a rank's time."""
    _, payload, folder = post_fix
    schedules = sum(event["action"] == "schedule" for event in validate_lines(folder / "engine.jsonl"))
    assert schedules == 4  # three prompt chunks, one decode
    assert payload["steps"] == 2 * schedules  # each of the 2 ranks samples every step
    assert 0 < payload["step_seconds"] < payload["seconds"]


def test_post_fix_no_collective_separates_chunked_steps(post_fix: tuple[int, dict[str, Any], Path]) -> None:
    _, _, folder = post_fix
    steps = chunked_steps(folder)
    assert [step.step for step in steps] == [1, 2]  # three chunks: steps 1 and 2 are all non-final chunks
    for step in steps:
        assert not step.broadcast and not step.broadcast_precedes_next_forward
        assert not step.sample_precedes_next_forward, step  # rank 0's forward(N+1) does not wait for the last rank
    # the decode after the prompt does wait (a real dependency): the final chunk's broadcast exists
    last = [event for event in validate_lines(folder / "rank-1.jsonl") if event["action"] == "enter"]
    assert len(last) == 2  # steps 3 (final chunk) and 4 (decode) broadcast


def test_pre_fix_is_serialised_by_causal_order(pre_fix: tuple[int, dict[str, Any], Path]) -> None:
    code, payload, folder = pre_fix
    assert payload["outcome"] == "completed", payload  # not a hang: a stuck pipeline
    assert payload["replay"]["verdict"] == "violated" and payload["replay"]["property"] == "no_false_dependency"
    assert code == 1  # the run completed, its trace breaks a property
    assert "L2_pipelined_prefill" not in replay_traces(folder, profile="runtime")["witnessed"]
    steps = chunked_steps(folder)
    assert [step.step for step in steps] == [1, 2]
    for step in steps:
        assert step.broadcast and step.broadcast_precedes_next_forward and step.sample_precedes_next_forward, step


def test_pre_fix_diverges_from_the_post_fix_model_at_rank_0_broadcast(
    pre_fix: tuple[int, dict[str, Any], Path],
) -> None:
    _, _, folder = pre_fix
    result = replay_traces(folder, variant="post-fix", profile="runtime")
    assert result["verdict"] == "diverges"
    explanation = result["explanation"]
    assert "gpu_post" in explanation["reason"] and "rank:0" in explanation["reason"], explanation


def test_skip_disagree_hangs_and_the_waits_are_named(tmp_path: Path) -> None:
    code, payload, _ = run("--variant", "skip-disagree", "--scenario", "seed", "--trace-dir", str(tmp_path / "traces"))
    assert code == 1 and payload["outcome"] == "hang diagnosed", payload
    assert payload["waits"]["rank:1"] == "broadcast(pp)#1"  # the last rank broadcasts the final chunk's ids
    assert payload["waits"]["rank:0"] == "receive(rpc)"  # rank 0 skipped: its predicate saw no decode
    assert payload["seconds"] < TIMEOUT + 10  # the launcher's verdict, start-up included
    assert payload["replay"]["verdict"] == "violated" and payload["replay"]["property"] == "S1_broadcast_matching"


def test_choices_fed_back_give_the_same_run(tmp_path: Path) -> None:
    code, payload, _ = run(
        "--variant", "post-fix", "--scenario", "decode-gap", "--seed", "11", "--trace-dir", str(tmp_path / "first")
    )
    assert code == 0, payload
    script = tmp_path / "choices.jsonl"
    script.write_text("".join(json.dumps(choice) + "\n" for choice in payload["choices"]))
    again, replayed, _ = run(
        "--variant",
        "post-fix",
        "--scenario",
        "decode-gap",
        "--seed",
        "999",
        "--choices",
        str(script),
        "--trace-dir",
        str(tmp_path / "second"),
    )
    assert again == 0 and replayed["choices"] == payload["choices"]

    def schedule(folder: Path) -> list[Any]:
        return [
            (event["args"], event["observed"])
            for event in validate_lines(folder / "engine.jsonl")
            if event["action"] == "schedule"
        ]

    assert schedule(tmp_path / "first") == schedule(tmp_path / "second")


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [3, 4])
def test_post_fix_conforms_at_more_stages(tmp_path: Path, ranks: int) -> None:
    code, payload, _ = run(
        "--variant", "post-fix", "--scenario", "decode-gap", "--ranks", str(ranks), "--trace-dir", str(tmp_path)
    )
    assert code == 0 and payload["replay"]["verdict"] == "conforms", payload
    assert all(not step.broadcast and not step.sample_precedes_next_forward for step in chunked_steps(tmp_path))
