"""Golden pins of the dp-pause model: state counts, verdicts, counterexample lengths and shapes."""

from __future__ import annotations

import pytest

from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol
from lockstep.spec.expressions import Variable
from lockstep.spec.terms import Term

PROTOCOL = get_protocol("dp-pause")


def verdicts(result: object) -> dict[str, str]:
    return {item.name: item.verdict.value for item in result.properties}  # type: ignore[attr-defined]


def test_pre_fix_seed_hangs_through_the_stale_start_dp_wave() -> None:
    result = check(PROTOCOL.instance("pre-fix"), engine="bfs")
    assert result.verdict is Verdict.VIOLATED
    assert result.stats.states == 33732 and result.stats.transitions == 81575
    assert verdicts(result) == {
        "in_bounds": "holds",
        "well_defined": "holds",
        "quiescent_during_rpc": "violated",
        "forward_counts_agree": "holds",
        "pause_mode_semantics": "holds",
        "coordinator_idle_when_quiet": "holds",
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
    result = check(PROTOCOL.instance("post-fix"), engine="bfs")
    assert result.verdict is Verdict.HOLDS
    assert result.stats.states == 48918 and result.stats.transitions == 123006
    # With one request the client never reads a publication before adding it: coverage says so.
    assert result.warnings == ["action client_read_publication was never enabled in the explored states"]
    resumed = result.property_result("resumed")
    assert resumed.path is not None and resumed.path.length == 44


def test_finding_stale_wave_after_resume() -> None:
    instance = PROTOCOL.instance("post-fix", "stale-wave-after-resume")
    assert instance.expected == "violated"
    result = check(instance, engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 54
    actions = [step.action for step in hang.path.steps]
    resume_returned = actions.index("finish_resume")
    assert "handle_start_wave" in actions[resume_returned:]  # applied after a resume
    assert actions[-1] in ("step", "client_resume_returned", "finish_resume")
    assert "forward(worker_dp)#" in blocked_summary(result.machine, hang.path)


def test_every_default_instance_has_a_pinned_verdict() -> None:
    # ``check --all`` (tests/test_cli.py) checks every pinned verdict; this one says none is missing
    pinned = {(instance.variant, instance.name) for instance in pinned_instances([PROTOCOL])}
    for variant in PROTOCOL.variants:
        instance = PROTOCOL.instance(variant.name)
        assert instance.expected in ("holds", "violated") and (variant.name, instance.name) in pinned, variant.name


@pytest.mark.slow
def test_pinned_verdicts_of_every_default_instance() -> None:
    for variant in PROTOCOL.variants:
        instance = PROTOCOL.instance(variant.name)
        assert check(instance, engine="bfs").verdict.value == instance.expected


def test_overridden_parameters_have_no_pinned_verdict() -> None:
    assert PROTOCOL.instance("post-fix", overrides={"sync_interval": 2}).expected is None


@pytest.mark.slow
def test_post_fix_seed_holds_at_three_ranks_with_and_without_symmetry() -> None:
    instance = PROTOCOL.instance("post-fix", ranks=3)
    plain = check(instance, engine="bfs")
    reduced = check(instance, engine="bfs", symmetry=True)
    assert plain.verdict is Verdict.HOLDS and reduced.verdict is Verdict.HOLDS
    assert verdicts(plain) == verdicts(reduced)
    assert reduced.stats.states is not None and plain.stats.states is not None
    assert reduced.stats.states < plain.stats.states


@pytest.mark.slow
def test_pre_fix_seed_at_three_ranks_is_violated() -> None:
    result = check(PROTOCOL.instance("pre-fix", ranks=3), engine="bfs", symmetry=True)
    assert result.property_result("no_hang").verdict is Verdict.VIOLATED


def test_mutant_ignoring_start_dp_wave_while_paused_breaks_liveness() -> None:
    """PRs #36608/#38009 (closed): a paused engine drops START_DP_WAVE. Quiescence holds, but a rank
    with a request steps its forward while its peer, paused and idle, never joins: a hang."""
    result = check(PROTOCOL.instance("ignore-wave-while-paused"), engine="bfs")
    assert result.stats.states == 24490
    assert verdicts(result)["quiescent_during_rpc"] == "holds"
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 13
    actions = [step.action for step in hang.path.steps]
    assert actions[-1] == "handle_start_wave" and "handle_pause" in actions
    assert blocked_summary(result.machine, hang.path) == "rank 0 in forward(worker_dp)#1"


# ------------------------------------------------------------------ instances beyond the seed
# (state counts, verdicts and counterexample lengths as measured; expected verdicts from v0.21.0)
PINS = {
    ("modes", "pre-fix"): (140432, {"no_hang": 20}),
    ("modes", "post-fix"): (194659, {}),
    ("modes", "ignore-wave-while-paused"): (107340, {"no_hang": 13}),
    ("request-while-paused", "pre-fix"): (20929, {"no_hang": 19}),
    ("request-while-paused", "post-fix"): (19987, {}),
    ("staggered-pause", "pre-fix"): (53949, {"no_hang": 19}),
    ("staggered-pause", "post-fix"): (93534, {}),
    ("barrier-request", "pre-fix"): (20929, {"no_hang": 19, "quiescent_during_rpc": 15}),
    ("barrier-request", "post-fix"): (19987, {}),
    ("double-resume", "pre-fix"): (35765, {}),
    ("double-resume", "post-fix"): (87310, {"no_hang": 50}),
    ("double-resume", "no-local-wakeup"): (97367, {"no_hang": 50}),
    ("request-after-resume", "post-fix"): (237627, {"coordinator_idle_when_quiet": 52, "no_hang": 57}),
    ("aborted-stale-request", "post-fix"): (11976, {}),
    ("aborted-stale-request", "no-local-wakeup"): (11618, {"no_hang": 52}),
    ("fair-liveness", "pre-fix"): (33732, {"no_hang": 20}),
    ("fair-liveness", "post-fix"): (48918, {}),
    ("fair-liveness", "ignore-wave-while-paused"): (
        24490,
        {"no_hang": 13, "pause_returns": 13, "resume_eventually_serves": 34},
    ),
    ("fair-liveness", "no-local-wakeup"): (48918, {}),
    ("sync-interval-2", "pre-fix"): (46249, {"no_hang": 20}),
    ("sync-interval-2", "post-fix"): (60306, {}),
    ("sync-interval-32", "post-fix"): (467526, {}),
    ("seed-stats-task", "pre-fix"): (38672, {"quiescent_during_rpc": 18, "no_hang": 21}),
    ("seed-stats-task", "post-fix"): (60911, {}),
    ("seed-stats-task", "ignore-wave-while-paused"): (28295, {"no_hang": 14}),
    ("seed-stats-task", "no-local-wakeup"): (60911, {}),
    ("stale-client-view", "pre-fix"): (265121, {}),
    ("stale-client-view", "post-fix"): (946812, {}),
    ("stale-client-view", "no-local-wakeup"): (942892, {}),
    ("stale-view-across-resume", "pre-fix"): (802196, {"quiescent_during_rpc": 15, "no_hang": 21}),
    ("stale-view-across-resume", "post-fix"): (1083129, {}),
}


# Larger pins run in the slow tier; `check --all` (the main job, and CI's test of it) still checks their verdicts.
SLOW_STATES = 500_000


@pytest.mark.parametrize(
    ("name", "variant"),
    [pytest.param(*key, marks=pytest.mark.slow) if PINS[key][0] > SLOW_STATES else key for key in sorted(PINS)],
)
def test_pinned_instance(name: str, variant: str) -> None:
    instance = PROTOCOL.instance(variant, name)
    result = check(instance, engine="bfs")
    states, lengths = PINS[(name, variant)]
    assert result.verdict.value == instance.expected
    assert result.stats.states == states
    for prop, length in lengths.items():
        found = result.property_result(prop)
        assert found.verdict is Verdict.VIOLATED and found.path is not None and found.path.length == length


def test_barrier_request_pre_fix_hangs_in_the_barrier_against_a_dummy_forward() -> None:
    result = check(PROTOCOL.instance("pre-fix", "barrier-request"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.path is not None
    summary = blocked_summary(result.machine, hang.path)
    assert "barrier(engine_dp)" in summary and "forward(worker_dp)" in summary


def test_finding_double_resume_one_rank_alone_in_the_resume_barrier() -> None:
    result = check(PROTOCOL.instance("post-fix", "double-resume"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.path is not None
    actions = [step.action for step in hang.path.steps]
    assert (
        actions.count("client_resume_returned") == 1
        and "handle_resume" in actions[actions.index("client_resume_returned") :]
    )
    assert "resume_max(engine_dp)" in blocked_summary(result.machine, hang.path)


def test_finding_request_after_resume_gets_no_wave() -> None:
    result = check(PROTOCOL.instance("post-fix", "request-after-resume"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.path is not None
    actions = [step.action for step in hang.path.steps]
    assert actions[-4:] == ["client_add_request", "arrive_from_client", "handle_add", "step"]
    assert actions.index("coordinator_first_request") > actions.index("coordinator_report")  # FIRST_REQ after wave end


def test_mode_semantics_and_liveness_hold_post_fix_where_checked() -> None:
    result = check(PROTOCOL.instance("post-fix", "request-while-paused"), engine="bfs")
    names = {item.name: item.verdict.value for item in result.properties}
    assert names["pause_resolves"] == names["resume_serves"] == names["pause_mode_semantics"] == "holds"
    tight = check(PROTOCOL.instance("post-fix", "request-while-paused", overrides={"response_bound": 10}), engine="bfs")
    assert tight.property_result("pause_resolves").verdict is Verdict.VIOLATED  # the bound is not vacuous


def test_sync_interval_two_is_expressible() -> None:
    result = check(PROTOCOL.instance("post-fix", overrides={"sync_interval": 2}), engine="bfs")
    assert result.verdict is Verdict.HOLDS and result.stats.states is not None and result.stats.states > 48918


# ------------------------------------------------------------------ the vLLM functions of each step
def test_every_action_names_the_vllm_functions_it_mirrors() -> None:
    for name in ("seed", "modes", "barrier-request", "double-resume"):
        for variant in PROTOCOL.variants:
            machine = PROTOCOL.instance(variant.name, name).machine()
            unnamed = [
                action.name
                for action in machine.actions
                if not action.actor.startswith("group:") and not action.mirrors
            ]
            assert unnamed == [], (variant.name, name)
    pre, post = (PROTOCOL.instance(variant).machine() for variant in ("pre-fix", "post-fix"))
    assert "_pause_complete" in post.action_named("handle_pause").mirrors
    assert "_pause_complete" not in pre.action_named("handle_pause").mirrors
    assert (
        "sync_dp_state" in post.action_named("finish_sync").mirrors
        and "has_unfinished_dp" in pre.action_named("finish_sync").mirrors
    )


def test_counterexample_swimlanes_name_the_vllm_functions() -> None:
    from rich.console import Console

    from lockstep.cli.report import steps_json, swimlanes

    result = check(PROTOCOL.instance("pre-fix"), engine="bfs")
    shortest = result.counterexample
    assert shortest is not None and shortest.path is not None
    console = Console(width=400, record=True)
    console.print(swimlanes(result.machine, shortest.path, "counterexample"))
    text = console.export_text()
    assert "mirrors (source)" in text
    assert (
        "DPEngineCoreProc._handle_client_request(START_DP_WAVE)" in text
    )  # the stale wave, handled after pause returned
    assert "_handle_client_request(UTILITY) → EngineCoreProc.pause_scheduler (None at once if not has_work())" in text
    assert "_handle_client_request(UTILITY) → EngineCore.collective_rpc" in text
    steps = steps_json(result.machine, shortest.path)
    assert len(steps) == shortest.path.length == 17
    assert steps[-1]["action"] == "handle_collective_rpc" and "EngineCore.collective_rpc" in steps[-1]["mirrors"]


# ------------------------------------------------------------------ the mutant no-local-wakeup
def test_no_local_wakeup_leaves_the_sender_of_start_wave_idle_while_its_peer_steps() -> None:
    """P2(d): the stale-wave request is aborted before its engine steps; post-fix the engine's own
    engines_running = True makes it join the wave, the mutant stays idle (excluded from the
    START_DP_WAVE its start_wave caused) while rank 1 waits in a dummy forward."""
    result = check(PROTOCOL.instance("no-local-wakeup", "aborted-stale-request"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.path is not None
    actions = [(step.action, step.arguments.get("rank")) for step in hang.path.steps]
    assert ("handle_add", 0) in actions and ("coordinator_report", 0) in actions and ("handle_abort", 0) in actions
    assert actions.index(("handle_add", 0)) < actions.index(("handle_abort", 0))
    assert actions[-1] == ("step", 0)  # the idle `continue`: no forward
    assert blocked_summary(result.machine, hang.path) == "rank 1 in forward(worker_dp)#2"


# ------------------------------------------------------------------ fair-cycle liveness (L1, L2)
def test_fair_liveness_holds_post_fix_and_the_ignoring_mutant_never_answers_pause() -> None:
    post = check(PROTOCOL.instance("post-fix", "fair-liveness"), engine="bfs")
    assert {name: post.property_result(name).verdict for name in ("pause_returns", "resume_eventually_serves")} == {
        "pause_returns": Verdict.HOLDS,
        "resume_eventually_serves": Verdict.HOLDS,
    }
    mutant = check(PROTOCOL.instance("ignore-wave-while-paused", "fair-liveness"), engine="bfs")
    l1 = mutant.property_result("pause_returns")
    assert l1.verdict is Verdict.VIOLATED and l1.path is not None
    assert l1.path.loop_start == l1.path.length == 13  # a lasso whose cycle is the stop: rank 0 blocked for ever
    assert "the run stops" in l1.detail
    actions = [step.action for step in l1.path.steps]
    assert actions.count("client_pause") == 2 and actions[-1] == "handle_start_wave"
    assert blocked_summary(mutant.machine, l1.path) == "rank 0 in forward(worker_dp)#1"
    # fairness covers message delivery and stepping (engines, coordinator, groups), never the client
    fair = PROTOCOL.instance("post-fix", "fair-liveness").machine().finish().property_named("pause_returns").fair or ()
    assert {"arrive_from_coordinator", "step", "coordinator_report", "worker_dp.complete"} <= set(fair)
    assert not any(name.startswith("client") for name in fair)


# ------------------------------------------------------------------ the client's stats task (issue 3)
def test_stats_task_parameters_default_to_the_atomic_client() -> None:
    """stale_publications = lazy_first_request = 0 is today's client: the same variables, actions and states."""
    plain = PROTOCOL.instance("post-fix").machine()
    explicit = PROTOCOL.instance("post-fix", overrides={"stale_publications": 0, "lazy_first_request": 0})
    machine = explicit.machine()
    assert set(machine.variables) == set(plain.variables)
    assert [action.name for action in machine.actions] == [action.name for action in plain.actions]
    assert check(explicit, engine="bfs").stats.states == 48918
    assert "channel.publication" not in machine.variables and "channel.first_request_inproc" not in machine.variables


def test_stats_task_actions_mirror_vllm_and_are_enabled() -> None:
    machine = PROTOCOL.instance("post-fix", "stale-client-view").machine()
    assert "stats_update_task" in machine.action_named("client_read_stale_publication").mirrors
    assert "FIRST_REQ" in machine.action_named("client_forward_first_request").mirrors


def test_lazy_first_request_queues_one_first_req_per_request_added_before_the_stats_task_runs() -> None:
    """add_request_async does not set engines_running (core_client.py): two adds before the stats task
    runs queue two FIRST_REQs; the stats task forwards each with its view's wave at that time."""
    instance = PROTOCOL.instance("post-fix", "stale-client-view")
    machine = PROTOCOL.build(instance.variant, instance.parameters)
    queued = Term(Variable("channel.first_request_inproc", machine.variables["channel.first_request_inproc"].sort))
    machine.always("at_most_one_queued", queued <= 1, "witness: two FIRST_REQs queued at once")
    result = check(machine, engine="bfs", properties=["at_most_one_queued"])
    witness = result.property_result("at_most_one_queued")
    assert witness.verdict is Verdict.VIOLATED and witness.path is not None
    assert [step.action for step in witness.path.steps][-2:] == ["client_add_request", "client_add_request"]


def test_stale_publications_are_applied_where_the_coordinator_moves_before_a_request() -> None:
    """With one superseded publication in flight, the stats task applies it in some run (coverage), and the
    instance still holds post-fix; the seed's single request never sees one."""
    overrides = {"stale_publications": 1, "lazy_first_request": 1}
    result = check(PROTOCOL.instance("post-fix", "aborted-stale-request", overrides=overrides), engine="bfs")
    assert result.verdict is Verdict.HOLDS and result.stats.states == 28933
    assert not [warning for warning in result.warnings if "client_read" in warning or "client_forward" in warning]
    seed = check(PROTOCOL.instance("post-fix", "seed-stats-task"), engine="bfs")
    assert seed.warnings == ["action client_read_stale_publication was never enabled in the explored states"]


# ------------------------------------------------------------------ later releases (releases.py)
@pytest.mark.slow
def test_v0_33_0_drain_returns_while_a_kept_request_is_unfinished() -> None:
    result = check(PROTOCOL.instance("v0.33.0", "drain-after-resume"), engine="bfs")
    assert result.verdict is Verdict.VIOLATED
    broken = {name for name, verdict in verdicts(result).items() if verdict == "violated"}
    assert broken == {"drained_when_idle", "drained_while_adding", "wave_seen_before_complete"}
    drain = result.property_result("drained_when_idle")
    assert drain.path is not None and drain.path.length == 46
    actions = [step.action for step in drain.path.steps]
    # no FIRST_REQ: the engine that takes the request wakes itself; resume's barrier restarts the kept request
    assert "coordinator_first_request" not in actions and "handle_add_request" in actions
    assert actions[-3:] == ["finish_resume", "finish_resume", "client_resume_returned"]


@pytest.mark.slow
def test_v0_25_0_pause_returns_while_the_device_still_runs_a_forward() -> None:
    result = check(PROTOCOL.instance("v0.25.0", "request-while-paused"), engine="bfs")
    device = result.property_result("device_idle_after_pause")
    assert device.verdict is Verdict.VIOLATED and device.path is not None
    actions = [step.action for step in device.path.steps]
    assert "client_pause_returned" == actions[-1] and "device_idle" not in actions


@pytest.mark.slow
def test_v0_33_0_sleep_synchronises_the_device_and_wakes_up() -> None:
    result = check(PROTOCOL.instance("v0.33.0", "sleep"), engine="bfs")
    found = verdicts(result)
    assert {name for name, verdict in found.items() if verdict == "violated"} == {
        "drained_while_adding",
        "wave_seen_before_complete",
    }
    assert found["slept"] == "holds" and found["awake_after_wake_up"] == "holds"
    assert found["device_idle_after_pause"] == "holds"


def test_v0_33_0_rejects_requests_while_paused_until_resume() -> None:
    result = check(PROTOCOL.instance("v0.33.0", "reject-while-paused"), engine="bfs")
    assert result.verdict is Verdict.HOLDS
    found = verdicts(result)
    assert found["request_rejected"] == "holds" and found["rejection_cleared_after_resume"] == "holds"


@pytest.mark.slow
def test_v0_33_0_syncs_at_the_first_step_of_a_wave() -> None:
    # dp_sync_interval 2 syncs at step 1 too, so the drain counterexample is no longer than at interval 1
    at_two = check(PROTOCOL.instance("v0.33.0", "sync-interval-2"), engine="bfs").property_result("drained_when_idle")
    assert at_two.verdict is Verdict.VIOLATED and at_two.path is not None and at_two.path.length == 46


def test_v0_21_0_variants_have_none_of_the_later_release_state() -> None:
    names = set(PROTOCOL.instance("post-fix").machine().variables)
    assert not names & {"executor_sleep", "device_busy", "was_running", "reject_new_requests", "client.rejected"}
    later = set(PROTOCOL.instance("v0.33.0").machine().variables)
    assert {"executor_sleep", "device_busy", "was_running", "reject_new_requests", "client.rejected"} <= later


def test_v0_29_0_first_request_no_longer_marks_the_coordinator_running() -> None:
    # coordinator.py 0.29.0: FIRST_REQ sends START_DP_WAVE but leaves engines_running to the engines' reports
    def updated(variant: str) -> set[str]:
        action = PROTOCOL.instance(variant).machine().action_named("coordinator_first_request")
        return {name for name, _ in action.updates}

    assert "coordinator.engines_running" in updated("v0.25.0")
    assert "coordinator.engines_running" not in updated("v0.29.0")
    assert "channel.coordinator" in updated("v0.29.0")


def test_v0_25_0_sleep_replies_only_with_the_device_idle() -> None:
    # the sleep's pause callback runs model_executor.sleep: Worker.sleep synchronises the device before replying
    result = check(PROTOCOL.instance("v0.25.0", "sleep"), engine="bfs-vec")
    found = verdicts(result)
    assert found["device_idle_after_pause"] == "holds" and found["slept"] == "holds"
    assert found["awake_after_wake_up"] == "holds"
    names = {action.name for action in PROTOCOL.instance("v0.25.0", "sleep").machine().actions}
    assert {"fire_idle_callbacks", "synchronize_device"} <= names and "notify_idle" not in names
    # a plain pause in v0.25.0 still returns with the device busy (pause-device-busy)
    assert "notify_idle" in {action.name for action in PROTOCOL.instance("v0.25.0").machine().actions}


@pytest.mark.slow
def test_wave_seen_before_complete_per_release() -> None:
    lengths = {}
    for variant in ("v0.25.0", "v0.29.0", "v0.33.0"):
        seen = check(PROTOCOL.instance(variant, "wave-unseen"), engine="bfs-vec").property_result(
            "wave_seen_before_complete"
        )
        assert seen.verdict is Verdict.VIOLATED and seen.path is not None
        actions = [step.action for step in seen.path.steps]
        assert actions[-1] == "finish_sync"
        lengths[variant] = (seen.path.length, actions)
    # v0.25.0: the FIRST_REQ never reaches the coordinator before the wave ends
    assert lengths["v0.25.0"][0] == 24 and "coordinator_first_request" not in lengths["v0.25.0"][1]
    # v0.33.0: the start_wave of the rank that took the request is still on its way
    assert lengths["v0.33.0"][0] == 24 and "coordinator_report" not in lengths["v0.33.0"][1]
    # v0.29.0 at sync_interval 1: the wave ends at its first step, a sync the real 32-step cadence never has there
    assert lengths["v0.29.0"][0] == 13 and "coordinator_first_request" in lengths["v0.29.0"][1]
