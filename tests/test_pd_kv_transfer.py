"""pd-kv-transfer: the P/D KV hand-off model holds on v0.33.0's seed, finds v0.29.0's scheduler
assert and the fault instances' violations with short counterexamples, and its engines agree."""

from __future__ import annotations

import pytest

from lockstep.checkers import Verdict, check
from lockstep.models.pd_kv_transfer import POST_FIX, PRE_FIX, PROTOCOL

SAFETY = ("no_foreign_read", "no_free_under_transfer", "no_engine_assert")


def test_post_fix_seed_holds_under_bfs() -> None:
    result = check(PROTOCOL.instance(POST_FIX, "seed"), engine="bfs")
    assert result.verdict is Verdict.HOLDS
    assert result.stats.states == 82
    assert all(item.verdict is Verdict.HOLDS for item in result.properties)
    witness = result.property_result("transfer_completes")
    assert witness.path is not None and "decode_read_done" in [step.action for step in witness.path.steps]


def test_pre_fix_failed_cleanup_trips_the_scheduler_assert() -> None:
    result = check(PROTOCOL.instance(PRE_FIX, "abort-failed-cleanup"), engine="bfs")
    violation = result.property_result("no_engine_assert")
    assert violation.verdict is Verdict.VIOLATED and violation.path is not None
    steps = [(step.action, dict(step.arguments)) for step in violation.path.steps]
    assert [action for action, _ in steps] == [
        "prefill_schedule",
        "prefill_finish",
        "decode_admit",
        "decode_abort",
        "decode_notify_only",
        "decode_finished_recving",
    ]
    assert not steps[4][1]["ok"]  # the notify-only read failed
    # the other properties hold: the bug is the assert, not a leak or a corruption
    assert all(item.verdict is not Verdict.VIOLATED for item in result.properties if item.name != "no_engine_assert")


def test_post_fix_failed_cleanup_holds_with_the_lease() -> None:
    result = check(PROTOCOL.instance(POST_FIX, "abort-failed-cleanup"), engine="bfs")
    assert result.verdict is Verdict.HOLDS
    assert result.property_result("abort_recovered").verdict is Verdict.HOLDS


@pytest.mark.parametrize(
    ("instance", "name", "length"),
    [("lost-notification", "no_block_leak", 9), ("untimely-lease", "no_foreign_read", 6)],
)
def test_fault_instances_find_their_violation(instance: str, name: str, length: int) -> None:
    result = check(PROTOCOL.instance(POST_FIX, instance), engine="bfs")
    item = result.property_result(name)
    assert item.verdict is Verdict.VIOLATED and item.path is not None and item.path.length == length


def test_a_lost_notification_is_recovered_by_a_timely_lease() -> None:
    assert check(PROTOCOL.instance(POST_FIX, "lost-notification-lease"), engine="bfs").verdict is Verdict.HOLDS


@pytest.mark.parametrize("variant", [PRE_FIX, POST_FIX])
def test_bfs_vec_agrees_with_bfs_on_the_seed(variant: str) -> None:
    instance = PROTOCOL.instance(variant, "seed")
    reference, vectorised = check(instance, engine="bfs"), check(instance, engine="bfs-vec")
    assert (vectorised.stats.states, vectorised.stats.transitions) == (
        reference.stats.states,
        reference.stats.transitions,
    )
    assert {item.name: item.verdict for item in vectorised.properties} == {
        item.name: item.verdict for item in reference.properties
    }


def test_bmc_agrees_with_bfs_on_the_seed() -> None:
    instance = PROTOCOL.instance(POST_FIX, "seed")
    result = check(instance, engine="bmc", depth=12, properties=list(SAFETY))
    assert all(result.property_result(name).verdict is Verdict.HOLDS_WITHIN_BOUND for name in SAFETY)


def test_bmc_finds_the_pre_fix_assert_at_the_bfs_length() -> None:
    instance = PROTOCOL.instance(PRE_FIX, "abort-failed-cleanup")
    at = check(instance, engine="bmc", depth=6, properties=["no_engine_assert"]).property_result("no_engine_assert")
    assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == 6
    before = check(instance, engine="bmc", depth=5, properties=["no_engine_assert"]).property_result("no_engine_assert")
    assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


def test_every_action_names_the_vllm_source_it_mirrors() -> None:
    machine = PROTOCOL.instance(PRE_FIX, "abort-failed-cleanup").machine()
    assert all(action.mirrors for action in machine.actions)
