"""Tests for lockstep.checkers.symmetry: fewer states, same verdicts, refusals, concrete counterexamples."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_explicit import assert_replayable

from lockstep.checkers import Verdict, check
from lockstep.checkers.symmetry import Canonicalizer, SymmetryError, argument_permuters
from lockstep.models import get_protocol
from lockstep.spec.machine import IN_BOUNDS, WELL_DEFINED, Machine, Step
from lockstep.spec.semantics import InterpretedSystem, State
from lockstep.spec.sorts import IndexSort, MapSort, integers
from lockstep.spec.terms import Term, all_of, any_of, constant, sum_of

Rank = IndexSort("Rank", 3)


def ranks_machine(
    *, guarded: bool = True, members: tuple[int, ...] | None = None, initial: tuple[int, ...] = (0, 0, 0)
) -> tuple[Machine, Term]:
    """Three ranks, each with a counter in 0..2 that only it increments."""
    machine = Machine("ranks")
    counters = machine.variable("counters", MapSort(Rank, integers(0, 2)), initial)
    machine.add_action(
        "inc",
        lambda rank: Step(counters[rank] < 2 if guarded else True, {counters: counters.set(rank, counters[rank] + 1)}),
        actor="rank:{rank}",
        rank=Rank,
    )
    machine.set_final(all_of(Rank, lambda rank: counters[rank] == 2))
    machine.declare_symmetric(Rank, members)
    return machine, counters


def with_properties(machine: Machine, counters: Term) -> Machine:
    machine.always("total_bounded", sum_of(Rank, lambda rank: counters[rank]) <= 6)
    machine.always("not_all_two", ~all_of(Rank, lambda rank: counters[rank] == 2))
    machine.sometimes(
        "spread", any_of(Rank, lambda low: any_of(Rank, lambda high: (counters[low] == 0) & (counters[high] == 2)))
    )
    return machine


def test_symmetry_reduces_states_and_keeps_verdicts() -> None:
    plain = check(with_properties(*ranks_machine()), engine="bfs")
    reduced = check(with_properties(*ranks_machine()), engine="bfs", symmetry=True)
    assert plain.stats.states == 27 and plain.stats.transitions == 54
    assert reduced.stats.states == 10, "multisets of three counters in 0..2"
    assert reduced.stats.transitions == 20, "enabled ranks summed over the ten sorted representatives"
    verdicts = {p.name: p.verdict for p in plain.properties}
    assert {p.name: p.verdict for p in reduced.properties} == verdicts
    assert verdicts == {
        IN_BOUNDS: Verdict.HOLDS,
        WELL_DEFINED: Verdict.HOLDS,
        "total_bounded": Verdict.HOLDS,
        "not_all_two": Verdict.VIOLATED,
        "spread": Verdict.HOLDS,
        "no_deadlock": Verdict.HOLDS,
    }
    for result in (plain, reduced):
        assert result.property_result("not_all_two").path.length == 6  # type: ignore[union-attr]
        assert result.property_result("spread").path.length == 2  # type: ignore[union-attr]


def test_counterexamples_under_symmetry_are_concrete_paths() -> None:
    machine, counters = ranks_machine()
    with_properties(machine, counters)
    result = check(machine, engine="bfs", symmetry=True)
    canonical = Canonicalizer(machine)
    for name in ("not_all_two", "spread"):
        path = result.property_result(name).path
        assert path is not None
        assert_replayable(machine, path)
        assert any(step.state != canonical(step.state) for step in path.steps), (
            "the path is not a chain of representatives"
        )
    spread = result.property_result("spread").path
    assert spread is not None
    assert spread.final_state in {((0, 0, 2),), ((0, 2, 0),), ((2, 0, 0),)}


def test_in_bounds_counterexample_under_symmetry_is_concrete() -> None:
    machine, _ = ranks_machine(guarded=False)
    result = check(machine, engine="bfs", symmetry=True)
    overflow = result.property_result(IN_BOUNDS)
    assert overflow.verdict is Verdict.VIOLATED and overflow.path is not None and overflow.path.length == 3
    assert_replayable(machine, overflow.path)
    final = overflow.path.final_state[0]
    assert isinstance(final, tuple) and 3 in final
    # the detail names the entry of the replayed (concrete) path, not of a stored representative
    assert overflow.detail == f"counters[{final.index(3)}] would become 3, outside Int[0..2]"


def test_canonical_form_is_the_least_image() -> None:
    machine, _ = ranks_machine()
    canonical = Canonicalizer(machine.finish())
    assert len(canonical.permutations) == 6
    assert canonical(((2, 0, 1),)) == ((0, 1, 2),)
    assert canonical(((1, 1, 0),)) == ((0, 1, 1),)


def test_symmetry_over_a_subset_accepts_naming_the_other_rank() -> None:
    machine, counters = ranks_machine(members=(1, 2))
    machine.always("rank_zero_small", counters[0] <= 2)
    plain = check(ranks_machine(members=(1, 2))[0], engine="bfs")
    reduced = check(machine, engine="bfs", symmetry=True)
    assert plain.stats.states == 27
    assert reduced.stats.states == 18, "rank 0's counter times the unordered pairs of ranks 1 and 2"
    assert reduced.verdict is Verdict.HOLDS
    canonical = Canonicalizer(machine)
    assert canonical(((2, 1, 0),)) == ((2, 0, 1),), "rank 0 is never moved"


def test_symmetry_over_two_sorts() -> None:
    machine = Machine("two-sorts")
    Stage = IndexSort("Stage", 2)
    Pair = IndexSort("Pair", 2)
    stages = machine.variable("stages", MapSort(Stage, integers(0, 2)), (0, 0))
    pairs = machine.variable("pairs", MapSort(Pair, integers(0, 2)), (0, 0))
    machine.add_action(
        "stage", lambda s: Step(stages[s] < 2, {stages: stages.set(s, stages[s] + 1)}), actor="stage:{s}", s=Stage
    )
    machine.add_action(
        "pair", lambda p: Step(pairs[p] < 2, {pairs: pairs.set(p, pairs[p] + 1)}), actor="pair:{p}", p=Pair
    )
    machine.set_final(all_of(Stage, lambda s: stages[s] == 2) & all_of(Pair, lambda p: pairs[p] == 2))
    machine.declare_symmetric(Stage)
    machine.declare_symmetric(Pair)
    assert check(machine, engine="bfs", symmetry=True).stats.states == 36
    assert check(machine, engine="bfs").stats.states == 81


def test_refused_when_a_property_names_a_rank() -> None:
    machine, counters = ranks_machine()
    machine.always("first_small", counters[1] <= 2)
    with pytest.raises(
        SymmetryError, match=r"symmetry over Rank \[0, 1, 2\] is broken by property first_small: it names Rank 1"
    ):
        check(machine, engine="bfs", symmetry=True)
    assert check(machine, engine="bfs").verdict is Verdict.HOLDS, "without symmetry the same machine is fine"


def test_refused_when_ranks_are_ordered() -> None:
    machine, counters = ranks_machine()
    machine.add_action(
        "overtake",
        lambda rank, other: Step(rank < other, {counters: counters.set(rank, counters[other])}),
        actor="rank:{rank}",
        rank=Rank,
        other=Rank,
    )
    with pytest.raises(
        SymmetryError, match=r"broken by action overtake: < orders or computes with Rank values \(\(rank < other\)\)"
    ):
        check(machine, engine="bfs", symmetry=True)


def test_refused_when_arithmetic_uses_ranks() -> None:
    machine, counters = ranks_machine()
    machine.always("odd", sum_of(Rank, lambda rank: rank + counters[rank]) >= 0)
    with pytest.raises(SymmetryError, match=r"broken by property odd: \+ orders or computes with Rank values"):
        check(machine, engine="bfs", symmetry=True)


def test_refused_when_the_initial_state_is_not_symmetric() -> None:
    machine, _ = ranks_machine(initial=(1, 0, 0))
    with pytest.raises(SymmetryError, match="symmetry of machine ranks: the initial state is not symmetric"):
        check(machine, engine="bfs", symmetry=True)


def test_refused_when_nothing_is_declared() -> None:
    machine = Machine("plain")
    machine.variable("x", integers(0, 1), 0)
    with pytest.raises(SymmetryError, match="machine plain declares no symmetric sort"):
        check(machine, engine="bfs", symmetry=True)


def test_symmetry_refused_when_a_rank_leaks_into_an_integer() -> None:
    Rank = IndexSort("Rank", 3)
    machine = Machine("leak")
    last = machine.variable("last", integers(-1, 2), -1)
    seen = machine.variable("seen", MapSort(Rank, integers(0, 1)), (0, 0, 0))
    machine.add_action(
        "touch",
        lambda rank: Step(seen[rank] == 0, {seen: seen.set(rank, 1), last: rank}),
        actor="rank:{rank}",
        rank=Rank,
    )
    machine.declare_symmetric(Rank)
    machine.finish()
    with pytest.raises(SymmetryError, match="stores a Rank value in last of sort Int"):
        Canonicalizer(machine)


def test_symmetry_refused_when_a_rank_is_compared_with_an_integer_constant() -> None:
    Rank = IndexSort("Rank", 3)
    machine = Machine("compare")
    seen = machine.variable("seen", MapSort(Rank, integers(0, 1)), (0, 0, 0))
    one = constant(1, integers(0, 2))  # an integer, not a Rank: permuting ranks does not move it
    machine.add_action(
        "touch", lambda rank: Step(rank != one, {seen: seen.set(rank, 1)}), actor="rank:{rank}", rank=Rank
    )
    machine.declare_symmetric(Rank)
    machine.finish()
    with pytest.raises(SymmetryError, match="it compares Rank with Int"):
        Canonicalizer(machine)


def _eager_least_image(canonical: Canonicalizer, state: State) -> State:
    """The definition: the least of every permutation's whole image."""
    return tuple(min(permute(state) for permute in canonical.permutations))


