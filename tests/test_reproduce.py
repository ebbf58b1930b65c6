"""``lockstep reproduce``: model counterexamples run for real with processes and gloo collectives.

The dp-pause pre-fix ``seed`` counterexample (written by ``lockstep check`` itself) reproduces a
real hang, and so do the three post-fix findings (``stale-wave-after-resume``, ``double-resume``,
``request-after-resume``): the runtime, held to the counterexample's order, hangs with the waits
the model names, and its own trace violates the counterexample's property. The plan maps every choice of the
counterexample; input the runtime
cannot follow, or that is not a model counterexample, exits 2 with the file named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_traces import counterexample, reproduce

from lockstep.impl.dp_pause.reproduction import plan
from lockstep.traces.merge import open_traces

ROOT = Path(__file__).resolve().parent.parent


def test_the_pre_fix_seed_counterexample_hangs_for_real(tmp_path: Path) -> None:
    code, result, _ = reproduce(tmp_path, counterexample(tmp_path, "dp-pause", "--variant", "pre-fix"))
    assert code == 1 and result["verdict"] == "reproduced" and result["outcome"] == "hang diagnosed"
    assert result["waits"] == {"rank:0": "all_reduce(worker_dp)#1", "rank:1": "all_reduce(worker_world)#1"} | {
        actor: what for actor, what in result["waits"].items() if not actor.startswith("rank:")
    }
    assert result["replay"]["verdict"] == "violated" and result["replay"]["property"] == result["property"]
    assert {path.name for path in (tmp_path / "run").glob("*.jsonl")} == {
        "client.jsonl",
        "coordinator.jsonl",
        "rank-0.jsonl",
        "rank-1.jsonl",
    }


def test_the_stale_wave_finding_hangs_for_real_post_fix(tmp_path: Path) -> None:
    code, result, _ = reproduce(tmp_path, counterexample(tmp_path, "dp-pause", "--instance", "stale-wave-after-resume"))
    assert code == 1 and result["variant"] == "post-fix" and result["outcome"] == "hang diagnosed"
    assert result["waits"]["rank:0"].startswith("all_reduce(worker_dp)#")  # a dummy batch stepped alone
    assert result["waits"]["rank:1"] == "barrier(teardown)"  # idle: it never joins that forward
    assert result["replay"]["verdict"] == "violated" and result["replay"]["property"] == "no_hang"


@pytest.mark.parametrize(
    ("instance", "waits"),
    [
        (
            "double-resume",
            {"rank:0": "all_reduce(engine_dp)#", "rank:1": "all_reduce(worker_dp)#"},
        ),  # resume barrier alone
        ("request-after-resume", {"rank:0": "all_reduce(worker_dp)#", "rank:1": "receive(input_queue)"}),  # steps alone
    ],
)
def test_the_other_post_fix_findings_hang_for_real(tmp_path: Path, instance: str, waits: dict[str, str]) -> None:
    """Late requests and a second resume call come from the counterexample's client program."""
    code, result, _ = reproduce(tmp_path, counterexample(tmp_path, "dp-pause", "--instance", instance))
    assert code == 1 and result["variant"] == "post-fix" and result["outcome"] == "hang diagnosed"
    for actor, what in waits.items():
        assert result["waits"][actor].startswith(what), result["waits"]
    assert result["replay"]["verdict"] == "violated" and result["replay"]["property"] == result["property"]


def test_the_plan_takes_every_choice_of_the_counterexample(tmp_path: Path) -> None:
    path = counterexample(tmp_path, "dp-pause", "--variant", "pre-fix")
    trace = open_traces([path])
    events = [record.event for record in trace.records()]
    planned = plan(trace.header, events)
    arrivals = [event for event in events if event["action"].startswith("arrive_from_")]
    assert planned.scenario == "counterexample" and planned.ranks == 2
    assert sum(choice.point == "arrival" and choice.actor.startswith("rank:") for choice in planned.choices) == len(
        arrivals
    )
    program = planned.extra["client_program"]
    assert program == [
        {"action": event["action"], "args": event["args"]} for event in events if event["actor"] == "client"
    ]
    for rank in range(2):
        schedule = planned.extra["schedule"][f"rank:{rank}"]
        assert schedule["before_arrival"] == sorted(schedule["before_arrival"])
        assert len(schedule["before_arrival"]) == sum(event["actor"] == f"rank:{rank}" for event in arrivals)


def test_an_instance_the_runtime_client_cannot_follow_exits_2(tmp_path: Path) -> None:
    code, _, error = reproduce(
        tmp_path, counterexample(tmp_path, "dp-pause", "--variant", "pre-fix", "--instance", "barrier-request")
    )
    assert code == 2 and "counterexample.jsonl" in error and "rpc=1" in error


@pytest.mark.parametrize("kind", ["runtime", "missing", "protocol"])
def test_input_that_is_no_counterexample_exits_2(tmp_path: Path, kind: str) -> None:
    fixtures = ROOT / "tests" / "fixtures" / "traces"
    if kind == "runtime":
        path, message = fixtures / "runtime" / "dp-pause-pre-fix", "not a model counterexample"
    elif kind == "missing":
        path, message = tmp_path / "nope.jsonl", "nope.jsonl"
    else:
        lines = (fixtures / "dp-pause-pre-fix-seed.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        header["protocol"] = "computed-tokens"
        path = tmp_path / "other.jsonl"
        path.write_text("\n".join([json.dumps(header), *lines[1:2]]) + "\n")
        message = "other.jsonl"
    code, _, error = reproduce(tmp_path, path)
    assert code == 2 and message in error
