"""Collectives as a library on top of the spec language: communicators, their ops and built-ins.

A ``Communicator`` is a named group whose members are the values of an index sort. Each member
posts an ordered sequence of ops into its own bounded queue (state variable ``<name>.queue``).
Collective op k completes (action ``<name>.complete``) when every member's front op is the same
collective op; all members are released together and each gets the reduced result in
``<name>.result``. Point-to-point ops complete pairwise (action ``<name>.transfer``): a ``send``
to ``b`` at the front of ``a``'s queue meets a ``recv`` from ``a`` at the front of ``b``'s. Two
members whose front ops differ while one of them is a collective is a **collective mismatch**.
Because every member blocks in (at most ``capacity``) posted ops and completions pop all fronts
at once, the fronts of all members are always ops at the same position of their sequences.
A communicator made with ``interleaved_point_to_point=True`` lets send/recv ops sit between its
collectives in a member's order (NCCL p2p and a broadcast on one process group, as vLLM's PP
group does): transfers pop two members only, so a collective is then matched by its position
among the member's collectives alone. Collectives complete together, so two members whose fronts
are both collectives are at the same collective position; only they can mismatch. A collective
facing a send/recv is a wait, and a wait that can never end shows as a hang.

Built-ins added to the machine: ``no_collective_mismatch`` (a state predicate over all
communicators) and ``no_hang`` (every posted op completes within ``hang_bound`` steps, through
one monitor per communicator; in a state with no enabled action, no op may be pending).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.machine import NO_COLLECTIVE_MISMATCH, NO_HANG, Machine, Property, PropertyKind, Step
from lockstep.spec.sorts import EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Value
from lockstep.spec.terms import (
    DefinitionError,
    Term,
    TermLike,
    all_of,
    any_of,
    conjunction,
    constant,
    disjunction,
    if_then_else,
    lift,
    map_of,
    max_of,
    record_of,
    sum_of,
)


class Kind(enum.Enum):
    """What an op does when it completes."""

    ALL_REDUCE_SUM = "all_reduce_sum"
    ALL_REDUCE_MAX = "all_reduce_max"
    BARRIER = "barrier"
    BROADCAST = "broadcast"  # from a fixed source member
    SEND = "send"
    RECV = "recv"


@dataclass(frozen=True)
class OpSpec:
    """An op a communicator offers: its kind and, for broadcasts, the source member."""

    kind: Kind
    source: int | None = None

    @property
    def is_collective(self) -> bool:
        return self.kind not in (Kind.SEND, Kind.RECV)


def all_reduce_sum() -> OpSpec:
    return OpSpec(Kind.ALL_REDUCE_SUM)


def all_reduce_max() -> OpSpec:
    return OpSpec(Kind.ALL_REDUCE_MAX)


def barrier() -> OpSpec:
    return OpSpec(Kind.BARRIER)


def broadcast(source: int) -> OpSpec:
    return OpSpec(Kind.BROADCAST, source)


class Communicator:
    """A named group of members with per-member op queues. Create it before ``machine.finish()``."""

    def __init__(
        self,
        machine: Machine,
        name: str,
        members: IndexSort,
        operations: Mapping[str, OpSpec],
        *,
        payload: IntSort | None = None,
        width: int = 1,
        capacity: int = 1,
        description: str = "",
        point_to_point: bool = False,
        interleaved_point_to_point: bool = False,
    ) -> None:
        if not operations and not point_to_point:
            raise DefinitionError(f"communicator {name!r} offers no operations")
        for op_name, spec in operations.items():
            if spec.kind in (Kind.SEND, Kind.RECV):
                raise DefinitionError(
                    f"communicator {name!r}: declare send/recv with point_to_point=True, not as {op_name!r}"
                )
            if spec.source is not None and not members.contains(spec.source):
                raise DefinitionError(f"communicator {name!r}: broadcast source {spec.source} is not a member")
        if interleaved_point_to_point and not point_to_point:
            raise DefinitionError(f"communicator {name!r}: interleaved_point_to_point needs point_to_point=True")
        self.interleaved_point_to_point = interleaved_point_to_point
        self.machine = machine
        self.name = name
        self.members = members
        self.description = description
        self.specs: dict[str, OpSpec] = dict(operations)
        if point_to_point:
            self.specs["send"] = OpSpec(Kind.SEND)
            self.specs["recv"] = OpSpec(Kind.RECV)
        self.op_sort = EnumSort(f"{name}.op", tuple(self.specs))
        self.payload_sort = payload or IntSort(0, 1)
        self.width = width
        size = members.count
        low, high = self.payload_sort.low or 0, self.payload_sort.high or 0
        self.result_sort = IntSort(min(low * size, low), max(high * size, high))
        lane = IndexSort(f"{name}.lane", width)
        self.lane_sort = lane
        self.vector_sort = MapSort(lane, self.payload_sort)
        self.result_vector_sort = MapSort(lane, self.result_sort)
        self.posted_sort = RecordSort(
            f"{name}.posted", (("op", self.op_sort), ("peer", members), ("payload", self.vector_sort))
        )
        self.queue_sort = SequenceSort(self.posted_sort, capacity)
        self.queue = machine.variable(
            f"{name}.queue",
            MapSort(members, self.queue_sort),
            tuple(() for _ in range(size)),
            f"ops posted on {name}, not yet complete",
        )
        zero_result = tuple(0 for _ in range(width))
        self.result = machine.variable(
            f"{name}.result",
            MapSort(members, self.result_vector_sort),
            tuple(zero_result for _ in range(size)),
            f"result of the last op on {name}",
        )
        self.completion_actions: list[str] = []
        machine.communicators.append(self)
        self._define_completion()

    # ------------------------------------------------------------------------------ model-facing API
    def post(
        self,
        member: TermLike,
        op: str,
        payload: TermLike | tuple[TermLike, ...] | None = None,
        peer: TermLike | None = None,
    ) -> dict[Term, Term]:
        """The update that makes ``member`` post ``op`` (merge it into an action's updates).

        ``peer`` names the other side of a send/recv; a collective records the member itself, so no
        particular member is named (which would break symmetry over the members)."""
        if op not in self.specs:
            raise DefinitionError(f"communicator {self.name!r} has no op {op!r}; it offers {', '.join(self.specs)}")
        member_term = lift(member, self.members)
        if peer is None:
            peer = member_term
        values = payload if isinstance(payload, tuple) else ((payload,) if payload is not None else ())
        if len(values) > self.width:
            raise DefinitionError(
                f"communicator {self.name!r}: payload of {len(values)} values exceeds width {self.width}"
            )
        padded = list(values) + [0] * (self.width - len(values))
        vector = map_of(
            self.lane_sort,
            lambda lane: _select_constant(lane, [lift(v, self.payload_sort) for v in padded]),
            self.payload_sort,
        )
        entry = record_of(
            self.posted_sort, op=constant(op, self.op_sort), peer=lift(peer, self.members), payload=vector
        )
        return {self.queue: self.queue.set(member_term, self.queue[member_term].append(entry))}

    def send(self, sender: TermLike, receiver: TermLike, payload: TermLike | None = None) -> dict[Term, Term]:
        return self.post(sender, "send", payload, peer=receiver)

    def recv(self, receiver: TermLike, sender: TermLike) -> dict[Term, Term]:
        return self.post(receiver, "recv", None, peer=sender)

    def waiting(self, member: TermLike) -> Term:
        """``member`` has posted an op that has not completed (it blocks in it)."""
        return ~self.queue[lift(member, self.members)].is_empty()

    def done(self, member: TermLike) -> Term:
        """``member`` has no op pending on this communicator."""
        return self.queue[lift(member, self.members)].is_empty()

    def result_of(self, member: TermLike, lane: int = 0) -> Term:
        """Lane ``lane`` of the result ``member`` received from its last completed op."""
        return self.result[lift(member, self.members)][lift(lane, self.lane_sort)]

    def consume(self, member: TermLike) -> dict[Term, Term]:
        """The update that clears ``member``'s result once read (dead values would split states)."""
        zeros = tuple(0 for _ in range(self.width))
        return {self.result: self.result.set(lift(member, self.members), lift(zeros, self.result_vector_sort))}

    def any_pending(self) -> Term:
        return any_of(self.members, lambda member: ~self.queue[member].is_empty())

    def mismatch(self) -> Term:
        """Two members' front ops differ while at least one of them is a collective op (two
        point-to-point ops never mismatch; a send and a recv that do not pair show as a hang). With
        ``interleaved_point_to_point`` both fronts must be collectives (see the module docstring)."""
        collective_ops = [name for name, spec in self.specs.items() if spec.is_collective]

        def is_collective(op: Term) -> Term:
            return disjunction(*[op == name for name in collective_ops])

        def differ(first: Term, second: Term) -> Term:
            front_a, front_b = self.queue[first].head(), self.queue[second].head()
            collective_a, collective_b = is_collective(front_a.field("op")), is_collective(front_b.field("op"))
            return conjunction(
                ~self.queue[first].is_empty(),
                ~self.queue[second].is_empty(),
                (collective_a & collective_b) if self.interleaved_point_to_point else (collective_a | collective_b),
                front_a.field("op") != front_b.field("op"),
            )

        return any_of(self.members, lambda first: any_of(self.members, lambda second: differ(first, second)))

    # ---------------------------------------------------------------------------- engine-facing API
    def waiting_in(self, state: Mapping[str, Value], member: int) -> str | None:
        """A readable name of the op ``member`` blocks in, e.g. ``all_reduce_sum(engine_dp)``."""
        queue = state[f"{self.name}.queue"]
        assert isinstance(queue, tuple)
        posted = queue[member]
        assert isinstance(posted, tuple)
        if not posted:
            return None
        front = posted[0]
        assert isinstance(front, tuple)
        position = front[0]
        assert isinstance(position, int)
        op_name = self.op_sort.members[position]
        spec = self.specs[op_name]
        if spec.kind is Kind.SEND:
            return f"send->{front[1]}({self.name})"
        if spec.kind is Kind.RECV:
            return f"recv<-{front[1]}({self.name})"
        return f"{op_name}({self.name})"

    # ---------------------------------------------------------------------------------- internals
    def _define_completion(self) -> None:
        machine, queue, members = self.machine, self.queue, self.members
        collective_ops = [name for name, spec in self.specs.items() if spec.is_collective]
        if collective_ops:

            def complete() -> Step:
                def front_op(member: Term) -> Term:
                    return queue[member].head().field("op")

                every_member_waits = all_of(members, lambda member: ~queue[member].is_empty())
                same_op = all_of(
                    members, lambda first: all_of(members, lambda second: front_op(first) == front_op(second))
                )
                collective = all_of(
                    members, lambda member: disjunction(*[front_op(member) == name for name in collective_ops])
                )
                return Step(
                    guard=every_member_waits & same_op & collective,
                    updates={
                        queue: map_of(members, lambda member: queue[member].tail(), self.queue_sort),
                        self.result: map_of(
                            members, lambda member: self._reduced(front_op(member)), self.result_vector_sort
                        ),
                    },
                )

            name = f"{self.name}.complete"
            machine.add_action(
                name,
                complete,
                actor=f"group:{self.name}",
                description=f"the front collective op of every member of {self.name} completes",
            )
            self.completion_actions.append(name)
        if "send" in self.specs:

            def transfer(sender: Term, receiver: Term) -> Step:
                send_front, recv_front = queue[sender].head(), queue[receiver].head()
                return Step(
                    guard=conjunction(
                        sender != receiver,
                        ~queue[sender].is_empty(),
                        ~queue[receiver].is_empty(),
                        send_front.field("op") == "send",
                        send_front.field("peer") == receiver,
                        recv_front.field("op") == "recv",
                        recv_front.field("peer") == sender,
                    ),
                    updates={
                        queue: queue.set(sender, queue[sender].tail()).set(receiver, queue[receiver].tail()),
                        self.result: self.result.set(
                            receiver,
                            map_of(self.lane_sort, lambda lane: send_front.field("payload")[lane], self.result_sort),
                        ),
                    },
                )

            name = f"{self.name}.transfer"
            machine.add_action(
                name,
                transfer,
                actor=f"group:{self.name}",
                description=f"a send meets its recv on {self.name}",
                sender=members,
                receiver=members,
            )
            self.completion_actions.append(name)

    def _reduced(self, op: Term) -> Term:
        queue, members = self.queue, self.members

        def lane_value(lane: Term) -> Term:
            result: Term = lift(0, self.result_sort)
            for op_name, spec in reversed(list(self.specs.items())):
                if spec.kind is Kind.ALL_REDUCE_SUM:
                    value = sum_of(members, lambda member: queue[member].head().field("payload")[lane])
                elif spec.kind is Kind.ALL_REDUCE_MAX:
                    value = max_of(members, lambda member: queue[member].head().field("payload")[lane])
                elif spec.kind is Kind.BROADCAST and spec.source is not None:
                    value = queue[lift(spec.source, members)].head().field("payload")[lane]
                else:
                    continue
                result = if_then_else(op == op_name, value, result)
            return result

        return map_of(self.lane_sort, lane_value, self.result_sort)

    def before_finish(self) -> None:
        """Called by ``Machine.finish``: the first communicator adds the built-ins for all of them."""
        machine = self.machine
        communicators = [c for c in machine.communicators if isinstance(c, Communicator)]
        if communicators[0] is not self:
            return
        hang_bound = machine.hang_bound
        if hang_bound is None:
            raise DefinitionError(
                f"machine {machine.name} has communicators: declare Machine(..., hang_bound=N) (the steps "
                "within which every posted op must complete)"
            )
        machine.add_builtin(
            Property(
                NO_COLLECTIVE_MISMATCH,
                PropertyKind.ALWAYS,
                conjunction(*[~c.mismatch() for c in communicators]).expression,
                "members of a communicator never block in different ops at the same position",
                builtin=True,
            )
        )
        counters = [
            machine.monitor(
                f"{NO_HANG}.{c.name}",
                c.any_pending(),
                ~c.any_pending(),
                hang_bound,
                response_actions=tuple(c.completion_actions),
            )
            for c in communicators
        ]
        machine.add_builtin(
            Property(
                NO_HANG,
                PropertyKind.ALWAYS,
                conjunction(*[counter < hang_bound for counter in counters]).expression,
                f"every posted collective op completes within {hang_bound} steps",
                conjunction(*[~c.any_pending() for c in communicators]).expression,
                builtin=True,
            )
        )


def _select_constant(lane: Term, values: list[Term]) -> Term:
    result = values[-1]
    for position in range(len(values) - 2, -1, -1):
        result = if_then_else(lane == position, values[position], result)
    return result


__all__ = ["Communicator", "Kind", "OpSpec", "all_reduce_max", "all_reduce_sum", "barrier", "broadcast"]
