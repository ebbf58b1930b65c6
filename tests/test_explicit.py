"""Tests for lockstep.checkers.explicit.search (through ``check``): verdicts, paths and counts known by hand."""

from __future__ import annotations

import pytest

from lockstep.checkers import CheckResult, Limits, Path, PropertyResult, Statistics, Verdict, check, system_for
from lockstep.checkers.counterexample import first_invalid_step
from lockstep.checkers.explicit.search import ExplicitSearch
from lockstep.checkers.result import EXIT_CODES
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine, PropertyKind, Step
from lockstep.spec.protocol import UsageError
from lockstep.spec.semantics import InterpretedSystem, unpack
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, SequenceSort, integers
from lockstep.spec.terms import Term

COMPILED = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "interpreted"])


def two_counters(*, final: bool = True, never: bool = False) -> tuple[Machine, Term, Term]:
    """Counters a and b in 0..2, each incremented by its own action: 9 states, 12 transitions."""
    machine = Machine("two-counters")
    a = machine.variable("a", integers(0, 2), 0)
    b = machine.variable("b", integers(0, 2), 0)
    machine.add_action("inc_a", lambda: Step(a < 2, {a: a + 1}), actor="a")
    machine.add_action("inc_b", lambda: Step(b < 2, {b: b + 1}), actor="b")
    if never:
        machine.add_action("never", lambda: Step(a > 5, {a: 0}), actor="a")
    if final:
        machine.set_final((a == 2) & (b == 2))
    return machine, a, b


def actions_of(path: Path | None) -> list[str]:
    assert path is not None
    return [step.action for step in path.steps]


def assert_replayable(machine: Machine, path: Path) -> None:
    """Each step's state is a successor of the previous one under the step's action and arguments."""
    last_leaves_sort = path.steps != () and not all(
        machine.variables[name].sort.contains(value)
        for name, value in zip(machine.variables, path.final_state, strict=True)
    )
    assert first_invalid_step(InterpretedSystem(machine), path, ends_out_of_bounds=last_leaves_sort) is None


@COMPILED
def test_counts_of_a_complete_search(compiled: bool) -> None:
    machine, a, b = two_counters()
    machine.always("bounded", a + b <= 4)
    result = check(machine, engine="bfs", compiled=compiled)
    assert result.stats.states == 9
    assert result.stats.transitions == 12, "(state, action, arguments) triples: a<2 in 6 states, b<2 in 6"
    assert result.stats.depth == 4
    assert result.stopped is None and result.warnings == []
    assert [(p.name, p.verdict) for p in result.properties] == [
        (IN_BOUNDS, Verdict.HOLDS),
        (WELL_DEFINED, Verdict.HOLDS),
        ("bounded", Verdict.HOLDS),
        (NO_DEADLOCK, Verdict.HOLDS),
    ]
    assert result.verdict is Verdict.HOLDS and result.exit_code == 0 and result.engine == "bfs"


@COMPILED
def test_transitions_count_every_enabled_argument_tuple(compiled: bool) -> None:
    machine = Machine("indexed")
    Which = IndexSort("Which", 2)
    counters = machine.variable("counters", MapSort(Which, integers(0, 2)), (0, 0))
    machine.add_action(
        "inc",
        lambda which: Step(counters[which] < 2, {counters: counters.set(which, counters[which] + 1)}),
        actor="counter:{which}",
        which=Which,
    )
    machine.add_action(
        "noop", lambda which, other: Step(which != other), actor="counter:{which}", which=Which, other=Which
    )
    machine.set_final(counters[0] + counters[1] == 4)
    result = check(machine, engine="bfs", compiled=compiled)
    assert result.stats.states == 9
    assert result.stats.transitions == 12 + 9 * 2, "noop is enabled for (0, 1) and (1, 0) in all 9 states"
    assert result.verdict is Verdict.HOLDS


@COMPILED
def test_bfs_counterexample_is_shortest(compiled: bool) -> None:
    machine, a, b = two_counters()
    machine.always("not_two_one", ~((a == 2) & (b == 1)))
    result = check(machine, engine="bfs", compiled=compiled)
    violated = result.property_result("not_two_one")
    assert violated.verdict is Verdict.VIOLATED and violated.kind is PropertyKind.ALWAYS
    assert actions_of(violated.path) == ["inc_a", "inc_a", "inc_b"]
    assert violated.path is not None and unpack(machine, violated.path.final_state) == {"a": 2, "b": 1}
    assert [step.actor for step in violated.path.steps] == ["a", "a", "b"]
    assert_replayable(machine, violated.path)
    assert result.counterexample is violated and violated.counterexample is violated.path
    assert result.verdict is Verdict.VIOLATED and result.exit_code == 1


