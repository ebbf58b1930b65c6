"""Coverage goals derived from a model, the shortest model path to each, and a few paths covering them.

``lockstep test-runtime`` drives the reference runtime through these paths; this module owns what
a goal is, how the model reaches it and how a runtime trace's replay is judged to reach it.
A goal is one of

- ``action``: an action fires with one tuple of arguments (``action handle_pause(rank=1)``);
- ``guard``: a guard conjunct of an action is true, or false, for some argument binding;
- ``decision``: a Boolean condition inside an action's updates (a comparison or a flag read,
  with no bound variable) is true, or false, when the action fires: the branch the step takes.
  ``finish_sync: votes % 2 != 0`` true is "a partial vote at a sync point"; and an operand of an
  ``and`` (``or``) that is false (true) while every other operand is true (false), so it alone
  decides the branch (``... ~ignored[rank] false decides ...``: a message the action would have
  applied, but ignores);
- ``witness``: a ``sometimes`` property holds;
- ``near-violation``: one enabled step leads to a state that violates an ``always`` property
  (the state itself does not);
- ``monitor``: a bounded-response monitor (``no_hang`` and ``respond_within``) reaches its highest
  level the model can reach: the closest the model gets to firing it.

``find_goals(machine)`` runs one breadth-first search over the model with every goal as a
predicate and keeps, per goal, the first state (and step) that reaches it, so each goal's path
(rebuilt from parent links) is a shortest one. ``covering_paths`` picks a small set of those
paths that together pass through every reached goal. ``RuntimeGoals`` judges replays: fed the
candidate states and event bindings of a replay (``replay_traces(observe=...)``), it collects the
goals the trace reached. Nothing here prints.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from lockstep.checkers.result import Path, Step
from lockstep.clock import TIMEOUT, Clock
from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import (
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    children,
    render,
    walk,
)
from lockstep.spec.machine import Machine, PropertyKind
from lockstep.spec.semantics import State, Transition, TransitionSystem, argument_space, unpack
from lockstep.spec.sorts import BoolSort, Value

KINDS = ("action", "guard", "decision", "witness", "near-violation", "monitor")
CONNECTIVES = frozenset({Operator.NOT, Operator.AND, Operator.OR, Operator.IMPLIES, Operator.IF_THEN_ELSE})
Binding = tuple[int, tuple[Value, ...]]


@dataclass(frozen=True)
class Goal:
    """A coverage goal: its kind (``KINDS``) and a label unique within the model."""

    kind: str
    label: str


@dataclass
class ReachedGoal:
    """A goal the model reaches: the first state (id) that does, and the step from it for
    goals reached by a step (``action``, ``decision``)."""

    goal: Goal
    state_id: int
    transition: Transition | None
    depth: int


@dataclass
class GoalSearch:
    """What ``find_goals`` found: every goal, the reached ones, and the search's size."""

    machine: Machine
    goals: list[Goal]
    reached: dict[str, ReachedGoal]
    states: int
    complete: bool
    _parent: list[int] = field(repr=False, default_factory=list)
    _via: list[Transition | None] = field(repr=False, default_factory=list)
    _initial: State = ()
    _system: TransitionSystem | None = field(repr=False, default=None)
    _catalogue: _Catalogue | None = field(repr=False, default=None)
    stopped: str | None = None  # "timeout": the command's clock ran out before the search was complete

    def state(self, state_id: int) -> State:
        via = self._via[state_id]
        return self._initial if via is None else via.target

    @property
    def unreached(self) -> list[Goal]:
        return [goal for goal in self.goals if goal.label not in self.reached]

    def chain(self, state_id: int) -> list[int]:
        """The state ids from the initial state to ``state_id``."""
        found = []
        while state_id != -1:
            found.append(state_id)
            state_id = self._parent[state_id]
        return found[::-1]

    def path(self, label: str) -> Path:
        """A shortest model path to the goal ``label``."""
        reached = self.reached[label]
        transitions = [self._via[state_id] for state_id in self.chain(reached.state_id)[1:]]
        if reached.transition is not None:
            transitions.append(reached.transition)
        steps = []
        for transition in transitions:
            assert transition is not None
            action = self.machine.actions[transition.action]
            arguments = {parameter.name: value for parameter, value in zip(action.parameters, transition.arguments)}
            steps.append(Step(action.name, action.actor_for(arguments), arguments, transition.target))
        return Path(self._initial, tuple(steps))


