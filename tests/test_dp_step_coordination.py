"""dp-step-coordination: the per-step collectives of DP ranks line up in v0.33.0, and v0.24.0's
drafter skip (a batch beyond the drafter's max_model_len on one rank) makes them mismatch or hang,
with short counterexamples that BFS, the vectorised engine and BMC agree on."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgers import unnamed

from lockstep.checkers import Verdict, check
from lockstep.models.dp_step_coordination import POST_FIX, PRE_FIX, PROTOCOL
from lockstep.models.dp_step_coordination.releases import BISECTION
from lockstep.models.dp_step_coordination.state import V0_29_0

COLLECTIVES = ("no_collective_mismatch", "no_hang", "no_deadlock")
LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "dp-step-coordination.md"


def test_post_fix_seed_holds_and_witnesses_a_dummy_step_and_the_wave_end() -> None:
    result = check(PROTOCOL.instance(POST_FIX, "seed"), engine="bfs")
    assert result.verdict is Verdict.HOLDS and result.stats.states == 74
    dummy = result.property_result("dummy_step").path
    assert dummy is not None and [step.action for step in dummy.steps] == ["execute_dummy_batch"]
    finish = result.property_result("all_ranks_finish").path
    assert finish is not None and finish.length == 20
    assert [step.action for step in finish.steps].count("engine_dp.complete") == 1  # v0.33.0 syncs at step 1


def test_pre_fix_syncs_only_on_the_interval() -> None:
    """v0.24.0's ``_has_global_unfinished_reqs`` first all-reduces at step ``dp_sync_interval``:
    the shortest run to the wave's end takes two iterations, not one."""
    finish = check(PROTOCOL.instance(PRE_FIX, "seed"), engine="bfs").property_result("all_ranks_finish").path
    assert finish is not None and finish.length == 36
    assert [step.action for step in finish.steps].count("end_iteration") == 4


def test_pre_fix_overlong_batch_skips_the_drafter_and_the_moe_collectives_mismatch() -> None:
    result = check(PROTOCOL.instance(PRE_FIX, "overlong-draft"), engine="bfs")
    violation = result.property_result("no_collective_mismatch")
    assert violation.verdict is Verdict.VIOLATED and violation.path is not None
    steps = [(step.action, dict(step.arguments)) for step in violation.path.steps]
    assert steps[:3] == [
        ("add_request", {"rank": 0}),
        ("execute_model", {"rank": 0, "fits": False}),  # the batch does not fit the drafter
        ("execute_dummy_batch", {"rank": 1}),
    ]
    assert len(steps) == 16 and ("execute_dummy_batch", {"rank": 0}) in steps[10:]
    last = dict(zip(result.machine.variables, violation.path.steps[-1].state, strict=True))
    fronts = [queue[0][0] for queue in last["worker_ep.queue"]]  # each rank's front op on the EP group
    operations = ("moe_target", "moe_draft")
    assert sorted(operations[front] for front in fronts) == ["moe_draft", "moe_target"]


def test_post_fix_overlong_batch_runs_the_drafter_dummy_run() -> None:
    result = check(PROTOCOL.instance(POST_FIX, "overlong-draft"), engine="bfs")
    assert result.verdict is Verdict.HOLDS
    skipped = result.property_result("drafter_skipped")
    assert skipped.verdict is Verdict.HOLDS and skipped.path is not None  # the fixed branch is reached


def test_v0_29_0_has_the_drafter_fix_and_the_old_sync() -> None:
    """0.25.0-0.29.0: the overlong batch runs the drafter's dummy_run (holds, as 0.33.0), the sync waits for
    step ``dp_sync_interval`` (the wave's shortest end as 0.24.0's)."""
    assert check(PROTOCOL.instance(V0_29_0, "overlong-draft"), engine="bfs").verdict is Verdict.HOLDS
    finish = check(PROTOCOL.instance(V0_29_0, "seed"), engine="bfs").property_result("all_ranks_finish").path
    assert finish is not None and finish.length == 36


def test_every_release_from_0_19_0_to_0_33_0_maps_to_its_variant() -> None:
    expected = {
        **dict.fromkeys(["0.19.0", "0.19.1", "0.20.2", "0.21.0", "0.22.1", "0.23.0", "0.24.0"], PRE_FIX),
        **dict.fromkeys(["0.25.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0"], V0_29_0),
        **dict.fromkeys(["0.30.0", "0.31.0", "0.32.0", "0.33.0"], POST_FIX),
    }
    assert {release: PROTOCOL.release_variant(release).name for release in expected} == expected  # type: ignore[union-attr]
    assert PROTOCOL.release_variant("0.18.0") is None