@COMPILED
def test_dfs_finds_the_violation_along_its_own_path(compiled: bool) -> None:
    machine, a, b = two_counters()
    machine.always("not_two_one", ~((a == 2) & (b == 1)))
    result = check(machine, engine="dfs", compiled=compiled)
    violated = result.property_result("not_two_one")
    assert violated.verdict is Verdict.VIOLATED and result.engine == "dfs"
    # DFS expands the last-discovered state first: (0,0) -> (0,1) -> (0,2) -> (1,2) -> (2,2), then (1,1) -> (2,1)
    assert actions_of(violated.path) == ["inc_b", "inc_a", "inc_a"]
    assert violated.path is not None
    assert_replayable(machine, violated.path)


@COMPILED
def test_sometimes_witnessed_holds_with_the_shortest_witness(compiled: bool) -> None:
    machine, a, b = two_counters()
    machine.sometimes("reach_one_two", (a == 1) & (b == 2))
    result = check(machine, engine="bfs", compiled=compiled)
    witnessed = result.property_result("reach_one_two")
    assert witnessed.verdict is Verdict.HOLDS and witnessed.kind is PropertyKind.SOMETIMES
    assert actions_of(witnessed.path) == ["inc_a", "inc_b", "inc_b"]
    assert witnessed.counterexample is None, "a witness is not a counterexample"
    assert result.verdict is Verdict.HOLDS


@COMPILED
def test_sometimes_unreachable_is_violated_after_a_complete_search(compiled: bool) -> None:
    machine, a, b = two_counters()
    machine.sometimes("reach_three", a + b == 5)
    result = check(machine, engine="bfs", compiled=compiled)
    unreachable = result.property_result("reach_three")
    assert unreachable.verdict is Verdict.VIOLATED and unreachable.path is None
    assert unreachable.detail == "no reachable state satisfies it"
    assert result.stats.states == 9 and result.verdict is Verdict.VIOLATED


def long_chain(length: int = 3000) -> tuple[Machine, Term]:
    machine = Machine("chain")
    x = machine.variable("x", integers(0, length), 0)
    machine.add_action("inc", lambda: Step(x < length, {x: x + 1}), actor="a")
    machine.set_final(x == length)
    return machine, x


def test_sometimes_is_inconclusive_when_max_states_stops_the_search() -> None:
    machine, x = long_chain()
    machine.sometimes("end", x == 3000)
    machine.always("never_end", x < 3000)
    result = check(machine, engine="bfs", limits=Limits(max_states=100))
    assert result.stopped == "max-states"
    assert 100 <= (result.stats.states or 0) < 3001, "limits are checked periodically, never past the state space"
    end = result.property_result("end")
    assert end.verdict is Verdict.INCONCLUSIVE and end.detail == "no witness in the explored states"
    assert result.property_result("never_end").verdict is Verdict.INCONCLUSIVE
    assert result.verdict is Verdict.INCONCLUSIVE and result.exit_code == 3


def test_timeout_stops_the_search_inconclusively() -> None:
    machine, x = long_chain()
    machine.always("small", x <= 3000)
    result = check(machine, engine="bfs", limits=Limits(timeout_seconds=0.0))
    assert result.stopped == "timeout"
    assert result.property_result("small").verdict is Verdict.INCONCLUSIVE
    assert result.verdict is Verdict.INCONCLUSIVE


def test_a_violation_found_before_a_limit_still_wins() -> None:
    machine, x = long_chain()
    machine.always("below_five", x < 5)
    result = check(machine, engine="bfs", limits=Limits(max_states=100))
    assert result.property_result("below_five").verdict is Verdict.VIOLATED
    assert result.verdict is Verdict.VIOLATED


@pytest.mark.parametrize(
    ("max_depth", "states", "verdict"),
    [(2, 6, Verdict.HOLDS_WITHIN_BOUND), (3, 8, Verdict.HOLDS_WITHIN_BOUND), (4, 9, Verdict.VIOLATED)],
)
def test_max_depth_bounds_the_search(max_depth: int, states: int, verdict: Verdict) -> None:
    machine, a, b = two_counters()
    machine.always("not_both_two", ~((a == 2) & (b == 2)))
    machine.sometimes("both_two", (a == 2) & (b == 2))
    result = check(machine, engine="bfs", limits=Limits(max_depth=max_depth))
    assert result.stats.states == states, "states at the depth bound are stored and checked but not expanded"
    assert result.property_result("not_both_two").verdict is verdict
    assert result.stopped is None
    if verdict is Verdict.HOLDS_WITHIN_BOUND:
        assert result.property_result("both_two").verdict is Verdict.INCONCLUSIVE
        assert result.property_result(NO_DEADLOCK).verdict is Verdict.HOLDS_WITHIN_BOUND
        assert result.verdict is Verdict.INCONCLUSIVE, "an unwitnessed sometimes outranks holds-within-bound"