def label_of(expression: Expression) -> str:
    """``render(expression)`` with its bound variables numbered from 0 in order of appearance: a
    machine built twice names them apart (``rank9``, ``rank17``), a goal's label must not."""
    text = render(expression)
    names: list[str] = []
    for node in walk(expression):
        if isinstance(node, Comprehension) and node.variable.name not in names:
            names.append(node.variable.name)
    if not names:
        return text
    renamed = {name: f"{name.rstrip('0123456789')}#{number}" for number, name in enumerate(names)}
    return re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda match: renamed[match.group(1)], text)


def _atoms(expression: Expression, found: dict[str, Expression]) -> None:
    """Boolean conditions in ``expression``: Bool-valued nodes that are no connective or constant
    and read no bound variable (those could not be evaluated on their own)."""
    if isinstance(expression, (Comprehension, Bound, Constant)):
        return
    if isinstance(expression.sort, BoolSort) and not (
        isinstance(expression, Operation) and expression.operator in CONNECTIVES
    ):
        if not _binds(expression):
            found.setdefault(label_of(expression), expression)
        return
    for child in children(expression):
        _atoms(child, found)


def _binds(expression: Expression) -> bool:
    if isinstance(expression, (Bound, Comprehension)):
        return True
    return any(_binds(child) for child in children(expression))


def _conditions(
    expression: Expression, found: dict[str, Expression], deciding: dict[str, tuple[Operation, int]]
) -> None:
    """The atoms of every condition (of an if-then-else, a connective's operand) inside an update,
    and every operand of an ``and``/``or`` (with no bound variable) that can decide it alone."""
    if isinstance(expression, Comprehension):
        return
    if isinstance(expression, Operation) and expression.operator in CONNECTIVES:
        operands = expression.arguments[:1] if expression.operator is Operator.IF_THEN_ELSE else expression.arguments
        for operand in operands:
            _atoms(operand, found)
        if expression.operator in (Operator.AND, Operator.OR) and not _binds(expression):
            for position, operand in enumerate(expression.arguments):
                value = "false" if expression.operator is Operator.AND else "true"
                label = f"{label_of(operand)} {value} decides {label_of(expression)}"
                deciding.setdefault(label, (expression, position))
    for child in children(expression):
        _conditions(child, found, deciding)


