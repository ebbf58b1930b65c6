"""dp-pause's later releases bisected (``releases.BISECTION``), the per-release response bound and
v0.29.0's wave-unseen at sync_interval 2 (issue 18)."""

from __future__ import annotations

from lockstep.checkers import check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.models.dp_pause.model import PROTOCOL
from lockstep.models.dp_pause.releases import BISECTION, RELEASES, release_of, response_steps
from lockstep.spec.protocol import POST_FIX


def test_every_release_from_0_21_to_0_33_maps_to_a_declared_variant() -> None:
    declared = {variant.name for variant in PROTOCOL.variants}
    versions = [version for version, _, _ in BISECTION]
    assert versions[0] == "0.21.0" and versions[-1] == "0.33.0" and len(set(versions)) == len(versions)
    assert all(variant in declared for _, variant, _ in BISECTION)
    assert {variant for _, variant, _ in BISECTION} >= set(RELEASES)


def test_only_later_releases_widen_the_response_bound() -> None:
    assert response_steps(release_of(POST_FIX), 2) == 0
    assert response_steps(release_of("v0.25.0"), 2) == 6
    assert response_steps(release_of("v0.29.0"), 2) == 10


def test_v0_29_0_wave_ends_unseen_when_rank_0_starts_running_with_a_pause_pending() -> None:
    result = check(
        PROTOCOL.instance("v0.29.0", "wave-unseen-interval-2"), engine="bfs", properties=["wave_seen_before_complete"]
    )
    item = result.property_result("wave_seen_before_complete")
    assert item.verdict.value == "violated" and item.path is not None
    actions = [(step.actor, step.action) for step in item.path.steps]
    assert len(actions) == 26 and actions[-1] == ("rank:0", "finish_sync")
    # the coordinator took FIRST_REQ (no engines_running from v0.29.0 on) and rank 0 handled its pause
    assert ("coordinator", "coordinator_first_request") in actions and ("rank:0", "handle_pause") in actions
    assert ("coordinator", "coordinator_report") not in actions


def test_v0_23_0_runs_a_forward_after_a_partial_wake_and_v0_25_0_does_not() -> None:
    """(w18wake) 0.21.0-0.23.0: wake_up(['weights']) resumes the scheduler with the kv_cache asleep."""
    properties = ["forward_only_awake"]
    violated = check(PROTOCOL.instance("v0.23.0", "partial-wake"), engine="bfs", properties=properties)
    item = violated.property_result("forward_only_awake")
    assert item.verdict.value == "violated" and item.path is not None
    actions = [(step.actor, step.action) for step in item.path.steps]
    assert len(actions) == 49 and actions[-2:] == [("rank:0", "finish_resume"), ("rank:0", "step")]
    fixed = check(PROTOCOL.instance("v0.25.0", "partial-wake"), engine="bfs", properties=properties)
    assert fixed.property_result("forward_only_awake").verdict.value == "holds"


def test_v0_23_0_hangs_on_the_second_wake_round_and_v0_25_0_does_not() -> None:
    """(w18audit) wake_up(['kv_cache']) resumes again: rank 1, its wave still running, ignores it; rank 0 takes
    its copy after the wave ended and enters the resume barrier alone (double-resume's hang)."""
    hung = check(PROTOCOL.instance("v0.23.0", "partial-wake"), engine="bfs", properties=["no_hang"])
    item = hung.property_result("no_hang")
    assert item.verdict.value == "violated" and item.path is not None
    actions = [(step.actor, step.action) for step in item.path.steps]
    assert len(actions) == 68
    rank_1_wakes = [index for index, action in enumerate(actions) if action == ("rank:1", "handle_wake")]
    rank_0_wakes = [index for index, action in enumerate(actions) if action == ("rank:0", "handle_wake")]
    ends = [index for index, action in enumerate(actions) if action == ("rank:0", "finish_sync")]
    # the second round: rank 1's wake_up inside the resumed wave, rank 0's after that wave's last sync
    assert len(rank_1_wakes) == len(rank_0_wakes) == 2 and rank_1_wakes[1] < ends[-1] < rank_0_wakes[1]
    assert blocked_summary(hung.machine, item.path) == "rank 0 in resume_max(engine_dp)#4"
    fixed = check(PROTOCOL.instance("v0.25.0", "partial-wake"), engine="bfs", properties=["no_hang"])
    assert fixed.property_result("no_hang").verdict.value == "holds"