@functools.cache
def _walked(ranks: int) -> tuple[InterpretedSystem, Canonicalizer]:
    """dp-pause post-fix at ``ranks`` ranks (ranks 1.. symmetric) and its canonicalizer."""
    machine = get_protocol("dp-pause").instance("post-fix", "seed", overrides={"ranks": ranks}).machine()
    return InterpretedSystem(machine), Canonicalizer(machine)


@settings(max_examples=60, deadline=None)
@given(ranks=st.sampled_from([3, 4]), choices=st.lists(st.integers(0, 10**6), min_size=1, max_size=60))
def test_the_lazy_least_image_is_the_least_of_the_whole_images(ranks: int, choices: list[int]) -> None:
    """``Canonicalizer`` compares images variable by variable and builds only the least one; on every
    state of random walks through dp-pause at 3 and 4 ranks (2 and 6 permutations), and on each
    state's images, it gives exactly the least whole image."""
    system, canonical = _walked(ranks)
    state = system.initial()
    for choice in choices:
        for image in [state, *(permute(state) for permute in canonical.permutations)]:
            assert canonical(image) == _eager_least_image(canonical, image)
        transitions = [t for t in system.transitions(state) if t.out_of_bounds is None]
        if not transitions:
            break
        state = transitions[choice % len(transitions)].target


