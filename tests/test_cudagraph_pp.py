"""Golden pins of the cudagraph-pp model (vLLM PR #35162): state counts, verdicts, counterexample
lengths and shapes per variant × instance; explicit vs BMC at the shortest length; the descriptor
plan against vLLM's rules; the num_reqs-adjustment lemma, concretely and with Z3."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from golden import check_golden
from ledgers import unnamed

from lockstep.checkers import Verdict, check
from lockstep.checkers.symbolic.lemmas import prove
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.models.cudagraph_pp.descriptors import (
    Descriptor,
    adjusted_num_reqs,
    capture_plan,
    capture_sizes,
    dispatch_plan,
)
from lockstep.models.cudagraph_pp.lemmas import LEMMAS
from lockstep.models.cudagraph_pp.releases import BISECTION
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.semantics import unpack

PROTOCOL = get_protocol("cudagraph-pp")
WITNESS = "graph_replayed_on_non_first_rank"

# (variant, instance): (states, transitions, {violated property: shortest length}, witness length)
GOLDEN: dict[tuple[str, str], tuple[int, int, dict[str, int | None], int | None]] = {
    ("pre-fix", "seed"): (406, 630, {WITNESS: None}, None),
    ("post-fix", "seed"): (421, 654, {}, 12),
    ("no-persistent-buffer", "seed"): (421, 654, {"A1_address_stability": 12, "A2_freshness": 12}, 12),
    ("no-copy-in", "seed"): (421, 654, {"A2_freshness": 12}, 12),
    ("missing-key", "seed"): (421, 654, {"A2_freshness": 12, "K1_key_sets": 10}, 12),
    ("full-adjustment", "seed"): (421, 654, {"R1_replay_compatibility": 8}, 12),
    ("no-send-wait", "seed"): (646, 954, {"A2_freshness": 14, "A3_sender_reuse": 11}, 12),
    ("pre-fix", "full-and-piecewise"): (406, 630, {WITNESS: None}, None),
    ("post-fix", "full-and-piecewise"): (441, 690, {}, 16),
    ("no-persistent-buffer", "full-and-piecewise"): (441, 690, {"A1_address_stability": 16, "A2_freshness": 16}, 16),
    ("no-copy-in", "full-and-piecewise"): (441, 690, {"A2_freshness": 16}, 16),
    ("missing-key", "full-and-piecewise"): (441, 690, {"A2_freshness": 16, "K1_key_sets": 14}, 16),
    ("full-adjustment", "full-and-piecewise"): (441, 690, {}, 16),
    ("no-send-wait", "full-and-piecewise"): (570, 870, {"A2_freshness": 18, "A3_sender_reuse": 15}, 16),
}
VIOLATIONS = [
    (variant, instance, name, length)
    for (variant, instance), (_, _, violated, _) in GOLDEN.items()
    for name, length in violated.items()
    if length is not None
]


@pytest.mark.parametrize(("variant", "instance"), list(GOLDEN))
def test_golden_states_verdicts_and_lengths(variant: str, instance: str) -> None:
    result = check_golden(PROTOCOL, variant, instance, GOLDEN[(variant, instance)], WITNESS)
    assert result.warnings == []


def test_every_variant_and_instance_is_pinned() -> None:
    assert {(variant.name, instance.name) for variant in PROTOCOL.variants for instance in PROTOCOL.instances} == set(
        GOLDEN
    )


def test_pre_fix_is_eager_only_so_the_sometimes_property_has_no_witness() -> None:
    result = check(PROTOCOL.instance("pre-fix"), engine="bfs")
    replayed = result.property_result(WITNESS)
    assert replayed.verdict is Verdict.VIOLATED and replayed.path is None
    assert replayed.detail == "no reachable state satisfies it"
    assert all(action.name != "capture" for action in result.machine.actions)  # capture_model returned early


def test_cli_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", "cudagraph-pp", "--variant", "pre-fix"]) == 1
    assert main(["check", "cudagraph-pp", "--variant", "post-fix"]) == 0
    assert main(["check", "cudagraph-pp", "--variant", "post-fix", "--ranks", "3"]) == 0
    capsys.readouterr()


def steps_of(
    variant: str, name: str, instance: str = "seed"
) -> tuple[object, list[tuple[str, dict[str, object]]], dict[str, object]]:
    result = check(PROTOCOL.instance(variant, instance), engine="bfs")
    path = result.property_result(name).path
    assert path is not None
    machine = result.machine
    return machine, [(step.action, step.arguments) for step in path.steps], unpack(machine, path.final_state)


def test_no_persistent_buffer_replays_a_graph_on_tensors_it_never_saw() -> None:
    machine, actions, final = steps_of("no-persistent-buffer", "A1_address_stability")
    assert actions[-1] == ("forward", {"rank": 1})
    address = machine.variables["forward.given"].sort.value  # type: ignore[attr-defined]
    assert address.render(final["forward.given"][1]) == "FRESH_0"  # type: ignore[index]
    descriptor = machine.variables["forward.descriptor"].sort.value  # type: ignore[attr-defined]
    replayed = final["forward.descriptor"][1]  # type: ignore[index]
    assert address.render(final["graph.input"][1][replayed]) == "CAPTURE_BUFFER"  # type: ignore[index]
    assert descriptor.render(replayed).startswith("FULL(")
    assert final["forward.data"][1] == (-1, -1)  # type: ignore[index]  # the capture's garbage


def test_no_copy_in_reads_the_persistent_buffer_stale() -> None:
    machine, actions, final = steps_of("no-copy-in", "A2_freshness")
    assert [name for name, _ in actions[-4:]] == ["send", "receive", "prepare_inputs", "forward"]
    assert final["received.data"][1] == 0 and final["persistent"][1] == (-1, -1)  # type: ignore[index]


def test_missing_key_fails_before_the_copy() -> None:
    _, actions, final = steps_of("missing-key", "K1_key_sets")
    assert actions[-1] == ("receive", {"rank": 1})
    assert final["received.keys"][1] == (True, False)  # type: ignore[index]  # no residual


def test_full_adjustment_captures_fewer_requests_than_the_descriptor_advertises() -> None:
    machine, actions, final = steps_of("full-adjustment", "R1_replay_compatibility")
    assert actions[-2][0] == "schedule" and actions[-1][0] == "first_forward"
    descriptor = machine.variables["forward.descriptor"].sort.value  # type: ignore[attr-defined]
    replayed = final["forward.descriptor"][0]  # type: ignore[index]
    assert descriptor.render(replayed) == "FULL(3,2)"
    assert final["graph.requests"][0][replayed] == 1  # type: ignore[index]  # 2 -> ceil(3/2)=2 -> 3//2=1


def test_no_send_wait_overwrites_the_buffer_being_sent() -> None:
    _, actions, final = steps_of("no-send-wait", "A3_sender_reuse")
    assert [name for name, _ in actions].count("first_forward") == 2 and actions[-1][0] == "first_forward"
    assert final["send.pending"][0] is True and (final["send.step"][0], final["send.data"][0]) == (0, 1)  # type: ignore[index]


@pytest.mark.parametrize(
    ("variant", "instance", "name", "length"),
    [pytest.param(*row, marks=pytest.mark.slow) if row[1] != "seed" else row for row in VIOLATIONS],
)
def test_bmc_finds_each_violation_at_exactly_the_explicit_length(
    variant: str, instance: str, name: str, length: int
) -> None:
    pinned = PROTOCOL.instance(variant, instance)
    at = check(pinned, engine="bmc", depth=length, properties=[name]).property_result(name)
    assert at.verdict is Verdict.VIOLATED and at.path is not None and at.path.length == length
    before = check(pinned, engine="bmc", depth=length - 1, properties=[name]).property_result(name)
    assert before.verdict is Verdict.HOLDS_WITHIN_BOUND


def test_bmc_agrees_on_the_witness() -> None:
    post = check(PROTOCOL.instance("post-fix"), engine="bmc", depth=12, properties=[WITNESS]).property_result(WITNESS)
    assert post.verdict is Verdict.HOLDS and post.path is not None and post.path.length == 12
    pre = check(PROTOCOL.instance("pre-fix"), engine="bmc", depth=12, properties=[WITNESS]).property_result(WITNESS)
    assert pre.verdict is Verdict.INCONCLUSIVE and pre.path is None


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_post_fix_holds_beyond_the_seed(mode: int) -> None:
    """Three stages, three steps would be larger; these already take every runtime path."""
    for overrides in (
        {"ranks": 3},
        {"largest_capture_size": 4, "max_num_tokens": 5, "max_num_reqs": 3},
        {"decode_query_len": 2, "largest_capture_size": 4, "max_num_reqs": 2},
    ):
        result = check(PROTOCOL.instance("post-fix", overrides={**overrides, "cudagraph_mode": mode}), engine="bfs")
        assert result.verdict is Verdict.HOLDS, (mode, overrides)


def test_capture_plan_follows_cudagraph_utils() -> None:
    assert capture_sizes(3) == (1, 2, 3) and capture_sizes(8) == (1, 2, 4, 8) and capture_sizes(3, 2) == (2,)
    by_size, order = capture_plan("FULL_AND_PIECEWISE", (1, 2, 3), max_num_reqs=2, decode_query_len=1)
    assert [d.label for d in order] == ["PIECEWISE(3)", "PIECEWISE(2)", "PIECEWISE(1)", "FULL(2,2,u1)", "FULL(1,1,u1)"]
    assert [d.label for d in by_size[2]] == ["FULL(2,2,u1)", "PIECEWISE(2)"]
    _, full = capture_plan("FULL", (1, 2, 3), max_num_reqs=2, decode_query_len=1)
    assert full == [Descriptor("FULL", 3, 2), Descriptor("FULL", 2, 2), Descriptor("FULL", 1, 1)]
    table = dispatch_plan(by_size, max_num_tokens=4, max_num_reqs=2, decode_query_len=1)
    assert table[(2, 2, True)].label == "FULL(2,2,u1)"  # uniform decode: the FULL graph first
    assert table[(2, 1, False)].label == "PIECEWISE(2)"  # mixed
    assert table[(1, 1, True)].label == "FULL(1,1,u1)"
    assert all(tokens <= 3 for tokens, _, _ in table)  # beyond the largest capture size: eager


# ----------------------------------------------------------------------------------- the lemma
ADJUSTMENT = next(item for item in LEMMAS if item.name == "cudagraph-pp/num-reqs-adjustment")
BEYOND = next(item for item in LEMMAS if item.name == "cudagraph-pp/num-reqs-adjustment-beyond-domain")


def described(num_reqs: int, num_tokens: int) -> int:
    """The adjustment as #35162's description writes it, in plain Python (the reference)."""
    if num_reqs > 0 and num_tokens > num_reqs and num_tokens % num_reqs != 0:
        num_reqs = num_tokens // math.ceil(num_tokens / num_reqs)
        if num_tokens % num_reqs != 0:
            num_reqs = 1
    return num_reqs


