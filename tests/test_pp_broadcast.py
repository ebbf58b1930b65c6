"""Golden pins of the pp-broadcast model (vLLM PR #38726): state counts, verdicts and counterexample
lengths per variant × instance; the shapes of the stuck pipeline, the skip-disagree hang and the
stale mapping; explicit vs BMC at the shortest length; three ranks. The releases through v0.33.0
(issue 33): the release table, the features (sync scheduling, speculative decoding, the V2 runner,
structured output), the findings' counterexamples, and the ledger docs/models/pp-broadcast.md checked
against the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import check_golden

from lockstep.changes import mirrored_names
from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.models.pp_broadcast import engine as pp_engine
from lockstep.models.pp_broadcast import worker as pp_worker
from lockstep.models.pp_broadcast.releases import BISECTION
from lockstep.spec.protocol import UsageError
from lockstep.spec.semantics import unpack
from lockstep.spec.terms import lift

PROTOCOL = get_protocol("pp-broadcast")
WITNESS = "L2_pipelined_prefill"
BROADCAST = 4  # Phase.BROADCAST
NEVER_COMPLETES = ["action pp.complete was never enabled in the explored states"]

# (variant, instance): (states, transitions, {violated property: shortest length or None}, L2 witness length)
GOLDEN: dict[tuple[str, str], tuple[int, int, dict[str, int | None], int | None]] = {
    ("pre-fix", "seed"): (1289, 3036, {"no_false_dependency": 10, WITNESS: None}, None),
    ("post-fix", "seed"): (1024, 2477, {}, 12),
    ("skip-disagree", "seed"): (956, 2350, {"S1_broadcast_matching": 10, "no_hang": 28, "no_deadlock": 28}, 12),
    ("skip-whole-receive", "seed"): (1024, 2477, {}, 12),
    ("pre-fix", "chunks-then-decode"): (4117, 9932, {"no_false_dependency": 10, WITNESS: None}, None),
    ("post-fix", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("skip-disagree", "chunks-then-decode"): (
        3139,
        7785,
        {
            "S1_broadcast_matching": 23,
            "S3_no_stale_read": 31,
            "reads_latest_token": 31,
            "no_hang": 49,
            "no_deadlock": 49,
        },
        12,
    ),
    ("skip-whole-receive", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("pre-fix", "decode-gap"): (23155, 56086, {"no_false_dependency": 10, WITNESS: None}, None),
    ("post-fix", "decode-gap"): (22112, 54011, {}, 12),
    ("skip-disagree", "decode-gap"): (
        5205,
        12421,
        {"S1_broadcast_matching": 5, "S3_no_stale_read": 4, "reads_latest_token": 4, "no_hang": 21, "no_deadlock": 21},
        12,
    ),
    ("skip-whole-receive", "decode-gap"): (22112, 54011, {"S3_no_stale_read": 22}, 12),
    ("post-fix", "failed-forward"): (2334, 5947, {"receive_only_on_non_last": 4}, 12),
    ("pre-fix", "failed-forward"): (
        2631,
        6571,
        {"no_false_dependency": 10, "receive_only_on_non_last": 4, WITNESS: None},
        None,
    ),
    ("skip-disagree", "failed-forward"): (
        2204,
        5697,
        {"S1_broadcast_matching": 10, "no_deadlock": 28, "no_hang": 28, "receive_only_on_non_last": 4},
        12,
    ),
    ("skip-whole-receive", "failed-forward"): (2334, 5947, {"receive_only_on_non_last": 4}, 12),
    ("v0.21.0", "seed"): (1024, 2477, {}, 12),
    ("v0.21.0", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("v0.21.0", "decode-gap"): (22112, 54011, {}, 12),
    ("v0.21.0", "failed-forward"): (2334, 5947, {}, 12),
    ("v0.22.0", "seed"): (1024, 2477, {}, 12),
    ("v0.22.0", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("v0.22.0", "decode-gap"): (22112, 54011, {}, 12),
    ("v0.22.0", "failed-forward"): (2334, 5947, {}, 12),
    ("pre-fix", "empty-step"): (10420, 25425, {"no_false_dependency": 10, WITNESS: None}, None),
    ("post-fix", "empty-step"): (9844, 24309, {}, 12),
    ("skip-disagree", "empty-step"): (
        6954,
        17240,
        {
            "S1_broadcast_matching": 10,
            "S3_no_stale_read": 17,
            "reads_latest_token": 17,
            "no_hang": 32,
            "no_deadlock": 32,
        },
        12,
    ),
    ("skip-whole-receive", "empty-step"): (9844, 24309, {}, 12),
    ("v0.21.0", "empty-step"): (9844, 24309, {}, 12),
    ("v0.22.0", "empty-step"): (9844, 24309, {}, 12),
    # v0.23.0 and v0.30.0 keep v0.22.0's V1 path; from v0.31.0 the V1 runner runs PP synchronously
    ("v0.23.0", "seed"): (1024, 2477, {}, 12),
    ("v0.30.0", "seed"): (1024, 2477, {}, 12),
    ("v0.31.0", "seed"): (940, 2326, {}, 12),
    ("v0.33.0", "seed"): (940, 2326, {}, 12),
    ("v0.23.0", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("v0.30.0", "chunks-then-decode"): (3650, 9017, {}, 12),
    ("v0.31.0", "chunks-then-decode"): (2187, 5445, {}, 12),
    ("v0.33.0", "chunks-then-decode"): (2187, 5445, {}, 12),
    ("v0.23.0", "decode-gap"): (22112, 54011, {}, 12),
    ("v0.30.0", "decode-gap"): (22112, 54011, {}, 12),
    ("v0.31.0", "decode-gap"): (24009, 60079, {}, 12),
    ("v0.33.0", "decode-gap"): (24009, 60079, {}, 12),
    ("v0.23.0", "failed-forward"): (2334, 5947, {"failure_reaches_engine": 4}, 12),
    ("v0.30.0", "failed-forward"): (2334, 5947, {"failure_reaches_engine": 4}, 12),
    ("v0.31.0", "failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("v0.33.0", "failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("v0.23.0", "empty-step"): (9844, 24309, {}, 12),
    ("v0.30.0", "empty-step"): (9844, 24309, {}, 12),
    ("v0.31.0", "empty-step"): (4806, 12128, {}, 12),
    ("v0.33.0", "empty-step"): (4806, 12128, {}, 12),
}

# The features' instances (release_verdicts.RELEASE_INSTANCES), checked with the vectorised engine (the same
# counts and lengths as bfs; some have millions of states).
FEATURE_GOLDEN: dict[tuple[str, str], tuple[int, int, dict[str, int | None], int | None]] = {
    ("pre-fix", "spec-decode"): (
        2696,
        6526,
        {"no_false_dependency": 10, "sampled_one_column": 27, "draft_inputs_known": 23, "L2_pipelined_prefill": None},
        None,
    ),
    ("post-fix", "spec-decode"): (2517, 6191, {"sampled_one_column": 22, "draft_inputs_known": 18}, 12),
    ("v0.21.0", "spec-decode"): (2517, 6191, {"sampled_one_column": 22, "draft_inputs_known": 18}, 12),
    ("v0.22.0", "spec-decode"): (2517, 6191, {"sampled_one_column": 22, "draft_inputs_known": 18}, 12),
    ("v0.23.0", "spec-decode"): (2517, 6191, {"sampled_one_column": 22, "draft_inputs_known": 18}, 12),
    ("v0.30.0", "spec-decode"): (2517, 6191, {"sampled_one_column": 22, "draft_inputs_known": 18}, 12),
    ("v0.31.0", "spec-decode"): (1061, 2577, {}, 12),
    ("v0.33.0", "spec-decode"): (1061, 2577, {}, 12),
    ("pre-fix", "structured-output"): (
        102791,
        374943,
        {"no_false_dependency": 10, "grammar_bitmask_current": 30, "L2_pipelined_prefill": None},
        None,
    ),
    ("post-fix", "structured-output"): (107831, 397037, {"grammar_bitmask_current": 21}, 12),
    ("v0.21.0", "structured-output"): (107831, 397037, {"grammar_bitmask_current": 21}, 12),
    ("v0.22.0", "structured-output"): (107831, 397037, {"grammar_bitmask_current": 21}, 12),
    ("v0.23.0", "structured-output"): (107831, 397037, {"grammar_bitmask_current": 21}, 12),
    ("v0.30.0", "structured-output"): (107831, 397037, {"grammar_bitmask_current": 21}, 12),
    ("v0.31.0", "structured-output"): (19600, 68251, {}, 12),
    ("v0.33.0", "structured-output"): (19600, 68251, {}, 12),
    ("pre-fix", "sync"): (940, 2326, {}, 12),
    ("post-fix", "sync"): (940, 2326, {}, 12),
    ("v0.21.0", "sync"): (940, 2326, {}, 12),
    ("v0.22.0", "sync"): (940, 2326, {}, 12),
    ("v0.23.0", "sync"): (940, 2326, {}, 12),
    ("v0.30.0", "sync"): (940, 2326, {}, 12),
    ("v0.31.0", "sync"): (940, 2326, {}, 12),
    ("v0.33.0", "sync"): (940, 2326, {}, 12),
    ("pre-fix", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("post-fix", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.21.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.22.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.23.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.30.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.31.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("v0.33.0", "sync-decode-gap"): (24009, 60079, {}, 12),
    ("pre-fix", "sync-failed-forward"): (2176, 5651, {}, 12),
    ("post-fix", "sync-failed-forward"): (2176, 5651, {}, 12),
    ("v0.21.0", "sync-failed-forward"): (2176, 5651, {}, 12),
    ("v0.22.0", "sync-failed-forward"): (2176, 5651, {}, 12),
    ("v0.23.0", "sync-failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("v0.30.0", "sync-failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("v0.31.0", "sync-failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("v0.33.0", "sync-failed-forward"): (2176, 5651, {"failure_reaches_engine": 4}, 12),
    ("pre-fix", "sync-structured-output"): (19600, 68251, {}, 12),
    ("post-fix", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.21.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.22.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.23.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.30.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.31.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("v0.33.0", "sync-structured-output"): (19600, 68251, {}, 12),
    ("pre-fix", "v2-seed"): (1289, 3036, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("post-fix", "v2-seed"): (1289, 3036, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.21.0", "v2-seed"): (1289, 3036, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.22.0", "v2-seed"): (1289, 3036, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.23.0", "v2-seed"): (5570, 18185, {}, 12),
    ("v0.30.0", "v2-seed"): (7270, 20784, {}, 12),
    ("v0.31.0", "v2-seed"): (5570, 18185, {}, 12),
    ("v0.33.0", "v2-seed"): (5570, 18185, {}, 12),
    ("pre-fix", "v2-chunks-then-decode"): (2703, 6484, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("post-fix", "v2-chunks-then-decode"): (
        2703,
        6484,
        {"no_false_dependency": 10, "L2_pipelined_prefill": None},
        None,
    ),
    ("v0.21.0", "v2-chunks-then-decode"): (2703, 6484, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.22.0", "v2-chunks-then-decode"): (2703, 6484, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.23.0", "v2-chunks-then-decode"): (114117, 388997, {}, 12),
    ("v0.30.0", "v2-chunks-then-decode"): (114117, 388997, {}, 12),
    ("v0.31.0", "v2-chunks-then-decode"): (114117, 388997, {}, 12),
    ("v0.33.0", "v2-chunks-then-decode"): (114117, 388997, {}, 12),
    ("pre-fix", "v2-decode-gap"): (16085, 38846, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("post-fix", "v2-decode-gap"): (16085, 38846, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.21.0", "v2-decode-gap"): (16085, 38846, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.22.0", "v2-decode-gap"): (16085, 38846, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.23.0", "v2-decode-gap"): (1931699, 7047558, {}, 12),
    ("v0.30.0", "v2-decode-gap"): (1931699, 7047558, {}, 12),
    ("v0.31.0", "v2-decode-gap"): (1931699, 7047558, {}, 12),
    ("v0.33.0", "v2-decode-gap"): (1931699, 7047558, {}, 12),
    ("pre-fix", "v2-failed-forward"): (2631, 6571, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("post-fix", "v2-failed-forward"): (2631, 6571, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.21.0", "v2-failed-forward"): (2631, 6571, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.22.0", "v2-failed-forward"): (2631, 6571, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.23.0", "v2-failed-forward"): (13628, 45947, {}, 12),
    ("v0.30.0", "v2-failed-forward"): (17765, 53948, {}, 12),
    ("v0.31.0", "v2-failed-forward"): (13628, 45947, {}, 12),
    ("v0.33.0", "v2-failed-forward"): (13628, 45947, {}, 12),
    ("pre-fix", "v2-structured-output"): (2205, 5059, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("post-fix", "v2-structured-output"): (2205, 5059, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.21.0", "v2-structured-output"): (2205, 5059, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.22.0", "v2-structured-output"): (2205, 5059, {"no_false_dependency": 10, "L2_pipelined_prefill": None}, None),
    ("v0.23.0", "v2-structured-output"): (128474, 428470, {}, 12),
    ("v0.30.0", "v2-structured-output"): (128474, 428470, {}, 12),
    ("v0.31.0", "v2-structured-output"): (128474, 428470, {}, 12),
    ("v0.33.0", "v2-structured-output"): (128474, 428470, {}, 12),
    ("pre-fix", "v2-spec-decode"): (
        896,
        2053,
        {
            "no_false_dependency": 10,
            "L2_pipelined_prefill": None,
            "no_collective_mismatch": 15,
            "no_hang": 20,
            "no_deadlock": 20,
        },
        None,
    ),
    ("post-fix", "v2-spec-decode"): (
        896,
        2053,
        {
            "no_false_dependency": 10,
            "L2_pipelined_prefill": None,
            "no_collective_mismatch": 15,
            "no_hang": 20,
            "no_deadlock": 20,
        },
        None,
    ),
    ("v0.21.0", "v2-spec-decode"): (
        896,
        2053,
        {
            "no_false_dependency": 10,
            "L2_pipelined_prefill": None,
            "no_collective_mismatch": 15,
            "no_hang": 20,
            "no_deadlock": 20,
        },
        None,
    ),
    ("v0.22.0", "v2-spec-decode"): (
        896,
        2053,
        {
            "no_false_dependency": 10,
            "L2_pipelined_prefill": None,
            "no_collective_mismatch": 15,
            "no_hang": 20,
            "no_deadlock": 20,
        },
        None,
    ),
    ("v0.23.0", "v2-spec-decode"): (
        97963,
        324480,
        {"draft_inputs_known": 20, "no_collective_mismatch": 29, "no_hang": 44, "no_deadlock": 44},
        12,
    ),
    ("v0.30.0", "v2-spec-decode"): (114117, 388997, {}, 12),
    ("v0.31.0", "v2-spec-decode"): (114117, 388997, {}, 12),
    ("v0.33.0", "v2-spec-decode"): (114117, 388997, {}, 12),
}


@pytest.mark.parametrize(("variant", "instance"), list(GOLDEN))
def test_golden_states_verdicts_and_lengths(variant: str, instance: str) -> None:
    result = check_golden(PROTOCOL, variant, instance, GOLDEN[(variant, instance)], WITNESS)
    # The skip-disagree mutant never completes a broadcast: the first one the last rank posts hangs. From v0.31.0
    # the V1 runner runs PP without async scheduling: nothing is broadcast.
    assert result.warnings == (NEVER_COMPLETES if variant in ("skip-disagree", "v0.31.0", "v0.33.0") else [])


@pytest.mark.parametrize(("variant", "instance"), list(FEATURE_GOLDEN))
def test_feature_golden_states_verdicts_and_lengths(variant: str, instance: str) -> None:
    states, transitions, violated, witness_length = FEATURE_GOLDEN[(variant, instance)]
    pinned = PROTOCOL.instance(variant, instance)
    result = check(pinned, engine="auto")
    assert result.verdict.value == pinned.expected
    assert (result.stats.states, result.stats.transitions) == (states, transitions)
    found = {
        item.name: (item.path.length if item.path else None)
        for item in result.properties
        if item.verdict is Verdict.VIOLATED
    }
    assert found == violated
    witness = result.property_result(WITNESS)
    assert (witness.path.length if witness.verdict is Verdict.HOLDS and witness.path else None) == witness_length


def test_every_variant_and_instance_is_pinned() -> None:
    """The shared instances pin every variant (from v0.31.0 their sync path); every pin has its golden figures."""
    shared = {instance.name for instance in PROTOCOL.instances[:5]}
    assert {(variant.name, name) for variant in PROTOCOL.variants for name in shared} == set(GOLDEN)
    pinned = {(variant, instance.name) for instance in PROTOCOL.instances for variant in instance.expected}
    assert pinned == set(GOLDEN) | set(FEATURE_GOLDEN)


def path_of(
    variant: str, name: str, instance: str = "seed"
) -> tuple[object, list[tuple[str, dict[str, object]]], dict[str, object]]:
    result = check(PROTOCOL.instance(variant, instance), engine="bfs")
    path = result.property_result(name).path
    assert path is not None
    return (
        result.machine,
        [(step.action, step.arguments) for step in path.steps],
        unpack(result.machine, path.final_state),
    )


def test_pre_fix_counterexample_is_the_stuck_pipeline() -> None:
    """Rank 0 ran forward(1), sent it, and its stream now waits in the broadcast of step 1, whose only
    row is a non-final chunk, while the last rank has not even finished that step's forward."""
    _, actions, final = path_of("pre-fix", "no_false_dependency")
    names = [name for name, _ in actions]
    assert names[0] == "schedule" and actions[-1] == ("gpu_post", {"rank": 0})
    assert ("sample_tokens", {"rank": 0}) in actions and ("sample_tokens", {"rank": 1}) not in actions
    assert ("gpu_compute", {"rank": 1}) not in actions  # the last rank has not run forward(1)
    assert ("pp.transfer", {"sender": 0, "receiver": 1}) in actions  # the hidden states went out first
    assert final["gpu.step"] == (0, 0) and final["gpu.phase"][0] == BROADCAST  # type: ignore[index]
    assert final["gpu.posted"][0] is True and final["scheduler.steps"][0] == (1,)  # type: ignore[index]  # chunk 1 of 2
    assert final["rank.broadcast_issued"][0][0] is True  # type: ignore[index]


