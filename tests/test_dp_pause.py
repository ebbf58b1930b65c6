"""Golden pins of the dp-pause model: state counts, verdicts, counterexample lengths and shapes."""

from __future__ import annotations

import pytest

from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.models import get_protocol

PROTOCOL = get_protocol("dp-pause")


def verdicts(result: object) -> dict[str, str]:
    return {item.name: item.verdict.value for item in result.properties}  # type: ignore[attr-defined]


def test_pre_fix_seed_hangs_through_the_stale_start_dp_wave() -> None:
    result = check(PROTOCOL.instance("pre-fix"))
    assert result.verdict is Verdict.VIOLATED
    assert result.stats.states == 33732 and result.stats.transitions == 81575
    assert verdicts(result) == {
        "in_bounds": "holds",
        "quiescent_during_rpc": "violated",
        "resumed": "holds",
        "no_collective_mismatch": "holds",
        "no_hang": "violated",
        "no_deadlock": "violated",
    }
    hang = result.property_result("no_hang")
    assert hang.path is not None and hang.path.length == 20
    actions = [step.action for step in hang.path.steps]
    # The race of vLLM #36594: a START_DP_WAVE handled after pause returned wakes a rank into a
    # dummy forward, while its peer runs the collective_rpc.
    assert "handle_start_wave" in actions and "client_pause_returned" in actions
    assert actions.index("client_pause_returned") < len(actions) - 1
    summary = blocked_summary(result.machine, hang.path)
    assert "forward(worker_dp)#" in summary and "rpc(worker_world)#1" in summary
    shortest = result.counterexample
    assert shortest is not None and shortest.name == "quiescent_during_rpc" and shortest.path is not None
    assert shortest.path.length == 17


def test_post_fix_seed_holds_at_two_ranks() -> None:
    result = check(PROTOCOL.instance("post-fix"))
    assert result.verdict is Verdict.HOLDS
    assert result.stats.states == 48918 and result.stats.transitions == 123006
    # With one request the client never reads a publication before adding it: coverage says so.
    assert result.warnings == ["action client_read_publication was never enabled in the explored states"]
    resumed = result.property_result("resumed")
    assert resumed.path is not None and resumed.path.length == 44


def test_finding_stale_wave_after_resume() -> None:
    instance = PROTOCOL.instance("post-fix", "stale-wave-after-resume")
    assert instance.expected == "violated"
    result = check(instance)
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 54
    actions = [step.action for step in hang.path.steps]
    resume_returned = actions.index("finish_resume")
    assert "handle_start_wave" in actions[resume_returned:]  # applied after a resume
    assert actions[-1] in ("step", "client_resume_returned", "finish_resume")
    assert "forward(worker_dp)#" in blocked_summary(result.machine, hang.path)


def test_pinned_verdicts_of_every_default_instance() -> None:
    for variant in PROTOCOL.variants:
        instance = PROTOCOL.instance(variant.name)
        assert check(instance).verdict.value == instance.expected


def test_overridden_parameters_have_no_pinned_verdict() -> None:
    assert PROTOCOL.instance("post-fix", overrides={"sync_interval": 2}).expected is None


@pytest.mark.slow
def test_post_fix_seed_holds_at_three_ranks_with_and_without_symmetry() -> None:
    instance = PROTOCOL.instance("post-fix", ranks=3)
    plain = check(instance)
    reduced = check(instance, symmetry=True)
    assert plain.verdict is Verdict.HOLDS and reduced.verdict is Verdict.HOLDS
    assert verdicts(plain) == verdicts(reduced)
    assert reduced.stats.states is not None and plain.stats.states is not None
    assert reduced.stats.states < plain.stats.states


@pytest.mark.slow
def test_pre_fix_seed_at_three_ranks_is_violated() -> None:
    result = check(PROTOCOL.instance("pre-fix", ranks=3), symmetry=True)
    assert result.property_result("no_hang").verdict is Verdict.VIOLATED


def test_mutant_ignoring_start_dp_wave_while_paused_breaks_liveness() -> None:
    """PRs #36608/#38009 (closed): a paused engine drops START_DP_WAVE. Quiescence holds, but a rank
    with a request steps its forward while its peer, paused and idle, never joins: a hang."""
    result = check(PROTOCOL.instance("ignore-wave-while-paused"))
    assert result.stats.states == 24490
    assert verdicts(result)["quiescent_during_rpc"] == "holds"
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 13
    actions = [step.action for step in hang.path.steps]
    assert actions[-1] == "handle_start_wave" and "handle_pause" in actions
    assert blocked_summary(result.machine, hang.path) == "rank 0 in forward(worker_dp)#1"
