"""How replay reads one trace event in the model's terms (``conformance.replay``'s ``Replayer`` is one).

An ``EventReader`` holds, for one built ``Machine``, every action's argument space and the actor
each binding steps, the variables' slots and the communicators, and turns an event into:

- the **bindings** it may stand for (``_bindings``): the named action with every value of the
  parameters the event leaves out, where the model's actor equals the event's ``actor``;
- the **checks** of its ``observed`` values (``_observed``): (variable slot, map key position or
  -1 for the whole value, value), read with the model's sorts (``mode[1]`` is one map entry);
- for an ``enter`` / ``complete`` of a collective, the communicator's queue slot, the member and
  the op (``_collective``);
- the positions of the actions an ``unrecorded`` entry names (``_unrecorded_positions``: an
  action, an actor such as ``coordinator``, or an actor kind such as ``group:*``).

A name or value the model does not have is a ``TraceInputError`` naming the file, line and what
the model has. What it read is remembered in bounded memo tables (a run repeats few distinct
events). ``matches`` and ``collective_holds`` test a state against what was read.
"""

from __future__ import annotations

from typing import Any

from lockstep.spec.collectives import Communicator
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import State, argument_space
from lockstep.spec.sorts import MapSort, Value
from lockstep.spec.trace_values import ValueMismatch, decode, decode_key
from lockstep.traces.reader import Record, TraceInputError

MEMO_LIMIT = 1 << 16  # entries per memo table before it is cleared

Binding = tuple[int, tuple[Value, ...]]  # (action position, arguments in parameter order)
Check = tuple[int, int, Value]  # (variable slot, map key position or -1 for the whole value, value)


