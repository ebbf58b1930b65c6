"""The reference runtime on cudagraph-pp: pipeline stages in real rank processes with real gloo p2p.

Post-fix runs complete, every stage's output equals the eager reference of the seeded pipeline,
and the traces follow the post-fix model; the ``no-persistent-buffer`` and ``no-copy-in``
mutants complete with outputs that differ from the eager reference, and their traces replay as
violating A1 (address stability) and A2 (freshness) against their own variant's model and
diverge from the post-fix model; every line fits the JSON Schema. ``EmulatedGraph`` replays read
the recorded tensors' data at replay time; the runtime's descriptor plan and dispatch agree with
the model's on every small configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from runtime_traces import validate_lines

from lockstep.impl.cudagraph_pp.descriptors import DescriptorPlan
from lockstep.impl.cudagraph_pp.graphs import EmulatedGraph, GraphManager
from lockstep.impl.cudagraph_pp.stages import Pipeline
from lockstep.models.cudagraph_pp.descriptors import MODE_NAMES, capture_plan, capture_sizes, dispatch_plan
from lockstep.models.cudagraph_pp.model import PROTOCOL as MODEL
from lockstep.testing import replay_traces

# the model's action names over its variants and instances, and the collective events
ACTIONS = {
    action.name
    for instance in MODEL.instances
    for variant in MODEL.variants
    for action in MODEL.instance(variant.name, instance.name).machine().actions
} | {"enter", "complete"}

ROOT = Path(__file__).resolve().parent.parent


def run(folder: Path, *arguments: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "cudagraph-pp",
            "--hang-timeout",
            "10",
            "--json",
            "--trace-dir",
            str(folder),
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(completed.stdout), time.monotonic() - started


def events_of(folder: Path, ranks: int) -> dict[str, list[dict[str, Any]]]:
    """Every rank's trace lines, each checked against the JSON Schema, by file name."""
    found: dict[str, list[dict[str, Any]]] = {}
    assert sorted(path.name for path in folder.glob("*.jsonl")) == [f"rank-{rank}.jsonl" for rank in range(ranks)]
    for path in sorted(folder.glob("*.jsonl")):
        events = validate_lines(path)
        assert all(event["action"] in ACTIONS for event in events)  # the model's, as the vocabulary checked
        found[path.name] = events
    return found


def comparisons(folder: Path, ranks: int) -> dict[int, list[dict[str, Any]]]:
    """Each rank's per-step comparison of its output with the eager reference."""
    return {
        rank: json.loads((folder / f"rank-{rank}.outputs.json").read_text(encoding="utf-8"))["steps"]
        for rank in range(ranks)
    }


@pytest.mark.parametrize("scenario", ["seed", "full-and-piecewise"])
def test_post_fix_outputs_equal_eager_and_traces_conform(tmp_path: Path, scenario: str) -> None:
    code, payload, seconds = run(tmp_path, "--variant", "post-fix", "--scenario", scenario, "--set", "steps=3")
    assert code == 0 and payload["outcome"] == "completed", payload
    assert payload["replay"]["verdict"] == "conforms", payload["replay"]
    events = events_of(tmp_path, 2)
    forwards = [event for event in events["rank-1.jsonl"] if event["action"] == "forward"]
    assert len(forwards) == 3
    for forward in forwards:  # the graph read step N's received data from the persistent buffer
        step = forward["observed"]["forward.step[1]"]
        assert forward["observed"]["forward.given[1]"] == "PERSISTENT"
        assert forward["observed"]["forward.data[1]"] == {"hidden_states": step, "residual": step}
    assert any(forward["observed"]["forward.descriptor[1]"] != "NONE" for forward in forwards)  # a graph replayed
    for rank, steps in comparisons(tmp_path, 2).items():
        assert [step["equal_to_eager"] for step in steps] == [True] * 3, (rank, steps)
    assert seconds < 60


@pytest.mark.parametrize(
    ("variant", "broken"), [("no-persistent-buffer", "A1_address_stability"), ("no-copy-in", "A2_freshness")]
)
def test_mutant_outputs_differ_from_eager_and_traces_violate(tmp_path: Path, variant: str, broken: str) -> None:
    code, payload, _ = run(tmp_path, "--variant", variant, "--set", "steps=2")
    assert payload["outcome"] == "completed", payload
    assert code == 1  # the replay found the violation
    assert payload["replay"]["verdict"] == "violated" and payload["replay"]["property"] == broken, payload["replay"]
    events_of(tmp_path, 2)
    found = comparisons(tmp_path, 2)
    assert all(step["equal_to_eager"] for step in found[0])  # the first stage reads its own input buffers
    replayed = [step for step in found[1] if step["descriptor"] != "NONE"]
    assert replayed and not any(step["equal_to_eager"] for step in replayed), found[1]
    assert max(step["max_abs_difference"] for step in replayed) > 1e-3
    own = replay_traces(tmp_path, profile="runtime")
    assert (own["verdict"], own["property"]) == ("violated", broken)
    against_post_fix = replay_traces(tmp_path, variant="post-fix", profile="runtime")
    assert against_post_fix["verdict"] == "diverges", against_post_fix


