"""``lockstep reproduce`` on pp-broadcast: model counterexamples run with real stage processes and gloo.

The ``skip-disagree`` counterexamples (``seed``, ``chunks-then-decode``, ``decode-gap``) hang for
real: the last rank waits in the broadcast its peer skipped, and the waits are named. The pre-fix
``seed`` counterexample completes, and the runtime's own trace violates ``no_false_dependency``.
In every run each actor's CPU events (and each rank's stream events) start with the
counterexample's, arguments included, so the ``leave_out`` choices (the model's one action
parameter) are really taken: ``skip-whole-receive`` ``decode-gap`` needs one to leave a request out,
and the runtime then reads the stale mapping (``S3_no_stale_read``). The plan's workload is the
header's, ``--set`` overrides included; a ``leave_out`` the scheduler cannot take is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from runtime_traces import counterexample, reproduce

from lockstep.impl.pp_broadcast.reproduction import plan
from lockstep.traces.merge import open_traces

CPU_ACTIONS = ("schedule", "process_output", "execute_model", "sample_tokens")
GPU_ACTIONS = ("gpu_compute", "gpu_post", "gpu_complete")


def threads(events: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Each actor's CPU events and each rank's stream events, as (action, arguments), in order."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for event in events:
        thread = "cpu" if event["action"] in CPU_ACTIONS else "gpu" if event["action"] in GPU_ACTIONS else None
        if thread is not None:
            found.setdefault((event["actor"], thread), []).append(
                (event["action"], json.dumps(event["args"], sort_keys=True))
            )
    return found


def assert_follows(path: Path, run: Path) -> None:
    """The runtime's events of every thread start with the counterexample's."""
    model = threads([json.loads(line) for line in path.read_text().splitlines()[1:]])
    runtime = threads(
        [json.loads(line) for file in sorted(run.glob("*.jsonl")) for line in file.read_text().splitlines()[1:]]
    )
    assert model
    for thread, steps in model.items():
        assert runtime.get(thread, [])[: len(steps)] == steps, thread


@pytest.mark.parametrize(
    ("instance", "rank_0"),
    [
        ("seed", "receive(rpc)"),  # it skipped the broadcast of the last step and waits for the next RPC
        ("chunks-then-decode", "send->1(pp)#"),  # it went on to the decode's forward
        ("decode-gap", "send->1(pp)#"),
    ],
)
def test_skip_disagree_hangs_for_real_and_names_the_waits(tmp_path: Path, instance: str, rank_0: str) -> None:
    path = counterexample(tmp_path, "pp-broadcast", "--variant", "skip-disagree", "--instance", instance)
    code, result, _ = reproduce(tmp_path, path, timeout=10)
    assert code == 1 and result["verdict"] == "reproduced" and result["outcome"] == "hang diagnosed", result
    assert result["waits"]["rank:1"] == "broadcast(pp)#1"  # the last rank broadcasts alone
    assert result["waits"]["rank:0"].startswith(rank_0), result["waits"]
    assert result["waits"]["engine"].startswith("receive(reply of step")
    assert result["replay"]["verdict"] == "violated"
    if instance == "seed":
        assert result["replay"]["property"] == result["property"] == "S1_broadcast_matching"
    assert_follows(path, tmp_path / "run")


def test_pre_fix_seed_violates_no_false_dependency_for_real(tmp_path: Path) -> None:
    path = counterexample(tmp_path, "pp-broadcast", "--variant", "pre-fix")
    code, result, _ = reproduce(tmp_path, path, timeout=10)
    assert code == 1 and result["verdict"] == "reproduced" and result["outcome"] == "completed", result
    assert result["replay"]["verdict"] == "violated"
    assert result["replay"]["property"] == result["property"] == "no_false_dependency"
    assert_follows(path, tmp_path / "run")


def test_a_leave_out_choice_is_taken_and_the_stale_read_happens(tmp_path: Path) -> None:
    path = counterexample(tmp_path, "pp-broadcast", "--variant", "skip-whole-receive", "--instance", "decode-gap")
    trace = open_traces([path])
    assert [
        event["args"]["leave_out"]
        for event in (record.event for record in trace.records())
        if event["action"] == "schedule"
    ] == [-1, 1, -1]
    code, result, _ = reproduce(tmp_path, path, timeout=10)
    assert code == 1 and result["outcome"] == "completed", result
    assert result["replay"]["property"] == result["property"] == "S3_no_stale_read"
    assert_follows(path, tmp_path / "run")  # the engine's schedule events carry leave_out


def test_the_run_takes_the_header_workload_and_the_plan_refuses_an_impossible_leave_out(tmp_path: Path) -> None:
    path = counterexample(
        tmp_path, "pp-broadcast", "--variant", "skip-disagree", "--set", "requests=2", "--set", "chunks=3"
    )
    trace = open_traces([path])
    events = [record.event for record in trace.records()]
    planned = plan(trace.header, events)
    assert planned.scenario == "seed" and planned.ranks == 2
    assert planned.extra == {"chunks": 3, "decodes": 0, "requests": 2, "gaps": 0}
    assert [choice.point for choice in planned.choices] == ["chunk_tokens"] * 4  # no gaps: leave_out is never asked
    code, result, _ = reproduce(tmp_path, path, timeout=10)  # the runtime runs the header's two requests
    assert code == 1 and result["outcome"] == "hang diagnosed", result
    header = json.loads((tmp_path / "run" / "engine.jsonl").read_text().splitlines()[0])
    assert {name: header["parameters"][name] for name in planned.extra} == planned.extra
    assert_follows(path, tmp_path / "run")
    schedule = next(index for index, event in enumerate(events) if event["action"] == "schedule")
    events[schedule] = {**events[schedule], "args": {"leave_out": 1}}
    with pytest.raises(ValueError, match="leaves request 1 out with 0 gaps left"):
        plan(trace.header, events)
    events[schedule] = {**events[schedule], "action": "schedule_empty", "args": {}}
    with pytest.raises(ValueError, match="schedules no empty steps"):
        plan(trace.header, events)
