"""Tests for lockstep.spec.machine: definition-time errors that say how to fix them, and monitors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lockstep.checkers import Verdict, check
from lockstep.spec.collectives import Communicator, all_reduce_sum
from lockstep.spec.expressions import Constant, Operation, Operator
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine, PropertyKind, Step
from lockstep.spec.semantics import InterpretedSystem, State, unpack
from lockstep.spec.sorts import BOOL, INTEGER, IndexSort, MapSort, enum, integers
from lockstep.spec.terms import DefinitionError, Term, lift

Color = enum("Color", ["RED", "GREEN", "BLUE"])
Rank = IndexSort("Rank", 2)
Counter = integers(0, 2)


def counter_machine() -> tuple[Machine, Term, Term]:
    machine = Machine("counter")
    x = machine.variable("x", Counter, 0, "a counter")
    flag = machine.variable("flag", BOOL, False)
    return machine, x, flag


def test_a_well_formed_machine() -> None:
    machine, x, flag = counter_machine()
    mode = machine.variable("mode", Color, "GREEN")
    machine.add_action(
        "inc", lambda rank: Step((x < 2) & ~flag, {x: x + 1, mode: "BLUE"}), actor="rank:{rank}", rank=Rank
    )
    machine.always("small", x <= 2, "x stays small")
    machine.sometimes("top", x == 2)
    machine.finish()
    assert machine.initial_state() == {"x": 0, "flag": False, "mode": 1}
    assert [prop.name for prop in machine.properties] == [IN_BOUNDS, WELL_DEFINED, "small", "top", NO_DEADLOCK]
    assert machine.property_named("top").kind is PropertyKind.SOMETIMES
    action = machine.action_named("inc")
    assert len(action.guard) == 2, "the guard's conjuncts are kept apart"
    assert [name for name, _ in action.updates] == ["x", "mode"]
    assert action.updates[1][1] == Constant(2, Color)
    assert action.actor_for({"rank": 1}) == "rank:1"
    assert machine.finish() is machine, "finish() twice is harmless"
    with pytest.raises(KeyError):
        machine.action_named("dec")


DefinitionMistake = Callable[[Machine, Term, Term], object]


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        (lambda m, x, flag: m.variable("x", BOOL, False), "machine counter already has a variable named 'x'"),
        (
            lambda m, x, flag: [m.add_action("inc", lambda: Step(True), actor="a") for _ in range(2)],
            "machine counter already has an action named 'inc'",
        ),
        (
            lambda m, x, flag: [m.always("p", x >= 0) for _ in range(2)],
            "machine counter already has a property named 'p'",
        ),
        (lambda m, x, flag: (m.always("p", x >= 0), m.sometimes("p", flag)), "already has a property named 'p'"),
        (
            lambda m, x, flag: m.always(NO_DEADLOCK, flag),
            "property name 'no_deadlock' is reserved for a built-in property",
        ),
        (lambda m, x, flag: m.sometimes(IN_BOUNDS, flag), "property name 'in_bounds' is reserved"),
        (
            lambda m, x, flag: m.add_action("inc", lambda rank: Step(True), actor="a"),
            r"action 'inc': the function's parameters are \['rank'\] but sorts were given for \[\]; give one sort per "
            r"parameter after the context arguments, as in machine.add\(inc, state, rank=<its sort>\)",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(True), actor="a", rank=Rank),
            r"the function's parameters are \[\] but sorts were given for \['rank'\]",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda rank: Step(True), actor="a", rank=INTEGER),
            "action 'inc': parameter 'rank' needs a finite sort",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(True, {x + 1: 0}), actor="a"),
            r"action 'inc': update targets must be state variables, got Term\(\(x \+ 1\)\)",
        ),
        (
            lambda m, x, flag: m.add_action(
                "inc", lambda: Step(True, {Term(Operation(Operator.NOT, (flag.expression,), BOOL)): True}), actor="a"
            ),
            "update targets must be state variables",
        ),
        (
            lambda m, x, flag: m.add_action(
                "inc", lambda: Step(True, {Machine("other").variable("y", BOOL, False): True}), actor="a"
            ),
            r"action 'inc': Term\(y\) is not a variable of machine counter",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(True, {flag: 1}), actor="a"),
            "action 'inc': cannot assign a value of sort Int to 'flag' of sort Bool",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(True, {x: flag}), actor="a"),
            r"cannot assign a value of sort Bool to 'x' of sort Int\[0..2\]",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(True, {x: 1, Term(x.expression): 2}), actor="a"),
            "action 'inc': variable 'x' is written twice in one step: x := 1 and x := 2",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(x + 1), actor="a"),
            "action 'inc': the guard has sort Int, not Bool",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(x), actor="a"),
            r"the guard has sort Int\[0..2\], not Bool",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda: True, actor="a"),
            r"action 'inc' must return Step\(guard, updates\), not bool",
        ),
        (
            lambda m, x, flag: m.add_action("inc", lambda rank: Step(True), actor="rank:{who}", rank=Rank),
            r"action 'inc': actor template 'rank:\{who\}' names an unknown parameter 'who'",
        ),
        (lambda m, x, flag: m.add_action("inc", lambda: Step(True), actor="rank:{0}"), "names an unknown parameter"),
        (
            lambda m, x, flag: m.add_action("inc", lambda: Step(Machine("o").variable("z", BOOL, False)), actor="a"),
            "action 'inc' reads 'z', which is not a variable of machine counter",
        ),
        (
            lambda m, x, flag: (
                m.always("p", Term(m.actions[0].parameters[0]) == 0)
                if m.add_action("inc", lambda rank: Step(True), actor="a", rank=Rank)
                else None
            ),
            "property 'p' uses parameter 'rank' of another action",
        ),
        (
            lambda m, x, flag: m.variable("y", Counter, 5),
            r"variable 'y': initial value 5 is not a value of Int\[0..2\]",
        ),
        (lambda m, x, flag: m.variable("y", Counter, True), "initial value True is not a value"),
        (
            lambda m, x, flag: m.variable("y", MapSort(Rank, BOOL), (True,)),
            r"initial value \(True,\) has 1 entries, not one per key of Map\[Rank -> Bool\] \(2\); write a tuple",
        ),
        (lambda m, x, flag: m.variable("y", Color, "PURPLE"), "'PURPLE' is not a member of Color"),
        (lambda m, x, flag: m.variable("y", INTEGER, 0), "variable 'y': state variables need a finite sort, not Int"),
        (lambda m, x, flag: m.always("p", x + 1), "property 'p': the predicate has sort Int, not Bool"),
        (lambda m, x, flag: m.sometimes("p", 3), "property 'p': the predicate has sort Int, not Bool"),
        (lambda m, x, flag: m.set_final(x), r"final: the predicate has sort Int\[0..2\], not Bool"),
        (
            lambda m, x, flag: m.respond_within("r", flag, flag, -1),
            "monitor 'r': the bound must be non-negative, got -1",
        ),
        (
            lambda m, x, flag: m.declare_symmetric(Rank, (0,)),
            r"symmetry over Rank: members \[0\] must be at least two values",
        ),
        (
            lambda m, x, flag: m.declare_symmetric(Rank, (1, 2)),
            r"members \[1, 2\] must be at least two values of the sort",
        ),
    ],
)
def test_definition_mistakes(mistake: DefinitionMistake, message: str) -> None:
    machine, x, flag = counter_machine()
    with pytest.raises(DefinitionError, match=message):
        mistake(machine, x, flag)


@pytest.mark.parametrize(
    ("addition", "what"),
    [
        (lambda m, x: m.variable("y", BOOL, False), "variable 'y'"),
        (lambda m, x: m.add_action("inc", lambda: Step(True), actor="a"), "action 'inc'"),
        (lambda m, x: m.always("p", x == 0), "property 'p'"),
        (lambda m, x: m.sometimes("p", x == 0), "property 'p'"),
        (lambda m, x: m.respond_within("r", x == 0, x == 1, 1), "variable 'monitor.r'"),
        (lambda m, x: m.set_final(x == 2), "a final predicate"),
        (lambda m, x: m.declare_symmetric(Rank), "a symmetry"),
    ],
)
def test_nothing_can_be_added_after_finish(addition: Callable[[Machine, Term], object], what: str) -> None:
    machine, x, _ = counter_machine()
    machine.finish()
    assert machine.finished
    with pytest.raises(DefinitionError, match=f"cannot add {what} to machine counter after finish"):
        addition(machine, x)


def test_a_communicator_needs_a_hang_bound() -> None:
    machine = Machine("group")
    Communicator(machine, "dp", Rank, {"sum": all_reduce_sum()})
    with pytest.raises(
        DefinitionError, match=r"machine group has communicators: declare Machine\(\.\.\., hang_bound=N\)"
    ):
        machine.finish()


# ------------------------------------------------------------------------------------------- monitors
def stepping_machine(trigger_at: int, response_at: int | None, bound: int, *, acknowledge: bool = False) -> Machine:
    """x counts 0..8; the trigger holds at x == trigger_at, the response at x == response_at."""
    machine = Machine("stepping")
    x = machine.variable("x", integers(0, 8), 0)
    machine.add_action("inc", lambda: Step(x < 8, {x: x + 1}), actor="a")
    if acknowledge:
        machine.add_action("ack", lambda: Step(x < 8, {x: x + 1}), actor="b")
    response = x == response_at if response_at is not None else x > 8
    machine.respond_within(
        "answered", x == trigger_at, response, bound, response_actions=("ack",) if acknowledge else ()
    )
    machine.set_final(x == 8)
    return machine.finish()


def counters_along(machine: Machine, actions: list[str]) -> list[int]:
    system = InterpretedSystem(machine)
    state: State = system.initial()
    values = [unpack(machine, state)["monitor.answered"]]
    for name in actions:
        position = [action.name for action in machine.actions].index(name)
        state = next(transition.target for transition in system.transitions(state) if transition.action == position)
        values.append(unpack(machine, state)["monitor.answered"])
    return values  # type: ignore[return-value]


def test_monitor_counts_steps_since_the_trigger_until_the_response() -> None:
    machine = stepping_machine(trigger_at=1, response_at=4, bound=5)
    assert machine.variables["monitor.answered"].sort == integers(-1, 5)
    assert machine.variables["monitor.answered"].monitor
    assert counters_along(machine, ["inc"] * 6) == [-1, 0, 1, 2, -1, -1, -1]


def test_monitor_saturates_and_starts_where_the_trigger_holds_initially() -> None:
    assert counters_along(stepping_machine(trigger_at=1, response_at=None, bound=1), ["inc"] * 5) == [-1, 0, 1, 1, 1, 1]
    assert counters_along(stepping_machine(trigger_at=0, response_at=None, bound=3), ["inc"] * 2) == [0, 1, 2]
    assert counters_along(stepping_machine(trigger_at=0, response_at=0, bound=3), ["inc"]) == [-1, -1]


def test_a_response_action_restarts_the_counter() -> None:
    machine = stepping_machine(trigger_at=1, response_at=None, bound=5, acknowledge=True)
    assert counters_along(machine, ["inc", "inc", "inc", "ack", "inc"]) == [-1, 0, 1, 2, -1, -1]
    assert counters_along(machine, ["ack", "ack", "inc"]) == [-1, 0, -1, -1]


@pytest.mark.parametrize("bound", [0, 1, 2, 3])
@pytest.mark.parametrize("delay", [0, 1, 2, 3, 4, 5])
def test_respond_within_is_violated_once_bound_steps_pass_without_response(bound: int, delay: int) -> None:
    """The property fails in the state ``bound`` steps after the trigger if the response has not come:
    a response ``delay`` steps after the trigger is in time exactly when ``delay <= bound``."""
    result = check(stepping_machine(trigger_at=1, response_at=1 + delay, bound=bound), engine="bfs")
    answered = result.property_result("answered")
    if delay <= bound:
        assert answered.verdict is Verdict.HOLDS and answered.path is None
    else:
        assert answered.verdict is Verdict.VIOLATED
        assert answered.path is not None
        assert answered.path.length == 1 + bound, "trigger after one step, then bound steps without response"
        assert unpack(result.machine, answered.path.final_state) == {"x": bound + 1, "monitor.answered": bound}


def test_actions_name_the_source_functions_they_mirror() -> None:
    machine, x, _ = counter_machine()
    machine.add_action("bump", lambda: Step(x < 2, {x: x + 1}), actor="a", mirrors="Scheduler.schedule")
    machine.add_action("reset", lambda: Step(x == 2, {x: 0}), actor="a")
    with pytest.raises(DefinitionError, match=r"mirror: \['teleport'\] are not actions of machine counter"):
        machine.mirror({"teleport": "nowhere"})
    machine.mirror({"reset": "Scheduler.reset_prefix_cache"})
    machine.respond_within("reset_soon", x == 2, x == 0, 1)  # the monitor rebuilds every action at finish()
    machine.finish()
    assert machine.action_named("bump").mirrors == "Scheduler.schedule"
    assert machine.action_named("reset").mirrors == "Scheduler.reset_prefix_cache"
    assert any(name == "monitor.reset_soon" for name, _ in machine.action_named("bump").updates)
    with pytest.raises(DefinitionError, match="after finish"):
        machine.mirror({"bump": "x"})


def test_a_module_level_action_binds_with_its_context_and_stays_callable() -> None:
    from dataclasses import dataclass

    from lockstep.spec.actions import action
    from lockstep.spec.evaluation import Environment, evaluate

    @dataclass(frozen=True)
    class Counters:
        count: Term
        limit: int

    @action(actor="rank:{rank}", mirrors="Worker.bump")
    def bump(model: Counters, rank: Term) -> Step:
        """Add one to a rank's counter."""
        return Step(model.count[rank] < model.limit, {model.count: model.count.set(rank, model.count[rank] + 1)})

    Rank = IndexSort("Rank", 2)
    machine = Machine("counters")
    model = Counters(machine.variable("count", MapSort(Rank, integers(0, 3)), (0, 0)), 3)
    bound = machine.add(bump, model, rank=Rank)
    assert (bound.name, bound.actor, bound.description, bound.mirrors) == (
        "bump",
        "rank:{rank}",
        "Add one to a rank's counter.",
        "Worker.bump",
    )
    renamed = machine.add(bump, model, name="bump_first", actor="rank:0", rank=Rank)
    assert (renamed.name, renamed.actor) == ("bump_first", "rank:0")
    step = bump(model, lift(1, Rank))  # the definition runs on its own, as a plain function
    assert evaluate(lift(step.guard).expression, Environment({"count": (3, 2)})) is True
    with pytest.raises(DefinitionError, match="but sorts were given for"):
        machine.add(bump, model, name="bump_without_sorts")


def test_an_action_taking_keywords_gets_every_declared_parameter_in_order() -> None:
    from lockstep.spec.actions import action

    @action(actor="engine")
    def take(limit: int, **amounts: Term) -> Step:
        """Take one amount per slot, the names decided at build time."""
        assert list(amounts) == ["amount_0", "amount_1"]
        total = amounts["amount_0"] + amounts["amount_1"]
        return Step(total <= limit, {})

    machine = Machine("keywords")
    machine.variable("unused", integers(0, 1), 0)
    bound = machine.add(take, 2, sorts={f"amount_{slot}": integers(0, 2) for slot in range(2)})
    assert [parameter.name for parameter in bound.parameters] == ["amount_0", "amount_1"]
    assert bound.description == "Take one amount per slot, the names decided at build time."
