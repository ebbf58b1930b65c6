"""Any model as a Hypothesis ``RuleBasedStateMachine``: one rule per action, one invariant per property.

``state_machine_for(system)`` returns a new ``RuleBasedStateMachine`` subclass whose instances
step a ``TransitionSystem`` (the compiled one by default) from its initial state:

- one **rule per action**, named after it, with the precondition "the action is enabled here";
  its arguments are drawn with ``data.draw`` one parameter at a time, each from the values for
  which the action is still enabled given the parameters already drawn, so every draw is an
  enabled step and Hypothesis shrinks arguments towards the first enabled value;
- one **invariant per safety property** (``always`` properties, built-ins included):
  ``in_bounds`` fails when the step just taken pushed a variable out of its sort, ``well_defined``
  where ``evaluate`` raises in the state (``definedness``), ``no_deadlock``
  when no action is enabled in a state that is not final, and a property with a deadlock
  condition (``no_hang``) when that condition is false in such a state; the others evaluate
  their predicate. A failure raises ``PropertyViolation`` naming the property;
- one always-enabled rule, ``step_or_end``, so that Hypothesis never stops with "no progress can
  be made". In a state where no action is enabled (the ``no_deadlock`` invariant has already
  checked that it is final) it ends the run: every later step of that example is this same no-op
  (Hypothesis has no public way to end a run before ``stateful_step_count``; the no-op steps cost
  a rule draw each, and the shrinker deletes them). Elsewhere it takes any enabled step, the
  action drawn as well. That matters: Hypothesis's swarm testing switches off a random subset of
  the rules for a whole example, and in a state whose enabled actions are all switched off this
  rule is what keeps the run going (a stutter there would repeat to the end of the example, and
  a precondition "no action enabled" would make the example invalid).

Long examples. Hypothesis ends a stateful run once its choices fill its buffer, and choosing a
rule costs many choices (a filtered draw over every rule, a swarm flag per valid rule), so a run
holds a few hundred rule calls at most (docs/performance.md). So with ``burst`` > 1, ``step_or_end``
takes 1..``burst`` steps (the count is drawn, and shrinks towards 1), each costing two or three
choices, with the invariants checked between them; the engine sets ``burst`` from the steps asked for.
A run never takes more than ``max_steps`` model steps.

Each instance records the path it took and the states it visited in a shared ``Recorder``, so the
engine can read the failing run back, count examples, and minimise the run afterwards.
Nothing here prints.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lockstep.checkers.definedness import undefined_at
from lockstep.checkers.result import Step, bounds_detail
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Action, Machine, PropertyKind
from lockstep.spec.protocol import UsageError
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, Transition, TransitionSystem

END_OF_RUN = "step_or_end"


class PropertyViolation(AssertionError):
    """A safety property failed in the state the run reached (raised inside Hypothesis's run)."""

    def __init__(self, property_name: str, detail: str) -> None:
        super().__init__(f"{property_name} is violated" + (f": {detail}" if detail else ""))
        self.property_name = property_name
        self.detail = detail


@dataclass
class Run:
    """One example: the steps it took and whether it failed."""

    initial: State
    steps: list[Step] = field(default_factory=list)
    violation: PropertyViolation | None = None
    ended: bool = False  # reached a state with no enabled action


class OutOfTime(KeyboardInterrupt):
    """Raised when a run starts after the session's time is up. Hypothesis treats a
    ``KeyboardInterrupt`` as "stop the whole session now": it neither counts it as a failure nor
    records the cut-short run (any other exception would be recorded, and a run that stops
    drawing where an earlier one with the same choices went on is reported as flaky)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Recorder:
    """What the machines of one fuzzing session saw, and its clock.

    Every run is counted; the first failing one and the shortest failing one are kept. A run that
    starts after ``deadline`` (absolute, ``time.monotonic()``), or more than ``shrink_seconds``
    after the first failure, raises ``OutOfTime``: that is how a session, or its shrinking, is cut
    short (the shortest failing run so far is then the result)."""

    deadline: float | None = None
    shrink_seconds: float | None = None
    max_steps: int = 100  # model steps per run
    burst: int = 1  # the most model steps one step_or_end call takes
    runs: int = 0
    steps: int = 0
    completed: int = 0  # runs that reached a state with no enabled action
    first_failure: int | None = None  # 1-based number of the first failing run
    first_failing: Run | None = None  # that run (before shrinking)
    failure_time: float | None = None  # time.monotonic() when it failed
    shortest_failing: Run | None = None
    last: Run | None = None
    witnessed: set[str] = field(default_factory=set)  # `sometimes` properties seen true

    def start(self, initial: State) -> Run:
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline:
            raise OutOfTime("timeout")
        if (
            self.failure_time is not None
            and self.shrink_seconds is not None
            and now > self.failure_time + self.shrink_seconds
        ):
            raise OutOfTime("shrink-timeout")
        self.runs += 1
        self.last = Run(initial)
        return self.last

    def failed(self, run: Run, violation: PropertyViolation) -> None:
        if run.violation is None:
            run.violation = violation
        if self.shortest_failing is None or len(run.steps) < len(self.shortest_failing.steps):
            self.shortest_failing = run
        if self.first_failure is None:
            self.first_failure = self.runs
            self.first_failing = run
            self.failure_time = time.monotonic()


def _identifier(name: str) -> str:
    """A Python identifier for a rule or invariant (action names may hold dots or dashes)."""
    cleaned = "".join(character if character.isalnum() or character == "_" else "_" for character in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"_{cleaned}"


class _ModelStateMachine(RuleBasedStateMachine):
    """The base of every generated class; the class attributes are set by ``state_machine_for``."""

    system: TransitionSystem
    recorder: Recorder
    safety_checks: list[Callable[[_ModelStateMachine], None]]

    def __init__(self) -> None:
        super().__init__()
        self.state: State = self.system.initial()
        self.run = self.recorder.start(self.state)
        self.last_transition: Transition | None = None
        self._cache_state: State | None = None
        self._transitions: list[Transition] = []
        self._by_action: dict[int, list[Transition]] = {}
        self._values: tuple[bool, ...] = ()
        self._undefined: str | None = None  # why ``evaluate`` raises in the state (``well_defined``)

    # -------------------------------------------------------------------------------- the state
    def _refresh(self) -> None:
        if self._cache_state is self.state:
            return
        self._undefined = None
        try:
            self._transitions = self.system.transitions(self.state)
            self._values = self.system.property_values(self.state)
            if not self._transitions:
                self.system.is_final(self.state)
                for position in range(len(self.system.machine.properties)):
                    self.system.holds_at_deadlock(position, self.state)
        except ModelError:  # evaluate's answers: ``well_defined`` is violated, and nothing undefined holds
            reference = InterpretedSystem(self.system.machine)
            self._undefined = undefined_at(reference, self.state)
            if self._undefined is None:
                raise
            try:
                self._transitions = reference.transitions(self.state)
            except ModelError:
                self._transitions = []
            self._values = tuple(
                _defined_and_true(functools.partial(reference.holds, position, self.state))
                for position in range(len(self.system.machine.properties))
            )
        self._by_action = {}
        for transition in self._transitions:
            self._by_action.setdefault(transition.action, []).append(transition)
        self._cache_state = self.state

    def enabled(self, action: int) -> list[Transition]:
        self._refresh()
        return self._by_action.get(action, [])

    def take(self, transition: Transition) -> None:
        machine = self.system.machine
        action = machine.actions[transition.action]
        arguments = {parameter.name: value for parameter, value in zip(action.parameters, transition.arguments)}
        self.run.steps.append(Step(action.name, action.actor_for(arguments), arguments, transition.target))
        self.recorder.steps += 1
        self.state = transition.target
        self.last_transition = transition

    def violate(self, property_name: str, detail: str = "") -> None:
        violation = PropertyViolation(property_name, detail)
        self.recorder.failed(self.run, violation)
        raise violation

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={len(self.run.steps)})"


def _draw_step(state_machine: _ModelStateMachine, data: Any, position: int) -> Transition:
    """One enabled step of action ``position``: its arguments drawn one parameter at a time."""
    action = state_machine.system.machine.actions[position]
    candidates = state_machine.enabled(position)
    for index, parameter in enumerate(action.parameters):
        values = sorted({transition.arguments[index] for transition in candidates}, key=repr)
        chosen = data.draw(st.sampled_from(values), label=parameter.name) if len(values) > 1 else values[0]
        candidates = [transition for transition in candidates if transition.arguments[index] == chosen]
    return candidates[0]  # an action's arguments determine its step


def _action_rule(position: int, action: Action) -> Callable[..., None]:
    """The rule of one action: draw its arguments among the enabled ones, then take the step."""

    def take_action(self: _ModelStateMachine, data: Any = None) -> None:
        self.take(_draw_step(self, data, position))

    take_action.__name__ = take_action.__qualname__ = _identifier(action.name)
    take_action.__doc__ = action.description
    decorated = rule(data=st.data())(take_action) if action.parameters else rule()(take_action)
    return precondition(lambda self: len(self.run.steps) < self.recorder.max_steps and bool(self.enabled(position)))(
        decorated
    )


def _step_or_end(self: _ModelStateMachine, data: Any) -> None:
    """Any enabled step (the action drawn too); in a state where none is enabled, the end of the run."""
    self._refresh()
    if not self._by_action or len(self.run.steps) >= self.recorder.max_steps:
        return  # final (the invariants said so), or out of steps: the rest of the example is this no-op
    burst = min(self.recorder.burst, self.recorder.max_steps - len(self.run.steps))
    count = data.draw(st.integers(1, burst), label="steps") if burst > 1 else 1
    for number in range(count):
        if number:  # the invariants Hypothesis runs after the rule, between the steps of a burst
            for check in self.safety_checks:
                check(self)
            self._refresh()
            if not self._by_action:
                return
        position = data.draw(st.sampled_from(sorted(self._by_action)), label="action")
        self.take(_draw_step(self, data, position))


_step_or_end.__name__ = _step_or_end.__qualname__ = END_OF_RUN
_step_or_end = rule(data=st.data())(_step_or_end)


def _invariant(machine: Machine, position: int) -> Callable[[_ModelStateMachine], None]:
    prop = machine.properties[position]

    def check(self: _ModelStateMachine) -> None:
        if prop.name == IN_BOUNDS:  # checked first: nothing else is evaluated in an out-of-sort state
            moved = self.last_transition
            if moved is not None and moved.out_of_bounds is not None:
                self.violate(prop.name, bounds_detail(machine, moved.out_of_bounds, self.state))
            return
        self._refresh()
        if prop.name == WELL_DEFINED:
            if self._undefined is not None:
                self.violate(prop.name, self._undefined)
            return
        if not self._values[position]:
            self.violate(prop.name)
        if self._transitions or self._undefined is not None:  # no successors where undefined, yet no deadlock
            return
        if prop.name == NO_DEADLOCK and not self.system.is_final(self.state):
            self.violate(prop.name, "no action is enabled")
        if prop.at_deadlock is not None and not self.system.holds_at_deadlock(position, self.state):
            self.violate(prop.name, "no action is enabled")

    # Hypothesis runs invariants in name order: the position keeps the declaration order (in_bounds first).
    check.__name__ = check.__qualname__ = f"invariant_{position:03d}_{_identifier(prop.name)}"
    return invariant()(check)


def _defined_and_true(question: Callable[[], bool]) -> bool:
    """A predicate's value; an undefined one does not hold (``definedness``)."""
    try:
        return question()
    except ModelError:
        return False


def _witness_recorder(machine: Machine) -> Callable[[_ModelStateMachine], None]:
    positions = [i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.SOMETIMES]

    def witnesses(self: _ModelStateMachine) -> None:
        self._refresh()
        if not self._by_action and not self.run.ended:
            self.run.ended = True
            self.recorder.completed += 1
        for position in positions:
            if self._values[position]:
                self.recorder.witnessed.add(machine.properties[position].name)

    witnesses.__name__ = "record_witnesses"
    return invariant()(witnesses)


def safety_positions(machine: Machine) -> list[int]:
    """The properties fuzzing checks: every ``always`` property (leads-to needs the whole graph)."""
    return [i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.ALWAYS]


def state_machine_for(system: TransitionSystem, recorder: Recorder) -> type[_ModelStateMachine]:
    """A new ``RuleBasedStateMachine`` class stepping ``system``; its runs are recorded in ``recorder``."""
    machine = system.machine
    namespace: dict[str, object] = {"system": system, "recorder": recorder}
    for position, action in enumerate(machine.actions):
        function = _action_rule(position, action)
        namespace[function.__name__] = function
    if END_OF_RUN in namespace or len(namespace) != len(machine.actions) + 2:
        raise UsageError(
            f"machine {machine.name}: two actions share a rule name, or one is named {END_OF_RUN!r} (the fuzzer's own)"
        )
    namespace[END_OF_RUN] = _step_or_end
    for position in safety_positions(machine):
        check = _invariant(machine, position)
        namespace[check.__name__] = check
    namespace["record_witnesses"] = _witness_recorder(machine)
    namespace["safety_checks"] = [namespace[name] for name in sorted(namespace) if name.startswith("invariant_")]
    name = "Fuzz_" + _identifier(machine.name)
    return type(name, (_ModelStateMachine,), namespace)
