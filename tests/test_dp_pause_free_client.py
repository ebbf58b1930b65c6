"""dp-pause's free client (``free_client`` = 1: adds, pauses in each allowed mode, collective_rpcs while paused
and resumes in any order and number within the budgets) and the drained step of requests of any length (a step
that runs no forward because every request's last token is in flight, then finishes them), checked on
recordings of a real vLLM 0.32.0 kept as fixtures (no vLLM needed):

- ``pause-at-wave-boundary-seed-0``: one 16-token request, a keep-mode pause as soon as it finished, the
  collective_rpc, the resume and a request after it. vLLM 0.32.0 schedules async on this CPU DP setup
  (``Scheduler.schedule`` skips a request whose placeholders reach ``max_tokens``), so the request's last token
  is processed in a step that runs no forward, after which the rank runs a dummy batch: the model without the
  drained step diverged there (a model error, fixed in ``engine.step``).
- ``random-seed-2`` (``--scenario random --seed 2``): a pause in abort mode, a request while paused, two
  collective_rpcs in one pause, the resume, one more request: the scripted client cannot judge it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError
from lockstep.testing import replay_traces

PROTOCOL = get_protocol("dp-pause")
RECORDINGS = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0"
BOUNDARY, RANDOM = RECORDINGS / "pause-at-wave-boundary-seed-0", RECORDINGS / "random-seed-2"
ACTORS = ["client", "rank:0", "rank:1"]


def test_the_free_client_and_the_drained_step_leave_the_pinned_machines_unchanged() -> None:
    seed = PROTOCOL.instance("post-fix").machine()
    assert "client.cycle" not in seed.variables and "client.resume_round" not in seed.variables
    step = next(action for action in seed.actions if action.name == "step")
    assert [parameter.name for parameter in step.parameters] == ["rank"]
    free = PROTOCOL.instance("post-fix", None, {"free_client": 1, "request_steps": 0}).machine()
    assert {"client.cycle", "client.resume_round"} <= set(free.variables)
    step = next(action for action in free.actions if action.name == "step")
    assert [parameter.name for parameter in step.parameters] == ["rank", "drained"]


def test_the_free_client_refuses_response_bounds() -> None:
    with pytest.raises(UsageError, match="free_client"):
        PROTOCOL.instance("post-fix", None, {"free_client": 1, "bounded_liveness": 1}).machine()


@pytest.mark.parametrize("recording", [BOUNDARY, RANDOM], ids=["wave-boundary", "random-seed-2"])
def test_real_free_scenarios_conform_to_their_release(recording: Path) -> None:
    result = replay_traces(recording, profile="vllm-dp-pause", expected_actors=ACTORS)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.30.0 seed"


def _rewritten(recording: Path, into: Path, **parameters: int) -> Path:
    """A copy of ``recording`` whose headers say ``parameters``."""
    shutil.copytree(recording, into)
    for file in into.glob("*.jsonl"):
        lines = file.read_text().splitlines()
        header = json.loads(lines[0])
        header["parameters"].update(parameters)
        file.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return into


def test_without_the_drained_step_the_wave_boundary_recording_diverges(tmp_path: Path) -> None:
    """Requests of two forwards have no drained step: the step after the 16-token request's last forward,
    which finishes it without a forward, is where the recording leaves the model."""
    copy = _rewritten(BOUNDARY, tmp_path / "counted", request_steps=2)
    result = replay_traces(copy, profile="vllm-dp-pause", trust_header=True)
    assert result["verdict"] == "diverges", result


def test_the_scripted_client_cannot_judge_two_rpcs_in_one_pause(tmp_path: Path) -> None:
    copy = _rewritten(RANDOM, tmp_path / "scripted", free_client=0)
    result = replay_traces(copy, profile="vllm-dp-pause", trust_header=True)
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"].startswith("client_")
