"""The explicit-state engine: one search loop over interleavings with a pluggable frontier.

BFS discovers states in order of depth, so the first violation of each property it records is
a shortest counterexample; DFS uses less memory on deep models. States are the packed tuples
of ``lockstep.spec.semantics`` (exact keys: no hash collisions, stable across runs); parent
links rebuild paths, which are then replayed through the model so that with symmetry
reduction the path is a concrete execution, not a sequence of representatives. A state where the
model cannot be evaluated violates ``well_defined`` and is not expanded (``definedness``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lockstep.checkers.definedness import undefined_at
from lockstep.checkers.explicit.liveness import Edge, StateGraph, check_leads_to
from lockstep.checkers.limits import Limits, LimitWatch
from lockstep.checkers.result import (
    CheckResult,
    Path,
    PropertyResult,
    Statistics,
    Step,
    Verdict,
    bounds_detail,
    never_enabled_warning,
)
from lockstep.checkers.symmetry import Canonicalizer
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, WELL_DEFINED, Machine, Property, PropertyKind
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, Transition, TransitionSystem

Progress = Callable[[Statistics], None]
FIRST_VIOLATION = "first-violation"  # why a search with stop_at_first stopped


def first_violation(properties: Sequence[Property], found: Iterable[int], watched: frozenset[int] | None) -> bool:
    """Whether an ``always`` property among ``watched`` (every property when None) was found violated."""
    return any(
        properties[position].kind is PropertyKind.ALWAYS and (watched is None or position in watched)
        for position in found
    )


@dataclass
class _Found:
    state_id: int
    extra: Transition | None = None  # for in_bounds: the step that left the sort
    detail: str = ""


class ExplicitSearch:
    """A single run of the search; ``run()`` returns the ``CheckResult``."""

    def __init__(
        self,
        system: TransitionSystem,
        *,
        order: str = "bfs",
        symmetry: bool = False,
        limits: Limits | None = None,
        progress: Progress | None = None,
        keep_edges: bool = False,
        stop_at_first: bool = False,
        watched: frozenset[int] | None = None,
    ) -> None:
        if order not in ("bfs", "dfs"):
            raise ValueError(f"unknown search order {order!r}; use 'bfs' or 'dfs'")
        self.system = system
        self.machine: Machine = system.machine
        self.order = order
        self.canonical = Canonicalizer(self.machine) if symmetry else None
        self.limits = limits or Limits()
        self.progress = progress
        self.stop_at_first = stop_at_first
        self.watched = watched  # the properties whose first violation stops it (None: all)
        self.states: list[State] = []
        self.parent: list[int] = []
        self.via: list[tuple[int, tuple[object, ...]]] = []
        self.depth: list[int] = []
        self.index: dict[State, int] = {}
        self.found: dict[int, _Found] = {}  # property position -> first violation / witness
        self.fired: set[int] = set()
        # leads-to properties need the whole graph: every in-bounds edge, by source state id
        self.liveness = [i for i, prop in enumerate(self.machine.properties) if prop.kind is PropertyKind.LEADS_TO]
        wanted = keep_edges or bool(self.liveness)
        self.edges: list[list[Edge]] | None = [] if wanted and self.canonical is None else None
        self.well_defined = next(i for i, prop in enumerate(self.machine.properties) if prop.name == WELL_DEFINED)
        self._reference: InterpretedSystem | None = None  # evaluate's answers where the system raises

    def _add(self, state: State, parent: int, via: tuple[int, tuple[object, ...]], depth: int) -> int | None:
        key = self.canonical(state) if self.canonical is not None else state
        if key in self.index:
            return None
        state_id = len(self.states)
        self.index[key] = state_id
        self.states.append(key)
        self.parent.append(parent)
        self.via.append(via)
        self.depth.append(depth)
        if self.edges is not None:
            self.edges.append([])
        self._check_state(state_id, key)
        return state_id

    def _check_state(self, state_id: int, state: State) -> None:
        try:
            values = self.system.property_values(state)
            undefined: dict[int, str] = {}
        except ModelError:
            values, undefined = self._values_where_defined(state_id, state)
        for position, (prop, holds) in enumerate(zip(self.machine.properties, values)):
            if position in self.found:
                continue
            if (prop.kind is PropertyKind.ALWAYS and not holds) or (prop.kind is PropertyKind.SOMETIMES and holds):
                self.found[position] = _Found(state_id, detail=undefined.get(position, ""))

    def reference(self) -> InterpretedSystem:
        """The reference interpreter, asked where the system raises."""
        if self._reference is None:
            self._reference = InterpretedSystem(self.machine)
        return self._reference

    def _values_where_defined(self, state_id: int, state: State) -> tuple[tuple[bool, ...], dict[int, str]]:
        """Each property's value in a state where some predicate cannot be evaluated, by the
        reference interpreter: an undefined predicate is false there (and ``well_defined`` is
        violated); why each is undefined."""
        values: list[bool] = []
        undefined: dict[int, str] = {}
        for position in range(len(self.machine.properties)):
            try:
                values.append(self.reference().holds(position, state))
            except ModelError as error:
                values.append(False)
                undefined[position] = f"its predicate cannot be evaluated: {error}"
                self._undefined(state_id, str(error))
        return tuple(values), undefined

    def _undefined(self, state_id: int, why: str) -> None:
        """``well_defined`` is violated in the state (the first such state found is kept)."""
        if self.well_defined not in self.found:
            self.found[self.well_defined] = _Found(state_id, detail=why)

    def _transitions(self, state_id: int, state: State) -> list[Transition] | None:
        """The state's transitions; where the system raises, the reference interpreter's (the
        generated code evaluates some guard conjuncts earlier than ``evaluate``); None where
        ``evaluate`` raises too (``well_defined`` is violated: no successors)."""
        try:
            return self.system.transitions(state)
        except ModelError:
            pass
        try:
            return self.reference().transitions(state)
        except ModelError as error:
            self._undefined(state_id, str(error))
            return None

    def run(self) -> CheckResult:
        started = time.monotonic()
        watch = LimitWatch(self.limits, started)
        stats = Statistics()
        properties = self.machine.properties
        in_bounds = next(i for i, prop in enumerate(properties) if prop.name == IN_BOUNDS)
        deadlock_checks = [
            i for i, prop in enumerate(properties) if prop.at_deadlock is not None or prop.name == NO_DEADLOCK
        ]
        frontier: deque[int] = deque()
        first = self._add(self.system.initial(), -1, (-1, ()), 0)
        assert first is not None
        frontier.append(first)
        pop = frontier.popleft if self.order == "bfs" else frontier.pop
        truncated = False
        stopped: str | None = None
        last_report = started
        expanded = 0
        try:
            while frontier:
                expanded += 1
                if len(self.found) == len(properties):
                    break
                if self.stop_at_first and first_violation(properties, self.found, self.watched):
                    stopped = FIRST_VIOLATION
                    break
                state_id = pop()
                state = self.states[state_id]
                depth = self.depth[state_id]
                stats.depth = max(stats.depth, depth)
                if self.limits.max_depth is not None and depth >= self.limits.max_depth:
                    truncated = True
                    continue
                transitions = self._transitions(state_id, state)
                if transitions is None:
                    continue
                stats.transitions = (stats.transitions or 0) + len(transitions)
                if not transitions:
                    for position in deadlock_checks:
                        if position in self.found and self.well_defined in self.found:
                            continue
                        if not self._deadlock_ok(state_id, position, state) and position not in self.found:
                            self.found[position] = _Found(state_id, detail="no action is enabled")
                for transition in transitions:
                    self.fired.add(transition.action)
                    if transition.out_of_bounds is not None:
                        if in_bounds not in self.found:
                            self.found[in_bounds] = _Found(state_id, transition)
                        continue
                    child = self._add(transition.target, state_id, (transition.action, transition.arguments), depth + 1)
                    if child is not None:
                        frontier.append(child)
                    if self.edges is not None:
                        target = self.index[transition.target] if child is None else child
                        self.edges[state_id].append((transition.action, transition.arguments, target))
                if self.limits.max_states is not None and len(self.states) >= self.limits.max_states:
                    stopped = "max-states"
                    break
                if expanded & 0x3FF == 0:
                    now = time.monotonic()
                    stopped = watch.exceeded(len(self.states))
                    if stopped is not None:
                        break
                    if self.progress is not None and now - last_report >= 0.25:
                        last_report = now
                        self.progress(
                            Statistics(len(self.states), stats.transitions, stats.depth, now - started, len(frontier))
                        )
        except KeyboardInterrupt:
            stopped = "interrupted"
        stats.states = len(self.states)
        stats.seconds = time.monotonic() - started
        stats.phases["search"] = stats.seconds  # the phase profile: the search, then the paths and verdicts
        complete = stopped is None and not frontier and not truncated
        results = [
            self._verdict(position, complete, truncated and stopped is None) for position in range(len(properties))
        ]
        for position in self.liveness:
            results[position] = self._liveness(position, complete)
        never_enabled = [
            action.name for position, action in enumerate(self.machine.actions) if position not in self.fired
        ]
        warnings = [never_enabled_warning(name) for name in never_enabled]
        stats.phases["counterexample"] = time.monotonic() - started - stats.seconds
        return CheckResult(self.machine, self.order, results, stats, stopped, warnings, never_enabled)

    def _liveness(self, position: int, complete: bool) -> PropertyResult:
        prop = self.machine.properties[position]
        if self.edges is None or not complete:
            why = "leads-to is checked without --symmetry" if self.edges is None else "needs the complete state graph"
            return PropertyResult(prop.name, prop.kind, Verdict.INCONCLUSIVE, None, why, prop.builtin)
        graph = StateGraph(self.machine, self.states, self.edges)

        def make_step(action_position: int, arguments: tuple[object, ...], target: State) -> Step:
            action = self.machine.actions[action_position]
            named = {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
            return Step(action.name, action.actor_for(named), named, target)

        return check_leads_to(graph, prop, make_step)

    def _deadlock_ok(self, state_id: int, position: int, state: State) -> bool:
        """The property's deadlock condition (``no_deadlock``: the state is final) holds in a state
        where nothing is enabled; an undefined one does not (``well_defined`` is violated)."""
        prop = self.machine.properties[position]
        try:
            if prop.name == NO_DEADLOCK:
                return self.system.is_final(state)
            return self.system.holds_at_deadlock(position, state)
        except ModelError:
            why = undefined_at(self.reference(), state)
            if why is None:
                raise
            self._undefined(state_id, why)
            return False

    def _verdict(self, position: int, complete: bool, bounded: bool) -> PropertyResult:
        prop = self.machine.properties[position]
        found = self.found.get(position)
        if found is None:
            return property_verdict(prop, None, "", complete, bounded)
        path = self.path_to(found.state_id, found.extra)
        detail = found.detail
        if found.extra is not None and found.extra.out_of_bounds is not None:  # as replayed, not as stored
            detail = bounds_detail(self.machine, found.extra.out_of_bounds, path.final_state)
        return property_verdict(prop, path, detail, complete, bounded)

    def path_to(self, state_id: int, extra: Transition | None = None) -> Path:
        """Rebuild the path to a stored state by replaying the model along its parent links."""
        chain: list[int] = []
        cursor = state_id
        while cursor != -1:
            chain.append(cursor)
            cursor = self.parent[cursor]
        chain.reverse()
        current = self.system.initial()
        steps: list[Step] = []
        for child in chain[1:]:
            action_position, _ = self.via[child]
            wanted = self.states[child]
            for transition in self.system.transitions(current):
                if transition.action != action_position or transition.out_of_bounds is not None:
                    continue
                key = self.canonical(transition.target) if self.canonical is not None else transition.target
                if key == wanted:
                    steps.append(self._step(transition))
                    current = transition.target
                    break
            else:  # pragma: no cover - would mean the model is not deterministic
                raise ModelError("a counterexample could not be replayed: the model's successors changed between runs")
        if extra is not None:
            if self.canonical is not None:
                for transition in self.system.transitions(current):
                    if transition.action == extra.action and transition.out_of_bounds == extra.out_of_bounds:
                        extra = transition
                        break
            steps.append(self._step(extra))
        return Path(self.system.initial(), tuple(steps))

    def _step(self, transition: Transition) -> Step:
        return transition_step(self.machine, transition)


def property_verdict(prop: Property, path: Path | None, detail: str, complete: bool, bounded: bool) -> PropertyResult:
    """A property's result from what a search found: ``path`` to its violation or witness, if any;
    ``complete`` when every reachable state was explored, ``bounded`` when only a depth cut it short."""
    if path is not None:
        verdict = Verdict.VIOLATED if prop.kind is PropertyKind.ALWAYS else Verdict.HOLDS
        return PropertyResult(prop.name, prop.kind, verdict, path, detail, prop.builtin)
    if prop.kind is PropertyKind.SOMETIMES:
        verdict = Verdict.VIOLATED if complete else Verdict.INCONCLUSIVE
        detail = "no reachable state satisfies it" if complete else "no witness in the explored states"
        return PropertyResult(prop.name, prop.kind, verdict, None, detail, prop.builtin)
    verdict = Verdict.HOLDS if complete else (Verdict.HOLDS_WITHIN_BOUND if bounded else Verdict.INCONCLUSIVE)
    return PropertyResult(prop.name, prop.kind, verdict, None, "", prop.builtin)


def transition_step(machine: Machine, transition: Transition) -> Step:
    """A counterexample step: the action, its actor and named arguments, and the state after it."""
    action = machine.actions[transition.action]
    arguments = {parameter.name: value for parameter, value in zip(action.parameters, transition.arguments)}
    return Step(action.name, action.actor_for(arguments), arguments, transition.target)