def test_a_dense_drafter_blocks_the_ranks_in_different_groups() -> None:
    """An EAGLE head has no MoE layers: the skipping rank waits in the EP group, its peer in the DP
    group, so nothing mismatches and the ranks hang."""
    pre = check(PROTOCOL.instance(PRE_FIX, "overlong-eagle"), engine="bfs")
    assert pre.property_result("no_collective_mismatch").verdict is Verdict.HOLDS
    hang = pre.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None and hang.path.length == 18
    assert check(PROTOCOL.instance(POST_FIX, "overlong-eagle"), engine="bfs").verdict is Verdict.HOLDS


@pytest.mark.parametrize("variant", [PRE_FIX, POST_FIX])
def test_a_stopped_rank_hangs_its_peers(variant: str) -> None:
    result = check(PROTOCOL.instance(variant, "rank-stops"), engine="bfs")
    hang = result.property_result("no_hang")
    assert hang.verdict is Verdict.VIOLATED and hang.path is not None
    actions = [step.action for step in hang.path.steps]  # the peer posts, and waits for ever
    assert sorted(actions) == ["execute_dummy_batch", "post_collective", "stop_rank"]


@pytest.mark.parametrize(("variant", "instance"), [(PRE_FIX, "seed"), (POST_FIX, "seed"), (PRE_FIX, "overlong-draft")])
def test_bfs_vec_agrees_with_bfs(variant: str, instance: str) -> None:
    target = PROTOCOL.instance(variant, instance)
    reference, vectorised = check(target, engine="bfs"), check(target, engine="bfs-vec")
    assert (vectorised.stats.states, vectorised.stats.transitions) == (
        reference.stats.states,
        reference.stats.transitions,
    )
    for item in reference.properties:
        mine = vectorised.property_result(item.name)
        assert mine.verdict is item.verdict, item.name
        assert (mine.path.length if mine.path else None) == (item.path.length if item.path else None), item.name


def test_bmc_finds_the_pre_fix_mismatch_at_the_bfs_length() -> None:
    instance = PROTOCOL.instance(PRE_FIX, "overlong-draft")
    name = "no_collective_mismatch"
    at = check(instance, engine="bmc", depth=16, properties=[name]).property_result(name)
    assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == 16
    before = check(instance, engine="bmc", depth=15, properties=[name]).property_result(name)
    assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


def test_bmc_finds_no_mismatch_post_fix_within_the_same_bound() -> None:
    result = check(PROTOCOL.instance(POST_FIX, "overlong-draft"), engine="bmc", depth=16, properties=list(COLLECTIVES))
    assert all(result.property_result(name).verdict is Verdict.HOLDS_WITHIN_BOUND for name in COLLECTIVES)


def test_symmetry_reduces_the_states_and_keeps_the_verdicts() -> None:
    instance = PROTOCOL.instance(PRE_FIX, "overlong-mtp")
    plain, reduced = check(instance, engine="bfs"), check(instance, engine="bfs", symmetry=True)
    assert reduced.stats.states is not None and plain.stats.states is not None
    assert reduced.stats.states < plain.stats.states
    assert {item.name: item.verdict for item in reduced.properties} == {
        item.name: item.verdict for item in plain.properties
    }


def test_every_action_names_the_vllm_source_it_mirrors() -> None:
    machine = PROTOCOL.instance(PRE_FIX, "rank-stops").machine()
    mirrored = [action for action in machine.actions if not action.actor.startswith("group:")]  # not completions
    assert len(mirrored) == 6 and all(action.mirrors for action in mirrored)


def test_the_page_names_every_mirrored_function_action_property_variant_and_parameter() -> None:
    """docs/models/dp-step-coordination.md is checked against the model: a name the model adds fails here until
    the page says what it is."""
    text = LEDGER.read_text(encoding="utf-8")
    assert unnamed(PROTOCOL, text) == {"mirrored": [], "action": [], "property": [], "variant": []}
    assert not [parameter.name for parameter in PROTOCOL.parameters if f"`{parameter.name}`" not in text]


def test_the_page_release_table_is_the_bisection() -> None:
    text = LEDGER.read_text(encoding="utf-8")
    table = text[text.index("| release | variant |") : text.index("`SpecDecodeBaseProposer.dummy_run`'s loop")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:] if line.startswith("| ")]
    listed = {
        (release.strip(), variant.strip().strip("`"))
        for releases, variant in rows
        for release in releases.split(",")
        if release.strip()
    }
    assert listed == {(release, variant) for release, variant, _ in BISECTION}
