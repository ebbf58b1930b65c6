"""Re-minimising a failing run by breadth-first search over the states it visited.

Hypothesis's shrinker stops at a *locally* minimal run: deleting or simplifying any one part of
it no longer fails, yet a shorter failing run may exist that differs in several places at once
(another rank handles its message first, so two steps elsewhere become unnecessary). This module
finds the shortest failing path in a small neighbourhood of the runs at hand:

1. the *core* is the set of states on the given failing runs (the shrunk run, and the first
   failing run before shrinking, which visits other states);
2. breadth-first search from the initial state expands only the states at most ``radius`` steps
   off the core (radius 0: the core states alone; their successors are discovered and tested but
   not expanded). The first discovered state that violates the same property ends the search;
   BFS order makes its path the shortest in that subgraph;
3. the states of the path found join the core and the search is repeated while the path gets
   shorter; then the radius grows by one, up to ``max_radius``, unless a search would discover
   more than ``budget`` states (large instances: the neighbourhood stays small).

The shrunk run lies inside the subgraph, so the result is never longer than it (if even radius 0
would pass the budget, ``minimise`` returns None and the engine keeps the shrunk run). The result is a
real run of the model (it is rebuilt from ``system.transitions``), violating the same property.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from lockstep.checkers.result import Path, Step
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, Machine
from lockstep.spec.semantics import State, Transition, TransitionSystem


class _Goal:
    """Does a state (or, for in_bounds, a step) violate the property?"""

    def __init__(self, system: TransitionSystem, property_name: str) -> None:
        machine: Machine = system.machine
        self.system = system
        self.name = property_name
        self.position = next(i for i, prop in enumerate(machine.properties) if prop.name == property_name)
        self.at_deadlock = machine.properties[self.position].at_deadlock is not None

    def state(self, state: State, transitions: list[Transition]) -> bool:
        if self.name == IN_BOUNDS:
            return False
        if not self.system.holds(self.position, state):
            return True
        if transitions:
            return False
        if self.name == NO_DEADLOCK:
            return not self.system.is_final(state)
        return self.at_deadlock and not self.system.holds_at_deadlock(self.position, state)

    def step(self, transition: Transition) -> bool:
        return self.name == IN_BOUNDS and transition.out_of_bounds is not None


def _step(machine: Machine, transition: Transition) -> Step:
    action = machine.actions[transition.action]
    arguments = {parameter.name: value for parameter, value in zip(action.parameters, transition.arguments)}
    return Step(action.name, action.actor_for(arguments), arguments, transition.target)


def _search(
    system: TransitionSystem, core: set[State], goal: _Goal, radius: int, budget: int
) -> tuple[list[Transition] | None, bool]:
    """The shortest path (as transitions) to a violation, expanding only the states at most
    ``radius`` steps away from a ``core`` state; and whether the search stopped at ``budget``
    discovered states (its path, if any, is then still a path, but maybe not the shortest)."""
    initial = system.initial()
    parent: dict[State, tuple[State, Transition] | None] = {initial: None}
    away: dict[State, int] = {initial: 0 if initial in core else radius + 1}  # steps from the core

    def chain(state: State, last: Transition | None = None) -> list[Transition]:
        path: list[Transition] = [] if last is None else [last]
        link = parent[state]
        while link is not None:
            path.append(link[1])
            link = parent[link[0]]
        path.reverse()
        return path

    successors = system.transitions(initial)
    if goal.state(initial, successors):
        return [], False
    frontier = deque([(initial, successors)])
    while frontier:
        state, successors = frontier.popleft()
        if away[state] > radius:
            continue
        if len(parent) > budget:
            return None, True
        for transition in successors:
            if goal.step(transition):
                return chain(state, transition), False
            target = transition.target
            if transition.out_of_bounds is not None or target in parent:
                continue
            parent[target] = (state, transition)
            away[target] = 0 if target in core else away[state] + 1
            following = system.transitions(target)
            if goal.state(target, following):
                return chain(target), False
            frontier.append((target, following))
    return None, False


def states_of(path: Path) -> set[State]:
    return {path.initial, *(step.state for step in path.steps)}


def minimise(
    system: TransitionSystem, property_name: str, runs: Iterable[Path], *, max_radius: int = 8, budget: int = 20_000
) -> Path | None:
    """The shortest path violating ``property_name`` found around ``runs`` (see the module doc);
    None if no violation is reachable in that subgraph (the runs do not violate the property).

    The neighbourhood grows (``radius`` 0, 1, ... ``max_radius`` steps off the core) until a
    search would discover more than ``budget`` states; at each radius the search repeats while
    the path it finds gets shorter, the states of each new path joining the core."""
    core: set[State] = set()
    for run in runs:
        core |= states_of(run)
    goal = _Goal(system, property_name)
    best: list[Transition] | None = None
    for radius in range(max_radius + 1):
        exhausted = False
        while True:
            found, exhausted = _search(system, core, goal, radius, budget)
            if found is None or (best is not None and len(found) >= len(best)):
                break
            best = found
            state = system.initial()
            for transition in found:
                core.add(state)
                state = transition.target
        if exhausted:
            break
    if best is None:
        return None
    machine = system.machine
    return Path(system.initial(), tuple(_step(machine, transition) for transition in best))