def test_the_ir_adjustment_is_the_described_one() -> None:
    for num_reqs, num_tokens in itertools.product(range(1, 13), range(1, 13)):
        value = evaluate(adjusted_num_reqs(num_reqs, num_tokens).expression, Environment({}))
        assert value == described(num_reqs, num_tokens)
    assert described(4, 10) == 1  # protocols.md's example: 4 -> ceil(10/4)=3 -> 10//3=3 -> 1


def test_the_lemma_holds_for_every_value_up_to_six() -> None:
    cases = list(ADJUSTMENT.cases(6))
    assert cases and all(1 <= num_reqs <= num_tokens for num_reqs, num_tokens in cases)  # type: ignore[operator]
    assert all(ADJUSTMENT.holds_for(case) for case in cases)
    assert ADJUSTMENT.concrete_counterexample(6) is None


def test_the_counter_lemma_fails_exactly_where_num_reqs_exceeds_num_tokens() -> None:
    cases = list(BEYOND.cases(6))
    assert cases and not any(BEYOND.holds_for(case) for case in cases)  # never divides there
    assert BEYOND.concrete_counterexample(6) == (2, 1)


def test_z3_proves_the_lemma_and_refutes_the_counter_lemma() -> None:
    proved = prove(ADJUSTMENT)
    assert proved.outcome == "proved" and proved.as_expected
    refuted = prove(BEYOND)
    assert refuted.outcome == "refuted" and refuted.as_expected and refuted.counterexample == (2, 1)


