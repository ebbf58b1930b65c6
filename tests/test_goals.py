"""Coverage goals from a model (``lockstep.checkers.conformance.goals``): what the goals are, that each reached
goal's path is a real model path ending where the goal holds, that the covering paths pass
through every reached goal, and that replaying a goal path's model trace (the judge
``test-runtime`` applies to runtime traces) reaches the goals its path covers."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.checkers import system_for
from lockstep.checkers.conformance.goals import KINDS, GoalSearch, RuntimeGoals, covering_paths, find_goals, label_of
from lockstep.checkers.conformance.judgement import replay_traces
from lockstep.checkers.counterexample import first_invalid_step, write_counterexample
from lockstep.models import get_protocol
from lockstep.spec.protocol import Instance

PARTIAL_VOTE = "finish_sync: ((engine_dp.result[rank][1] % 2) != 0) true"  # a partial pause vote at a sync point
WAVE_AFTER_CONSENSUS = "handle_start_wave: ignore_start_dp_wave[rank] true"  # START_DP_WAVE after consensus


def search(protocol: str, variant: str, instance: str = "seed") -> tuple[Instance, GoalSearch]:
    model = get_protocol(protocol).instance(variant, instance)
    return model, find_goals(system_for(model.machine()))


def test_every_goal_path_is_a_model_path_that_reaches_its_goal() -> None:
    model, found = search("computed-tokens", "post-fix")
    system = system_for(model.machine())
    kinds = {goal.kind for goal in found.goals}
    assert kinds <= set(KINDS) and {"action", "guard", "decision", "witness"} <= kinds
    assert found.complete and found.reached and found.unreached
    for label, reached in found.reached.items():
        path = found.path(label)
        assert first_invalid_step(system, path) is None, label
        assert path.length == reached.depth + (reached.transition is not None), label


def test_the_covering_paths_pass_through_every_reached_goal() -> None:
    _, found = search("pp-broadcast", "post-fix")
    chosen = covering_paths(found)
    covered = {goal for _, goals in chosen for goal in goals}
    assert covered == set(found.reached)
    assert len(chosen) < len(found.reached) // 4
    assert len(covering_paths(found, max_paths=2)) == 2


def test_replaying_a_goal_path_reaches_the_goals_it_covers(tmp_path: Path) -> None:
    """The runtime side's judge (``RuntimeGoals`` fed by ``replay_traces``) on the model's own
    paths: every goal a path covers is reached, whatever machine the replay builds."""
    model, found = search("pp-broadcast", "post-fix")
    machine = model.machine()
    for number, (label, covered) in enumerate(covering_paths(found)):
        file = tmp_path / f"path-{number}.jsonl"
        write_counterexample(
            file,
            machine,
            found.path(label),
            protocol="pp-broadcast",
            variant="post-fix",
            instance="seed",
            parameters=model.parameters,
            property_name=label,
        )
        goals = RuntimeGoals()
        replay_traces(file, protocol="pp-broadcast", variant="post-fix", observe=goals.observe)
        missed = [goal for goal in covered if not goals.reaches(found.reached[goal].goal)]
        assert not missed, (label, missed)


def test_labels_do_not_depend_on_how_bound_variables_were_named() -> None:
    first, second = (get_protocol("dp-pause").instance("post-fix").machine() for _ in range(2))
    labels = [
        [label_of(conjunct) for action in machine.actions for conjunct in action.guard] for machine in (first, second)
    ]
    assert labels[0] == labels[1] and any("#0" in label for label in labels[0])


def test_dp_pause_goals_name_the_partial_vote_and_the_wave_after_consensus() -> None:
    """The issue's two states no random run reached are goals of the post-fix model (the catalogue
    alone: the search is below)."""
    from lockstep.checkers.conformance.goals import _Catalogue

    labels = {goal.label for goal in _Catalogue(get_protocol("dp-pause").instance("post-fix").machine()).goals}
    assert PARTIAL_VOTE in labels and WAVE_AFTER_CONSENSUS in labels
    assert "one step from violating quiescent_during_rpc" in labels


@pytest.mark.slow
def test_dp_pause_reaches_the_partial_vote_the_wave_after_consensus_and_the_pre_fix_near_violation() -> None:
    _, fixed = search("dp-pause", "post-fix")
    assert PARTIAL_VOTE in fixed.reached and WAVE_AFTER_CONSENSUS in fixed.reached
    assert not any(reached.goal.kind == "near-violation" for reached in fixed.reached.values())
    _, broken = search("dp-pause", "pre-fix")
    near = broken.reached["one step from violating quiescent_during_rpc"]
    assert near.depth == 16  # the counterexample is 17 steps: one step before its violation
