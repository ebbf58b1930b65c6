"""Golden pins of the async-placeholders model (vLLM PR #42938), its scans and its lemmas."""

from __future__ import annotations

import itertools
import time
from functools import cache
from pathlib import Path

import pytest

from lockstep.changes import mirrored_names
from lockstep.checkers import CheckResult, Verdict, check
from lockstep.checkers.symbolic.lemmas import prove
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.models.async_placeholders import LEMMAS, POST_FIX, PRE_FIX
from lockstep.models.async_placeholders.lemmas import BACKWARD_EQUALS_FORWARD, BACKWARD_EQUALS_FORWARD_ANY_LIST
from lockstep.models.async_placeholders.releases import BISECTION, V0_27_0
from lockstep.models.async_placeholders.scans import BACKWARD, FORWARD, first_placeholder, scan_cost
from lockstep.models.async_placeholders.state import Kind
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.semantics import unpack

PROTOCOL = get_protocol("async-placeholders")
INVARIANTS = (
    "in_bounds",
    "suffix_form",
    "unused_slots_empty",
    "repair_postcondition",
    "scans_agree",
    "batch_aliases_request_list",
    "scan_cost_bounded",
    "list_matches_scheduler_count",
    "tokens_aligned",
    "placeholders_nonnegative",
    "placeholders_count_in_flight",
    "no_deadlock",
)
# instance -> (states, transitions, {witness: length}); both variants share the state graph.
GOLDEN = {
    "seed": (57, 83, {"repaired": 12}),
    "spec-decode": (151, 237, {"repaired": 12, "fewer_drafts_accepted": 12}),
    "kv-load-failure": (
        321,
        511,
        {"repaired": 12, "fewer_drafts_accepted": 12, "trim_left_no_placeholder": 14, "more_ids_than_placeholders": 14},
    ),
    "preemption": (1081, 2026, {"repaired": 12, "rejoins_with_history": 11, "discarded_chunk": 3}),
    "all-operations": (
        5484,
        10409,
        {
            "repaired": 12,
            "fewer_drafts_accepted": 12,
            "trim_left_no_placeholder": 14,
            "more_ids_than_placeholders": 14,
            "rejoins_with_history": 11,
            "discarded_chunk": 3,
        },
    ),
    "history-toggle": (374, 588, {"repaired": 12, "repair_without_sampled_ids": 7}),
}
# (variant, instance) -> {violated invariant: shortest counterexample length}
VIOLATIONS = {
    **{(PRE_FIX, name): {"scan_cost_bounded": 17} for name in GOLDEN},
    **{(POST_FIX, name): {} for name in GOLDEN},
    (PRE_FIX, "history-toggle"): {"scan_cost_bounded": 17, "list_matches_scheduler_count": 16, "tokens_aligned": 12},
    (POST_FIX, "history-toggle"): {"list_matches_scheduler_count": 16, "tokens_aligned": 12},
}


@cache
def explicit(variant: str, instance: str) -> CheckResult:
    return check(PROTOCOL.instance(variant, instance), engine="bfs")


@pytest.mark.parametrize(("variant", "instance"), sorted(VIOLATIONS))
def test_golden_states_verdicts_and_lengths(variant: str, instance: str) -> None:
    result = explicit(variant, instance)
    states, transitions, witnesses = GOLDEN[instance]
    assert (result.stats.states, result.stats.transitions) == (states, transitions)
    assert result.verdict.value == PROTOCOL.instance(variant, instance).expected
    violated = VIOLATIONS[(variant, instance)]
    for name in INVARIANTS:
        item = result.property_result(name)
        if name in violated:
            assert item.verdict is Verdict.VIOLATED and item.path is not None and item.path.length == violated[name], (
                name
            )
        else:
            assert item.verdict is Verdict.HOLDS, name
    for name, length in witnesses.items():
        item = result.property_result(name)
        assert item.verdict is Verdict.HOLDS and item.path is not None and item.path.length == length, name
    assert not result.warnings