class EventReader:
    """Reads events of traces of one machine as its actions, observed values and collectives."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self._actions = {action.name: (position, action) for position, action in enumerate(machine.actions)}
        self._spaces = [argument_space(action) for action in machine.actions]
        self._actor_of: dict[Binding, str] = {}
        for position, action in enumerate(machine.actions):
            names = [parameter.name for parameter in action.parameters]
            for arguments in self._spaces[position]:
                self._actor_of[(position, arguments)] = action.actor_for(dict(zip(names, arguments)))
        self.actors = frozenset(self._actor_of.values())
        self._slots = {name: slot for slot, name in enumerate(machine.variables)}
        self._communicators = {c.name: c for c in machine.communicators if isinstance(c, Communicator)}
        self._binding_memo: dict[object, list[Binding]] = {}
        self._observed_memo: dict[object, tuple[Check, ...]] = {}

    def _bindings(self, record: Record) -> list[Binding]:
        event = record.event
        args = event["args"]
        try:
            key: object = (event["actor"], event["action"], tuple(args.items()))
            hash(key)
        except TypeError:
            key = None
        if key is not None:
            found = self._binding_memo.get(key)
            if found is not None:
                return found
        position, action = self._actions[event["action"]]
        declared = {parameter.name: (slot, parameter.sort) for slot, parameter in enumerate(action.parameters)}
        fixed: list[tuple[int, Value]] = []
        for name, value in args.items():
            if name not in declared:
                names = ", ".join(declared) or "none"
                raise TraceInputError(
                    record.path, record.line, f"action {action.name} has no parameter {name!r} (parameters: {names})"
                )
            slot, sort = declared[name]
            try:
                fixed.append((slot, decode(sort, value, f"args.{name}")))
            except ValueMismatch as error:
                raise TraceInputError(record.path, record.line, str(error)) from None
        if event["actor"] not in self.actors:
            known = ", ".join(sorted(self.actors))
            raise TraceInputError(
                record.path, record.line, f"unknown actor {event['actor']!r} for {self.machine.name} (actors: {known})"
            )
        bindings = [
            (position, arguments)
            for arguments in self._spaces[position]
            if all(arguments[slot] == value for slot, value in fixed)
            and self._actor_of[(position, arguments)] == event["actor"]
        ]
        if key is not None:
            self._remember(self._binding_memo, key, bindings)
        return bindings

    def _observed(self, record: Record) -> tuple[Check, ...]:
        observed = record.event.get("observed")
        if not observed:
            return ()
        try:
            key: object = tuple(observed.items())
            hash(key)
        except TypeError:
            key = None
        if key is not None:
            found = self._observed_memo.get(key)
            if found is not None:
                return found
        checks: list[Check] = []
        for name, value in observed.items():
            try:
                checks.append(self._observation(name, value))
            except ValueMismatch as error:
                raise TraceInputError(record.path, record.line, str(error)) from None
        result = tuple(checks)
        if key is not None:
            self._remember(self._observed_memo, key, result)
        return result

    def _observation(self, name: str, value: object) -> Check:
        variables = self.machine.variables
        if name in variables:
            return self._slots[name], -1, decode(variables[name].sort, value, f"observed.{name}")
        base, bracket, rest = name.partition("[")
        if bracket and rest.endswith("]") and base in variables and isinstance(variables[base].sort, MapSort):
            sort = variables[base].sort
            assert isinstance(sort, MapSort)
            position = decode_key(sort, rest[:-1], f"observed.{name}")
            return self._slots[base], position, decode(sort.value, value, f"observed.{name}")
        raise ValueMismatch(f"observed.{name}: {self.machine.name} has no variable {name!r}")

    def _collective(self, record: Record) -> tuple[int, int, int | None]:
        event = record.event
        clock = event.get("clock") or {}
        name = event["args"].get("communicator")
        if name is None and len(clock) == 1:
            name = next(iter(clock))
        communicator = self._communicators.get(name) if isinstance(name, str) else None
        if communicator is None:
            known = ", ".join(self._communicators) or "none"
            raise TraceInputError(record.path, record.line, f"unknown communicator {name!r} (communicators: {known})")
        _, _, identifier = event["actor"].partition(":")
        try:
            member = decode(communicator.members, int(identifier), f"actor {event['actor']}")
        except (ValueError, ValueMismatch) as error:
            raise TraceInputError(
                record.path, record.line, f"actor {event['actor']!r} is not a member of {name}: {error}"
            ) from None
        op = event["args"].get("op")
        if op is not None and op not in communicator.specs:
            raise TraceInputError(
                record.path, record.line, f"communicator {name} has no op {op!r} (ops: {', '.join(communicator.specs)})"
            )
        assert isinstance(member, int)
        return self._slots[f"{communicator.name}.queue"], member, None if op is None else communicator.op_sort.index(op)

    def _unrecorded_positions(self, entries: frozenset[str]) -> frozenset[int]:
        positions: set[int] = set()
        for entry in entries:
            matched = {
                position
                for position, action in enumerate(self.machine.actions)
                if entry in (action.name, action.actor, action.actor.split(":")[0] + ":*")
            }
            if not matched and entry in self.actors:  # one actor of a kind whose actions are one set
                kind = entry.split(":")[0] + ":*"
                raise ValueError(
                    f"unrecorded {entry!r}: one {kind.split(':')[0]} alone cannot be left unrecorded, its actions are "
                    f"every {kind.split(':')[0]}'s; name the kind ({kind}) or the actions"
                )
            if not matched:
                raise ValueError(f"unrecorded {entry!r} names no action, actor or actor kind of {self.machine.name}")
            positions |= matched
        return frozenset(positions)

    @staticmethod
    def _remember(memo: dict[Any, Any], key: object, value: object) -> None:
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        memo[key] = value


def frozen_key(value: object) -> object:
    """``value`` with every list (and tuple) in it a tuple: JSON has no tuples, so keys stay distinct."""
    return tuple(frozen_key(item) for item in value) if isinstance(value, (list, tuple)) else value


def matches(state: State, checks: tuple[Check, ...]) -> bool:
    for slot, position, value in checks:
        current = state[slot]
        if position >= 0:
            current = current[position]  # type: ignore[index]
        if current != value:
            return False
    return True


def collective_holds(state: State, slot: int, member: int, op: int | None, entered: bool) -> bool:
    queue = state[slot][member]  # type: ignore[index]
    if not entered:
        return not queue
    return bool(queue) and (op is None or queue[-1][0] == op)


__all__ = ["MEMO_LIMIT", "Binding", "Check", "EventReader", "collective_holds", "frozen_key", "matches"]
