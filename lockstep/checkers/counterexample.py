"""Counterexamples as data: changed variables, who waits in which collective, and trace events.

A ``Path`` from an engine becomes (a) rows for the reporter's swimlanes: step, actor,
action(arguments), the source function(s) the action mirrors, variables changed old -> new, and
the collective each rank blocks in with its per-communicator sequence number ("rank 0 in
rpc(worker_world)#1"); and (b) events of the trace format, written with ``lockstep.traces``.
Nothing here prints.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import cast

from lockstep.checkers.result import Path
from lockstep.spec.collectives import Communicator
from lockstep.spec.machine import Machine
from lockstep.spec.semantics import State, TransitionSystem
from lockstep.spec.sorts import MapSort, Value
from lockstep.traces import JSONValue, TraceEvent, TraceFormatError, TraceHeader, TraceSource, write_trace
from lockstep.traces.output import OutputError

JSONObject = Mapping[str, JSONValue]


@dataclass(frozen=True)
class Change:
    variable: str
    before: str
    after: str


@dataclass(frozen=True)
class Row:
    index: int  # 1-based step number
    actor: str
    action: str
    arguments: str
    changes: tuple[Change, ...]
    waiting: Mapping[int, tuple[str, ...]]  # member -> collectives it blocks in after the step
    mirrors: str = ""  # the source function(s) the action stands for ("" if the model names none)


def communicators(machine: Machine) -> list[Communicator]:
    return [library for library in machine.communicators if isinstance(library, Communicator)]


def changes(machine: Machine, before: State, after: State) -> tuple[Change, ...]:
    """The variables a step changed; for maps, only the entries that changed (``mode[1]``)."""
    found: list[Change] = []
    for (name, variable), old, new in zip(machine.variables.items(), before, after):
        if old == new or variable.monitor:
            continue
        sort = variable.sort
        if isinstance(sort, MapSort) and isinstance(old, tuple) and isinstance(new, tuple):
            for key, old_entry, new_entry in zip(sort.keys, old, new):
                if old_entry != new_entry:
                    label = f"{name}[{sort.key.render(key)}]"
                    found.append(Change(label, sort.value.render(old_entry), sort.value.render(new_entry)))
        else:
            found.append(Change(name, sort.render(old), sort.render(new)))
    return tuple(found)


def render_arguments(machine: Machine, action: str, arguments: Mapping[str, Value]) -> str:
    declared = {parameter.name: parameter for parameter in machine.action_named(action).parameters}
    return ", ".join(f"{name}={declared[name].sort.render(value)}" for name, value in arguments.items())


class _Sequencer:
    """Counts completed ops per communicator along a path, for the "#k" sequence numbers."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.groups = communicators(machine)
        self.completed = {group.name: 0 for group in self.groups}

    def advance(self, action: str) -> None:
        for group in self.groups:
            if action in group.completion_actions:
                self.completed[group.name] += 1

    def waiting(self, state: State) -> dict[int, tuple[str, ...]]:
        values = dict(zip(self.machine.variables, state))
        result: dict[int, list[str]] = {}
        for group in self.groups:
            for member in range(group.members.count):
                label = group.waiting_in(values, member)
                if label is not None:
                    result.setdefault(member, []).append(f"{label}#{self.completed[group.name] + 1}")
        return {member: tuple(labels) for member, labels in result.items()}


def rows(machine: Machine, path: Path) -> list[Row]:
    """The swimlane rows of a path, one per step."""
    sequencer = _Sequencer(machine)
    result: list[Row] = []
    previous = path.initial
    for number, step in enumerate(path.steps, start=1):
        sequencer.advance(step.action)
        result.append(
            Row(
                number,
                step.actor,
                step.action,
                render_arguments(machine, step.action, step.arguments),
                changes(machine, previous, step.state),
                sequencer.waiting(step.state),
                machine.action_named(step.action).mirrors,
            )
        )
        previous = step.state
    return result


def first_invalid_step(system: TransitionSystem, path: Path, *, ends_out_of_bounds: bool = False) -> int | None:
    """Replay ``path`` through ``system``: None if every step is a step of the model, else the number
    of the first step that is not (0: the path does not start in the initial state). With
    ``ends_out_of_bounds`` the last step may leave a variable's sort (an ``in_bounds`` counterexample)."""
    if path.initial != system.initial():
        return 0
    current = path.initial
    machine = system.machine
    for number, step in enumerate(path.steps, start=1):
        action = machine.action_named(step.action)
        position = machine.actions.index(action)
        arguments = tuple(step.arguments[parameter.name] for parameter in action.parameters)
        last = ends_out_of_bounds and number == len(path.steps)
        if not any(
            transition.action == position
            and transition.arguments == arguments
            and transition.target == step.state
            and (last or transition.out_of_bounds is None)
            for transition in system.transitions(current)
        ):
            return number
        current = step.state
    return None


def blocked_summary(machine: Machine, path: Path) -> str:
    """Who waits in what at the end of a path: "rank 0 in rpc(worker_world)#1; rank 1 in ..."."""
    sequencer = _Sequencer(machine)
    for step in path.steps:
        sequencer.advance(step.action)
    waiting = sequencer.waiting(path.final_state)
    return "; ".join(f"rank {member} in {', '.join(labels)}" for member, labels in sorted(waiting.items()))


def trace_events(machine: Machine, path: Path) -> list[TraceEvent]:
    """The path as trace events: observed = the variables the step changed, clock = ops completed."""
    sequencer = _Sequencer(machine)
    events: list[TraceEvent] = []
    previous = path.initial
    names = list(machine.variables)
    for index, step in enumerate(path.steps):
        sequencer.advance(step.action)
        observed = {
            name: machine.variables[name].sort.to_json(new)
            for name, old, new in zip(names, previous, step.state)
            if old != new and not machine.variables[name].monitor
        }
        arguments = {
            name: machine.action_named(step.action).parameters[position].sort.to_json(value)
            for position, (name, value) in enumerate(step.arguments.items())
        }
        clock = dict(sequencer.completed) if sequencer.groups else None
        events.append(
            TraceEvent(index, step.actor, step.action, cast(JSONObject, arguments), cast(JSONObject, observed), clock)
        )
        previous = step.state
    return events


def write_counterexample(
    file: str | FilePath,
    machine: Machine,
    path: Path,
    *,
    protocol: str,
    variant: str,
    instance: str,
    parameters: Mapping[str, int],
    property_name: str | None,
    backend: str = "lockstep-explicit",
) -> FilePath:
    """Write ``path`` as a trace file (header + one event per step) and return its path;
    ``backend`` names the engine that found it (``lockstep-explicit``, ``lockstep-fuzz``,
    ``lockstep-explore``); ``property_name`` the property it violates (None: a path that violates
    none, such as one taken in ``lockstep explore``). A path the trace format cannot hold is an
    ``OutputError`` (what a command reports beside its verdict, never instead of it), and an existing
    file is left as it was."""
    header = TraceHeader(
        protocol=protocol,
        variant=variant,
        instance=instance,
        # a lasso's cycle start travels with the trace, so a replay knows the steps from it on repeat
        parameters={
            **parameters,
            **({} if property_name is None else {"property": property_name}),
            **({} if path.loop_start is None else {"loop_start": path.loop_start}),
        },
        source=TraceSource(kind="model", backend=backend, host=platform.node() or None),
    )
    try:
        return write_trace(file, header, trace_events(machine, path))
    except TraceFormatError as error:
        raise OutputError(f"{file}: the counterexample does not fit the trace format: {error}") from error