def test_the_forward_scan_reads_the_history_the_backward_scan_only_the_run() -> None:
    """The pre-fix seed's cost counterexample: four steps of plain decode; the fourth repair finds
    [0, 1, -1], whose forward scan reads 3 elements where the bound is 1 + 1."""
    path = explicit(PRE_FIX, "seed").property_result("scan_cost_bounded").path
    assert path is not None
    machine = explicit(PRE_FIX, "seed").machine
    actions = [step.action for step in path.steps]
    assert actions[-1] == "sample" and actions.count("sample") == 4 and actions.count("bookkeeping") == 3
    before = unpack(machine, path.steps[-2].state)
    after = unpack(machine, path.final_state)
    assert before["runner.output_token_ids"] == (0, 1, -1, -1) and before["runner.length"] == 3
    assert after["runner.output_token_ids"] == (0, 1, 2, -1) and after["runner.length"] == 3
    assert (after["repair.scan_steps"], after["repair.run_length"], after["repair.first_placeholder"]) == (3, 1, 2)
    # The same repair in v0.22.0 reads the run and the token before it: 2 elements.
    replay = check(PROTOCOL.instance(POST_FIX), "bfs")
    assert replay.property_result("scan_cost_bounded").verdict is Verdict.HOLDS


def test_finding_history_toggle_collapses_two_placeholders_into_one_token() -> None:
    """v0.22.0: step 1 needs no output ids (no sampled ids registered), step 2 does; step 3's repair
    writes step 2's token (position 1) over both placeholders: the list shrinks to [1]."""
    instance = PROTOCOL.instance(POST_FIX, "history-toggle")
    assert instance.expected == "violated" and PROTOCOL.instance_spec("history-toggle").finding
    result = explicit(POST_FIX, "history-toggle")
    path = result.property_result("tokens_aligned").path
    assert path is not None and path.length == 12
    schedules = [step.arguments for step in path.steps if step.action == "schedule"]
    assert schedules[0]["history"] is False and all(item["history"] for item in schedules[1:])
    before = unpack(result.machine, path.steps[-2].state)
    after = unpack(result.machine, path.final_state)
    assert before["runner.output_token_ids"][:2] == (-1, -1) and before["runner.length"] == 2
    assert after["runner.output_token_ids"][0] == 1 and after["runner.length"] == 1 and after["repair.done"]
    shorter = result.property_result("list_matches_scheduler_count").path
    assert shorter is not None and shorter.steps[-1].action == "update_states"
    final = unpack(result.machine, shorter.final_state)
    assert final["runner.length"] < final["queue.scheduled"][0][3]  # the list is shorter than num_output_tokens


CROSS = [
    (variant, instance, name, length)
    for (variant, instance), violated in sorted(VIOLATIONS.items())
    if variant == PRE_FIX
    for name, length in violated.items()
]


@pytest.mark.parametrize(
    ("variant", "instance", "name", "length"),
    [
        pytest.param(
            *case,
            marks=()
            if case[1:3] in (("seed", "scan_cost_bounded"), ("history-toggle", "tokens_aligned"))
            else pytest.mark.slow,
        )
        for case in CROSS
    ],
)
def test_bmc_finds_each_violation_at_exactly_the_explicit_length(
    variant: str, instance: str, name: str, length: int
) -> None:
    target = PROTOCOL.instance(variant, instance)
    found = check(target, engine="bmc", depth=length, properties=[name]).property_result(name)
    assert found.verdict is Verdict.VIOLATED and found.path is not None and found.path.length == length
    assert (
        check(target, engine="bmc", depth=length - 1, properties=[name]).property_result(name).verdict
        is not Verdict.VIOLATED
    )


def _forward(values: tuple[int, ...]) -> int:
    return values.index(-1)


def _backward(values: tuple[int, ...]) -> int:
    """v0.22.0's loop: walk back from the end while the element before is -1."""
    position = len(values)
    while position > 0 and values[position - 1] == -1:
        position -= 1
    return position


def _suffix_form(values: tuple[int, ...]) -> bool:
    return all(values[index + 1] == -1 for index in range(len(values) - 1) if values[index] == -1)


def _lists(largest: int) -> list[tuple[int, ...]]:
    return [values for size in range(1, largest + 1) for values in itertools.product((-1, 0, 1), repeat=size)]


def test_the_scan_folds_are_list_index_and_the_backward_walk() -> None:
    """The model's scan definitions, run by the evaluator, against vLLM's two loops and their costs."""
    for values in _lists(6):
        if values[-1] != -1:
            assert evaluate(first_placeholder(BACKWARD, values, len(values)).expression, Environment({})) == len(values)
            continue
        forward = evaluate(first_placeholder(FORWARD, values, len(values)).expression, Environment({}))
        backward = evaluate(first_placeholder(BACKWARD, values, len(values)).expression, Environment({}))
        assert (forward, backward) == (_forward(values), _backward(values))
        assert evaluate(scan_cost(FORWARD, values, len(values)).expression, Environment({})) == forward + 1
        reads = len(values) - backward + (1 if backward > 0 else 0)
        assert evaluate(scan_cost(BACKWARD, values, len(values)).expression, Environment({})) == reads