EXPECTED = {
    "pre-fix": ("conforms", None, True),
    "post-fix": ("conforms", None, True),
    "no-persistent-buffer": ("violated", "A1_address_stability", False),
    "no-copy-in": ("violated", "A2_freshness", False),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(EXPECTED))
@pytest.mark.parametrize(
    ("ranks", "scenario", "seed"), [(3, "piecewise", 3), (4, "full-and-piecewise", 2), (2, "full-decode-only", 4)]
)
def test_every_variant_at_more_stages_and_modes(
    tmp_path: Path, variant: str, ranks: int, scenario: str, seed: int
) -> None:
    """Deeper pipelines and the other cudagraph modes: the same verdicts; a mutant's error reaches every later stage."""
    code, payload, _ = run(
        tmp_path,
        "--variant",
        variant,
        "--ranks",
        str(ranks),
        "--scenario",
        scenario,
        "--seed",
        str(seed),
        "--set",
        "steps=3",
    )
    verdict, broken, equal = EXPECTED[variant]
    assert payload["outcome"] == "completed", payload
    assert (payload["replay"]["verdict"], payload["replay"]["property"]) == (verdict, broken), payload["replay"]
    assert code == (0 if verdict == "conforms" else 1)
    events_of(tmp_path, ranks)
    found = comparisons(tmp_path, ranks)
    assert all(step["equal_to_eager"] for step in found[0])
    last = found[ranks - 1]
    assert all(step["equal_to_eager"] for step in last) if equal else not all(step["equal_to_eager"] for step in last)


def test_emulated_graph_replays_what_the_recorded_tensors_hold() -> None:
    """Copying into the captured buffer changes the replay; a new tensor with the same values does not."""
    buffer = {"x": torch.zeros(3, 2)}
    graph = EmulatedGraph(lambda given: {"y": given["x"] * 2 + 1}, {"x": buffer["x"][:2]})
    address = graph.outputs["y"].data_ptr()
    fresh = torch.full((2, 2), 5.0)
    assert torch.equal(graph.replay()["y"], torch.ones(2, 2))  # the fresh tensor is not looked at
    buffer["x"][:2].copy_(fresh)
    replayed = graph.replay()
    assert torch.equal(replayed["y"], torch.full((2, 2), 11.0)) and replayed["y"].data_ptr() == address
    assert graph.input_pointers["x"] == buffer["x"].data_ptr()


def test_graph_manager_full_and_piecewise_match_eager() -> None:
    pipeline = Pipeline(seed=1, stages=2, hidden_size=8, device=torch.device("cpu"))
    plan = DescriptorPlan.build(1, 4, 4, 2, 1)
    persistent = {key: torch.zeros(4, 8) for key in ("hidden_states", "residual")}
    manager = GraphManager(1, pipeline, 2, use_cuda_graphs=False)
    for descriptor in plan.order:
        manager.capture(descriptor, {key: tensor[: descriptor.num_tokens] for key, tensor in persistent.items()})
    assert manager.output is not None and manager.output["hidden_states"].shape[0] == 4  # sized by the first capture
    values = {key: torch.randn(4, 8) for key in persistent}
    for descriptor in plan.order:
        rows = descriptor.num_tokens
        for key, tensor in persistent.items():
            tensor[:rows].copy_(values[key][:rows])
        replayed = manager.run(descriptor, {})
        eager = pipeline.forward(1, {key: value[:rows] for key, value in values.items()})
        for key in eager:
            assert torch.allclose(replayed[key][:rows], eager[key], atol=1e-6), descriptor.label


@pytest.mark.parametrize("mode", range(4))
@pytest.mark.parametrize("decode_query_len", [1, 2])
def test_runtime_plan_and_dispatch_agree_with_the_model(mode: int, decode_query_len: int) -> None:
    for largest in range(decode_query_len, 9):
        for max_num_reqs in range(1, 5):
            max_num_tokens = largest
            plan = DescriptorPlan.build(mode, largest, max_num_tokens, max_num_reqs, decode_query_len)
            by_size, order = capture_plan(
                MODE_NAMES[mode], capture_sizes(largest, decode_query_len), max_num_reqs, decode_query_len
            )
            assert [d.label for d in plan.order] == [d.label for d in order]
            table = dispatch_plan(by_size, max_num_tokens, max_num_reqs, decode_query_len)
            for tokens in range(1, max_num_tokens + 1):
                for requests in range(1, min(tokens, max_num_reqs) + 1):
                    for decode in (False, True):
                        if decode and tokens != requests * decode_query_len:
                            continue
                        chosen = plan.dispatch(tokens, requests, decode)
                        expected = table.get((tokens, requests, decode))
                        assert (chosen and chosen.label) == (expected and expected.label), (tokens, requests, decode)