@dataclass
class _Catalogue:
    """Every goal of a machine, with what evaluating it needs."""

    machine: Machine
    goals: list[Goal] = field(default_factory=list)
    spaces: list[list[tuple[Value, ...]]] = field(default_factory=list)
    guards: list[list[tuple[str, Expression]]] = field(default_factory=list)  # per action: (label, conjunct)
    decisions: list[list[tuple[str, Expression]]] = field(default_factory=list)  # per action: (label, atom)
    # per action: (label, (connective, operand)): the operand alone decides the and/or
    deciders: list[list[tuple[str, tuple[Operation, int]]]] = field(default_factory=list)
    monitors: dict[str, int] = field(default_factory=dict)  # monitor variable -> position in the state

    def __post_init__(self) -> None:
        machine = self.machine
        for action in machine.actions:
            space = argument_space(action)
            self.spaces.append(space)
            for arguments in space:
                self.goals.append(Goal("action", action_label(machine, action.name, arguments)))
            guard = [(f"{action.name}: {label_of(conjunct)}", conjunct) for conjunct in action.guard]
            self.guards.append(guard)
            for label, _ in guard:
                self.goals += [Goal("guard", f"{label} {value}") for value in ("true", "false")]
            atoms: dict[str, Expression] = {}
            deciding: dict[str, tuple[Operation, int]] = {}
            for name, update in action.updates:
                if not machine.variables[name].monitor:  # a monitor's counter is bookkeeping, not a branch
                    _conditions(update, atoms, deciding)
            decision = [(f"{action.name}: {text}", atom) for text, atom in atoms.items() if "monitor." not in text]
            self.decisions.append(decision)
            for label, _ in decision:
                self.goals += [Goal("decision", f"{label} {value}") for value in ("true", "false")]
            decisive = [(f"{action.name}: {text}", found) for text, found in deciding.items() if "monitor." not in text]
            self.deciders.append(decisive)
            self.goals += [Goal("decision", label) for label, _ in decisive]
        for prop in machine.properties:
            if prop.kind is PropertyKind.SOMETIMES:
                self.goals.append(Goal("witness", prop.name))
            elif prop.kind is PropertyKind.ALWAYS:
                self.goals.append(Goal("near-violation", near_label(prop.name)))
        for position, (name, variable) in enumerate(machine.variables.items()):
            if variable.monitor:
                self.monitors[name] = position
        self.goals = list({goal.label: goal for goal in self.goals}.values())  # a label once (repeated conjuncts)

    def state_goals(self, system: TransitionSystem, state: State, transitions: Sequence[Transition]) -> set[str]:
        """Witnesses and near-violations reached in ``state`` (its ``transitions`` given)."""
        found: set[str] = set()
        properties = self.machine.properties
        values = system.property_values(state)
        targets: dict[State, tuple[bool, ...]] = {}
        for position, (prop, holds) in enumerate(zip(properties, values)):
            if prop.kind is PropertyKind.SOMETIMES and holds:
                found.add(prop.name)
            elif prop.kind is PropertyKind.ALWAYS and holds:
                for transition in transitions:
                    if transition.out_of_bounds is not None:
                        continue
                    after = targets.get(transition.target)
                    if after is None:
                        after = targets[transition.target] = system.property_values(transition.target)
                    if not after[position]:
                        found.add(near_label(prop.name))
                        break
        return found

    def guard_goals(self, state: State, wanted: Collection[str] | None = None) -> set[str]:
        """Guard conjuncts true/false in ``state`` for some binding (only labels in ``wanted``)."""
        values = unpack(self.machine, state)
        found: set[str] = set()
        for position, action in enumerate(self.machine.actions):
            guard = self.guards[position]
            if wanted is not None:
                guard = [entry for entry in guard if f"{entry[0]} true" in wanted or f"{entry[0]} false" in wanted]
            if not guard:
                continue
            names = [parameter.name for parameter in action.parameters]
            for arguments in self.spaces[position]:
                environment = Environment(values, dict(zip(names, arguments)))
                for label, conjunct in guard:
                    value = _value(conjunct, environment)
                    if value is not None:
                        found.add(f"{label} {'true' if value else 'false'}")
        return found

    def step_goals(self, values: dict[str, Value], position: int, arguments: tuple[Value, ...]) -> set[str]:
        """The action goal and decision goals of the action at ``position`` firing with ``arguments``."""
        action = self.machine.actions[position]
        found = {action_label(self.machine, action.name, arguments)}
        environment = Environment(
            values, {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
        )
        for label, atom in self.decisions[position]:
            value = _value(atom, environment)
            if value is not None:
                found.add(f"{label} {'true' if value else 'false'}")
        for label, (connective, operand) in self.deciders[position]:
            values_of = [_value(argument, environment) for argument in connective.arguments]
            alone = connective.operator is Operator.OR  # the value the operand decides the connective with
            if values_of[operand] is alone and all(
                value is (not alone) for place, value in enumerate(values_of) if place != operand
            ):
                found.add(label)
        return found

    def fires(self, values: dict[str, Value], position: int, arguments: tuple[Value, ...]) -> bool:
        action = self.machine.actions[position]
        environment = Environment(
            values, {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
        )
        return all(_value(conjunct, environment) for conjunct in action.guard)


def _value(expression: Expression, environment: Environment) -> bool | None:
    try:
        return bool(evaluate(expression, environment))
    except (EvaluationError, IndexError, ZeroDivisionError):
        return None


def action_label(machine: Machine, action: str, arguments: tuple[Value, ...]) -> str:
    declared = machine.action_named(action).parameters
    rendered = ", ".join(
        f"{parameter.name}={parameter.sort.render(value)}" for parameter, value in zip(declared, arguments)
    )
    return f"{action}({rendered})"


def near_label(prop: str) -> str:
    return f"one step from violating {prop}"


def monitor_label(name: str, level: int) -> str:
    return f"{name} at {level}"


def find_goals(system: TransitionSystem, *, max_states: int = 500_000, clock: Clock | None = None) -> GoalSearch:
    """One BFS over the model with every goal as a predicate (see the module doc); it stops, not
    complete and ``stopped`` "timeout", when ``clock`` (the command's) runs out."""
    machine = system.machine
    catalogue = _Catalogue(machine)
    initial = system.initial()
    index: dict[State, int] = {initial: 0}
    states, parent, depth = [initial], [-1], [0]
    parent_via: list[Transition | None] = [None]
    reached: dict[str, ReachedGoal] = {}
    guard_open = {goal.label for goal in catalogue.goals if goal.kind == "guard"}
    highest = {name: (0, -1) for name in catalogue.monitors}  # monitor -> (level, state id)
    frontier: deque[int] = deque([0])
    complete = True
    stopped: str | None = None
    expanded = 0

    def mark(labels: Iterable[str], state_id: int, transition: Transition | None) -> None:
        for label in labels:
            if label not in reached:
                reached[label] = ReachedGoal(_goal(catalogue, label), state_id, transition, depth[state_id])

    while frontier:
        expanded += 1
        if clock is not None and expanded % 256 == 0 and clock.expired():
            complete, stopped = False, TIMEOUT
            break
        state_id = frontier.popleft()
        state = states[state_id]
        transitions = system.transitions(state)
        mark(catalogue.state_goals(system, state, transitions), state_id, None)
        if guard_open:
            seen = catalogue.guard_goals(state, guard_open)
            guard_open -= seen
            mark(seen, state_id, None)
        for name, position in catalogue.monitors.items():
            level = state[position]
            if isinstance(level, int) and level > highest[name][0]:
                highest[name] = (level, state_id)
        values = unpack(machine, state)
        for transition in transitions:
            if transition.out_of_bounds is not None:
                continue
            mark(
                (
                    label
                    for label in catalogue.step_goals(values, transition.action, transition.arguments)
                    if label not in reached
                ),
                state_id,
                transition,
            )
            if transition.target not in index:
                if len(states) >= max_states:
                    complete = False
                    continue
                index[transition.target] = len(states)
                states.append(transition.target)
                parent.append(state_id)
                parent_via.append(transition)
                depth.append(depth[state_id] + 1)
                frontier.append(len(states) - 1)
    goals = list(catalogue.goals)
    for name, (level, state_id) in highest.items():
        if level > 0:
            goal = Goal("monitor", monitor_label(name, level))
            goals.append(goal)
            reached[goal.label] = ReachedGoal(goal, state_id, None, depth[state_id])
    return GoalSearch(
        machine, goals, reached, len(states), complete, parent, parent_via, initial, system, catalogue, stopped
    )


def model_goals(machine: Machine) -> list[Goal]:
    """Every goal of ``machine`` (the catalogue ``find_goals`` searches for), without a search; the
    monitors' levels are not among them (a search learns how high each can go)."""
    return list(_Catalogue(machine).goals)


def _goal(catalogue: _Catalogue, label: str) -> Goal:
    for goal in catalogue.goals:
        if goal.label == label:
            return goal
    raise KeyError(label)


def covering_paths(search: GoalSearch, max_paths: int | None = None) -> list[tuple[str, list[str]]]:
    """A small set of goal paths that together pass through every reached goal (greedy set cover:
    each time the path that reaches most goals not yet covered, evaluating every goal along it):
    ``(goal whose path it is, goals its path reaches that no earlier path did)``, most first."""
    at_state: dict[int, set[str]] = {}
    at_step: dict[int, set[str]] = {}
    wanted = set(search.reached)

    def state_goals(state_id: int) -> set[str]:
        found = at_state.get(state_id)
        if found is None:
            found = at_state[state_id] = _goals_at(search, search.state(state_id)) & wanted
        return found

    def step_goals(state_id: int, transition: Transition) -> set[str]:
        assert search._catalogue is not None
        values = unpack(search.machine, search.state(state_id))
        return search._catalogue.step_goals(values, transition.action, transition.arguments) & wanted

    covers: dict[str, set[str]] = {}
    for label, reached in search.reached.items():
        chain = search.chain(reached.state_id)
        covered = {label}
        for position, state_id in enumerate(chain):
            covered |= state_goals(state_id)
            if position + 1 < len(chain):
                child = chain[position + 1]
                found = at_step.get(child)
                if found is None:
                    transition = search._via[child]
                    assert transition is not None
                    found = at_step[child] = step_goals(state_id, transition)
                covered |= found
        if reached.transition is not None:
            covered |= step_goals(reached.state_id, reached.transition)
        covers[label] = covered
    chosen: list[tuple[str, list[str]]] = []
    left = set(search.reached)
    while left and (max_paths is None or len(chosen) < max_paths):
        best = max(sorted(covers), key=lambda label: (len(covers[label] & left), -search.reached[label].depth))
        gained = covers[best] & left
        if not gained:
            break
        chosen.append((best, sorted(gained)))
        left -= gained
    return chosen


def _goals_at(search: GoalSearch, state: State) -> set[str]:
    """The state goals (witnesses, near-violations, guard conjuncts, monitor levels up to the
    state's) that hold in ``state``."""
    catalogue, system = search._catalogue, search._system
    assert catalogue is not None and system is not None
    found = catalogue.state_goals(system, state, system.transitions(state)) | catalogue.guard_goals(state)
    for name, position in catalogue.monitors.items():
        level = state[position]
        if isinstance(level, int):
            found |= {monitor_label(name, below) for below in range(1, level + 1)}
    return found


class RuntimeGoals:
    """The goals a replayed trace reaches, fed by ``replay_traces(observe=...)``. Evaluates each
    candidate state the replay holds before an event and after the last (at most ``per_event`` of
    them) with the code the model search uses, and the event's bindings that can fire there."""

    def __init__(self, per_event: int = 8) -> None:
        self.per_event = per_event
        self.reached: set[str] = set()
        self._catalogues: dict[int, tuple[_Catalogue, TransitionSystem]] = {}
        self._seen: set[State] = set()

    def observe(self, system: TransitionSystem, states: Collection[State], bindings: Sequence[Binding]) -> None:
        entry = self._catalogues.get(id(system))
        if entry is None:
            entry = self._catalogues[id(system)] = (_Catalogue(system.machine), system)
        catalogue, _ = entry
        for number, state in enumerate(states):
            if number >= self.per_event:
                break
            if state not in self._seen:
                self._seen.add(state)
                self.reached |= catalogue.state_goals(system, state, system.transitions(state))
                self.reached |= catalogue.guard_goals(state)
                for name, position in catalogue.monitors.items():
                    level = state[position]
                    if isinstance(level, int) and level > 0:
                        self.reached.add(monitor_label(name, level))
            values = unpack(system.machine, state)
            for position, arguments in bindings:
                if catalogue.fires(values, position, arguments):
                    self.reached |= catalogue.step_goals(values, position, arguments)

    def reaches(self, goal: Goal) -> bool:
        if goal.kind == "monitor":  # at least the level the model reaches
            name, _, level = goal.label.rpartition(" at ")
            return any(
                label.rpartition(" at ")[0] == name and int(label.rpartition(" at ")[2]) >= int(level)
                for label in self.reached
                if " at " in label and label.rpartition(" at ")[2].isdigit()
            )
        return goal.label in self.reached


__all__ = [
    "KINDS",
    "Goal",
    "GoalSearch",
    "ReachedGoal",
    "RuntimeGoals",
    "covering_paths",
    "find_goals",
    "model_goals",
]