def test_post_fix_witness_runs_forward_two_while_the_last_rank_is_in_step_one() -> None:
    _, actions, final = path_of("post-fix", WITNESS)
    assert [name for name, _ in actions].count("schedule") == 2 and actions[-1] == ("gpu_compute", {"rank": 0})
    assert final["gpu.step"][0] == 1 and final["gpu.step"][1] == 0  # type: ignore[index]
    assert final["rank.broadcast_issued"][0][0] is False  # type: ignore[index]  # the skip


def test_pre_fix_has_no_pipelined_witness() -> None:
    result = check(PROTOCOL.instance("pre-fix"), engine="bfs")
    replayed = result.property_result(WITNESS)
    assert replayed.verdict is Verdict.VIOLATED and replayed.path is None
    assert replayed.detail == "no reachable state satisfies it"


def test_skip_disagree_leaves_the_last_rank_in_the_broadcast_of_the_final_chunk() -> None:
    result = check(PROTOCOL.instance("skip-disagree"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.detail == "no action is enabled" and hang.path is not None
    assert blocked_summary(result.machine, hang.path).startswith("rank 1 in broadcast(pp)")
    final = unpack(result.machine, hang.path.final_state)
    assert final["rank.broadcast_issued"] == ((False, False), (False, True))  # step 2: the final chunk
    assert result.property_result("no_collective_mismatch").verdict is Verdict.HOLDS  # a wait, not a mismatch
    _, actions, _ = path_of("skip-disagree", "S1_broadcast_matching")
    assert actions[-1] == ("sample_tokens", {"rank": 1})


def test_skip_whole_receive_keeps_the_mapping_of_the_step_before() -> None:
    """Request 1 decodes at step 1, is left out of the all-chunked step 2 and decodes again at 3:
    rank 0 still maps it to its row of step 1. The id it scatters is still request 1's latest token
    (reads_latest_token holds) and no length differs (S4 holds): see the model's docstring."""
    machine, actions, final = path_of("skip-whole-receive", "S3_no_stale_read", "decode-gap")
    assert ("schedule", {"leave_out": 1}) in actions and actions[-1][0] == "schedule"
    assert final["scheduler.steps"][:3] == ((1, 1), (2, 0), (3, 2))  # type: ignore[index]
    assert final["rank.prev_req_id_to_index"][0] == (False, True) and final["rank.prev_map_step"][0] == 1  # type: ignore[index]
    assert final["rank.rpcs"][0] == 4  # type: ignore[index]  # sample(2) done, exec(3) next
    result = check(PROTOCOL.instance("skip-whole-receive", "decode-gap"), engine="bfs")
    assert result.property_result("reads_latest_token").verdict is Verdict.HOLDS
    assert result.property_result("S4_placeholder_agreement").verdict is Verdict.HOLDS


EMPTY_STEP_ACTIONS = {"schedule_empty", "execute_model_empty", "gpu_pass"}


def test_empty_steps_add_their_actions_and_properties_only_where_enabled() -> None:
    """Without ``empty_steps`` a machine keeps exactly its actions and properties (and the runtime's
    vocabulary); with it, an empty step is execute_model alone on every rank and the stream passes it."""
    seed = PROTOCOL.instance("post-fix", "seed").machine()
    empty = PROTOCOL.instance("post-fix", "empty-step").machine()
    assert not EMPTY_STEP_ACTIONS & {action.name for action in seed.actions}
    assert EMPTY_STEP_ACTIONS <= {action.name for action in empty.actions}
    added = {item.name for item in empty.properties} - {item.name for item in seed.properties}
    assert added == {"no_sample_on_empty_step", "no_pp_op_on_empty_step"}
    assert "scheduler.empty_steps_left" in empty.variables and "scheduler.empty_steps_left" not in seed.variables


@pytest.mark.parametrize("variant", ["pre-fix", "post-fix", "v0.21.0"])
def test_a_decode_after_an_empty_step_reads_the_mapping_of_the_step_before_it(variant: str) -> None:
    """A one-chunk prompt, one empty step anywhere, one decode: the decode after the empty step reads the
    mapping and tokens of the last sampled step (S3 over sampled steps and reads_latest_token hold), and
    no rank samples or posts a PP op for the empty step, in every release."""
    result = check(PROTOCOL.instance(variant, overrides={"chunks": 1, "decodes": 1, "empty_steps": 1}), engine="bfs")
    assert (result.stats.states, result.stats.transitions) == (4848, 11756)  # no chunked step: no skip to differ
    for name in ("S3_no_stale_read", "reads_latest_token", "no_sample_on_empty_step", "no_pp_op_on_empty_step"):
        assert result.property_result(name).verdict is Verdict.HOLDS, name


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", "pp-broadcast", "--variant", "pre-fix"]) == 1
    assert main(["check", "pp-broadcast", "--variant", "post-fix"]) == 0
    assert main(["check", "pp-broadcast", "--variant", "post-fix", "--ranks", "3"]) == 0
    capsys.readouterr()


def test_three_ranks() -> None:
    post = check(PROTOCOL.instance("post-fix", ranks=3), engine="bfs")
    assert post.verdict is Verdict.HOLDS and (post.stats.states, post.stats.transitions) == (20094, 69742)
    assert post.property_result(WITNESS).path is not None and post.property_result(WITNESS).path.length == 12  # type: ignore[union-attr]
    pre = check(PROTOCOL.instance("pre-fix", ranks=3), engine="bfs")
    assert pre.property_result("no_false_dependency").path is not None
    assert pre.property_result("no_false_dependency").path.length == 10  # type: ignore[union-attr]


# Every property violated in the seeds of pre-fix and the mutants, and skip-whole-receive's own instance.
CROSS_VALIDATED = [
    ("pre-fix", "seed", "no_false_dependency", 10),
    ("skip-disagree", "seed", "S1_broadcast_matching", 10),
    ("skip-disagree", "seed", "no_hang", 28),
    ("skip-disagree", "seed", "no_deadlock", 28),
    ("skip-whole-receive", "decode-gap", "S3_no_stale_read", 22),
]
SLOW_BMC = {row for row in CROSS_VALIDATED if row[3] > 20}


@pytest.mark.parametrize(
    ("variant", "instance", "name", "length"),
    [pytest.param(*row, marks=pytest.mark.slow) if row in SLOW_BMC else row for row in CROSS_VALIDATED],
)
def test_bmc_finds_each_violation_at_exactly_the_explicit_length(
    variant: str, instance: str, name: str, length: int
) -> None:
    pinned = PROTOCOL.instance(variant, instance)
    at = check(pinned, engine="bmc", depth=length, properties=[name]).property_result(name)
    assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == length
    before = check(pinned, engine="bmc", depth=length - 1, properties=[name]).property_result(name)
    assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


def test_the_cross_validated_rows_are_every_seed_violation() -> None:
    wanted = {
        (variant, instance, name, length)
        for (variant, instance), (_, _, violated, _) in GOLDEN.items()
        if instance == "seed" and variant != "post-fix"
        for name, length in violated.items()
        if length is not None
    }
    assert wanted | {("skip-whole-receive", "decode-gap", "S3_no_stale_read", 22)} == set(CROSS_VALIDATED)


def test_bmc_agrees_on_the_l2_witness() -> None:
    witness = check(PROTOCOL.instance("post-fix"), engine="bmc", depth=12, properties=[WITNESS]).property_result(
        WITNESS
    )
    assert witness.verdict is Verdict.HOLDS and witness.path is not None and witness.path.length == 12
    shorter = check(PROTOCOL.instance("post-fix"), engine="bmc", depth=11, properties=[WITNESS]).property_result(
        WITNESS
    )
    assert shorter.verdict is Verdict.INCONCLUSIVE and shorter.path is None


# ---- releases through v0.33.0 (issue 33) ------------------------------------------------------------------

PYPI_RELEASES = (
    "0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 "
    "0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0"
).split()


def test_every_release_from_0_19_to_0_33_maps_to_its_variant() -> None:
    """Every PyPI release is in the bisection once, in order, and release_variant reads it (the real-vLLM
    recorders ask for 0.32.0 and 0.21.0)."""
    assert [release for release, _, _ in BISECTION] == PYPI_RELEASES
    for release, variant, _ in BISECTION:
        found = PROTOCOL.release_variant(release)
        assert found is not None and found.name == variant, release
    assert PROTOCOL.release_variant("0.32.0").name == "v0.31.0"  # type: ignore[union-attr]
    assert PROTOCOL.release_variant("0.21.0").name == "v0.21.0"  # type: ignore[union-attr]
    assert PROTOCOL.release_variant("0.34.0") is None and PROTOCOL.release_variant("0.18.0") is None
    later = {variant.name for variant in PROTOCOL.variants if variant.later_release}
    assert {variant for _, variant, _ in BISECTION} == later | {"pre-fix", "post-fix"}


def test_the_v2_runner_without_async_scheduling_is_left_out() -> None:
    with pytest.raises(UsageError, match="V2 runner without async scheduling is not modelled"):
        PROTOCOL.instance("v0.23.0", overrides={"runner": 2, "async_scheduling": 0}).machine()


def test_from_v0_31_the_v1_runner_runs_pp_without_async_scheduling() -> None:
    """VllmConfig turns async scheduling off for the V1 runner with PP (an explicit request is refused), so the
    seed of v0.31.0 on is the sync seed: no rank broadcasts."""
    for variant in ("v0.31.0", "v0.33.0"):
        seed = PROTOCOL.instance(variant, "seed").machine()
        sync = PROTOCOL.instance(variant, "sync").machine()
        assert list(seed.variables) == list(sync.variables)
        assert [item.name for item in seed.properties] == [item.name for item in sync.properties]
        result = check(PROTOCOL.instance(variant, "seed"), engine="bfs")
        assert (result.stats.states, result.stats.transitions) == (940, 2326)  # the sync pin's figures


def test_features_add_their_variables_and_actions_only_where_turned_on() -> None:
    """The seed keeps exactly its machine in every variant that runs it; each feature adds its own parts."""
    seed = PROTOCOL.instance("post-fix", "seed").machine()
    for variant in ("v0.23.0", "v0.30.0"):
        later = PROTOCOL.instance(variant, "seed").machine()
        assert list(later.variables) == list(seed.variables)
        assert [action.name for action in later.actions] == [action.name for action in seed.actions]
        assert [item.name for item in later.properties] == [item.name for item in seed.properties]

    def added(variant: str, instance: str) -> tuple[set[str], set[str], set[str]]:
        machine = PROTOCOL.instance(variant, instance).machine()
        return (
            set(machine.variables) - set(seed.variables),
            {action.name for action in machine.actions} - {action.name for action in seed.actions},
            {item.name for item in machine.properties} - {item.name for item in seed.properties},
        )

    assert added("post-fix", "spec-decode") == (
        {"rank.sample_failed_step"},
        {"engine_raises_on_sample"},
        {"sampled_one_column", "draft_inputs_known"},
    )
    assert added("v0.31.0", "sync") == (set(), set(), set())  # S4 (async placeholders) is dropped instead
    assert "S4_placeholder_agreement" not in {
        item.name for item in PROTOCOL.instance("v0.31.0", "sync").machine().properties
    }
    variables, actions, properties = added("v0.23.0", "v2-chunks-then-decode")
    assert {"rank.req_states_sampled_step", "side.step", "side.posted", "ppb.queue"} <= variables
    assert {"side_post", "side_complete", "side_pass", "schedule_empty", "ppb.complete"} <= actions
    assert "S3_no_stale_read" not in {
        item.name for item in PROTOCOL.instance("v0.23.0", "v2-seed").machine().properties
    }
    assert added("post-fix", "structured-output")[1] == {"sample_deferred"}
    for mutant in ("skip-disagree", "skip-whole-receive"):  # a mutant of the V1 skip runs v0.20.0's V2 path
        assert PROTOCOL.instance(mutant, "v2-seed").machine().name == f"pp-broadcast/{mutant}"


def violation(variant: str, instance: str, name: str) -> tuple[object, list[tuple[str, str]], dict[str, object]]:
    result = check(PROTOCOL.instance(variant, instance), engine="bfs", properties=[name])
    item = result.property_result(name)
    assert item.verdict is Verdict.VIOLATED and item.path is not None
    return (
        result,
        [(step.actor, step.action) for step in item.path.steps],
        unpack(result.machine, item.path.final_state),
    )


def test_v1_spec_decode_fails_the_shape_assert_on_the_decode_and_rank_0_lacks_the_draft() -> None:
    """Two chunks, then a decode with one draft: rank 0 prepares the decode with the scheduler's -1 placeholder for
    the draft (18 steps); the last rank samples [num_reqs, 2] and raises before broadcasting (22 steps)."""
    _, actions, final = violation("v0.30.0", "spec-decode", "sampled_one_column")
    assert len(actions) == 22 and actions[-1] == ("rank:1", "sample_tokens")
    assert final["rank.sample_failed_step"] == 3 and final["scheduler.steps"] == ((1,), (2,), (3,))  # the decode
    assert final["rank.broadcast_issued"][1] == (False, True, False)  # type: ignore[index]  # raised before it
    _, actions, final = violation("v0.30.0", "spec-decode", "draft_inputs_known")
    assert len(actions) == 18 and actions[-1] == ("rank:0", "execute_model") and final["rank.rpcs"][0] == 5  # type: ignore[index]
    synchronous = check(PROTOCOL.instance("v0.31.0", "spec-decode"), engine="bfs")
    assert synchronous.verdict is Verdict.HOLDS  # from v0.31.0: no broadcast, the scheduler sends the drafts


def test_v2_spec_decode_until_v0_29_posts_mismatched_widths() -> None:
    """The final chunk's step has no drafts: the last rank sends [num_reqs, 1], rank 0 receives [num_reqs, 2]."""
    result, _, _ = violation("v0.23.0", "v2-spec-decode", "no_collective_mismatch")
    item = result.property_result("no_collective_mismatch")  # type: ignore[attr-defined]
    assert blocked_summary(result.machine, item.path) == "rank 0 in sampled_wide(ppb)#1; rank 1 in sampled(ppb)#1"  # type: ignore[attr-defined]
    before = check(PROTOCOL.instance("v0.22.0", "v2-spec-decode"), engine="bfs", properties=["no_collective_mismatch"])
    summary = blocked_summary(before.machine, before.property_result("no_collective_mismatch").path)  # type: ignore[arg-type]
    assert "broadcast_wide(pp)" in summary and "broadcast(pp)" in summary
    fixed = check(PROTOCOL.instance("v0.30.0", "v2-spec-decode"), engine="auto")
    assert fixed.property_result("no_collective_mismatch").verdict is Verdict.HOLDS
    assert fixed.property_result("draft_inputs_known").verdict is Verdict.HOLDS


def test_v2_until_v0_22_waits_on_every_broadcast_like_v1_before_the_fix() -> None:
    _, actions, final = violation("v0.22.0", "v2-seed", "no_false_dependency")
    assert len(actions) == 10 and actions[-1] == ("rank:0", "gpu_post")
    assert final["gpu.phase"][0] == BROADCAST and final["scheduler.steps"][0] == (1,)  # type: ignore[index]


def test_structured_output_computes_the_bitmask_after_the_wrong_step() -> None:
    """Three stages: the decode's sample_tokens waits for the oldest step, the first chunk, while the final chunk
    whose token the grammar lacks is still in flight (issue #45014); two stages and sync scheduling hold."""
    _, actions, final = violation("v0.22.0", "structured-output", "grammar_bitmask_current")
    assert len(actions) == 21 and actions[-2:] == [("engine", "process_output"), ("engine", "sample_deferred")]
    assert final["engine.processed"] == 1 and final["scheduler.steps"] == ((1,), (2,), (3,))
    two_stages = check(PROTOCOL.instance("v0.22.0", "structured-output", ranks=2), engine="auto")
    assert two_stages.property_result("grammar_bitmask_current").verdict is Verdict.HOLDS


def test_the_v2_freshness_property_fails_without_the_decode_cadence(monkeypatch: pytest.MonkeyPatch) -> None:
    """reads_latest_token over req_states can fail: a scheduler without next_decode_eligible_step lets rank 0
    prepare a decode before its ring slot brought the token."""
    monkeypatch.setattr(pp_engine, "may_schedule", lambda state, request: lift(True))
    result = check(
        PROTOCOL.instance("v0.23.0", "v2-chunks-then-decode"), engine="bfs", properties=["reads_latest_token"]
    )
    assert result.property_result("reads_latest_token").verdict is Verdict.VIOLATED


def test_sync_reads_fail_without_the_schedulers_new_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """reads_latest_token without async scheduling can fail: non-last ranks that ignore the scheduler's
    new_token_ids prepare a decode without its input token."""
    monkeypatch.setattr(pp_worker, "new_token_updates", lambda state, rank, step: {})
    result = check(PROTOCOL.instance("v0.31.0", "sync-decode-gap"), engine="bfs", properties=["reads_latest_token"])
    assert result.property_result("reads_latest_token").verdict is Verdict.VIOLATED


def test_from_v0_23_a_failed_forward_reaches_the_engine_as_an_empty_output() -> None:
    """The last rank's execute_model raises; its sample_tokens, without execute_model_state, returns
    EMPTY_MODEL_RUNNER_OUTPUT from v0.23.0 (None before), so step_with_batch_queue does not re-raise the failure."""
    _, actions, final = violation("v0.23.0", "sync-failed-forward", "failure_reaches_engine")
    assert actions == [
        ("engine", "schedule"),
        ("rank:0", "execute_model"),
        ("rank:1", "execute_model_raises"),
        ("rank:1", "sample_tokens"),
    ]
    assert final["rank.sample_path"][1] == 3 and final["engine.failed_step"] == 1  # type: ignore[index]  # RETURN
    before = check(PROTOCOL.instance("v0.22.0", "sync-failed-forward"), engine="bfs")
    assert before.property_result("failure_reaches_engine").verdict is Verdict.HOLDS  # None: the re-raise happens
    v2 = check(PROTOCOL.instance("v0.33.0", "v2-failed-forward"), engine="auto")
    assert v2.verdict is Verdict.HOLDS  # the V2 runner returns None


# ---- the ledger (docs/models/pp-broadcast.md) -------------------------------------------------------------

LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "pp-broadcast.md"


def every_machine() -> list[object]:
    """Every variant × instance the protocol builds (the mutants included)."""
    return [
        PROTOCOL.instance(variant.name, instance.name).machine()
        for variant in PROTOCOL.variants
        for instance in PROTOCOL.instances
    ]


def test_the_ledger_names_every_mirrored_function_variant_property_and_parameter() -> None:
    """The ledger is checked against the model: a mirrored name, a variant, a property or a parameter the model adds
    fails this test until the ledger says what it is."""
    text = LEDGER.read_text(encoding="utf-8")
    machines = every_machine()
    mirrored = {name for machine in machines for action in machine.actions for name in mirrored_names(action.mirrors)}  # type: ignore[attr-defined]
    missing = sorted(name for name in mirrored - {"None", "True", "False"} if name not in text)
    assert not missing, f"docs/models/pp-broadcast.md does not name: {missing}"
    actions = {action.name for machine in machines for action in machine.actions}  # type: ignore[attr-defined]
    assert not [name for name in sorted(actions) if f"`{name}`" not in text]
    properties = {item.name for machine in machines for item in machine.properties} - {"in_bounds", "well_defined"}  # type: ignore[attr-defined]
    assert not [name for name in sorted(properties) if f"`{name}`" not in text]
    assert not [variant.name for variant in PROTOCOL.variants if f"`{variant.name}`" not in text]
    assert not [parameter.name for parameter in PROTOCOL.parameters[-4:] if f"`{parameter.name}`" not in text]


def test_the_ledger_release_table_is_the_bisection() -> None:
    text = LEDGER.read_text(encoding="utf-8")
    table = text[text.index("| release | variant |") : text.index("## Features")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:] if line.startswith("| ")]
    listed = {
        (release.strip(), variant.strip().strip("`"))
        for releases, variant in rows
        for release in releases.split(",")
        if release.strip()
    }
    assert listed == {(release, variant) for release, variant, _ in BISECTION}