def test_max_depth_alone_gives_holds_within_bound() -> None:
    machine, a, b = two_counters()
    machine.always("bounded", a + b <= 4)
    result = check(machine, engine="bfs", limits=Limits(max_depth=1))
    assert {p.name: p.verdict for p in result.properties} == {
        IN_BOUNDS: Verdict.HOLDS_WITHIN_BOUND,
        WELL_DEFINED: Verdict.HOLDS_WITHIN_BOUND,
        "bounded": Verdict.HOLDS_WITHIN_BOUND,
        NO_DEADLOCK: Verdict.HOLDS_WITHIN_BOUND,
    }
    assert result.verdict is Verdict.HOLDS_WITHIN_BOUND and result.exit_code == 0


@COMPILED
def test_in_bounds_violated_when_an_update_leaves_its_sort(compiled: bool) -> None:
    machine = Machine("overflow")
    x = machine.variable("x", integers(0, 2), 0)
    machine.add_action("inc", lambda: Step(True, {x: x + 1}), actor="a")
    result = check(machine, engine="bfs", compiled=compiled)
    overflow = result.property_result(IN_BOUNDS)
    assert overflow.verdict is Verdict.VIOLATED and overflow.builtin
    assert overflow.detail == "x would become 3, outside Int[0..2]"
    assert actions_of(overflow.path) == ["inc", "inc", "inc"]
    assert overflow.path is not None and overflow.path.final_state == (3,)
    assert result.stats.states == 3, "the out-of-sort state is never stored"
    assert result.property_result(NO_DEADLOCK).verdict is Verdict.HOLDS


@COMPILED
def test_no_deadlock_violated_in_a_dead_state_that_is_not_final(compiled: bool) -> None:
    machine, _, _ = two_counters(final=False)
    result = check(machine, engine="bfs", compiled=compiled)
    deadlock = result.property_result(NO_DEADLOCK)
    assert deadlock.verdict is Verdict.VIOLATED and deadlock.detail == "no action is enabled"
    assert actions_of(deadlock.path) == ["inc_a", "inc_a", "inc_b", "inc_b"]
    holding, _, _ = two_counters(final=True)
    assert check(holding, engine="bfs", compiled=compiled).property_result(NO_DEADLOCK).verdict is Verdict.HOLDS


def test_always_with_an_at_deadlock_condition() -> None:
    machine, a, b = two_counters(final=True)
    machine.always("ends_balanced", a >= 0, at_deadlock=a < b)
    result = check(machine, engine="bfs")
    ends = result.property_result("ends_balanced")
    assert ends.verdict is Verdict.VIOLATED and ends.detail == "no action is enabled"
    assert unpack(machine, ends.path.final_state) == {"a": 2, "b": 2}  # type: ignore[union-attr]


def test_warnings_list_actions_never_enabled() -> None:
    machine, _, _ = two_counters(never=True)
    result = check(machine, engine="bfs")
    assert result.warnings == ["action never was never enabled in the explored states"]


@COMPILED
def test_undefined_operations_are_well_defined_violations_in_both_systems(compiled: bool) -> None:
    """Where ``evaluate`` raises (the tail of an empty queue, in an update or a property), the state
    violates ``well_defined``, with the path to it and what failed; an undefined property does not
    hold (it was a model error ending the search)."""
    machine = Machine("broken")
    queue = machine.variable("queue", SequenceSort(BOOL, 1), ())
    machine.add_action("pop", lambda: Step(True, {queue: queue.tail()}), actor="a")
    result = check(machine, engine="bfs", compiled=compiled)
    undefined = result.property_result(WELL_DEFINED)
    assert undefined.verdict is Verdict.VIOLATED and undefined.path is not None and undefined.path.length == 0
    assert "pop" in undefined.detail and "tail of an empty sequence" in undefined.detail, undefined.detail
    assert result.property_result(NO_DEADLOCK).verdict is Verdict.HOLDS  # no successors, but no deadlock
    property_machine = Machine("broken-property")
    queue = property_machine.variable("queue", SequenceSort(BOOL, 1), ())
    property_machine.always("front_false", queue.head() == False)  # noqa: E712 - builds an IR comparison
    result = check(property_machine, engine="bfs", compiled=compiled)
    assert "property front_false" in result.property_result(WELL_DEFINED).detail
    front = result.property_result("front_false")
    assert front.verdict is Verdict.VIOLATED and "cannot be evaluated" in front.detail


