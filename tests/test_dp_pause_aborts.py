"""dp-pause's free client with aborts (``free_client`` = 1, ``abort_request`` = n: up to n ABORTs, of any request
at any time; the engine may find the request already finished) and the recorder's ABORT events, checked on
recordings of a real vLLM 0.32.0 kept as fixtures (no vLLM needed):

- ``aborts-seed-2`` (``--scenario aborts --seed 2``): two requests on rank 0, the first aborted after 3 tokens,
  a pause in wait mode (the second request finishes during it), a request added while paused, the
  collective_rpc, the resume, that request aborted after 3 tokens, an abort of the finished one (not sent),
  a request to rank 1. It conforms to ``v0.30.0``.

- ``abort-while-paused-seed-2`` (``lockstep vllm check dp-pause --scenario abort-while-paused --seed 2``): two
  requests on rank 0, the first aborted mid-run (vLLM aborts it eagerly from ``aborts_queue`` within a step,
  so the ABORT taken later from the input queue finds it finished), a pause in wait mode, a request added
  while paused and aborted before the resume, the collective_rpc, the resume, a request to rank 1. The run
  hung: rank 1 entered its forward's DP all-reduce alone (the request's wave is the engines' current one,
  so it woke nobody; rank 0 stayed idle) until the driver's deadline. The recording up to the hang
  conforms to ``v0.30.0``.
"""

from __future__ import annotations

import json
import shutil
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError
from lockstep.testing import replay_traces
from lockstep.traces.reader import TraceInputError

PROTOCOL = get_protocol("dp-pause")
RECORDINGS = Path(__file__).parent / "fixtures" / "traces" / "vllm-0.32.0"
HANG = RECORDINGS / "abort-while-paused-seed-2"
ABORTS = RECORDINGS / "aborts-seed-2"
ACTORS = ["client", "rank:0", "rank:1"]


def _events(recording: Path, actor_file: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (recording / actor_file).read_text().splitlines()[1:]]


def _rewritten(recording: Path, into: Path, **parameters: int) -> Path:
    """A copy of ``recording`` whose headers say ``parameters``."""
    shutil.copytree(recording, into)
    for file in into.glob("*.jsonl"):
        lines = file.read_text().splitlines()
        header = json.loads(lines[0])
        header["parameters"].update(parameters)
        file.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return into


def test_the_abort_budget_is_the_free_clients_and_leaves_the_pinned_machines_unchanged() -> None:
    pinned = PROTOCOL.instance("post-fix", "aborted-stale-request").machine()
    assert "client.aborted" in pinned.variables and "client.aborts" not in pinned.variables
    handle = next(action for action in pinned.actions if action.name == "handle_abort")
    assert [parameter.name for parameter in handle.parameters] == ["rank"]
    free = PROTOCOL.instance("v0.30.0", None, {"free_client": 1, "request_steps": 0, "abort_request": 3}).machine()
    assert free.variables["client.aborts"].sort.name == "Int[0..3]"
    handle = next(action for action in free.actions if action.name == "handle_abort")
    assert [parameter.name for parameter in handle.parameters] == ["rank", "finishes"]
    with pytest.raises(UsageError, match="abort_request > 1 needs free_client"):
        PROTOCOL.instance("post-fix", None, {"abort_request": 2}).machine()


def test_the_recorder_writes_each_abort_on_both_sides() -> None:
    client = [event["action"] for event in _events(HANG, "client.jsonl")]
    assert client.count("client_abort_request") == 2  # request-1 had finished: AsyncLLM.abort sent nothing
    rank_0 = [event["action"] for event in _events(HANG, "rank-0.jsonl")]
    assert rank_0.count("handle_abort") == 2


def test_real_aborts_and_a_wait_mode_pause_conform() -> None:
    result = replay_traces(ABORTS, profile="vllm-dp-pause", expected_actors=ACTORS)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.30.0 seed"
    actions = result["coverage"]["actions"]
    assert (actions["client_abort_request"], actions["handle_abort"], actions["client_pause"]) == (2, 2, 2)
    assert result["parameters"]["pause_modes"] == 4  # wait mode only


def test_the_scripted_client_refuses_several_aborts(tmp_path: Path) -> None:
    copy = _rewritten(ABORTS, tmp_path / "scripted", free_client=0)
    with pytest.raises(UsageError, match="abort_request > 1 needs free_client"):
        replay_traces(copy, profile="vllm-dp-pause", trust_header=True)


def test_a_real_abort_while_paused_conforms_up_to_the_hang() -> None:
    result = replay_traces(HANG, profile="vllm-dp-pause", expected_actors=ACTORS)
    assert result["verdict"] == "conforms", result.get("explanation")
    assert result["model"] == "dp-pause v0.30.0 seed"
    assert result["coverage"]["actions"]["handle_abort"] == 2
    rank_1, rank_0 = _events(HANG, "rank-1.jsonl"), _events(HANG, "rank-0.jsonl")
    assert rank_1[-1]["action"] == "enter" and rank_1[-1]["args"] == {"communicator": "worker_dp", "op": "forward"}
    assert rank_0[-1]["action"] == "finish_resume"  # idle: no request, engines_running false, nobody woke it
    assert rank_0[-1]["observed"]["engines_running[0]"] is False and rank_0[-1]["observed"]["requests[0]"] == 0


def test_the_model_has_the_hang_the_real_engine_took() -> None:
    """Among the model states the recording may end in, some reach no final state (the hang: nothing wakes
    rank 0); the others still have a START_DP_WAVE in flight, which the unrecorded coordinator never sent."""
    ends: list[tuple[Any, list[Any]]] = []

    def observe(system: Any, candidates: Any, bindings: Any) -> None:
        if not bindings:
            ends.append((system, list(candidates)))

    replay_traces(HANG, profile="vllm-dp-pause", observe=observe)
    system, states = ends[-1]

    def reaches_final(start: Any) -> bool:
        seen, queue = {start}, deque([start])
        while queue:
            state = queue.popleft()
            if system.is_final(state):
                return True
            for transition in system.transitions(state):
                if transition.target not in seen and len(seen) < 200_000:
                    seen.add(transition.target)
                    queue.append(transition.target)
        return False

    stuck = [state for state in states if not reaches_final(state)]
    assert stuck and len(stuck) < len(states)


def test_an_abort_beyond_the_budget_is_refused(tmp_path: Path) -> None:
    copy = _rewritten(HANG, tmp_path / "one-abort", abort_request=1)
    with pytest.raises(TraceInputError, match="client.aborts = 2 is beyond its bounds"):
        replay_traces(copy, profile="vllm-dp-pause", trust_header=True)
