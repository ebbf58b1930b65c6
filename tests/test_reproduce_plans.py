"""``lockstep reproduce`` for async-placeholders and cudagraph-pp: their plans turn a model
counterexample into the runtime's scripted choices, and the runs fail for real as the model says
(the runtime's trace violates the counterexample's property)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_traces import counterexample, reproduce

from lockstep.impl.async_placeholders.reproduction import plan as async_plan
from lockstep.impl.cudagraph_pp.reproduction import plan as cudagraph_plan
from lockstep.traces.merge import open_traces


def events_of(path: Path) -> tuple[dict[str, object], list[dict[str, object]]]:
    trace = open_traces([path])
    return dict(trace.header), [dict(record.event) for record in trace.records()]


def test_the_async_placeholders_plan_scripts_the_scheduler_loop(tmp_path: Path) -> None:
    path = counterexample(tmp_path, "async-placeholders", "--variant", "pre-fix")
    header, events = events_of(path)
    planned = async_plan(header, events)
    scheduler = [event for event in events if event["actor"] == "scheduler"]
    assert planned.scenario == "seed" and planned.ranks == 1
    assert [choice.chosen for choice in planned.choices if choice.point == "next"] == [
        {"schedule": "schedule", "update_from_output": "process", "kv_load_failure": "kv_load_failure"}[
            str(event["action"])
        ]
        for event in scheduler
    ]


@pytest.mark.slow
def test_the_async_placeholders_pre_fix_counterexample_violates_its_property_for_real(tmp_path: Path) -> None:
    code, result, _ = reproduce(tmp_path, counterexample(tmp_path, "async-placeholders", "--variant", "pre-fix"))
    assert code == 1 and result["outcome"] == "completed"
    assert result["replay"]["verdict"] == "violated" and result["replay"]["property"] == result["property"]


def test_the_cudagraph_plan_scripts_every_schedule_and_refuses_an_impossible_one(tmp_path: Path) -> None:
    path = counterexample(tmp_path, "cudagraph-pp", "--variant", "no-copy-in")
    header, events = events_of(path)
    planned = cudagraph_plan(header, events)
    schedules = [event for event in events if event["action"] == "schedule"]
    assert planned.scenario == "seed" and planned.ranks == 2 and planned.extra["steps"] == 2
    assert [(choice.point, choice.chosen) for choice in planned.choices] == [
        pair
        for event in schedules
        for pair in (
            ("schedule.tokens", str(event["args"]["tokens"])),  # type: ignore[index]
            ("schedule.requests", str(event["args"]["requests"])),  # type: ignore[index]
        )
    ]
    wrong = [dict(event, args={"tokens": 2, "requests": 1, "decode": True}) for event in schedules]
    with pytest.raises(ValueError, match="uniform decode exactly when tokens == requests"):
        cudagraph_plan(header, wrong)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "property_name"), [("no-copy-in", "A2_freshness"), ("no-persistent-buffer", "A1_address_stability")]
)
def test_the_cudagraph_mutants_counterexamples_violate_their_property_for_real(
    tmp_path: Path, variant: str, property_name: str
) -> None:
    code, result, _ = reproduce(tmp_path, counterexample(tmp_path, "cudagraph-pp", "--variant", variant))
    assert code == 1 and result["replay"]["verdict"] == "violated"
    assert result["replay"]["property"] == property_name
