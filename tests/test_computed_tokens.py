"""Golden pins of the computed-tokens model: state counts, verdicts, counterexample lengths and shapes,
explicit-vs-BMC agreement on the pre-fix violations, and the k-induction proof of U1, U3, U4 (post-fix)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgers import unnamed

from lockstep.checkers import Verdict, check
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.models.computed_tokens import build
from lockstep.models.computed_tokens.releases import BISECTION

PROTOCOL = get_protocol("computed-tokens")

# (variant, instance): (states, transitions, {property: (verdict, length)} for every property with a
# path or a verdict other than holds; every other property holds).
GOLDEN = {
    ("pre-fix", "seed"): (
        56,
        78,
        {"U3_bounded_slack": ("violated", 13), "all_finished": ("holds", 12), "optimistic_bound": ("holds", 9)},
    ),
    ("post-fix", "seed"): (56, 78, {"all_finished": ("holds", 12), "optimistic_bound": ("holds", 9)}),
    ("pre-fix", "sync-scheduling"): (
        17,
        16,
        {
            "U2_exact": ("violated", 10),
            "U3_bounded_slack": ("violated", 10),
            "U6_mirror_converges": ("violated", 10),
            "all_finished": ("holds", 8),
        },
    ),
    ("post-fix", "sync-scheduling"): (17, 16, {"all_finished": ("holds", 8)}),
    ("pre-fix", "chunked-prefill"): (
        64,
        90,
        {"U3_bounded_slack": ("violated", 17), "all_finished": ("holds", 16), "optimistic_bound": ("holds", 13)},
    ),
    ("post-fix", "chunked-prefill"): (64, 90, {"all_finished": ("holds", 16), "optimistic_bound": ("holds", 13)}),
    ("pre-fix", "pipeline"): (
        109,
        167,
        {"U3_bounded_slack": ("violated", 19), "all_finished": ("holds", 17), "optimistic_bound": ("holds", 13)},
    ),
    ("post-fix", "pipeline"): (109, 167, {"all_finished": ("holds", 17), "optimistic_bound": ("holds", 13)}),
    ("pre-fix", "context-limit"): (
        104,
        148,
        {
            "U3_bounded_slack": ("violated", 13),
            "U3_within_max_model_len": ("violated", 21),
            "U6_mirror_converges": ("violated", 18),
            "all_finished": ("holds", 16),
            "optimistic_bound": ("holds", 9),
        },
    ),
    ("post-fix", "context-limit"): (91, 134, {"all_finished": ("holds", 16), "optimistic_bound": ("holds", 9)}),
    ("pre-fix", "sync-pipeline-early-drafts"): (85, 130, {"U2_exact": ("violated", 19), "all_finished": ("holds", 18)}),
    ("post-fix", "sync-pipeline-early-drafts"): (
        85,
        130,
        {"U2_exact": ("violated", 19), "all_finished": ("holds", 18)},
    ),
}


@pytest.mark.parametrize(("variant", "instance"), sorted(GOLDEN))
def test_golden_counts_verdicts_and_lengths(variant: str, instance: str) -> None:
    states, transitions, notable = GOLDEN[(variant, instance)]
    spec = PROTOCOL.instance(variant, instance)
    result = check(spec, engine="bfs")
    assert (result.stats.states, result.stats.transitions) == (states, transitions)
    seen = {item.name: (item.verdict.value, item.path.length if item.path else None) for item in result.properties}
    assert {name: value for name, value in seen.items() if value[0] != "holds" or value[1] is not None} == notable
    assert set(seen) >= {
        "U1_sound",
        "U2_exact",
        "U3_bounded_slack",
        "U4_prefill_progress",
        "U5_padding",
        "U6_mirror_converges",
    }
    assert result.verdict.value == spec.expected


def test_every_instance_is_pinned() -> None:
    assert {(variant.name, spec.name) for variant in PROTOCOL.variants for spec in PROTOCOL.instances} == set(GOLDEN)


def test_pre_fix_seed_counterexample_is_the_mirror_drifting_by_two_rejected_drafts() -> None:
    result = check(PROTOCOL.instance("pre-fix"), engine="bfs")
    slack = result.property_result("U3_bounded_slack")
    assert slack.path is not None and slack.path.length == 13
    steps = slack.path.steps
    actions = [step.action for step in steps]
    assert actions[-1] == "execute_model"
    rejected = [step for step in steps if step.action == "sample_tokens" and step.arguments["accepted"] == 0]
    assert len(rejected) == 3  # the prefill step (no draft) and two decode steps that reject their draft
    names = list(result.machine.variables)
    final = dict(zip(names, slack.path.final_state, strict=True))
    upper, seq_len = final["metadata.seq_lens_cpu_upper_bound"][0][0], final["metadata.seq_lens"][0][0]
    allowed = final["metadata.allowed_slack"][0][0]
    assert (upper, seq_len, allowed) == (7, 5, 1)  # two rejected drafts in the mirror, one draft in flight
    assert (
        final["runner.num_computed_tokens_np"][0][0] == 5 and final["metadata.scheduler_num_computed_tokens"][0][0] == 4
    )


# Each property the explicit engine finds violated in pre-fix: BMC finds it at exactly that length, not before.
VIOLATIONS = [
    (instance, name, length)
    for (variant, instance), (_, _, notable) in sorted(GOLDEN.items())
    if variant == "pre-fix" and instance in ("seed", "sync-scheduling")
    for name, (verdict, length) in notable.items()
    if verdict == "violated"
]


@pytest.mark.parametrize(("instance", "name", "length"), VIOLATIONS)
def test_bmc_finds_each_pre_fix_violation_at_the_explicit_length(instance: str, name: str, length: int) -> None:
    spec = PROTOCOL.instance("pre-fix", instance)
    at = check(spec, engine="bmc", depth=length, properties=[name]).property_result(name)
    assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == length
    before = check(spec, engine="bmc", depth=length - 1, properties=[name]).property_result(name)
    assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


@pytest.mark.slow
@pytest.mark.parametrize("instance", ["chunked-prefill", "pipeline", "context-limit"])
def test_bmc_agrees_on_the_longer_pre_fix_violations(instance: str) -> None:
    spec = PROTOCOL.instance("pre-fix", instance)
    for name, (verdict, length) in GOLDEN[("pre-fix", instance)][2].items():
        if verdict != "violated":
            continue
        at = check(spec, engine="bmc", depth=length, properties=[name]).property_result(name)
        assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == length
        before = check(spec, engine="bmc", depth=length - 1, properties=[name]).property_result(name)
        assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


def test_bmc_witnesses_of_the_optimistic_bound_have_the_explicit_length() -> None:
    spec = PROTOCOL.instance("post-fix")
    witness = check(spec, engine="bmc", depth=9, properties=["optimistic_bound"]).property_result("optimistic_bound")
    assert witness.verdict is Verdict.HOLDS and witness.path is not None and witness.path.length == 9
    shorter = check(spec, engine="bmc", depth=8, properties=["optimistic_bound"]).property_result("optimistic_bound")
    assert shorter.verdict is not Verdict.HOLDS


def test_k_induction_proves_u1_u3_u4_for_post_fix_at_every_depth() -> None:
    result = check(
        PROTOCOL.instance("post-fix"),
        engine="induction",
        induction_k=1,
        properties=["U1_sound", "U3_bounded_slack", "U4_prefill_progress"],
    )
    assert {item.name: (item.verdict, item.detail) for item in result.properties} == {
        name: (Verdict.HOLDS, "proved by 1-induction")
        for name in ("U1_sound", "U3_bounded_slack", "U4_prefill_progress")
    }


def test_without_the_strengthening_induction_proves_nothing() -> None:
    machine = build("post-fix", PROTOCOL.instance("post-fix").parameters)
    machine.strengthening.clear()
    result = check(machine, engine="induction", induction_k=1, properties=["U3_bounded_slack"])
    assert result.property_result("U3_bounded_slack").verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize(
    ("instance", "overrides"),
    [
        ("seed", {}),
        ("sync-scheduling", {}),
        ("chunked-prefill", {}),
        ("pipeline", {}),
        ("seed", {"requests": 2}),
        ("seed", {"ranks": 3}),
    ],
)
def test_strengthening_invariants_hold_in_every_reachable_post_fix_state(
    instance: str, overrides: dict[str, int]
) -> None:
    parameters = PROTOCOL.instance("post-fix", instance, overrides=overrides or None).parameters
    result = check(build("post-fix", parameters, invariants_as_properties=True), engine="bfs")
    invariants = [item for item in result.properties if item.name.startswith("invariant_")]
    assert invariants and all(item.verdict is Verdict.HOLDS for item in invariants)


def test_finding_sync_pipeline_schedules_a_request_whose_final_chunk_is_in_flight() -> None:
    spec = PROTOCOL.instance("post-fix", "sync-pipeline-early-drafts")
    assert spec.expected == "violated" and PROTOCOL.instance_spec("sync-pipeline-early-drafts").finding
    exact = check(spec, engine="bfs").property_result("U2_exact")
    assert exact.verdict is Verdict.VIOLATED and exact.path is not None and exact.path.length == 19
    actions = [step.action for step in exact.path.steps]
    assert actions.count("schedule") == 4 and actions[-1] == "execute_model"
    schedules = [i for i, action in enumerate(actions) if action == "schedule"]
    updates = [i for i, action in enumerate(actions) if action == "update_from_output"]
    # the third step is scheduled after the first update, before the final chunk (second step) is updated from
    assert updates[0] < schedules[2] < updates[1]


def test_cli_pre_fix_seed_exits_1_and_ranks_option_applies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "computed-tokens", "--variant", "pre-fix"]) == 1
    assert main(["check", "computed-tokens", "--variant", "post-fix", "--ranks", "2"]) == 0
    capsys.readouterr()


# ---- releases v0.20.0-v0.33.0 and the ledger (docs/models/computed-tokens.md) ------------------------------------

LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "computed-tokens.md"


def test_every_release_maps_to_its_variant() -> None:
    """The release table is the bisection: 0.20.0-0.21.0 are pre-fix, 0.22.0 to 0.33.0 post-fix, and releases
    before 0.20.0 (no CPU mirror) are modelled by no variant."""
    assert [release for release, _, _ in BISECTION][0] == "0.20.0"
    assert [release for release, _, _ in BISECTION][-1] == "0.33.0"
    expected = {
        "0.20.0": "pre-fix",
        "0.21.0": "pre-fix",
        "0.22.0": "post-fix",
        "0.27.1": "post-fix",
        "0.33.0": "post-fix",
    }
    for release, variant in expected.items():
        found = PROTOCOL.release_variant(release)
        assert found is not None and found.name == variant, release
    assert PROTOCOL.release_variant("0.19.1") is None


def test_the_ledger_names_every_mirrored_function_action_variant_property_and_parameter() -> None:
    """The ledger is checked against the model: a mirrored name, an action, a variant, a property or a parameter the
    model adds fails this test until the ledger says what it is."""
    text = LEDGER.read_text(encoding="utf-8")
    assert unnamed(PROTOCOL, text) == {"mirrored": [], "action": [], "property": [], "variant": []}
    assert not [parameter.name for parameter in PROTOCOL.parameters[:-1] if f"`{parameter.name}`" not in text]


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