def test_each_lemma_evaluated_on_every_list_up_to_six() -> None:
    for values in _lists(6):
        ends = values[-1] == -1
        equal = not ends or _forward(values) == _backward(values)
        assert BACKWARD_EQUALS_FORWARD.holds_for(values)
        assert BACKWARD_EQUALS_FORWARD_ANY_LIST.holds_for(values) == equal
        if ends and _suffix_form(values):
            assert equal
    assert BACKWARD_EQUALS_FORWARD.concrete_counterexample(6) is None
    assert BACKWARD_EQUALS_FORWARD_ANY_LIST.concrete_counterexample(6) == (-1, 0, -1)


@pytest.mark.parametrize("name", [item.name for item in LEMMAS])
def test_each_lemma_is_proved_or_refuted_as_expected(name: str) -> None:
    item = next(lemma for lemma in LEMMAS if lemma.name == name)
    started = time.monotonic()
    outcome = prove(item)
    assert outcome.outcome == item.expected and outcome.as_expected
    assert time.monotonic() - started < 20
    if item.expected == "refuted":
        assert outcome.counterexample == (-1, 0, -1)


def test_the_model_repair_matches_update_async_output_token_ids() -> None:
    """The `sample` action of each variant, evaluated on every list of up to four tokens and every
    previous-row size, against a Python mirror of v0.21.0/v0.22.0's repair loop body."""
    for variant, scan in ((PRE_FIX, _forward), (POST_FIX, _backward)):
        machine = PROTOCOL.instance(variant, overrides={"num_spec_tokens": 2}).machine()
        sample = machine.action_named("sample")
        updates = dict(sample.updates)
        base = {name: variable.initial for name, variable in machine.variables.items()}
        entry = (0, False, 0, 0, 0, True)  # RUN, not a chunk, no drafts, sent, outputs, history
        for values in _lists(4):
            for count in (1, 2, 3):
                state = {
                    **base,
                    "runner.output_token_ids": values + (-1,) * (4 - len(values)),
                    "runner.length": len(values),
                    "runner.phase": 1,
                    "runner.has_prev_row": True,
                    "runner.prev_row_start": 2,
                    "runner.prev_row_count": count,
                    "runner.sampled_token_ids_cpu": True,
                    "queue.scheduled": (entry,),
                    "runner.in_batch": True,
                }
                environment = Environment(state)
                new_length = evaluate(updates["runner.length"], environment)
                new_tokens = evaluate(updates["runner.output_token_ids"], environment)
                expected = list(values)
                if expected[-1] == -1:
                    start = scan(values)
                    expected[start:] = [2 + offset for offset in range(min(count, len(values) - start))]
                assert (new_tokens[:new_length], new_length) == (tuple(expected), len(expected)), (
                    variant,
                    values,
                    count,
                )


def test_command_line_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "async-placeholders", "--variant", "pre-fix"]) == 1
    assert main(["check", "async-placeholders", "--variant", "post-fix"]) == 0
    assert main(["check", "async-placeholders", "--ranks", "2"]) == 2
    capsys.readouterr()


# ---- releases v0.21.0-v0.33.0 and the ledger (docs/models/async-placeholders.md) ------------------------------

LEDGER = Path(__file__).resolve().parent.parent / "docs" / "models" / "async-placeholders.md"


def test_every_release_maps_to_its_variant() -> None:
    """The release table is the bisection: up to 0.21.0 pre-fix, 0.26.0 post-fix, 0.27.0 and 0.33.0 the stale-output
    variant, and releases before 0.19.0 are modelled by no variant."""
    assert [release for release, _, _ in BISECTION][0] == "0.19.0"
    assert [release for release, _, _ in BISECTION][-1] == "0.33.0"
    expected = {
        "0.19.0": PRE_FIX,
        "0.20.2": PRE_FIX,
        "0.21.0": PRE_FIX,
        "0.22.1": POST_FIX,
        "0.26.0": POST_FIX,
        "0.27.0": V0_27_0,
        "0.33.0": V0_27_0,
    }
    for release, variant in expected.items():
        found = PROTOCOL.release_variant(release)
        assert found is not None and found.name == variant, release
    assert PROTOCOL.release_variant("0.18.1") is None


