"""Proofs for every number of ranks (``lockstep.checkers.symbolic.all_ranks``, ``rank_family``): the
model as one family in its rank count, a property proved for symbolic N and re-checked, and a
planted wrong invariant refused by the re-check."""

from __future__ import annotations

import pytest

from lockstep.checkers.symbolic.all_ranks import (
    COUNTING_LEMMA,
    Candidate,
    _Budget,
    _Prover,
    features,
    recheck,
)
from lockstep.checkers.symbolic.lemmas import prove
from lockstep.checkers.symbolic.rank_family import NotUniform, family
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.models.dp_pause.model import PROTOCOL


@pytest.fixture(scope="module")
def seed_family():  # type: ignore[no-untyped-def]
    instance = PROTOCOL.instance("post-fix")
    return family(PROTOCOL, instance.variant, instance.parameters)


@pytest.fixture(scope="module")
def seed_features(seed_family):  # type: ignore[no-untyped-def]
    initial = PROTOCOL.instance("post-fix", ranks=2).machine().initial_state()
    return features(seed_family, {2: [tuple(initial.values())]})


def test_counting_lemma_is_proved() -> None:
    assert prove(COUNTING_LEMMA).outcome == "proved"


def test_dp_pause_is_one_family_at_every_admitted_rank_count(seed_family) -> None:  # type: ignore[no-untyped-def]
    assert seed_family.sizes == tuple(range(2, 9))
    assert seed_family.offsets  # replies == ranks and the SUM vote's dp_size follow N


def test_a_builder_that_loops_over_ranks_is_not_one_family() -> None:
    """A model whose expression has one operand per rank is refused, naming where."""
    from lockstep.spec.machine import Machine
    from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
    from lockstep.spec.sorts import BOOL, IndexSort, MapSort
    from lockstep.spec.terms import conjunction

    def build(variant: str, parameters: dict[str, int]) -> Machine:
        machine = Machine("loop")
        rank = IndexSort("Rank", parameters["ranks"])
        flag = machine.variable("flag", MapSort(rank, BOOL), tuple(False for _ in range(parameters["ranks"])))
        machine.always("all_false", conjunction(*(~flag[r] for r in range(parameters["ranks"]))))
        return machine

    protocol = Protocol(
        name="loop",
        title="loop",
        change="-",
        variants=(VariantSpec("post-fix", "-", "-"),),
        parameters=(ParameterSpec("ranks", 2, "ranks", minimum=2, maximum=4),),
        instances=(InstanceSpec("seed", "-"),),
        build=build,
        rank_parameter="ranks",
    )
    with pytest.raises(NotUniform, match="loop"):
        family(protocol, "post-fix", {"ranks": 2})


@pytest.mark.slow  # about two minutes of Z3 on the 2-core machine
def test_forward_counts_agree_is_proved_for_every_n_and_rechecked(seed_family, seed_features) -> None:  # type: ignore[no-untyped-def]
    """With sync_interval = 1 the step counter's sort is [0, 0]: the sorts alone imply S2 for every N,
    and the separate re-check (initiation, consecution per action, the property) agrees."""
    with bit_vectors(None):
        prover = _Prover(seed_family, seed_features, _Budget(300.0, 60.0))
        answer, _ = prover.implies([], "forward_counts_agree")
    assert answer == "unsat"
    assert recheck(seed_family, seed_features, [], ["forward_counts_agree"]) is None


@pytest.mark.slow  # about two minutes of Z3 on the 2-core machine
def test_a_planted_wrong_invariant_is_refused(seed_family, seed_features) -> None:  # type: ignore[no-untyped-def]
    """'for every rank r: mode[r] == TOP' holds initially but a step leaves it: the re-check refuses it,
    with the concrete step that breaks it."""
    atoms = seed_features.local
    top = next(i for i, atom in enumerate(atoms) if atom.variable == "mode" and atom.value == 0)
    wrong = Candidate(1, ((top, True, 0),))
    problem = recheck(seed_family, seed_features, [wrong], ["quiescent_during_rpc"])
    assert problem is not None and problem.startswith("consecution of")


def test_list_says_which_properties_are_proved_for_every_n() -> None:
    """``lockstep list dp-pause`` names the pinned all-N proof in its own column."""
    import subprocess
    import sys

    listing = subprocess.run(
        [sys.executable, "-m", "lockstep", "list", "dp-pause"], capture_output=True, text=True, check=True
    )
    assert "proved for all N" in listing.stdout
    row = [line for line in listing.stdout.splitlines() if line.startswith("│ dp-pause")][-1]
    assert row.split("│")[2].strip() == "forward_counts_agree"
