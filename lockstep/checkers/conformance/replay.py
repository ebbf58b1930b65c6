"""Conformance replay: does a recorded trace follow the model, and does it break a property?

Replay keeps the **candidate set**: every model state consistent with the events read so far.
It starts as the model's initial state (the header's parameters instantiate the model). Each
event then maps the set to the states it may lead to:

- An event naming a model **action** (``handle_pause`` with ``args`` ``{"rank": 1}``) takes that
  action from every candidate, with every value of the parameters the event leaves out, where
  the actor the model gives the step equals the event's ``actor``.
- An ``enter`` / ``complete`` event of a member on a communicator (the runtime's record of a
  collective, see ``lockstep.traces.merge``) takes no step: it keeps the candidates where that
  member has an op pending on the communicator (``enter``, the op named by ``args.op`` last in
  its queue) or nothing pending there (``complete``).
- ``observed`` (optional, a projection of the state after the event: ``{"requests": [1, 0]}``
  or one map entry ``{"mode[1]": "RPC"}``) keeps only successors with those values; variables
  left out are unobserved and stay open.

**Unrecorded actions.** A runtime may not record every model action: collective completions are
one step of a whole group in the model but per-member ``complete`` events in a recording, and a
recorder may leave out whole actors (a coordinator process). The actions named unrecorded (by
action name, by actor such as ``coordinator``, or by actor kind such as ``group:*``) may happen
between any two recorded events: before each event the candidate set is closed under them, at
most ``closure_depth`` steps deep (every intermediate state is kept, so zero steps is always a
choice). Which actions are unrecorded comes from the options; ``default_unrecorded`` gives the
usual choice: none for a model counterexample, communicator completions for a runtime recording.

A property is **violated** at event i when it fails in every candidate after event i (it then
fails whichever state the run was really in); the replay goes on, so a ``violated`` verdict also
says the whole trace conforms. At the end, a property with a deadlock condition fails when every
candidate has no enabled action and breaks that condition. An ``in_bounds`` failure in every
candidate stops the replay (the model cannot step on from outside its sorts). ``sometimes``
properties report the first event after which some candidate satisfies them.

The replay **diverges** at the first event no candidate can take (or whose observed values no
successor shows); the explanation gives the event, up to five candidate states, and for each the
guard conjuncts of the named action that are false with the values they read (``explain_guard``)
or the observed values the model contradicts. The candidate set growing beyond
``max_candidates`` stops the replay as ``inconclusive``. Memory is flat in the trace's length:
the candidate set plus bounded memo tables of successors and property values per state.

**Reading an event** in the model's terms (bindings, observed checks, collectives, unrecorded
entries) is ``lockstep.checkers.conformance.events``'s ``EventReader``, which ``Replayer`` extends; the
verdict types are ``lockstep.checkers.conformance.result``'s. Both stay importable from here.

**Speed.** A run revisits few candidate sets and few distinct events (without index and clock),
so each set is interned as a ``_Node`` holding its property verdicts and, per event, the step it
took (next node, largest set on the way): a step seen before is one lookup. Anything else takes
the full path, so verdicts, explanations and figures are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockstep.checkers.conformance.events import (
    Binding,
    Check,
    EventReader,
    collective_holds,
    frozen_key,
    matches,
)
from lockstep.checkers.conformance.result import (
    CONFORMS,
    DIVERGES,
    EXIT_CODES,
    INCONCLUSIVE,
    VIOLATED,
    ReplayOptions,
    ReplayResult,
    default_unrecorded,
)
from lockstep.spec.machine import IN_BOUNDS, PropertyKind
from lockstep.spec.semantics import State, TransitionSystem
from lockstep.traces.merge import COLLECTIVE_ACTIONS
from lockstep.traces.reader import Record, TraceInputError

_NODE_LIMIT, _STEPS_PER_NODE = 1 << 14, 1 << 5  # interned candidate sets, and steps remembered from each


class _Node:
    """An interned candidate set with its property verdicts and the steps taken from it."""

    __slots__ = ("states", "steps", "failing", "witnesses")

    def __init__(self, states: dict[State, None], failing: str | None, witnesses: tuple[str, ...]) -> None:
        self.states = states
        self.steps: dict[object, tuple[_Node, int]] = {}  # event key -> (next node, largest set on the way)
        self.failing = failing  # the always-property failing in every state, lowest position first
        self.witnesses = witnesses  # sometimes-properties some state satisfies, in first-seen order


class Replayer(EventReader):
    """Feed it the records of one run in order (``feed``), then take the ``result``."""

    def __init__(self, system: TransitionSystem, options: ReplayOptions | None = None) -> None:
        self.system = system
        self.options = options or ReplayOptions()
        super().__init__(system.machine)
        machine = self.machine
        self._unrecorded = self._unrecorded_positions(self.options.unrecorded)
        self._always = [
            i
            for i, prop in enumerate(machine.properties)
            if prop.kind is PropertyKind.ALWAYS and prop.name != IN_BOUNDS
        ]
        self._sometimes = [i for i, prop in enumerate(machine.properties) if prop.kind is PropertyKind.SOMETIMES]
        self._tables: dict[State, dict[Binding, list[tuple[State, str | None]]]] = {}
        self._internal_memo: dict[State, tuple[State, ...]] = {}
        self._property_memo: dict[State, tuple[frozenset[int], frozenset[int]]] = {}
        self._nodes: dict[tuple[State, ...], _Node] = {}
        initial = system.initial()
        self.candidates: dict[State, None] = {initial: None}
        self.candidate_states_max = 1
        self.conforming = 0
        self.events = 0
        self.last_index = -1
        self.violation: tuple[int, str] | None = None
        self.witnessed: dict[str, int] = {}
        self.stopped: ReplayResult | None = None
        self._node = self._intern(self.candidates)  # always the interned self.candidates
        for witness in self._node.witnesses:
            self.witnessed.setdefault(witness, -1)

    # ---------------------------------------------------------------------------------- stepping
    def feed(self, record: Record) -> bool:
        """Replay one event; False once the replay has stopped (diverged, out of bounds, too many candidates)."""
        if self.stopped is not None:
            return False
        event = record.event
        index = event["index"]
        self.events += 1
        self.last_index = index
        name = event["action"]
        args = event["args"]
        observed = event.get("observed")
        # what replay reads of the event: not its index, nor its clock (but a collective's communicator)
        key: object = (
            event["actor"],
            name,
            tuple(args.items()),
            tuple(observed.items()) if observed else None,
            tuple(event.get("clock") or ()) if name in COLLECTIVE_ACTIONS and "communicator" not in args else None,
        )
        node = self._node
        try:
            step = node.steps.get(key)
        except TypeError:  # a list among the values: as a tuple (an object among them: no fast path)
            try:
                key = frozen_key(key)
                step = node.steps.get(key)
            except TypeError:
                key = step = None
        if step is not None:  # as _arrive does, inline: this is the hot path
            node, size = step
            if size > self.candidate_states_max:
                self.candidate_states_max = size
            self._node = node
            self.candidates = node.states
            self.conforming = index + 1
            if node.failing is not None and self.violation is None:
                self.violation = (index, node.failing)
            if node.witnesses and len(self.witnessed) < len(self._sometimes):
                for witness in node.witnesses:
                    self.witnessed.setdefault(witness, index)
            return True
        try:
            if name in self._actions:
                bindings = self._bindings(record)
                collective = None
            elif name in COLLECTIVE_ACTIONS:
                bindings = []
                collective = self._collective(record)
            else:
                known = ", ".join(sorted(self._actions)[:12])
                raise TraceInputError(
                    record.path,
                    record.line,
                    f"unknown action {name!r} for {self.machine.name} (actions: {known}, ...; enter, complete)",
                )
            checks = self._observed(record)
        except TraceInputError as error:
            if self.options.strict:
                raise
            return self._diverge(record, self.candidates, [], (), error.problem)
        candidates = self._close(self.candidates) if self._unrecorded else self.candidates
        if candidates is None:
            return self._inconclusive(index)
        successors: dict[State, str | None] = {}
        if collective is None:
            tables = self._tables
            for state in candidates:
                table = tables.get(state) or self._table(state)
                for binding in bindings:
                    for target, out_of_bounds in table.get(binding, ()):
                        if not checks or matches(target, checks):
                            if successors.get(target, "") is not None:
                                successors[target] = out_of_bounds
        else:
            slot, member, op = collective
            for state in candidates:
                if collective_holds(state, slot, member, op, name == "enter") and (
                    not checks or matches(state, checks)
                ):
                    successors[state] = None
        if not successors:
            return self._diverge(record, candidates, bindings, checks, None)
        if len(successors) > self.options.max_candidates:
            return self._inconclusive(index)
        if None not in successors.values():  # every successor left its sorts
            self.conforming = index + 1
            self.violation = self.violation or (index, IN_BOUNDS)
            self.stopped = self._result(
                VIOLATED, explanation={"detail": "every candidate step leaves a variable's sort; replay stops"}
            )
            return False
        following = self._intern({state: None for state, out in successors.items() if out is None})
        size = max(len(candidates) if self._unrecorded else 0, len(following.states))
        self.candidate_states_max = max(self.candidate_states_max, size)
        if key is not None and len(node.steps) < _STEPS_PER_NODE:
            node.steps[key] = (following, size)
        self._arrive(following, index)
        return True

    def result(self) -> ReplayResult:
        """The verdict once every record has been fed (or the replay stopped)."""
        if self.stopped is not None:
            return self.stopped
        if self.violation is None:
            self._check_deadlock()
        if self.violation is not None:
            return self._result(VIOLATED)
        return self._result(CONFORMS)

    # ------------------------------------------------------------------------------------ memos
    def _table(self, state: State) -> dict[Binding, list[tuple[State, str | None]]]:
        table: dict[Binding, list[tuple[State, str | None]]] = {}
        for transition in self.system.transitions(state):
            table.setdefault((transition.action, transition.arguments), []).append(
                (transition.target, transition.out_of_bounds)
            )
        self._remember(self._tables, state, table)
        return table

    def _internal(self, state: State) -> tuple[State, ...]:
        found = self._internal_memo.get(state)
        if found is None:
            table = self._tables.get(state) or self._table(state)
            unrecorded = self._unrecorded
            found = tuple(
                dict.fromkeys(
                    target
                    for (position, _), targets in table.items()
                    if position in unrecorded
                    for target, out in targets
                    if out is None
                )
            )
            self._remember(self._internal_memo, state, found)
        return found

    def _close(self, states: dict[State, None]) -> dict[State, None] | None:
        closed = dict(states)
        frontier = list(states)
        limit = self.options.max_candidates
        for _ in range(self.options.closure_depth):
            following = []
            for state in frontier:
                for target in self._internal(state):
                    if target not in closed:
                        closed[target] = None
                        following.append(target)
            if len(closed) > limit:
                return None
            if not following:
                break
            frontier = following
        self.candidate_states_max = max(self.candidate_states_max, len(closed))
        return closed

    def _properties(self, state: State) -> tuple[frozenset[int], frozenset[int]]:
        found = self._property_memo.get(state)
        if found is None:
            values = self.system.property_values(state)
            found = (
                frozenset(i for i in self._always if not values[i]),
                frozenset(i for i in self._sometimes if values[i]),
            )
            self._remember(self._property_memo, state, found)
        return found

    def _intern(self, states: dict[State, None]) -> _Node:
        ordered = tuple(states)
        node = self._nodes.get(ordered)
        if node is None:
            if len(self._nodes) >= _NODE_LIMIT:  # forget every node and step; the current set starts again
                for old in self._nodes.values():
                    old.steps.clear()
                self._nodes.clear()
            failing: frozenset[int] | None = None
            witnesses: dict[str, None] = {}
            for state in states:
                fails, satisfied = self._properties(state)
                failing = fails if failing is None else failing & fails
                for position in satisfied:
                    witnesses[self.machine.properties[position].name] = None
            name = self.machine.properties[min(failing)].name if failing else None
            node = self._nodes[ordered] = _Node(states, name, tuple(witnesses))
        return node

    # ------------------------------------------------------------------------------- properties
    def _arrive(self, node: _Node, index: int) -> None:
        """The candidates are ``node``'s after event ``index``: the first violation and witnesses."""
        self._node = node
        self.candidates = node.states
        self.conforming = index + 1
        if node.failing is not None and self.violation is None:
            self.violation = (index, node.failing)
        if node.witnesses and len(self.witnessed) < len(self._sometimes):
            for witness in node.witnesses:
                self.witnessed.setdefault(witness, index)

    def _check_deadlock(self) -> None:
        for position, prop in enumerate(self.machine.properties):
            if prop.at_deadlock is None:
                continue
            if all(
                not (self._tables.get(state) or self._table(state))
                and not self.system.holds_at_deadlock(position, state)
                for state in self.candidates
            ):
                self.violation = (self.last_index, prop.name)
                return

    # ------------------------------------------------------------------------------ stopping
    def _result(
        self, verdict: str, event: int | None = None, explanation: dict[str, Any] | None = None
    ) -> ReplayResult:
        prop = None
        if verdict == VIOLATED and self.violation is not None:
            event, prop = self.violation
        return ReplayResult(
            verdict,
            event,
            prop,
            explanation,
            self.conforming,
            self.candidate_states_max,
            self.events,
            dict(self.witnessed),
            tuple(sorted(self.machine.actions[p].name for p in self._unrecorded)),
        )

    def _inconclusive(self, index: int) -> bool:
        detail = (
            f"more than {self.options.max_candidates} candidate states at event {index}; "
            "raise --max-candidates or record more"
        )
        self.stopped = self._result(INCONCLUSIVE, index, {"detail": detail})
        return False

    def _diverge(
        self,
        record: Record,
        candidates: dict[State, None],
        bindings: list[Binding],
        checks: tuple[Check, ...],
        problem: str | None,
    ) -> bool:
        from lockstep.checkers.conformance.divergence import explain

        explanation = explain(self, record, candidates, bindings, checks, problem)
        result = self._result(DIVERGES, record.event["index"], explanation)
        if self.violation is not None:
            result.failed_property = self.violation[1]
            explanation["earlier_violation"] = {"event": self.violation[0], "property": self.violation[1]}
        self.stopped = result
        return False


def replay(system: TransitionSystem, records: Iterable[Record], options: ReplayOptions | None = None) -> ReplayResult:
    """Replay ``records`` against ``system`` and return the verdict."""
    replayer = Replayer(system, options)
    for record in records:
        if not replayer.feed(record):
            break
    return replayer.result()


__all__ = [
    "CONFORMS",
    "DIVERGES",
    "EXIT_CODES",
    "INCONCLUSIVE",
    "VIOLATED",
    "Binding",
    "Check",
    "ReplayOptions",
    "ReplayResult",
    "Replayer",
    "default_unrecorded",
    "replay",
]