# ---- releases v0.18.0-v0.33.0 and the ledger (docs/models/cudagraph-pp.md) ---------------------------------------

LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "cudagraph-pp.md"


def test_every_release_maps_to_its_variant() -> None:
    """The release table is the bisection: 0.18.0 is pre-fix (eager-only PP), 0.19.0 to 0.33.0 post-fix, and releases
    before 0.18.0 are modelled by no variant."""
    releases = [release for release, _, _ in BISECTION]
    assert (releases[0], releases[-1]) == ("0.18.0", "0.33.0")
    assert PROTOCOL.release_table == tuple((release, variant) for release, variant, _ in BISECTION)
    expected = {
        "0.18.0": "pre-fix",
        "0.19.0": "post-fix",
        "0.23.0": "post-fix",
        "0.30.0": "post-fix",
        "0.33.0": "post-fix",
    }
    for release, variant in expected.items():
        found = PROTOCOL.release_variant(release)
        assert found is not None and found.name == variant, release
    assert PROTOCOL.release_variant("0.17.1") is None


def test_the_ledger_names_every_mirrored_function_action_variant_property_and_parameter() -> None:
    """The ledger is checked against the model: a mirrored name, an action, a variant, a property or a parameter the
    model adds fails this test until the ledger says what it is."""
    text = LEDGER.read_text(encoding="utf-8")
    assert unnamed(PROTOCOL, text) == {"mirrored": [], "action": [], "property": [], "variant": []}
    assert not [parameter.name for parameter in PROTOCOL.parameters if f"`{parameter.name}`" not in text]


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
