"""The state of one exploration: a model instance, the path taken through it, and a cursor.

A ``Session`` holds the path (``ExploredStep`` s: each step's action, actor, arguments and the model
state after it) and the cursor (how many of its steps are "so far"; 0 is the initial state). What
the page can ask of it:

- ``take(at, action, arguments)``: take an action enabled at the cursor's state; the steps after
  the cursor are dropped (as a browser's history drops its forward pages). ``at`` is the cursor the
  page saw: a page acting on a cursor that has moved since (a second tab) is refused
  (``StaleRequest``), never applied to another state.
- ``back()``, ``forward()``, ``jump(step)``: move the cursor along the path.
- ``reset()``: the path the session started with (a trace's steps, or none) and the cursor at 0.
- ``export(directory)``: the steps so far as a trace file in the format ``lockstep check`` writes
  for a counterexample (``lockstep.checkers.counterexample.write_counterexample``, through
  ``lockstep.traces.writer``), which ``lockstep replay`` accepts.
- ``document()``: everything the page draws, as JSON (below).

The model is evaluated here, by the transition system every engine uses (``system_for``: the
explicit engine's successor function and property evaluation): the enabled actions of a state with
their arguments, each successor, each property's value. A step's view holds the variables it
changed (old → new; map entries one by one, as counterexamples show them), the vLLM functions its
action mirrors (``mirrors=``), and the facts of the state after it: the ``always`` properties false
there (in a state where nothing is enabled, also those whose deadlock condition fails), the
``sometimes`` properties true there, and the ops each member of each communicator has posted and
not yet completed (``all_reduce_sum#2``: the op's number on its communicator, as the terminal
swimlanes number them; a path with an event that is not a model step, a recording's ``complete``,
counts no completions, so from there on ops are named without numbers). ``leads-to`` properties are
listed but not evaluated: a finite path says nothing about them.

**The document** (``document()``; ``lockstep.explore.page`` inlines it for ``show --html``):
``title``, ``model`` (protocol, variant, instance, parameters), ``source`` (what was opened: an
instance or a trace, and replay's verdict on it), ``lanes`` (one per actor), ``properties`` (name,
kind, sentence), ``communicators`` (members and their lanes), ``initial`` (the initial state's
entries and facts), ``steps`` (each step's view), ``divergence`` (where a trace leaves the model,
with replay's explanation), ``cursor``, ``enabled`` (the actions enabled at the cursor, each with
its arguments and the changes it would make) and ``interactive``. The page rebuilds the state at
the cursor from the initial entries and the steps' changes.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockstep.checkers import system_for
from lockstep.checkers.counterexample import changes, communicators, write_counterexample
from lockstep.checkers.result import Path as ResultPath
from lockstep.checkers.result import Step
from lockstep.spec.collectives import Communicator, Kind
from lockstep.spec.machine import Action, Machine, PropertyKind
from lockstep.spec.protocol import Instance
from lockstep.spec.semantics import ModelError, State, Transition, argument_space, explain_guard
from lockstep.spec.sorts import MapSort, Value
from lockstep.spec.trace_values import ValueMismatch, decode
from lockstep.traces.output import safe_name

JSONObject = dict[str, Any]
LANE_ENUMERATION_LIMIT = 4096  # argument tuples per action enumerated to find its actors' lanes
DOCUMENT_VERSION = 1


class SessionError(ValueError):
    """A request the session cannot follow (an action that is not enabled, a step that does not
    exist, a path that cannot be exported); the message says why."""


class StaleRequest(SessionError):
    """The page acted on a cursor that has moved since it drew it."""


@dataclass(frozen=True)
class ExploredStep:
    """One step of the path: an action taken in the page, or an event of a trace."""

    action: str
    actor: str
    arguments: Mapping[str, Any]  # as JSON (enum members by name), as a trace event carries them
    values: tuple[Value, ...] | None  # the model arguments in the action's parameter order; None: not a model action
    state: State | None  # the model state after the step; None: no model state (past a divergence)
    model_step: bool  # a transition of the model from the state before it (exportable)
    origin: str = "taken"  # "taken" in the page, or "trace"
    event: int | None = None  # the trace event's position in the (merged) trace
    candidates: int = 1  # model states consistent with the trace after this event (replay's candidate set)
    observed: Mapping[str, Any] | None = None  # the event's observed projection of the state


def state_entries(machine: Machine, state: State) -> list[list[str]]:
    """Every non-monitor variable of ``state`` as ``[label, value]``, map entries one by one
    (``mode[1]``), labelled as ``lockstep.checkers.counterexample.changes`` labels them."""
    entries: list[list[str]] = []
    for (name, variable), value in zip(machine.variables.items(), state):
        if variable.monitor:
            continue
        sort = variable.sort
        if isinstance(sort, MapSort) and isinstance(value, tuple):
            for key, entry in zip(sort.keys, value):
                entries.append([f"{name}[{sort.key.render(key)}]", sort.value.render(entry)])
        else:
            entries.append([name, sort.render(value)])
    return entries


def lane_order(lane: str) -> tuple[int, int, str]:
    """Ranks first, by number; then other actors; then groups."""
    kind, _, rest = lane.partition(":")
    if kind == "rank" and rest.isdigit():
        return (0, int(rest), lane)
    return (2 if kind == "group" else 1, 0, lane)


def _argument_text(action: Action, values: Sequence[Value]) -> str:
    return ", ".join(
        f"{parameter.name}={parameter.sort.render(value)}" for parameter, value in zip(action.parameters, values)
    )


def json_arguments_text(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in arguments.items())


class Session:
    """One exploration of ``instance`` (see the module doc); safe to share between threads."""

    def __init__(
        self,
        instance: Instance,
        steps: Sequence[ExploredStep] = (),
        *,
        machine: Machine | None = None,
        source: Mapping[str, Any] | None = None,
        divergence: Mapping[str, Any] | None = None,
    ) -> None:
        self.instance = instance
        self.machine = machine if machine is not None else instance.machine()
        self.system = system_for(self.machine)
        self.initial = self.system.initial()
        self.original = tuple(steps)
        self.path: list[ExploredStep] = list(steps)
        self.cursor = 0
        self.source: dict[str, Any] = dict(source or {"kind": "instance"})
        self.divergence = dict(divergence) if divergence is not None else None
        self._groups = communicators(self.machine)
        self._views: list[JSONObject] = []  # the views of path[:len(_views)]
        # per position: ops completed per communicator (None once a step that is not a model step hides them)
        self._completed: list[dict[str, int] | None] = [{group.name: 0 for group in self._groups}]
        self._initial_facts = self._facts(self.initial, self._completed[0])
        self._model_lanes = self._declared_lanes()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------ queries
    def state_at(self, position: int) -> State | None:
        """The model state after ``position`` steps (0: the initial state)."""
        return self.initial if position == 0 else self.path[position - 1].state

    def enabled(self) -> list[Transition]:
        """The transitions enabled at the cursor's state (none where there is no model state)."""
        state = self.state_at(self.cursor)
        if state is None:
            return []
        try:
            return self.system.transitions(state)
        except ModelError:
            return []

    def document(self, *, interactive: bool = True) -> JSONObject:
        """The page's document (see the module doc)."""
        with self._lock:
            return self._document(interactive)

    # ------------------------------------------------------------------------------------ actions
    def take(self, at: int, action: str, arguments: Mapping[str, Any]) -> None:
        """Take ``action`` with ``arguments`` (JSON values by parameter name) at the cursor ``at``."""
        with self._lock:
            if at != self.cursor:
                raise StaleRequest(f"the page is at step {at}, the session at step {self.cursor}: reload the page")
            state = self.state_at(self.cursor)
            if state is None:
                raise SessionError(f"step {self.cursor} has no model state (the trace left the model before it)")
            try:
                declared = self.machine.action_named(action)
            except KeyError:
                raise SessionError(f"the model has no action {action!r}") from None
            position = self.machine.actions.index(declared)
            if not isinstance(arguments, Mapping):
                raise SessionError("arguments must be an object of parameter names to values")
            unknown = sorted(set(arguments) - {parameter.name for parameter in declared.parameters})
            if unknown:
                raise SessionError(f"{action} has no parameter {', '.join(unknown)}")
            try:
                values = tuple(
                    decode(parameter.sort, arguments[parameter.name], f"{action}'s {parameter.name}")
                    if parameter.name in arguments
                    else self._missing(action, parameter.name)
                    for parameter in declared.parameters
                )
            except ValueMismatch as error:
                raise SessionError(str(error)) from None
            try:
                transitions = self.system.transitions(state)
            except ModelError as error:
                raise SessionError(f"the model cannot step from step {self.cursor}: {error}") from None
            found = next(
                (
                    transition
                    for transition in transitions
                    if transition.action == position and transition.arguments == values
                ),
                None,
            )
            if found is None:
                named = dict(zip([parameter.name for parameter in declared.parameters], values))
                reasons = explain_guard(self.machine, declared, state, named)
                label = f"{action}({_argument_text(declared, values)})"
                raise SessionError(f"{label} is not enabled at step {self.cursor}: " + ("; ".join(reasons) or "-"))
            named_values = dict(zip([parameter.name for parameter in declared.parameters], values))
            step = ExploredStep(
                action,
                declared.actor_for(named_values),
                {
                    parameter.name: parameter.sort.to_json(value)
                    for parameter, value in zip(declared.parameters, values)
                },
                values,
                found.target,
                True,
            )
            self._truncate(self.cursor)
            self.path.append(step)
            self.cursor += 1

    @staticmethod
    def _missing(action: str, name: str) -> Value:
        raise SessionError(f"{action} needs its argument {name}")

    def back(self) -> None:
        with self._lock:
            self.cursor = max(0, self.cursor - 1)

    def forward(self) -> None:
        with self._lock:
            self.cursor = min(len(self.path), self.cursor + 1)

    def jump(self, step: int) -> None:
        with self._lock:
            if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= len(self.path):
                raise SessionError(f"there is no step {step!r}: the path has steps 0 to {len(self.path)}")
            self.cursor = step

    def reset(self) -> None:
        with self._lock:
            kept = 0
            while kept < min(len(self.path), len(self.original)) and self.path[kept] is self.original[kept]:
                kept += 1
            self._truncate(kept)
            self.path.extend(self.original[kept:])
            self.cursor = 0

    def export(self, directory: Path) -> Path:
        """Write the steps so far (up to the cursor) into ``directory`` as a model trace file and
        return its path: named after the instance and the number of steps, replaced if it exists."""
        with self._lock:
            steps = self.path[: self.cursor]
            for number, step in enumerate(steps, start=1):
                if not step.model_step or step.values is None or step.state is None:
                    raise SessionError(
                        f"step {number} ({step.actor} {step.action}) is an event of the recording, not a step of "
                        "the model: only a path of model steps can be exported"
                    )
            path = ResultPath(
                self.initial,
                tuple(
                    Step(
                        step.action,
                        step.actor,
                        dict(
                            zip(
                                [parameter.name for parameter in self.machine.action_named(step.action).parameters],
                                step.values or (),
                            )
                        ),
                        step.state or (),
                    )
                    for step in steps
                ),
            )
            self._extend()
            violated = self._first_violation(self.cursor)
            instance = self.instance
            target = directory / (
                safe_name("explore", instance.protocol.name, instance.variant, instance.name, f"{len(steps)}-steps")
                + ".jsonl"
            )
            return write_counterexample(
                target,
                self.machine,
                path,
                protocol=instance.protocol.name,
                variant=instance.variant,
                instance=instance.name,
                parameters=dict(instance.parameters),
                property_name=violated,
                backend="lockstep-explore",
            )

    # ---------------------------------------------------------------------------------- internals
    def _truncate(self, length: int) -> None:
        del self.path[length:]
        del self._views[length:]
        del self._completed[length + 1 :]

    def _first_violation(self, last: int) -> str | None:
        """The first ``always`` property false on positions 0..``last`` (the earliest position first)."""
        facts = [self._initial_facts, *[view["facts"] for view in self._views[:last]]]
        for fact in facts:
            if fact is not None and fact["failing"]:
                return str(fact["failing"][0])
        return None

    def _declared_lanes(self) -> set[str]:
        """The actors the model's actions can have (a template is filled where its arguments are few)."""
        lanes: set[str] = set()
        for action in self.machine.actions:
            if "{" not in action.actor:
                lanes.add(action.actor)
                continue
            sizes = [sum(1 for _ in parameter.sort.values()) for parameter in action.parameters]
            if math.prod(sizes) > LANE_ENUMERATION_LIMIT:
                continue
            for values in argument_space(action):
                lanes.add(action.actor_for(dict(zip([parameter.name for parameter in action.parameters], values))))
        return lanes

    def _member_lane(self, group: Communicator, member: int) -> str:
        return f"rank:{group.members.render(member)}"

    def _mapped(self, group: Communicator, lanes: set[str]) -> bool:
        return all(self._member_lane(group, member) in lanes for member in range(group.members.count))

    def _lanes(self) -> list[str]:
        lanes = self._model_lanes | {step.actor for step in self.path}
        mapped = {f"group:{group.name}" for group in self._groups if self._mapped(group, lanes)}
        return sorted(lanes - mapped, key=lane_order)

    def _posted(self, state: State, completed: Mapping[str, int] | None) -> dict[str, list[list[str]]]:
        """Per communicator, per member, the ops posted and not yet complete (front first)."""
        values = dict(zip(self.machine.variables, state))
        result: dict[str, list[list[str]]] = {}
        for group in self._groups:
            queue = values.get(f"{group.name}.queue")
            members: list[list[str]] = []
            for posted in queue if isinstance(queue, tuple) else ():
                labels: list[str] = []
                for position, entry in enumerate(posted if isinstance(posted, tuple) else ()):
                    if not isinstance(entry, tuple) or not isinstance(entry[0], int):
                        continue
                    name = group.op_sort.members[entry[0]]
                    kind = group.specs[name].kind
                    number = "" if completed is None else f"#{completed.get(group.name, 0) + 1 + position}"
                    if kind is Kind.SEND:
                        labels.append(f"send→{entry[1]}{number}")
                    elif kind is Kind.RECV:
                        labels.append(f"recv←{entry[1]}{number}")
                    else:
                        labels.append(f"{name}{number}")
                members.append(labels)
            result[group.name] = members
        return result

    def _facts(self, state: State | None, completed: Mapping[str, int] | None) -> JSONObject | None:
        """What holds in ``state`` (see the module doc); None where there is no model state."""
        if state is None:
            return None
        facts: JSONObject = {"failing": [], "witnessed": [], "enabled": 0, "final": False, "error": None}
        try:
            facts["posted"] = self._posted(state, completed)
            transitions = self.system.transitions(state)
            facts["enabled"] = len(transitions)
            facts["final"] = self.system.is_final(state)
            values = self.system.property_values(state)
            for position, prop in enumerate(self.machine.properties):
                if prop.kind is PropertyKind.ALWAYS:
                    holds = values[position] and (bool(transitions) or self.system.holds_at_deadlock(position, state))
                    if not holds:
                        facts["failing"].append(prop.name)
                elif prop.kind is PropertyKind.SOMETIMES and values[position]:
                    facts["witnessed"].append(prop.name)
        except ModelError as error:
            facts["error"] = str(error)
        return facts

    def _view(
        self, number: int, step: ExploredStep, before: State | None, completed: dict[str, int] | None
    ) -> JSONObject:
        try:
            action: Action | None = self.machine.action_named(step.action)
        except KeyError:
            action = None
        if action is not None and step.values is not None:
            label = f"{step.action}({_argument_text(action, step.values)})" if action.parameters else step.action
        else:
            label = f"{step.action}({json_arguments_text(step.arguments)})" if step.arguments else step.action
        completes = next((group.name for group in self._groups if step.action in group.completion_actions), None)
        changed = (
            [[change.variable, change.before, change.after] for change in changes(self.machine, before, step.state)]
            if before is not None and step.state is not None
            else []
        )
        return {
            "number": number,
            "actor": step.actor,
            "action": step.action,
            "label": label,
            "arguments": dict(step.arguments),
            "mirrors": action.mirrors if action is not None else "",
            "description": action.description if action is not None else "",
            "changes": changed,
            "facts": self._facts(step.state, completed),
            "origin": step.origin,
            "event": step.event,
            "model_step": step.model_step,
            "candidates": step.candidates if step.state is not None else 0,
            "observed": dict(step.observed) if step.observed is not None else None,
            "completes": completes,
        }

    def _extend(self) -> None:
        """Compute the views of the steps that have none yet."""
        while len(self._views) < len(self.path):
            number = len(self._views) + 1
            step = self.path[number - 1]
            previous = self._completed[number - 1]
            completed = dict(previous) if previous is not None and step.model_step else None
            for group in self._groups:
                if completed is not None and step.action in group.completion_actions:
                    completed[group.name] += 1
            self._completed.append(completed)
            self._views.append(self._view(number, step, self.state_at(number - 1), completed))

    def _enabled_json(self) -> list[JSONObject]:
        state = self.state_at(self.cursor)
        if state is None:
            return []
        result = []
        for transition in self.enabled():
            action = self.machine.actions[transition.action]
            named = dict(zip([parameter.name for parameter in action.parameters], transition.arguments))
            text = _argument_text(action, transition.arguments)
            result.append(
                {
                    "action": action.name,
                    "actor": action.actor_for(named),
                    "label": f"{action.name}({text})" if action.parameters else action.name,
                    "arguments": {
                        parameter.name: parameter.sort.to_json(value)
                        for parameter, value in zip(action.parameters, transition.arguments)
                    },
                    "mirrors": action.mirrors,
                    "description": action.description,
                    "changes": [
                        [change.variable, change.before, change.after]
                        for change in changes(self.machine, state, transition.target)
                    ],
                    "leaves_bounds": transition.out_of_bounds,
                }
            )
        return result

    def _document(self, interactive: bool) -> JSONObject:
        self._extend()
        instance = self.instance
        lanes = self._lanes()
        lane_set = set(lanes)
        return {
            "format": "lockstep-explore",
            "version": DOCUMENT_VERSION,
            "interactive": interactive,
            "title": instance.label,
            "model": {
                "protocol": instance.protocol.name,
                "title": instance.protocol.title,
                "change": instance.protocol.change,
                "variant": instance.variant,
                "instance": instance.name,
                "parameters": dict(instance.parameters),
            },
            "source": dict(self.source),
            "lanes": lanes,
            "properties": [
                {
                    "name": prop.name,
                    "kind": prop.kind.value,
                    "description": prop.description,
                    "builtin": prop.builtin,
                }
                for prop in self.machine.properties
            ],
            "communicators": [
                {
                    "name": group.name,
                    "description": group.description,
                    "lanes": [
                        self._member_lane(group, member) if self._member_lane(group, member) in lane_set else None
                        for member in range(group.members.count)
                    ],
                }
                for group in self._groups
            ],
            "initial": {"entries": state_entries(self.machine, self.initial), "facts": self._initial_facts},
            "steps": list(self._views),
            "divergence": self.divergence,
            "cursor": self.cursor,
            "enabled": self._enabled_json() if interactive else [],
        }
