"""Lemmas for all sizes: the fold semantics, the Z3 proofs, and agreement with the model's own code."""

from __future__ import annotations

import itertools
import json

import pytest

from lockstep.checkers.symbolic.lemmas import prove
from lockstep.cli import main
from lockstep.models import LEMMAS, get_protocol
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.lemma import integer_lemma, lemma
from lockstep.spec.semantics import InterpretedSystem, unpack
from lockstep.spec.sorts import BOOL, INTEGER, integers
from lockstep.spec.terms import Term, if_then_else

SUM_VOTE = next(item for item in LEMMAS if item.name == "dp-pause/sum-vote")


def test_sum_vote_lemma_is_proved_for_all_sizes() -> None:
    outcome = prove(SUM_VOTE)
    assert outcome.outcome == "proved" and outcome.as_expected


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6])
def test_sum_vote_lemma_holds_concretely_and_matches_the_model_code(size: int) -> None:
    """For every 0/1 vote vector of this size: the lemma's fold holds, and the dp-pause model's own
    finish_sync (post-fix), run by the evaluator, decides exactly what the lemma says."""
    votes = list(itertools.product((0, 1), repeat=2 * size))
    for flat in votes:
        vector = tuple((flat[2 * rank], flat[2 * rank + 1]) for rank in range(size))
        assert SUM_VOTE.holds_for(vector)
    if size < 2:
        return  # the model needs two ranks
    machine = get_protocol("dp-pause").instance("post-fix", ranks=size).machine()
    system = InterpretedSystem(machine)
    finish_sync = machine.action_named("finish_sync")
    state = unpack(machine, system.initial())
    for flat in votes:
        unfinished = sum(flat[0::2])
        pending = sum(flat[1::2])
        any_unfinished, all_pending, any_pending = unfinished > 0, pending == size, pending > 0
        sync_state = {
            **state,
            "mode": tuple(3 for _ in range(size)),
            "engine_dp.result": tuple((unfinished, pending) for _ in range(size)),
        }
        updates = dict(finish_sync.updates)
        environment = Environment(sync_state, {"rank": 0})
        running = evaluate(updates["engines_running"], environment)[0]  # type: ignore[index]
        ignore = evaluate(updates["ignore_start_dp_wave"], environment)[0]  # type: ignore[index]
        assert ignore == all_pending
        if any_pending and not all_pending:
            assert running is True
        if all_pending:
            assert running == any_unfinished


def counter_lemma() -> object:
    """The first -1 of a list is where its trailing run of -1 begins: false outside real* (-1)+."""

    def step(acc: dict[str, Term], token: Term, index: Term) -> dict[str, Term]:
        is_placeholder = token == -1
        return {
            "first": if_then_else(is_placeholder & (acc["first"] == -1), index, acc["first"]),
            "run_start": if_then_else(is_placeholder, if_then_else(acc["in_run"], acc["run_start"], index), -1),
            "in_run": is_placeholder,
        }

    return lemma(
        "test/first-equals-run-start",
        "forward scan equals backward scan on every list (false: [-1, 0, -1])",
        expected="refuted",
        element=integers(-1, 1),
        accumulators={"first": (INTEGER, -1), "run_start": (INTEGER, -1), "in_run": (BOOL, False)},
        step=step,
        invariant=lambda acc, index: acc["in_run"].implies(acc["run_start"] >= 0),
        conclusion=lambda acc, size: acc["in_run"].implies(acc["first"] == acc["run_start"]),
        minimum_size=1,
    )


def test_a_counter_lemma_is_refuted_with_a_concrete_list() -> None:
    outcome = prove(counter_lemma())  # type: ignore[arg-type]
    assert outcome.outcome == "refuted" and outcome.as_expected
    assert outcome.counterexample is not None and outcome.counterexample[0] == -1 and outcome.counterexample[-1] == -1


def test_a_too_weak_strengthening_leaves_a_true_lemma_unproved() -> None:
    weak = lemma(
        "test/weak",
        "a sum of 0/1 flags never exceeds the length (true, but the strengthening says nothing)",
        expected="proved",
        element=integers(0, 1),
        accumulators={"total": (INTEGER, 0)},
        step=lambda acc, flag, index: {"total": acc["total"] + flag},
        invariant=lambda acc, index: True,
        conclusion=lambda acc, size: acc["total"] <= size,
    )
    assert prove(weak).outcome == "unproved"


def test_prove_lemmas_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["prove-lemmas", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["as_expected"] is True
    outcomes = {row["lemma"]: row["outcome"] for row in payload["lemmas"]}
    assert outcomes == {item.name: item.expected for item in LEMMAS} and outcomes["dp-pause/sum-vote"] == "proved"


def test_an_integer_lemma_is_proved_refuted_or_unproved_directly() -> None:
    """Lemmas over unbounded integer parameters: one Z3 query, concrete cases searched with evaluate."""
    square = integer_lemma(
        "test/square",
        "a*a >= a for integers",
        expected="proved",
        parameters=("a",),
        domain=lambda a: a == a,
        conclusion=lambda a: a * a >= a,
    )
    assert prove(square).outcome == "proved" and square.holds_for((-3,)) and square.concrete_counterexample() is None
    growing = integer_lemma(
        "test/growing",
        "b >= 0 makes a + b larger (false at b = 0)",
        expected="refuted",
        parameters=("a", "b"),
        domain=lambda a, b: b >= 0,
        conclusion=lambda a, b: a + b > a,
    )
    outcome = prove(growing)
    assert outcome.outcome == "refuted" and outcome.as_expected and outcome.counterexample == (-6, 0)
    far = integer_lemma(
        "test/far",
        "false only beyond the searched values",
        expected="proved",
        parameters=("a",),
        domain=lambda a: a >= 0,
        conclusion=lambda a: a < 100,
    )
    assert prove(far).outcome == "unproved" and all(far.holds_for(case) for case in far.cases(6))
    assert list(
        integer_lemma(
            "test/cases",
            "",
            expected="proved",
            parameters=("a", "b"),
            domain=lambda a, b: (a >= 1) & (b == a),
            conclusion=lambda a, b: True,
        ).cases(2)
    ) == [(1, 1), (2, 2)]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"expected": "maybe", "parameters": ("a",)}, "expected must be one of"),
        ({"expected": "proved", "parameters": ("a", "a")}, "parameters must be distinct"),
        ({"expected": "proved", "parameters": ("a",), "conclusion": lambda a: a + 1}, "the conclusion must be Bool"),
    ],
)
def test_integer_lemma_definition_errors(arguments: dict[str, object], message: str) -> None:
    from lockstep.spec.terms import DefinitionError

    defaults: dict[str, object] = {"domain": lambda a: a >= 0, "conclusion": lambda a: a >= 0}
    with pytest.raises(DefinitionError, match=message):
        integer_lemma("test/bad", "", **{**defaults, **arguments})  # type: ignore[arg-type]
