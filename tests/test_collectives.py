"""Tests for lockstep.spec.collectives: reductions, rendezvous, mismatch and hang detection on toy machines."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lockstep.checkers import Verdict, check
from lockstep.spec.collectives import (
    Communicator,
    Kind,
    OpSpec,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    broadcast,
)
from lockstep.spec.machine import NO_COLLECTIVE_MISMATCH, NO_DEADLOCK, NO_HANG, WELL_DEFINED, Machine, Step
from lockstep.spec.semantics import InterpretedSystem, State, unpack
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, integers
from lockstep.spec.terms import DefinitionError, Term, conjunction

Rank = IndexSort("Rank", 3)
Payload = integers(0, 3)
OPERATIONS = {"sum": all_reduce_sum(), "max": all_reduce_max(), "sync": barrier(), "bcast": broadcast(1)}


def poster(group: Communicator, op: str) -> Callable[[Term, Term], Step]:
    def post(rank: Term, value: Term) -> Step:
        return Step(group.done(rank), group.post(rank, op, value))

    return post


def toy_machine(interleaved: bool = False) -> tuple[Machine, Communicator]:
    """Three ranks that may post any op of ``group``, any payload, or send/recv to any other rank."""
    machine = Machine("collectives", hang_bound=3)
    group = Communicator(
        machine, "group", Rank, OPERATIONS, payload=Payload, point_to_point=True, interleaved_point_to_point=interleaved
    )
    for op in OPERATIONS:
        machine.add_action(f"post_{op}", poster(group, op), actor="rank:{rank}", rank=Rank, value=Payload)

    def send(sender: Term, receiver: Term, value: Term) -> Step:
        return Step(group.done(sender) & (sender != receiver), group.send(sender, receiver, value))

    def recv(receiver: Term, sender: Term) -> Step:
        return Step(group.done(receiver) & (sender != receiver), group.recv(receiver, sender))

    machine.add_action("send", send, actor="rank:{sender}", sender=Rank, receiver=Rank, value=Payload)
    machine.add_action("recv", recv, actor="rank:{receiver}", receiver=Rank, sender=Rank)
    return machine.finish(), group


class Driver:
    """Fires named actions with given arguments on the reference interpreter."""

    def __init__(self, interleaved: bool = False) -> None:
        self.machine, self.group = toy_machine(interleaved)
        self.system = InterpretedSystem(self.machine)
        self.state: State = self.system.initial()

    def enabled(self, action: str, **arguments: int) -> bool:
        return self._matching(action, arguments) != []

    def _matching(self, action: str, arguments: dict[str, int]) -> list[State]:
        position = [candidate.name for candidate in self.machine.actions].index(action)
        names = [parameter.name for parameter in self.machine.actions[position].parameters]
        return [
            transition.target
            for transition in self.system.transitions(self.state)
            if transition.action == position and dict(zip(names, transition.arguments)) == arguments
        ]

    def fire(self, action: str, **arguments: int) -> None:
        targets = self._matching(action, arguments)
        assert len(targets) == 1, f"{action}{arguments} is not enabled exactly once"
        self.state = targets[0]

    def value(self, name: str) -> object:
        return unpack(self.machine, self.state)[name]

    def results(self) -> tuple[int, ...]:
        result = self.value("group.result")
        assert isinstance(result, tuple)
        return tuple(vector[0] for vector in result)

    def holds(self, name: str) -> bool:
        position = [prop.name for prop in self.machine.properties].index(name)
        return self.system.holds(position, self.state)


@pytest.mark.parametrize(
    ("op", "payloads", "expected"),
    [("sum", (1, 2, 3), 6), ("max", (1, 3, 2), 3), ("bcast", (0, 2, 1), 2), ("sync", (3, 3, 3), 0)],
)
def test_collective_completes_only_when_every_member_posted(op: str, payloads: tuple[int, ...], expected: int) -> None:
    driver = Driver()
    for rank, payload in enumerate(payloads):
        assert not driver.enabled("group.complete"), f"completion before rank {rank} posted"
        driver.fire(f"post_{op}", rank=rank, value=payload)
    assert driver.value("group.queue") != ((), (), ())
    driver.fire("group.complete")
    assert driver.results() == (expected, expected, expected)
    assert driver.value("group.queue") == ((), (), ())
    assert driver.holds(NO_COLLECTIVE_MISMATCH) and driver.holds(NO_HANG)


def test_point_to_point_transfer_delivers_the_payload_to_the_receiver_only() -> None:
    driver = Driver()
    driver.fire("send", sender=0, receiver=2, value=3)
    assert not driver.enabled("group.transfer", sender=0, receiver=2)
    driver.fire("recv", receiver=1, sender=0)
    assert not driver.enabled("group.transfer", sender=0, receiver=1), "rank 0 sends to 2, not to 1"
    assert driver.holds(NO_COLLECTIVE_MISMATCH), "differing point-to-point ops are no collective mismatch"
    driver = Driver()
    driver.fire("send", sender=0, receiver=2, value=3)
    driver.fire("recv", receiver=2, sender=0)
    assert not driver.enabled("group.complete")
    driver.fire("group.transfer", sender=0, receiver=2)
    assert driver.results() == (0, 0, 3)
    assert driver.value("group.queue") == ((), (), ())


@pytest.mark.parametrize(
    ("posts", "mismatch"),
    [
        ([("post_sum", 0), ("post_max", 1)], True),
        ([("post_sum", 0), ("post_sync", 2)], True),
        ([("post_sum", 0), ("post_sum", 1)], False),
        ([("post_sum", 0)], False),
        ([("post_max", 0), ("post_max", 1), ("post_max", 2)], False),
    ],
)
def test_mismatch_when_two_members_block_in_different_collectives(posts: list[tuple[str, int]], mismatch: bool) -> None:
    driver = Driver()
    for action, rank in posts:
        driver.fire(action, rank=rank, value=1)
    assert driver.holds(NO_COLLECTIVE_MISMATCH) is not mismatch


def test_collective_against_point_to_point_is_a_mismatch() -> None:
    driver = Driver()
    driver.fire("post_sum", rank=0, value=1)
    driver.fire("send", sender=1, receiver=0, value=1)
    assert not driver.holds(NO_COLLECTIVE_MISMATCH)
    driver.fire("post_sum", rank=2, value=1)
    assert not driver.enabled("group.complete")


def test_interleaved_point_to_point_matches_collectives_among_themselves() -> None:
    """vLLM's PP group: rank 0 waits in the broadcast while rank 1 still sends to rank 2 (no mismatch);
    two different collectives at the fronts are still a mismatch."""
    driver = Driver(interleaved=True)
    driver.fire("post_bcast", rank=0, value=0)
    driver.fire("send", sender=1, receiver=2, value=1)
    driver.fire("recv", receiver=2, sender=1)
    assert driver.holds(NO_COLLECTIVE_MISMATCH), "a collective facing a send/recv is a wait, not a mismatch"
    driver.fire("group.transfer", sender=1, receiver=2)
    driver.fire("post_bcast", rank=1, value=2)
    driver.fire("post_sum", rank=2, value=1)
    assert not driver.holds(NO_COLLECTIVE_MISMATCH)
    assert not driver.enabled("group.complete")
    same = Driver(interleaved=True)
    for rank in range(3):
        same.fire("post_bcast", rank=rank, value=rank)
    same.fire("group.complete")
    assert same.results() == (1, 1, 1)


def test_interleaved_point_to_point_needs_point_to_point() -> None:
    with pytest.raises(DefinitionError, match="interleaved_point_to_point needs point_to_point=True"):
        Communicator(Machine("bad"), "g", Rank, {"b": broadcast(0)}, interleaved_point_to_point=True)


def test_waiting_in_names_the_front_op() -> None:
    driver = Driver()
    driver.fire("post_sum", rank=0, value=1)
    driver.fire("send", sender=1, receiver=2, value=1)
    driver.fire("recv", receiver=2, sender=1)
    values = unpack(driver.machine, driver.state)
    assert [driver.group.waiting_in(values, rank) for rank in range(3)] == [
        "sum(group)",
        "send->2(group)",
        "recv<-1(group)",
    ]
    assert driver.group.waiting_in(unpack(driver.machine, driver.system.initial()), 0) is None


def test_builtin_properties_are_added_once() -> None:
    machine, _ = toy_machine()
    names = [prop.name for prop in machine.properties]
    assert names == ["in_bounds", WELL_DEFINED, NO_COLLECTIVE_MISMATCH, NO_HANG, NO_DEADLOCK]
    assert "monitor.no_hang.group" in machine.variables
    assert machine.variables["monitor.no_hang.group"].sort == integers(-1, 3)


def hang_machine(*, tick: bool, second_rank_posts: bool, hang_bound: int) -> Machine:
    """Two ranks post one SUM each; an optional clock ticks independently up to 5."""
    machine = Machine("hang", hang_bound=hang_bound)
    Pair = IndexSort("Rank", 2)
    posted = machine.variable("posted", MapSort(Pair, BOOL), (False, False))
    group = Communicator(machine, "group", Pair, {"sum": all_reduce_sum()}, payload=integers(0, 0))

    def post(rank: Term) -> Step:
        allowed = ~posted[rank] if second_rank_posts else ~posted[rank] & (rank != 1)
        return Step(allowed, {posted: posted.set(rank, True), **group.post(rank, "sum")})

    machine.add_action("post", post, actor="rank:{rank}", rank=Pair)
    if tick:
        clock = machine.variable("clock", integers(0, 5), 0)
        machine.add_action("tick", lambda: Step(clock < 5, {clock: clock + 1}), actor="clock")
    machine.set_final(conjunction(posted[0], posted[1], group.done(0), group.done(1)))
    return machine


def test_no_hang_violated_through_the_bound() -> None:
    result = check(hang_machine(tick=True, second_rank_posts=True, hang_bound=2), engine="bfs")
    hang = result.property_result(NO_HANG)
    assert hang.verdict is Verdict.VIOLATED
    assert hang.path is not None
    # the shortest run: both post (pending from the first post on), then the clock ticks: two steps
    # after the first post the op has not completed
    assert [(step.action, step.arguments) for step in hang.path.steps] == [
        ("post", {"rank": 0}),
        ("post", {"rank": 1}),
        ("tick", {}),
    ]
    assert hang.detail == ""
    assert result.property_result(NO_COLLECTIVE_MISMATCH).verdict is Verdict.HOLDS


def test_no_hang_holds_when_every_op_completes_within_the_bound() -> None:
    result = check(hang_machine(tick=True, second_rank_posts=True, hang_bound=12), engine="bfs")
    assert result.property_result(NO_HANG).verdict is Verdict.HOLDS
    assert result.verdict is Verdict.HOLDS


def test_no_hang_violated_at_a_deadlock_with_a_pending_op() -> None:
    result = check(hang_machine(tick=False, second_rank_posts=False, hang_bound=10), engine="bfs")
    hang = result.property_result(NO_HANG)
    assert hang.verdict is Verdict.VIOLATED and hang.detail == "no action is enabled"
    assert hang.path is not None and [step.action for step in hang.path.steps] == ["post"]
    assert result.property_result(NO_DEADLOCK).verdict is Verdict.VIOLATED


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda machine: Communicator(machine, "empty", Rank, {}), "communicator 'empty' offers no operations"),
        (
            lambda machine: Communicator(machine, "p", Rank, {"s": OpSpec(Kind.SEND)}),
            "declare send/recv with point_to_point=True",
        ),
        (lambda machine: Communicator(machine, "b", Rank, {"b": broadcast(3)}), "broadcast source 3 is not a member"),
        (
            lambda machine: Communicator(machine, "g", Rank, {"sum": all_reduce_sum()}).post(0, "max"),
            "has no op 'max'; it offers sum",
        ),
        (
            lambda machine: Communicator(machine, "g", Rank, {"sum": all_reduce_sum()}).post(0, "sum", (1, 1)),
            "payload of 2 values exceeds width 1",
        ),
    ],
)
def test_communicator_definition_errors(build: Callable[[Machine], object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        build(Machine("bad"))


def test_op_specs() -> None:
    assert broadcast(2) == OpSpec(Kind.BROADCAST, 2) and broadcast(2).is_collective
    assert not OpSpec(Kind.RECV).is_collective and barrier().kind is Kind.BARRIER