def test_unknown_engine_and_order_are_refused() -> None:
    machine, _, _ = two_counters()
    with pytest.raises(
        UsageError, match="unknown engine 'astar'; engines: auto, bfs, dfs, bfs-vec, bfs-gpu, bmc, induction"
    ):
        check(machine, engine="astar")
    with pytest.raises(ValueError, match="unknown search order 'random'"):
        ExplicitSearch(system_for(machine.finish()), order="random")


def _result(*verdicts: Verdict) -> CheckResult:
    machine, _, _ = two_counters()
    properties = [PropertyResult(f"p{index}", PropertyKind.ALWAYS, verdict) for index, verdict in enumerate(verdicts)]
    return CheckResult(machine.finish(), "bfs", properties, Statistics())


@pytest.mark.parametrize(
    ("verdicts", "overall"),
    [
        ((Verdict.HOLDS, Verdict.HOLDS_WITHIN_BOUND, Verdict.INCONCLUSIVE, Verdict.VIOLATED), Verdict.VIOLATED),
        ((Verdict.VIOLATED, Verdict.HOLDS), Verdict.VIOLATED),
        ((Verdict.HOLDS_WITHIN_BOUND, Verdict.INCONCLUSIVE, Verdict.HOLDS), Verdict.INCONCLUSIVE),
        ((Verdict.HOLDS, Verdict.HOLDS_WITHIN_BOUND), Verdict.HOLDS_WITHIN_BOUND),
        ((Verdict.HOLDS, Verdict.HOLDS), Verdict.HOLDS),
        ((), Verdict.HOLDS),
    ],
)
def test_overall_verdict_precedence(verdicts: tuple[Verdict, ...], overall: Verdict) -> None:
    result = _result(*verdicts)
    assert result.verdict is overall
    assert result.exit_code == EXIT_CODES[overall]


def test_exit_codes_and_the_shortest_counterexample() -> None:
    assert EXIT_CODES == {Verdict.HOLDS: 0, Verdict.HOLDS_WITHIN_BOUND: 0, Verdict.VIOLATED: 1, Verdict.INCONCLUSIVE: 3}
    machine, a, b = two_counters()
    machine.always("late", ~((a == 2) & (b == 2)))
    machine.always("early", a == 0)
    machine.always("middle", a + b < 2)
    result = check(machine, engine="bfs")
    assert result.counterexample is not None and result.counterexample.name == "early"
    assert [(p.name, p.path.length) for p in result.properties if p.path is not None] == [
        ("late", 4),
        ("early", 1),
        ("middle", 2),
    ]
    assert (
        Statistics(states=10, seconds=2.0).states_per_second == 5.0 and Statistics(states=10).states_per_second == 0.0
    )


def test_fingerprints_are_stable_across_processes() -> None:
    import subprocess
    import sys

    from lockstep.models import get_protocol
    from lockstep.spec.semantics import InterpretedSystem, fingerprint

    machine = get_protocol("dp-pause").instance("post-fix").machine()
    here = fingerprint(InterpretedSystem(machine).initial())
    program = (
        "from lockstep.models import get_protocol\n"
        "from lockstep.spec.semantics import InterpretedSystem, fingerprint\n"
        "print(fingerprint(InterpretedSystem(get_protocol('dp-pause').instance('post-fix').machine()).initial()))\n"
    )
    for seed in ("0", "12345"):
        completed = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            check=True,
        )
        assert completed.stdout.strip() == here
    assert len(here) == 16 and fingerprint((1, (True, 2))) != fingerprint((1, (True, 3)))


def test_in_bounds_detail_names_the_map_entry() -> None:
    from lockstep.models import get_protocol

    result = check(get_protocol("dp-pause").instance("post-fix", overrides={"max_wave": 1}), engine="bfs")
    bounds = result.property_result(IN_BOUNDS)
    assert bounds.verdict is Verdict.VIOLATED and bounds.path is not None
    assert bounds.detail.startswith("current_wave[") and bounds.detail.endswith("would become 2, outside Int[0..1]")
    assert bounds.path.steps[-1].action == "finish_sync"
