"""Golden pins of the pp-broadcast model (vLLM PR #38726): state counts, verdicts and counterexample
lengths per variant × instance; the shapes of the stuck pipeline, the skip-disagree hang and the
stale mapping; explicit vs BMC at the shortest length; three ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import check_golden

from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import blocked_summary
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.spec.semantics import unpack

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
}


@pytest.mark.parametrize(("variant", "instance"), list(GOLDEN))
def test_golden_states_verdicts_and_lengths(variant: str, instance: str) -> None:
    result = check_golden(PROTOCOL, variant, instance, GOLDEN[(variant, instance)], WITNESS)
    # The skip-disagree mutant never completes a broadcast: the first one the last rank posts hangs.
    assert result.warnings == (NEVER_COMPLETES if variant == "skip-disagree" else [])


def test_every_variant_and_instance_is_pinned() -> None:
    assert {(variant.name, instance.name) for variant in PROTOCOL.variants for instance in PROTOCOL.instances} == set(
        GOLDEN
    )


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