@settings(max_examples=30, deadline=None)
@given(ranks=st.sampled_from([3, 4]), choices=st.lists(st.integers(0, 10**6), min_size=1, max_size=40))
def test_permuted_arguments_from_a_permuted_state_reach_the_permuted_target(ranks: int, choices: list[int]) -> None:
    """What the symmetric witness paths rely on (``PathBuilder._followed``): from every state of
    random walks through dp-pause, each permutation applied to the state and to a step's arguments
    (``argument_permuters``) gives a step of evaluate to the permuted target."""
    system, canonical = _walked(ranks)
    moves = [argument_permuters(system.machine, combination) for combination in canonical.combinations]
    state = system.initial()
    for choice in choices:
        transitions = system.transitions(state)
        for permute, move in zip(canonical.permutations, moves):
            image = permute(state)
            for transition in transitions:
                arguments = move[transition.action](transition.arguments)
                targets = [t.target for t in system.transitions(image, transition.action, arguments)]
                assert permute(transition.target) in targets
        in_bounds = [t for t in transitions if t.out_of_bounds is None]
        if not in_bounds:
            break
        state = in_bounds[choice % len(in_bounds)].target


def test_argument_permuters_move_every_symmetric_sort_of_a_combination() -> None:
    machine = Machine("two-sorts-arguments")
    Stage = IndexSort("Stage", 2)
    Pair = IndexSort("Pair", 3)
    stages = machine.variable("stages", MapSort(Stage, integers(0, 1)), (0, 0))
    machine.add_action(
        "both", lambda s, p: Step(stages[s] < 1, {stages: stages.set(s, 1)}), actor="stage:{s}", s=Stage, p=Pair
    )
    machine.declare_symmetric(Stage)
    machine.declare_symmetric(Pair)
    canonical = Canonicalizer(machine)
    moved = {argument_permuters(machine, c)[0]((0, 2)) for c in canonical.combinations}
    assert moved == {(s, p) for s in range(2) for p in range(3)}
    assert argument_permuters(machine, canonical.combinations[0])[0]((1, 2)) == (1, 2), "the identity first"


def test_vectorised_paths_leave_the_representatives_and_step_out_of_bounds_where_the_concrete_run_does() -> None:
    """Counters counting down from 2: the vectorised engines' representative puts the lowest counter
    last (least packed words), while the first rank decremented is rank 0, so the concrete run
    stands at a permuted image of the representatives and the step that leaves the sort is the
    representative's with its argument moved; the path is the reference engine's, replayable."""
    machine = Machine("down")
    counters = machine.variable("counters", MapSort(Rank, integers(0, 2)), (2, 2, 2))
    machine.add_action(
        "dec",
        lambda rank: Step(True, {counters: counters.set(rank, counters[rank] - 1)}),
        actor="rank:{rank}",
        rank=Rank,
    )
    machine.declare_symmetric(Rank)
    reference = check(machine, "bfs", symmetry=True).property_result(IN_BOUNDS)
    assert reference.path is not None and reference.path.length == 3
    for engine, options in (("bfs-vec", {}), ("bfs-gpu", {"device": "cpu"})):
        found = check(machine, engine, symmetry=True, **options).property_result(IN_BOUNDS)
        assert found.verdict is Verdict.VIOLATED and found.path == reference.path, engine
        assert found.detail == "counters[0] would become -1, outside Int[0..2]"
        assert_replayable(machine, found.path)
