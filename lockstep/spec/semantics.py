"""The stepping interface every engine uses, and its reference implementation over ``evaluate``.

A ``TransitionSystem`` packs a finished ``Machine``'s state into a tuple (variables in declaration
order) and answers: the initial state, every enabled (action, arguments) with its successor,
and the truth of each property in a state. ``InterpretedSystem`` answers with the concrete
evaluator (the reference semantics); ``lockstep.spec.compiler.CompiledSystem`` answers the same
questions with generated Python code and is tested against it.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import Expression, render
from lockstep.spec.machine import Action, Machine
from lockstep.spec.sorts import Value

State = tuple[Value, ...]


class ModelError(RuntimeError):
    """The model itself is broken at some state (an update read an empty queue, divided by zero...)."""


@dataclass(frozen=True)
class Transition:
    action: int  # position in machine.actions
    arguments: tuple[Value, ...]  # in the action's parameter order
    target: State
    out_of_bounds: str | None = None  # the variable whose new value left its sort, if any


class TransitionSystem(Protocol):
    machine: Machine
    names: tuple[str, ...]

    def initial(self) -> State: ...

    def transitions(self, state: State) -> list[Transition]: ...

    def holds(self, predicate: int, state: State) -> bool:
        """Property ``predicate`` (position in machine.properties) holds in ``state``."""
        ...

    def property_values(self, state: State) -> tuple[bool, ...]:
        """Every property's predicate in ``state``, in declaration order."""
        ...

    def holds_at_deadlock(self, predicate: int, state: State) -> bool: ...

    def is_final(self, state: State) -> bool: ...


def fingerprint(state: State) -> str:
    """A stable 16-hex-digit fingerprint of a packed state (the same in every run and process:
    states hold only ints, bools and tuples, whose ``repr`` is canonical)."""
    return hashlib.blake2b(repr(state).encode("ascii"), digest_size=8).hexdigest()


def pack(machine: Machine, values: Mapping[str, Value]) -> State:
    return tuple(values[name] for name in machine.variables)


def unpack(machine: Machine, state: State) -> dict[str, Value]:
    return dict(zip(machine.variables, state))


def argument_space(action: Action) -> list[tuple[Value, ...]]:
    return list(itertools.product(*[list(parameter.sort.values()) for parameter in action.parameters]))


class InterpretedSystem:
    """The reference ``TransitionSystem``: every question answered by ``evaluate``."""

    def __init__(self, machine: Machine) -> None:
        if not machine.finished:
            machine.finish()
        self.machine = machine
        self.names = tuple(machine.variables)
        self._index = {name: position for position, name in enumerate(self.names)}
        self._arguments = [argument_space(action) for action in machine.actions]

    def initial(self) -> State:
        return pack(self.machine, self.machine.initial_state())

    def _evaluate(self, expression: Expression, environment: Environment, where: str) -> Value:
        try:
            return evaluate(expression, environment)
        except (EvaluationError, IndexError, ZeroDivisionError) as error:
            raise ModelError(f"{where}: evaluating {render(expression)} failed: {error}") from error

    def transitions(
        self, state: State, action_id: int | None = None, only: tuple[Value, ...] | None = None
    ) -> list[Transition]:
        """The enabled transitions of ``state`` in action and argument order; with ``action_id``,
        only that action's (and with ``only``, only those arguments')."""
        values = unpack(self.machine, state)
        result: list[Transition] = []
        for position, action in enumerate(self.machine.actions):
            if action_id is not None and position != action_id:
                continue
            for arguments in self._arguments[position] if only is None else [only]:
                bindings = {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
                environment = Environment(values, bindings)
                where = f"action {action.name}{arguments}"
                if not all(self._evaluate(conjunct, environment, where) for conjunct in action.guard):
                    continue
                target = list(state)
                out_of_bounds = None
                for name, expression in action.updates:
                    value = self._evaluate(expression, environment, where)
                    if out_of_bounds is None and not self.machine.variables[name].sort.contains(value):
                        out_of_bounds = name
                    target[self._index[name]] = value
                result.append(Transition(position, arguments, tuple(target), out_of_bounds))
        return result

    def holds(self, predicate: int, state: State) -> bool:
        prop = self.machine.properties[predicate]
        return bool(self._evaluate(prop.predicate, Environment(unpack(self.machine, state)), f"property {prop.name}"))

    def property_values(self, state: State) -> tuple[bool, ...]:
        return tuple(self.holds(position, state) for position in range(len(self.machine.properties)))

    def holds_at_deadlock(self, predicate: int, state: State) -> bool:
        prop = self.machine.properties[predicate]
        if prop.at_deadlock is None:
            return True
        return bool(self._evaluate(prop.at_deadlock, Environment(unpack(self.machine, state)), f"property {prop.name}"))

    def is_final(self, state: State) -> bool:
        return bool(self._evaluate(self.machine.final, Environment(unpack(self.machine, state)), "final"))


def explain_guard(machine: Machine, action: Action, state: State, arguments: Mapping[str, Value]) -> list[str]:
    """The guard conjuncts of ``action`` that are false in ``state``, with the values they read."""
    values = unpack(machine, state)
    environment = Environment(values, dict(arguments))
    failed: list[str] = []
    for conjunct in action.guard:
        try:
            ok = evaluate(conjunct, environment)
        except (EvaluationError, IndexError, ZeroDivisionError) as error:
            failed.append(f"{render(conjunct)} cannot be evaluated ({error})")
            continue
        if not ok:
            from lockstep.spec.expressions import variables_of

            read = ", ".join(
                f"{name} = {machine.variables[name].sort.render(values[name])}"
                for name in sorted(variables_of(conjunct))
            )
            failed.append(f"{render(conjunct)} is false" + (f" ({read})" if read else ""))
    return failed