def test_preemption_from_v0_27_0_zeroes_the_placeholders_and_delivers_the_step_in_flight_stale() -> None:
    """v0.27.0's _preempt_request: the request is preempted with its decode in flight; the placeholders are 0 at once
    (post-fix keeps 1 until the output arrives), and the stale output adds its token without resolving any."""
    later = explicit(V0_27_0, "preemption")
    path = later.property_result("stale_output_in_flight").path
    assert path is not None and [step.action for step in path.steps] == ["schedule", "schedule"]
    assert [Kind.members[step.arguments["kind"]] for step in path.steps] == ["RUN", "PREEMPT"]
    final = unpack(later.machine, path.final_state)
    assert final["scheduler.placeholders"] == 0 and final["scheduler.stale_output"] == 1
    earlier = PROTOCOL.instance(POST_FIX, "preemption").machine()
    assert "scheduler.stale_output" not in earlier.variables
    assert later.property_result("stale_output_drains").verdict is Verdict.HOLDS


def every_machine() -> list[object]:
    return [
        PROTOCOL.instance(variant.name, instance.name).machine()
        for variant in PROTOCOL.variants
        for instance in PROTOCOL.instances
    ]


def test_the_ledger_names_every_mirrored_function_action_variant_property_and_parameter() -> None:
    """The ledger is checked against the model: a mirrored name, an action, a variant, a property or a parameter the
    model adds fails this test until the ledger says what it is."""
    text = LEDGER.read_text(encoding="utf-8")
    machines = every_machine()
    mirrored = {name for machine in machines for action in machine.actions for name in mirrored_names(action.mirrors)}  # type: ignore[attr-defined]
    assert not sorted(name for name in mirrored - {"None", "True", "False"} if name not in text)
    actions = {action.name for machine in machines for action in machine.actions}  # type: ignore[attr-defined]
    assert not [name for name in sorted(actions) if f"`{name}`" not in text]
    properties = {item.name for machine in machines for item in machine.properties} - {"in_bounds", "well_defined"}  # type: ignore[attr-defined]
    assert not [name for name in sorted(properties) if f"`{name}`" not in text]
    assert not [variant.name for variant in PROTOCOL.variants if f"`{variant.name}`" not in text]
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


def test_placeholders_count_the_outputs_in_flight_until_v0_27_0_zeroes_them_at_a_preemption() -> None:
    """With a decode (one draft) and a preemption in the batch queue, post-fix counts 1 + 1 placeholders and
    v0.27.0 none (stale output); each variant's property rejects the other's count."""
    for variant, stale, expected in ((POST_FIX, None, 2), (V0_27_0, 1, 0)):
        machine = PROTOCOL.instance(variant, overrides={"num_spec_tokens": 1, "preemptions": 1}).machine()
        predicate = next(item.predicate for item in machine.properties if item.name == "placeholders_count_in_flight")
        base = {name: variable.initial for name, variable in machine.variables.items()}
        run = (0, False, 1, 0, 0, True)  # RUN, not a chunk, one draft, sent, outputs, history
        preempt = (2, False, 0, 2, 0, True)
        if stale is not None:
            base["scheduler.stale_output"] = stale
        for placeholders in (0, 1, 2):
            state = {**base, "queue.scheduled": (run, preempt), "scheduler.placeholders": placeholders}
            assert evaluate(predicate, Environment(state)) is (placeholders == expected), (variant, placeholders)


def test_finding_pipeline_queue_rebuilds_a_skipped_request_with_a_prompt_token() -> None:
    """Three steps in flight (V1, three PP stages): step 1 schedules the request (one placeholder), step 2 skips it
    (its row leaves the batch), step 3 schedules it again before step 1's output is processed: num_output_tokens is
    1 (the placeholder) and the rebuild takes the last token of prompt + outputs, a prompt token. v0.27.0's resume
    gate does not apply (the request was not preempted)."""
    for variant in (POST_FIX, V0_27_0):
        result = explicit(variant, "pipeline-queue")
        path = result.property_result("tokens_aligned").path
        assert path is not None and path.length == 10
        kinds = [Kind.members[step.arguments["kind"]] for step in path.steps if step.action == "schedule"]
        assert kinds == ["RUN", "SKIP", "RUN"]
        final = unpack(result.machine, path.final_state)
        assert (
            final["runner.output_token_ids"][0] == PROTOCOL.instance(variant, "pipeline-queue").parameters["max_tokens"]
        )  # the prompt's stand-in
        assert final["scheduler.outputs"] == 0 and len(final["queue.executed"]) == 2
    two_steps = explicit(POST_FIX, "preemption")  # the same operations with two steps in flight hold
    assert two_steps.property_result("tokens_aligned").verdict is Verdict.HOLDS
