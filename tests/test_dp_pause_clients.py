"""dp-pause with two front-end clients (``clients`` = 2, lockstep/models/dp_pause/clients.py)."""

from __future__ import annotations

import pytest

from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.cli import main
from lockstep.impl.dp_pause.reproduction import plan
from lockstep.models import get_protocol
from lockstep.spec.protocol import UsageError

PROTOCOL = get_protocol("dp-pause")
SECOND_CLIENT = {"channel.second_client", "second_client.engines_running", "second_client.current_wave"}


def test_one_client_by_default_and_a_second_one_only_when_asked() -> None:
    assert not set(PROTOCOL.instance("post-fix").machine().variables) & SECOND_CLIENT
    machine = PROTOCOL.instance("post-fix", "second-client-during-resume").machine()
    assert SECOND_CLIENT <= set(machine.variables)
    actors = {action.name: action.actor for action in machine.actions}
    assert actors["second_client_add_request"] == "client:1"  # a client: never forced by fairness
    assert actors["arrive_from_second_client"] == "rank:{rank}"


def test_finding_second_client_request_during_resume_hangs_post_fix() -> None:
    result = check(PROTOCOL.instance("post-fix", "second-client-during-resume"), engine="auto")
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 46
    actions = [step.action for step in hang.path.steps]
    # the second client's FIRST_REQ is taken after the controller began to resume (it waited for settled messages)
    assert actions.index("client_resume") < actions.index("second_client_add_request")
    assert actions.index("second_client_add_request") < actions.index("coordinator_first_request")
    # one rank drops START_DP_WAVE before its resume, the other applies it after its resume barrier
    assert actions.index("handle_start_wave") < actions.index("finish_resume")
    assert "handle_start_wave" in actions[actions.index("finish_resume") :]
    assert "forward(worker_dp)#" in blocked_summary(result.machine, hang.path)


def test_v0_33_0_has_no_first_request_and_no_hang_with_two_clients() -> None:
    result = check(PROTOCOL.instance("v0.33.0", "second-client-during-resume"), engine="auto")
    found = {item.name: item.verdict for item in result.properties}
    assert found["no_hang"] is Verdict.HOLDS
    assert found["wave_seen_before_complete"] is Verdict.VIOLATED  # the known wave-unseen finding
    assert "drained_while_adding" not in found and "drained_when_idle" not in found  # one API server only


def test_finding_second_client_request_while_paused_reaches_the_engine_after_resume() -> None:
    result = check(PROTOCOL.instance("post-fix", "second-client-while-paused"), engine="auto")
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 48
    actions = [step.action for step in hang.path.steps]
    # sent while paused, its FIRST_REQ taken then; its ADD arrives only after both ranks resumed
    assert actions.index("client_pause_returned") < actions.index("second_client_add_request")
    assert actions.index("second_client_add_request") < actions.index("client_resume")
    assert actions.index("arrive_from_second_client") > max(i for i, a in enumerate(actions) if a == "finish_resume")
    assert actions[-2:] == ["handle_add", "step"]


def test_v0_33_0_rejects_the_second_clients_request_while_paused() -> None:
    result = check(PROTOCOL.instance("v0.33.0", "second-client-while-paused"), engine="auto")
    assert result.verdict is Verdict.HOLDS
    found = {item.name: item.verdict for item in result.properties}
    assert found["request_rejected"] is Verdict.HOLDS and found["rejection_cleared_after_resume"] is Verdict.HOLDS
    witness = result.property_result("request_rejected").path
    assert witness is not None and "second_client_add_request" in [step.action for step in witness.steps]


@pytest.mark.parametrize("option", ["lazy_first_request", "stale_publications"])
def test_single_client_options_are_refused_with_two_clients(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=option):
        PROTOCOL.instance("post-fix", overrides={"clients": 2, option: 1}).machine()
    code = main(["check", "dp-pause", "--set", "clients=2", "--set", f"{option}=1"])
    error = capsys.readouterr().err
    assert code == 2 and option in error and "Traceback" not in error


def test_the_runtime_refuses_a_counterexample_with_two_clients() -> None:
    header = {"parameters": {"ranks": 2, "requests": 0, "clients": 2}}
    with pytest.raises(ValueError, match="one front-end client.*clients=2"):
        plan(header, [])
