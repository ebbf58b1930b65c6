"""dp-pause's client and requests beyond the seed's script: requests of any length (``request_steps`` = 0, each
forward chooses how many of its requests end) and several pause/collective_rpc/resume cycles
(``pause_cycles``), so that real workloads replay (``tests/test_real_vllm_recordings.py``) while the seed bug
stays found. The defaults keep the seed's machine: every pin in ``tests/fixtures/model_snapshot.json`` is
unchanged (``lockstep check --all dp-pause``)."""

from __future__ import annotations

import pytest

from lockstep.checkers import Verdict, check
from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError

PROTOCOL = get_protocol("dp-pause")
ANY_WORKLOAD = {"request_steps": 0, "pause_cycles": 2}


def verdicts(variant: str, parameters: dict[str, int]) -> dict[str, Verdict]:
    result = check(PROTOCOL.instance(variant, None, parameters), engine="bfs")
    return {item.name: item.verdict for item in result.properties}


def test_the_seed_bug_is_found_with_requests_of_any_length_and_two_cycles() -> None:
    found = verdicts("pre-fix", ANY_WORKLOAD)
    assert found["quiescent_during_rpc"] is Verdict.VIOLATED and found["no_hang"] is Verdict.VIOLATED
    fixed = verdicts("post-fix", ANY_WORKLOAD)
    assert all(verdict is Verdict.HOLDS for verdict in fixed.values()), fixed


def test_only_requests_of_any_length_give_finish_forward_a_choice() -> None:
    """With ``request_steps`` = 0 a forward chooses how many of its requests end (``finished``); with 1 or 2 the
    action keeps its one parameter, so the pinned machines are unchanged."""

    def parameters(request_steps: int) -> list[str]:
        machine = PROTOCOL.instance("post-fix", None, {"request_steps": request_steps}).machine()
        finish = next(action for action in machine.actions if action.name == "finish_forward")
        return [parameter.name for parameter in finish.parameters]

    assert parameters(0) == ["rank", "finished"]
    assert parameters(1) == parameters(2) == ["rank"]


def test_the_client_pauses_again_after_resume_while_cycles_remain() -> None:
    machine = PROTOCOL.instance("post-fix", None, {"pause_cycles": 2}).machine()
    assert "client.cycle" in machine.variables
    assert "client.cycle" not in PROTOCOL.instance("post-fix").machine().variables  # the seed's machine as pinned
    result = check(machine, engine="bfs")
    resumed = result.property_result("resumed")
    assert resumed.verdict is Verdict.HOLDS and resumed.path is not None  # DONE is reached ...
    actions = [step.action for step in resumed.path.steps]
    assert actions.count("client_pause_returned") == 2 and actions.count("client_resume_returned") == 2  # ... twice


def test_requests_of_any_length_refuse_response_bounds() -> None:
    with pytest.raises(UsageError, match="request_steps = 0"):
        PROTOCOL.instance("post-fix", None, {"request_steps": 0, "bounded_liveness": 1}).machine()
